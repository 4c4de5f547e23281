/* SSM_CONV and SSM_SCAN (Mamba's depthwise causal convolution and selective
 * scan) with ggml's semantics and float operation order: see
 * ggml_compute_forward_ssm_conv_f32 / ggml_compute_forward_ssm_scan_f32 in
 * ggml-cpu/ops.cpp at the oracle revision. The orders below are what each
 * llama.cpp CPU variant's compiler made of that C (disassembly of
 * libggml-cpu-{x64,haswell,icelake}.so; ggml builds with fp contraction on,
 * this library with it off, so every fused step here is an explicit fmaf or
 * _fmadd_ps), one per SIMD level as kernels/PARITY.md §12 maps them:
 * scalar = x64, AVX2 = haswell, AVX-512 = icelake. */
#include "le_internal.h"

#include <stdio.h>

/* ---- ssm_conv ----
 * x[i1] = sum over i0 < d_conv of s[i0 + i1*ncs] * c[i0 + i1*nc], a float
 * sum from 0 in index order. x64 rounds every product; haswell's GCC
 * vectorised the products of each whole group of 8 (then one group of 4)
 * and added them in order, and contracted the last d_conv % 4 into fmas;
 * icelake does the same with groups of 16, then one of 8, then fmas. */
static inline float conv_dot(const float *s, const float *c, int nc, int w) {
  float sum = 0.0f;
  int i = 0;
  if (w == 0) {
    for (; i < nc; i++) sum += s[i] * c[i];
    return sum;
  }
  for (const int e = nc / w * w; i < e; i++) sum += s[i] * c[i]; /* whole groups of w */
  if (nc - i >= w / 2) {
    for (const int e = i + w / 2; i < e; i++) sum += s[i] * c[i];
  }
  for (; i < nc; i++) sum = fmaf(s[i], c[i], sum);
  return sum;
}

static int simd_width(void) {
  switch (le_simd()) {
    case LE_SIMD_AVX2: return 8;
    case LE_SIMD_AVX512: return 16;
    default: return 0;
  }
}

void le_ssm_conv(const le_node *n, const le_compute_params *p) {
  const le_tensor *s0 = &n->src[0], *s1 = &n->src[1], *d = &n->dst;
  const int nc = (int)s1->ne[0];  /* d_conv */
  const int ncs = (int)s0->ne[0]; /* d_conv - 1 + n_t */
  const int nr = (int)s0->ne[1];  /* d_inner */
  const int n_t = (int)d->ne[1], n_s = (int)d->ne[2];
  const int w = simd_width();
  /* rows (channels) per thread, as ggml */
  const int dr = (nr + p->nth - 1) / p->nth;
  const int ir0 = LE_MIN(dr * p->ith, nr), ir1 = LE_MIN(ir0 + dr, nr);
  for (int i3 = 0; i3 < n_s; i3++) {
    for (int i2 = 0; i2 < n_t; i2++) {
      const float *s = (const float *)((const char *)(uintptr_t)s0->data + ir0 * s0->nb[1] +
                                       i2 * s0->nb[0] + i3 * s0->nb[2]);
      const float *c = (const float *)((const char *)(uintptr_t)s1->data + ir0 * s1->nb[1]);
      float *x = (float *)((char *)(uintptr_t)d->data + ir0 * d->nb[0] + i2 * d->nb[1] +
                           i3 * d->nb[2]);
      for (int i1 = 0; i1 < ir1 - ir0; i1++) x[i1] = conv_dot(s + i1 * ncs, c + i1 * nc, nc, w);
    }
  }
}

/* ---- ssm_scan ---- */

/* ggml_compute_softplus_f32 (ggml-impl.h), libm expf/logf as ggml calls them. */
static inline float softplus(float v) { return v > 20.0f ? v : logf(1 + expf(v)); }

/* One row of Mamba-2's state update (A scalar per head): s = s0*dA + B*x_dt
 * per state element, returning sum(s * C). The SIMD variants keep ggml's
 * GGML_F32_VEC loop (4 accumulators of EPR lanes, GGML_F32_STEP elements a
 * step), whose mul + add the compiler contracted to fma(s0, dA, B*x_dt). */
static float scan2_row_scalar(const float *s0, const float *B, const float *C, float *s, int nc,
                              float dA, float x_dt) {
  float sumf = 0.0f;
  for (int i = 0; i < nc; i++) {
    const float state = (s0[i] * dA) + (B[i] * x_dt);
    sumf += state * C[i];
    s[i] = state;
  }
  return sumf;
}

