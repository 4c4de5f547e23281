/* Row-wise ops with ggml's semantics (see ggml-cpu/ops.cpp at the oracle
 * revision): each thread takes a contiguous range of dst rows. */
#include "le_internal.h"
#include "vexp.h"
#include "vnorm.h"

#include <stdio.h>

#include "ops_rows.h"

static void op_get_rows(const le_node *n, const le_compute_params *p) {
  const le_tensor *s0 = &n->src[0], *s1 = &n->src[1], *d = &n->dst;
  const le_type_traits *t = le_traits(s0->type);
  FOR_MY_ROWS(d, p)
  /* dst row (i1,i2,i3) takes the id at src1[i1,i2,i3] */
  const int32_t id = *(const int32_t *)((const char *)(uintptr_t)s1->data + i1 * s1->nb[0] +
                                        i2 * s1->nb[1] + i3 * s1->nb[2]);
  float *y = (float *)ROW(d, i1, i2, i3);
  if (id < 0 || id >= s0->ne[1]) {
    char msg[128];
    snprintf(msg, sizeof msg, "get_rows: row id %d outside 0..%lld", id, (long long)s0->ne[1] - 1);
    le_ctx_fail(p->ctx, msg);
    memset(y, 0, (size_t)d->ne[0] * 4);
    continue;
  }
  t->to_float((const char *)(uintptr_t)s0->data + id * s0->nb[1] + i2 * s0->nb[2] + i3 * s0->nb[3],
              y, s0->ne[0]);
  END_ROWS
}

static void op_rms_norm(const le_node *n, const le_compute_params *p) {
  const le_tensor *s0 = &n->src[0], *d = &n->dst;
  const float eps = node_f32(n, 0);
  const int64_t ne0 = s0->ne[0];
  FOR_MY_ROWS(d, p)
  const float *x = (const float *)ROW(s0, i1, i2, i3);
  float *y = (float *)ROW(d, i1, i2, i3);
  double sum = 0.0;
  for (int64_t i = 0; i < ne0; i++) sum += (double)(x[i] * x[i]);
  const float mean = (float)(sum / (double)ne0);
  const float scale = 1.0f / sqrtf(mean + eps);
  for (int64_t i = 0; i < ne0; i++) y[i] = x[i] * scale;
  END_ROWS
}

static void op_norm(const le_node *n, const le_compute_params *p) {
  const le_tensor *s0 = &n->src[0], *d = &n->dst;
  const float eps = node_f32(n, 0);
  const int64_t ne0 = s0->ne[0];
  FOR_MY_ROWS(d, p)
  const float *x = (const float *)ROW(s0, i1, i2, i3);
  float *y = (float *)ROW(d, i1, i2, i3);
  double sum = 0.0;
  for (int64_t i = 0; i < ne0; i++) sum += (double)x[i];
  const float mean = (float)sum / (float)ne0;
  /* ggml_vec_cvar_f32's grouping of the squares at the SIMD level in effect. */
  const float variance = (float)(le_vec_cvar_f32(ne0, y, x, mean) / (double)ne0);
  const float scale = 1.0f / sqrtf(variance + eps);
  for (int64_t i = 0; i < ne0; i++) y[i] *= scale;
  END_ROWS
}

static void op_binary(const le_node *n, const le_compute_params *p, int is_add) {
  const le_tensor *s0 = &n->src[0], *s1 = &n->src[1], *d = &n->dst;
  const int64_t ne0 = d->ne[0], ne10 = s1->ne[0];
  FOR_MY_ROWS(d, p)
  const float *x = (const float *)ROW(s0, i1, i2, i3);
  const float *z = (const float *)ROW(s1, i1 % s1->ne[1], i2 % s1->ne[2], i3 % s1->ne[3]);
  float *y = (float *)ROW(d, i1, i2, i3);
  if (ne10 == ne0) {
    if (is_add)
      for (int64_t i = 0; i < ne0; i++) y[i] = x[i] + z[i];
    else
      for (int64_t i = 0; i < ne0; i++) y[i] = x[i] * z[i];
  } else {
    for (int64_t i = 0; i < ne0; i++) y[i] = is_add ? x[i] + z[i % ne10] : x[i] * z[i % ne10];
  }
  END_ROWS
}

