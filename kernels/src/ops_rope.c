/* ROPE with ggml's semantics (ggml_compute_forward_rope at the oracle
 * revision): the sin/cos cache per position, then each row's rotated pairs. */
#include "ops_rows.h"

#include <math.h>
#if defined(__wasm__)
/* wasi-libc's musl sinf/cosf differ from x86-64 glibc's by an ulp now and
 * then; ROPE takes glibc's algorithm (PARITY.md §20). */
#include "third_party_arm_sincosf.h"
#define LE_ROPE_COSF le_arm_cosf
#define LE_ROPE_SINF le_arm_sinf
#else
#define LE_ROPE_COSF cosf
#define LE_ROPE_SINF sinf
#endif

/* ---- rope ---- */
static float rope_corr_dim(int n_dims, int n_ctx_orig, float n_rot, float base) {
  return n_dims * logf(n_ctx_orig / (n_rot * 2 * (float)M_PI)) / (2 * logf(base));
}

/* fused: ggml's rope_yarn built with fp contraction (see op_rope) fuses the
 * first product of the YaRN mix and the mscale correction into FMAs. */
static void rope_cache(float pos, const le_node *n, const float *ff, int64_t ne0, float *cache,
                       int fused) {
  const int n_dims = n->params[0], n_ctx_orig = n->params[2];
  const float freq_base = node_f32(n, 3), freq_scale = node_f32(n, 4);
  const float ext_factor = node_f32(n, 5), attn_factor = node_f32(n, 6);
  const float beta_fast = node_f32(n, 7), beta_slow = node_f32(n, 8);
  const float theta_scale = powf(freq_base, -2.0f / n_dims);
  float corr[2];
  corr[0] = LE_MAX(0.0f, floorf(rope_corr_dim(n_dims, n_ctx_orig, beta_fast, freq_base)));
  corr[1] = LE_MIN((float)(n_dims - 1), ceilf(rope_corr_dim(n_dims, n_ctx_orig, beta_slow, freq_base)));
  float theta = pos; /* theta_base, advanced by repeated multiplication like ggml */
  for (int64_t i0 = 0; i0 < ne0; i0 += 2) {
    const float f = ff ? ff[i0 / 2] : 1.0f;
    const float theta_extrap = theta / f;
    const float theta_interp = freq_scale * theta_extrap;
    float th = theta_interp, mscale = attn_factor;
    if (ext_factor != 0.0f) {
      const float y = ((float)(i0 / 2) - corr[0]) / LE_MAX(0.001f, corr[1] - corr[0]);
      const float ramp = (1 - LE_MIN(1.0f, LE_MAX(0.0f, y))) * ext_factor;
      if (fused) {
        th = fmaf(theta_interp, 1 - ramp, theta_extrap * ramp);
        mscale *= fmaf(0.1f, logf(1.0f / freq_scale), 1.0f);
      } else {
        th = theta_interp * (1 - ramp) + theta_extrap * ramp;
        mscale *= 1.0f + 0.1f * logf(1.0f / freq_scale);
      }
    }
    cache[i0] = LE_ROPE_COSF(th) * mscale;
    cache[i0 + 1] = LE_ROPE_SINF(th) * mscale;
    theta *= theta_scale;
  }
}

static inline float ld(const void *p, int f16) {
  return f16 ? le_fp16_to_fp32(*(const uint16_t *)p) : *(const float *)p;
}
static inline void st(void *p, float v, int f16) {
  if (f16)
    *(uint16_t *)p = le_fp32_to_fp16(v);
  else
    *(float *)p = v;
}

void le_op_rope(const le_node *n, const le_compute_params *p) {
  const le_tensor *s0 = &n->src[0], *s1 = &n->src[1], *d = &n->dst;
  const float *ff = n->n_src > 2 && n->src[2].data ? (const float *)(uintptr_t)n->src[2].data : NULL;
  const int n_dims = n->params[0], neox = n->params[1] & 2;
  const int f16 = s0->type == LE_TYPE_F16;
  const size_t ts = f16 ? 2 : 4;
  const int64_t ne0 = d->ne[0];
  /* Builds for CPUs with FMA (llama.cpp's haswell and AVX-512 variants)
   * contract rotate_pairs; the ones our scalar level follows (x64, sse42,
   * sandybridge, ivybridge) have no FMA and round each product. */
  const int fused = le_simd() != LE_SIMD_SCALAR;
  float *cache = (float *)p->wdata + (ne0 + 16) * p->ith;
  int64_t last_i2 = -1;
  FOR_MY_ROWS(d, p)
  if (i2 != last_i2) {
    const int32_t pos = *(const int32_t *)((const char *)(uintptr_t)s1->data + i2 * s1->nb[0]);
    /* Only the rotated pairs: the freq factors hold n_dims/2 entries (ggml
     * fills the cache to ne0, reading past them when n_dims < ne0). */
    rope_cache((float)pos, n, ff, n_dims, cache, fused);
    last_i2 = i2;
  }
  const char *x = ROW(s0, i1, i2, i3);
  char *y = ROW(d, i1, i2, i3);
  const int64_t off = neox ? n_dims / 2 : 1;
  for (int64_t i0 = 0; i0 < n_dims; i0 += 2) {
    const int64_t ic = neox ? i0 / 2 : i0;
    const float c = cache[i0], s = cache[i0 + 1];
    const float x0 = ld(x + ic * ts, f16), x1 = ld(x + (ic + off) * ts, f16);
    if (fused) {
      /* ggml's rotate_pairs is built with fp contraction: each output is one
       * fused multiply-add over a rounded product, in exactly this pairing. */
      st(y + ic * ts, fmaf(x0, c, -(x1 * s)), f16);
      st(y + (ic + off) * ts, fmaf(x0, s, x1 * c), f16);
    } else {
      st(y + ic * ts, x0 * c - x1 * s, f16);
      st(y + (ic + off) * ts, x0 * s + x1 * c, f16);
    }
  }
  if (x != y) memcpy(y + n_dims * ts, x + n_dims * ts, (size_t)(ne0 - n_dims) * ts);
  END_ROWS
}