#if defined(LE_X86)
/* the scalar tail of every fused level: B*x_dt rounded, then two fmas */
#define SCAN_TAIL_FUSED(i0)                                \
  for (int i = (i0); i < nc; i++) {                        \
    const float state = fmaf(s0[i], dA, B[i] * x_dt);      \
    sumf = fmaf(state, C[i], sumf);                        \
    s[i] = state;                                          \
  }

LE_TARGET_AVX2 static float scan2_row_avx2(const float *s0, const float *B, const float *C,
                                           float *s, int nc, float dA, float x_dt) {
  const int np = nc & ~31;
  const __m256 adA = _mm256_set1_ps(dA), axdt = _mm256_set1_ps(x_dt);
  __m256 sum[4] = {_mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(),
                   _mm256_setzero_ps()};
  for (int i = 0; i < np; i += 32) {
    for (int j = 0; j < 4; j++) {
      const int k = i + j * 8;
      const __m256 ay = _mm256_mul_ps(_mm256_loadu_ps(B + k), axdt);
      const __m256 ax = _mm256_fmadd_ps(_mm256_loadu_ps(s0 + k), adA, ay);
      sum[j] = _mm256_fmadd_ps(ax, _mm256_loadu_ps(C + k), sum[j]);
      _mm256_storeu_ps(s + k, ax);
    }
  }
  float sumf = hsum_hadd256(_mm256_add_ps(_mm256_add_ps(sum[0], sum[2]),
                                          _mm256_add_ps(sum[1], sum[3])));
  SCAN_TAIL_FUSED(np)
  return sumf;
}

LE_TARGET_AVX512 static float scan2_row_avx512(const float *s0, const float *B, const float *C,
                                               float *s, int nc, float dA, float x_dt) {
  const int np = nc & ~63;
  const __m512 adA = _mm512_set1_ps(dA), axdt = _mm512_set1_ps(x_dt);
  __m512 sum[4] = {_mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps(),
                   _mm512_setzero_ps()};
  for (int i = 0; i < np; i += 64) {
    for (int j = 0; j < 4; j++) {
      const int k = i + j * 16;
      const __m512 ay = _mm512_mul_ps(_mm512_loadu_ps(B + k), axdt);
      const __m512 ax = _mm512_fmadd_ps(_mm512_loadu_ps(s0 + k), adA, ay);
      sum[j] = _mm512_fmadd_ps(ax, _mm512_loadu_ps(C + k), sum[j]);
      _mm512_storeu_ps(s + k, ax);
    }
  }
  float sumf = _mm512_reduce_add_ps(_mm512_add_ps(_mm512_add_ps(sum[0], sum[2]),
                                                  _mm512_add_ps(sum[1], sum[3])));
  SCAN_TAIL_FUSED(np)
  return sumf;
}

/* Mamba-1 (A per state element): no SIMD in ggml (expf per element), but
 * the FMA builds contract state = s0*e + B*x_dt and sum += state*C. */
LE_TARGET_AVX2 static float scan1_row_fused(const float *s0, const float *A, const float *B,
                                            const float *C, float *s, int nc, float dt_sp,
                                            float x_dt) {
  float sumf = 0.0f;
  for (int i = 0; i < nc; i++) {
    const float e = expf(dt_sp * A[i]);
    const float state = fmaf(s0[i], e, B[i] * x_dt);
    sumf = fmaf(state, C[i], sumf);
    s[i] = state;
  }
  return sumf;
}
#endif

static float scan1_row_scalar(const float *s0, const float *A, const float *B, const float *C,
                              float *s, int nc, float dt_sp, float x_dt) {
  float sumf = 0.0f;
  for (int i = 0; i < nc; i++) {
    const float state = (s0[i] * expf(dt_sp * A[i])) + (B[i] * x_dt);
    sumf += state * C[i];
    s[i] = state;
  }
  return sumf;
}

#define AT(t, off) ((const char *)(uintptr_t)(t)->data + (off))