static void op_scale(const le_node *n, const le_compute_params *p) {
  const le_tensor *s0 = &n->src[0], *d = &n->dst;
  const float s = node_f32(n, 0), b = node_f32(n, 1);
  FOR_MY_ROWS(d, p)
  const float *x = (const float *)ROW(s0, i1, i2, i3);
  float *y = (float *)ROW(d, i1, i2, i3);
  if (b == 0.0f)
    for (int64_t i = 0; i < d->ne[0]; i++) y[i] = x[i] * s;
  else
    for (int64_t i = 0; i < d->ne[0]; i++) y[i] = x[i] * s + b;
  END_ROWS
}

/* ggml's CPU gelu (GGML_GELU_FP16): a table of the tanh approximation over
 * every f16 input, i.e. f16(gelu(f16(x))), clamped outside +-10. ggml fills
 * the table in ggml-cpu.c, which its FMA builds (haswell, the AVX-512
 * variants) compile with contraction: 1 + a*x*x becomes fma(a*x, x, 1)
 * there, and the builds our scalar level follows (x64, sse42, ...) have no
 * FMA. The two differ in the last f16 bit for some inputs. */
static inline float gelu_f32(float x, int fused) {
  const float c = 0.79788456080286535587989211986876f, a = 0.044715f;
  const float inner = fused ? fmaf(a * x, x, 1.0f) : 1.0f + a * x * x;
  return 0.5f * x * (1.0f + tanhf(c * x * inner));
}
static inline float gelu_table(float x, int fused) {
  if (x <= -10.0f) return 0.0f;
  if (x >= 10.0f) return x;
  const float xh = le_fp16_to_fp32(le_fp32_to_fp16(x));
  return le_fp16_to_fp32(le_fp32_to_fp16(gelu_f32(xh, fused)));
}

static void op_unary(const le_node *n, const le_compute_params *p) {
  const le_tensor *s0 = &n->src[0], *d = &n->dst;
  FOR_MY_ROWS(d, p)
  const float *x = (const float *)ROW(s0, i1, i2, i3);
  float *y = (float *)ROW(d, i1, i2, i3);
  if (n->op == LE_OP_SILU) {
    le_vec_swiglu_f32(d->ne[0], y, x, NULL);
  } else if (n->op == LE_OP_GELU) {
    const int fused = le_simd() != LE_SIMD_SCALAR;
    for (int64_t i = 0; i < d->ne[0]; i++) y[i] = gelu_table(x[i], fused);
  } else if (n->op == LE_OP_GEGLU) {
    /* ggml_vec_geglu_f32: the gelu table entry times the gate, and a plain
     * +0 (not 0 * gate) below the -10 clamp. */
    const int fused = le_simd() != LE_SIMD_SCALAR;
    const float *g = (const float *)ROW(&n->src[1], i1, i2, i3);
    for (int64_t i = 0; i < d->ne[0]; i++)
      y[i] = x[i] <= -10.0f ? 0.0f : gelu_table(x[i], fused) * g[i];
  } else { /* SWIGLU */
    const float *g = (const float *)ROW(&n->src[1], i1, i2, i3);
    le_vec_swiglu_f32(d->ne[0], y, x, g);
  }
  END_ROWS
}

/* The element-wise steps of soft_max, 8 lanes at a time where the CPU has
 * AVX2: each element gets the very operations of the scalar loops (x *
 * scale; + slope * mask; * inv), so the level does not matter. */
#if defined(LE_X86)
LE_TARGET_AVX2 static void sm_scale_mask_avx2(const float *x, float *y, int64_t n, float scale,
                                              const void *mask, int f16, float slope) {
  const __m256 vs = _mm256_set1_ps(scale), vl = _mm256_set1_ps(slope);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    __m256 v = _mm256_mul_ps(_mm256_loadu_ps(x + i), vs);
    if (mask) {
      const __m256 mv = f16 ? _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)((const uint16_t *)mask + i)))
                            : _mm256_loadu_ps((const float *)mask + i);
      v = _mm256_add_ps(v, _mm256_mul_ps(vl, mv));
    }
    _mm256_storeu_ps(y + i, v);
  }
  for (; i < n; i++) {
    y[i] = x[i] * scale;
    if (mask)
      y[i] += slope * (f16 ? le_fp16_to_fp32(((const uint16_t *)mask)[i]) : ((const float *)mask)[i]);
  }
}

/* The row maximum as the scalar loop finds it: with no NaN and a nonzero
 * maximum the order cannot matter (equal floats have equal bits; only a
 * zero maximum could come out +0 or -0 by order), else -2 = ask the loop. */
LE_TARGET_AVX2 static int sm_max_avx2(const float *y, int64_t n, float *out) {
  __m256 vm = _mm256_set1_ps(-INFINITY), nan = _mm256_setzero_ps();
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 v = _mm256_loadu_ps(y + i);
    vm = _mm256_max_ps(vm, v);
    nan = _mm256_or_ps(nan, _mm256_cmp_ps(v, v, _CMP_UNORD_Q));
  }
  if (_mm256_movemask_ps(nan)) return -2;
  float lanes[8], max = -INFINITY;
  _mm256_storeu_ps(lanes, vm);
  for (int k = 0; k < 8; k++) max = LE_MAX(max, lanes[k]);
  for (; i < n; i++) {
    if (y[i] != y[i]) return -2;
    max = LE_MAX(max, y[i]);
  }
  if (max == 0.0f) return -2;
  *out = max;
  return 0;
}

LE_TARGET_AVX2 static void sm_mul_avx2(float *y, int64_t n, float v) {
  const __m256 vv = _mm256_set1_ps(v);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) _mm256_storeu_ps(y + i, _mm256_mul_ps(_mm256_loadu_ps(y + i), vv));
  for (; i < n; i++) y[i] *= v;
}
#endif

static void op_soft_max(const le_node *n, const le_compute_params *p) {
  const le_tensor *s0 = &n->src[0], *d = &n->dst;
  const le_tensor *m = n->n_src > 1 && n->src[1].data ? &n->src[1] : NULL;
  const float scale = node_f32(n, 0), max_bias = node_f32(n, 1);
  const int64_t ne0 = s0->ne[0];
  const uint32_t n_head = (uint32_t)s0->ne[2];
  const uint32_t n_head_log2 = n_head ? 1u << (uint32_t)floor(log2((double)n_head)) : 1;
  const float m0 = powf(2.0f, -(max_bias) / n_head_log2);
  const float m1 = powf(2.0f, -(max_bias / 2.0f) / n_head_log2);
  FOR_MY_ROWS(d, p)
  const uint32_t h = (uint32_t)i2;
  const float slope = max_bias > 0.0f
                          ? (h < n_head_log2 ? powf(m0, h + 1) : powf(m1, 2 * (h - n_head_log2) + 1))
                          : 1.0f;
  const float *x = (const float *)ROW(s0, i1, i2, i3);
  float *y = (float *)ROW(d, i1, i2, i3);
#if defined(LE_X86)
  if (le_simd() != LE_SIMD_SCALAR) {
    const void *mr = m ? ROW(m, i1, i2 % m->ne[2], i3 % m->ne[3]) : NULL;
    sm_scale_mask_avx2(x, y, ne0, scale, mr, m && m->type == LE_TYPE_F16, slope);
    float max = -INFINITY;
    if (sm_max_avx2(y, ne0, &max) != 0)
      for (int64_t i = 0; i < ne0; i++) max = LE_MAX(max, y[i]);
    const double sum = le_vec_soft_max_f32(ne0, y, y, max);
    sm_mul_avx2(y, ne0, (float)(1.0 / sum));
    continue;
  }
#endif
  for (int64_t i = 0; i < ne0; i++) y[i] = x[i] * scale;
  if (m) {
    const char *mr = ROW(m, i1, i2 % m->ne[2], i3 % m->ne[3]);
    if (m->type == LE_TYPE_F16)
      for (int64_t i = 0; i < ne0; i++) y[i] += slope * le_fp16_to_fp32(((const uint16_t *)mr)[i]);
    else
      for (int64_t i = 0; i < ne0; i++) y[i] += slope * ((const float *)mr)[i];
  }
  float max = -INFINITY;
  for (int64_t i = 0; i < ne0; i++) max = LE_MAX(max, y[i]);
  const double sum = le_vec_soft_max_f32(ne0, y, y, max);
  const float inv = (float)(1.0 / sum);
  for (int64_t i = 0; i < ne0; i++) y[i] *= inv;
  END_ROWS
}