void le_ssm_scan(const le_node *n, const le_compute_params *p) {
  const le_tensor *t0 = &n->src[0], *t1 = &n->src[1], *t2 = &n->src[2], *t3 = &n->src[3],
                  *t4 = &n->src[4], *t5 = &n->src[5], *t6 = &n->src[6], *d = &n->dst;
  const int64_t nc = t0->ne[0]; /* d_state */
  const int64_t nr = t0->ne[1]; /* head dim */
  const int64_t nh = t1->ne[1]; /* heads */
  const int64_t ng = t4->ne[1]; /* groups of B and C */
  const int64_t nt = t1->ne[2]; /* tokens per sequence */
  const int64_t ns = t1->ne[3]; /* sequences */
  const int64_t K = n->params[0];
  /* the states follow y (x's element count) in dst */
  const int64_t s_off = t1->ne[0] * t1->ne[1] * t1->ne[2] * t1->ne[3] * 4;
  const int lvl = le_simd();
  const int mamba2 = t3->ne[0] == 1;
  /* heads per thread, as ggml */
  const int64_t dh = (nh + p->nth - 1) / p->nth;
  const int64_t ih0 = LE_MIN(dh * p->ith, nh), ih1 = LE_MIN(ih0 + dh, nh);
  const int32_t *ids = (const int32_t *)(uintptr_t)t6->data;
  const float *A = (const float *)(uintptr_t)t3->data;
  char *dst = (char *)(uintptr_t)d->data;
  for (int64_t i3 = 0; i3 < ns; i3++) {
    if (ids[i3] < 0 || ids[i3] >= t0->ne[3]) {
      /* ggml reads out of bounds here; refuse instead */
      char msg[128];
      snprintf(msg, sizeof msg, "ssm_scan: state id %d outside 0..%lld", ids[i3],
               (long long)t0->ne[3] - 1);
      le_ctx_fail(p->ctx, msg);
      return;
    }
    const float *s0 = (const float *)AT(t0, ids[i3] * t0->nb[3]);
    float *s = (float *)(dst + i3 * t0->nb[3] + s_off);
    for (int64_t i2 = 0; i2 < nt; i2++) {
      const float *x = (const float *)AT(t1, i2 * t1->nb[2] + i3 * t1->nb[3]);
      const float *dt = (const float *)AT(t2, i2 * t2->nb[1] + i3 * t2->nb[2]);
      const float *B = (const float *)AT(t4, i2 * t4->nb[2] + i3 * t4->nb[3]);
      const float *C = (const float *)AT(t5, i2 * t5->nb[2] + i3 * t5->nb[3]);
      float *y = (float *)(dst + (i2 * nh * nr + i3 * nt * nh * nr) * 4);
      for (int64_t h = ih0; h < ih1; h++) {
        const float dt_sp = softplus(dt[h]);
        const int64_t g = h / (nh / ng); /* repeat_interleave */
        const float dA = mamba2 ? expf(dt_sp * A[h]) : 0.0f;
        for (int64_t i1 = 0; i1 < nr; i1++) {
          const int64_t ii = i1 + h * nr;
          const float x_dt = x[ii] * dt_sp;
          const float *r0 = s0 + ii * nc, *b = B + g * nc, *c = C + g * nc;
          float *r = s + ii * nc;
          float sumf;
          if (mamba2) {
#if defined(LE_X86)
            if (lvl == LE_SIMD_AVX512) sumf = scan2_row_avx512(r0, b, c, r, (int)nc, dA, x_dt);
            else if (lvl == LE_SIMD_AVX2) sumf = scan2_row_avx2(r0, b, c, r, (int)nc, dA, x_dt);
            else
#endif
              sumf = scan2_row_scalar(r0, b, c, r, (int)nc, dA, x_dt);
          } else {
            const float *a = A + h * nc;
#if defined(LE_X86)
            if (lvl == LE_SIMD_AVX2 || lvl == LE_SIMD_AVX512) {
              sumf = scan1_row_fused(r0, a, b, c, r, (int)nc, dt_sp, x_dt);
            } else
#endif
              sumf = scan1_row_scalar(r0, a, b, c, r, (int)nc, dt_sp, x_dt);
          }
          y[ii] = sumf;
        }
      }
      /* rollback snapshots (K > 1, Mamba-2 only): the state after token
       * nt-1-slot goes to slot `slot` of the K slots */
      const int64_t slot = nt - 1 - i2;
      if (K > 1 && slot > 0 && slot < K) {
        char *snap = dst + s_off + (slot * ns + i3) * t0->nb[3];
        for (int64_t h = ih0; h < ih1; h++) {
          memcpy(snap + h * t0->nb[2], (char *)s + h * t0->nb[2], (size_t)t0->nb[2]);
        }
      }
      /* later tokens read the state just written */
      s0 = s;
    }
  }
}