/* ---- hadamard (ggml_compute_forward_fwht) ---- */
/* Each row times the orthonormal Walsh-Hadamard matrix: scaled by
 * 1/sqrt(n) first, then butterflies of growing span. Sums and differences
 * of two floats round the same whatever the vector width (ggml's SIMD
 * passes compute u - v as fma(v, -1, u)), so every level is one loop. */
static void op_hadamard(const le_node *n, const le_compute_params *p) {
  const le_tensor *s0 = &n->src[0], *d = &n->dst;
  const int64_t ne0 = d->ne[0];
  const float scale = 1.0f / sqrtf((float)ne0);
  FOR_MY_ROWS(d, p)
  const float *x = (const float *)ROW(s0, i1, i2, i3);
  float *y = (float *)ROW(d, i1, i2, i3);
  for (int64_t j = 0; j < ne0; j++) y[j] = x[j] * scale;
  for (int64_t len = 1; len < ne0; len <<= 1) {
    for (int64_t i = 0; i < ne0; i += 2 * len) {
      for (int64_t j = 0; j < len; j++) {
        const float u = y[i + j], v = y[i + len + j];
        y[i + j] = u + v;
        y[i + len + j] = u - v;
      }
    }
  }
  END_ROWS
}

/* ---- cpy ---- */
static void op_cpy(const le_node *n, const le_compute_params *p) {
  const le_tensor *s = &n->src[0], *d = &n->dst;
  const le_type_traits *ts = le_traits(s->type), *td = le_traits(d->type);
  const int same = s->ne[0] == d->ne[0] && s->ne[1] == d->ne[1] && s->ne[2] == d->ne[2] &&
                   s->ne[3] == d->ne[3];
  if (ts->blck > 1) {
    /* dequantizing copy (K-shift of a q8_0 cache): whole rows, same shape, f32 dst */
    FOR_MY_ROWS(d, p)
    ts->to_float(ROW(s, i1, i2, i3), (float *)ROW(d, i1, i2, i3), d->ne[0]);
    END_ROWS
    return;
  }
  if (td->blck > 1) {
    /* quantizing copy (KV cache in q8_0): whole rows, same shape, f32 src */
    le_from_float_fn q = td->from_float_act ? td->from_float_act : td->from_float_ref;
    FOR_MY_ROWS(d, p)
    q((const float *)ROW(s, i1, i2, i3), ROW(d, i1, i2, i3), d->ne[0]);
    END_ROWS
    return;
  }
  if (same && s->type == d->type && (size_t)s->nb[0] == ts->size && (size_t)d->nb[0] == td->size) {
    FOR_MY_ROWS(d, p)
    memcpy(ROW(d, i1, i2, i3), ROW(s, i1, i2, i3), (size_t)d->ne[0] * td->size);
    END_ROWS
    return;
  }
  /* general element copy in logical (row-major) order; rows of src */
  FOR_MY_ROWS(s, p)
  const char *x = ROW(s, i1, i2, i3);
  int64_t lin = ((i3 * s->ne[2] + i2) * s->ne[1] + i1) * s->ne[0];
  int64_t j0 = lin % d->ne[0], j1, j2, j3;
  lin /= d->ne[0];
  j1 = lin % d->ne[1];
  lin /= d->ne[1];
  j2 = lin % d->ne[2];
  j3 = lin / d->ne[2];
  for (int64_t i0 = 0; i0 < s->ne[0]; i0++) {
    const char *e = x + i0 * s->nb[0];
    float v;
    if (s->type == LE_TYPE_F32) v = *(const float *)e;
    else if (s->type == LE_TYPE_F16) v = le_fp16_to_fp32(*(const uint16_t *)e);
    else v = le_bf16_to_fp32(*(const uint16_t *)e);
    char *o = ROW(d, j1, j2, j3) + j0 * d->nb[0];
    if (d->type == LE_TYPE_F32) *(float *)o = v;
    else if (d->type == LE_TYPE_F16) *(uint16_t *)o = le_fp32_to_fp16(v);
    else *(uint16_t *)o = le_fp32_to_bf16(v);
    if (++j0 == d->ne[0]) {
      j0 = 0;
      if (++j1 == d->ne[1]) {
        j1 = 0;
        if (++j2 == d->ne[2]) {
          j2 = 0;
          ++j3;
        }
      }
    }
  }
  END_ROWS
}

/* ggml_compute_forward_set_rows (F32 rows, I32 ids): row i of plane (i2, i3)
 * of src0 goes to dst row ids[i, i2 % ne11, i3 % ne12], converted with the
 * type's CPU from_float (ggml's; the plain f16 rounding for F16). Threads
 * split the rows i as ggml does. TypeScript checks every id against dst's
 * rows before the call; an id outside them still fails the node here and
 * nothing is written for it. */
static void op_set_rows(const le_node *n, const le_compute_params *p) {
  const le_tensor *s = &n->src[0], *ids = &n->src[1], *d = &n->dst;
  const le_type_traits *td = le_traits(d->type);
  const int64_t nc = s->ne[0];
  int64_t r0, r1;
  split_rows(s->ne[1], p, &r0, &r1);
  for (int64_t i3 = 0; i3 < s->ne[3]; i3++) {
    for (int64_t i2 = 0; i2 < s->ne[2]; i2++) {
      for (int64_t i = r0; i < r1; i++) {
        const int32_t id = *(const int32_t *)((const char *)(uintptr_t)ids->data + i * ids->nb[0] +
                                              (i2 % ids->ne[1]) * ids->nb[1] +
                                              (i3 % ids->ne[2]) * ids->nb[2]);
        if (id < 0 || id >= d->ne[1]) {
          char msg[128];
          snprintf(msg, sizeof msg, "set_rows: row id %d outside 0..%lld", id,
                   (long long)d->ne[1] - 1);
          le_ctx_fail(p->ctx, msg);
          continue;
        }
        const float *x = (const float *)ROW(s, i, i2, i3);
        char *y = ROW(d, id, i2, i3);
        if (d->type == LE_TYPE_F32) {
          memcpy(y, x, (size_t)nc * 4);
        } else if (d->type == LE_TYPE_F16) {
          /* one element per row: the transposed V store, a row call per element is too dear */
          if (nc == 1) *(uint16_t *)y = le_fp32_to_fp16(*x);
          else le_fp32_to_fp16_row(x, (uint16_t *)y, nc);
        } else if (d->type == LE_TYPE_BF16) {
          uint16_t *h = (uint16_t *)y;
          for (int64_t k = 0; k < nc; k++) h[k] = le_fp32_to_bf16(x[k]);
        } else {
          le_from_float_fn q = td->from_float_act ? td->from_float_act : td->from_float_ref;
          q(x, y, nc);
        }
      }
    }
  }
}

/* ggml_compute_forward_concat_f32: each dst element from src0 below
 * src0's extent along dim, else from src1 shifted back by it. */
static void op_concat(const le_node *n, const le_compute_params *p) {
  const le_tensor *a = &n->src[0], *b = &n->src[1], *d = &n->dst;
  const int dim = n->params[0];
  const int64_t ea = a->ne[dim];
  FOR_MY_ROWS(d, p)
  float *y = (float *)ROW(d, i1, i2, i3);
  int64_t o[4] = {0, i1, i2, i3};
  for (int64_t i0 = 0; i0 < d->ne[0]; i0++) {
    o[0] = i0;
    const le_tensor *s = o[dim] < ea ? a : b;
    int64_t q[4] = {o[0], o[1], o[2], o[3]};
    if (s == b) q[dim] -= ea;
    y[i0] = *(const float *)((const char *)(uintptr_t)s->data + q[0] * s->nb[0] + q[1] * s->nb[1] +
                             q[2] * s->nb[2] + q[3] * s->nb[3]);
  }
  END_ROWS
}

/* ---- dispatch ---- */

static int fail(const char *what, const le_node *n) {
  le_set_error("op %d: %s", n->op, what);
  return -1;
}

/* The op rules (types, shapes, strides, params) are TypeScript's: the table
 * in lib/graph/ops.ts, which lib/backend/validate.ts applies to every node,
 * buffer extents included, before lib/backend/cpu.ts encodes it. This check
 * trusts that and keeps only what guards the dispatch itself: a known op, the
 * sources its kernel reads, and type traits where the kernels dereference
 * them. It is cheap and never fails on a validated node. */
static const int8_t min_src[LE_OP_COUNT] = {
    [LE_OP_GET_ROWS] = 2, [LE_OP_RMS_NORM] = 1, [LE_OP_MUL] = 2,  [LE_OP_ADD] = 2,
    [LE_OP_MUL_MAT] = 2,  [LE_OP_ROPE] = 2,     [LE_OP_SOFT_MAX] = 1, [LE_OP_SILU] = 1,
    [LE_OP_SWIGLU] = 2,   [LE_OP_CPY] = 1,      [LE_OP_SCALE] = 1, [LE_OP_NORM] = 1,
    [LE_OP_GELU] = 1,     [LE_OP_GEGLU] = 2,      [LE_OP_FLASH_ATTN_EXT] = 3,
    [LE_OP_SSM_CONV] = 2, [LE_OP_SSM_SCAN] = 7,   [LE_OP_CONCAT] = 2,
    [LE_OP_HADAMARD] = 1, [LE_OP_SET_ROWS] = 2,
};

int le_node_check(const le_node *n) {
  if (n->op < 0 || n->op >= LE_OP_COUNT) return fail("unsupported op", n);
  if (n->n_src < min_src[n->op] || n->n_src > LE_MAX_SRC) return fail("bad source count", n);
  /* a repacked layout (le_tensor.flags) only as MUL_MAT's src0 */
  if (n->dst.flags) return fail("flags set on dst", n);
  for (int i = 0; i < LE_MAX_SRC; i++)
    if (n->src[i].flags && (i > 0 || n->op != LE_OP_MUL_MAT)) return fail("flags set on a source", n);
  switch (n->op) {
    case LE_OP_GET_ROWS:
      if (!le_traits(n->src[0].type)) return fail("get_rows: src0 type unknown", n);
      return 0;
    case LE_OP_CPY:
      if (!le_traits(n->src[0].type) || !le_traits(n->dst.type)) return fail("cpy: type unknown", n);
      return 0;
    case LE_OP_SET_ROWS:
      if (!le_traits(n->dst.type) || n->src[0].type != LE_TYPE_F32 || n->src[1].type != LE_TYPE_I32)
        return fail("set_rows: types", n);
      if (le_traits(n->dst.type)->blck > 1 && !le_traits(n->dst.type)->from_float_act &&
          !le_traits(n->dst.type)->from_float_ref)
        return fail("set_rows: dst type has no quantizer", n);
      return 0;
    case LE_OP_MUL_MAT:
      return le_mul_mat_check(n);
    default:
      return 0;
  }
}

size_t le_node_wsize(const le_node *n, int n_threads) {
  switch (n->op) {
    case LE_OP_ROPE:
      return (size_t)(n->dst.ne[0] + 16) * 4 * (size_t)n_threads;
    case LE_OP_MUL_MAT:
      return le_mul_mat_wsize(n);
    case LE_OP_FLASH_ATTN_EXT:
      return le_flash_attn_wsize(n, n_threads);
    default:
      return 0;
  }
}

void le_node_compute(const le_node *n, const le_compute_params *p) {
  switch (n->op) {
    case LE_OP_GET_ROWS: op_get_rows(n, p); break;
    case LE_OP_RMS_NORM: op_rms_norm(n, p); break;
    case LE_OP_NORM: op_norm(n, p); break;
    case LE_OP_MUL: op_binary(n, p, 0); break;
    case LE_OP_ADD: op_binary(n, p, 1); break;
    case LE_OP_SCALE: op_scale(n, p); break;
    case LE_OP_SILU:
    case LE_OP_GELU:
    case LE_OP_SWIGLU:
    case LE_OP_GEGLU: op_unary(n, p); break;
    case LE_OP_SOFT_MAX: op_soft_max(n, p); break;
    case LE_OP_ROPE: le_op_rope(n, p); break;
    case LE_OP_CPY: op_cpy(n, p); break;
    case LE_OP_MUL_MAT: le_mul_mat(n, p); break;
    case LE_OP_FLASH_ATTN_EXT: le_flash_attn(n, p); break;
    case LE_OP_HADAMARD: op_hadamard(n, p); break;
    case LE_OP_SSM_CONV: le_ssm_conv(n, p); break;
    case LE_OP_SSM_SCAN: le_ssm_scan(n, p); break;
    case LE_OP_CONCAT: op_concat(n, p); break;
    case LE_OP_SET_ROWS: op_set_rows(n, p); break;
    default: break;
  }
}
