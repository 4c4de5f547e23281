/* exp-based row kernels (softmax, silu, swiglu) that reproduce ggml-cpu's
 * vec.cpp arithmetic at each SIMD level: its polynomial ggml_v_expf (an Arm
 * optimized-routines port) on AVX-512, AVX2 and (our x86 scalar level) SSE2,
 * libm expf for the leftover elements and the scalar level elsewhere (wasm32 with
 * SIMD128 runs the SSE2 form too). Bit-identical results matter: the outputs
 * feed f16 and q8 roundings, where a one-ulp difference becomes a visible one. */
#include "le_internal.h"

static inline float silu_f32(float x) { return x / (1.0f + expf(-x)); }

#if defined(LE_X86)
#define LE_TARGET_AVX512DQ __attribute__((target("avx512f,avx512dq,avx512bw,avx512vl,avx2,fma,f16c")))

/* The AVX-512 form: n = round(x/ln2), b = x - n ln2 (two-part ln2), a degree-5
 * polynomial, then scalef; |n| > 192 saturates to 0 or inf. */
LE_TARGET_AVX512DQ static inline __m512 v_expf_512(__m512 x) {
  const __m512 r = _mm512_set1_ps(0x1.8p23f);
  const __m512 z = _mm512_fmadd_ps(x, _mm512_set1_ps(0x1.715476p+0f), r);
  const __m512 n = _mm512_sub_ps(z, r);
  const __m512 b = _mm512_fnmadd_ps(n, _mm512_set1_ps(0x1.7f7d1cp-20f),
                                    _mm512_fnmadd_ps(n, _mm512_set1_ps(0x1.62e4p-1f), x));
  const __mmask16 big = _mm512_cmp_ps_mask(_mm512_abs_ps(n), _mm512_set1_ps(192), _CMP_GT_OQ);
  const __m512 u = _mm512_mul_ps(b, b);
  const __m512 hi = _mm512_fmadd_ps(_mm512_set1_ps(0x1.0e4020p-7f), b, _mm512_set1_ps(0x1.573e2ep-5f));
  const __m512 mid = _mm512_fmadd_ps(_mm512_set1_ps(0x1.555e66p-3f), b, _mm512_set1_ps(0x1.fffdb6p-2f));
  const __m512 lo = _mm512_fmadd_ps(_mm512_set1_ps(0x1.ffffecp-1f), b, _mm512_set1_ps(1.0f));
  const __m512 j = _mm512_fmadd_ps(_mm512_fmadd_ps(hi, u, mid), u, lo);
  const __m512 res = _mm512_scalef_ps(j, n);
  if (_mm512_kortestz(big, big)) return res;
  const __m512 zero = _mm512_setzero_ps();
  const __m512 sat = _mm512_mask_blend_ps(_mm512_cmp_ps_mask(n, zero, _CMP_LE_OQ),
                                          _mm512_set1_ps(INFINITY), zero);
  return _mm512_mask_blend_ps(big, res, sat);
}

LE_TARGET_AVX512DQ static inline __m512 v_silu_512(__m512 x) {
  const __m512 e = v_expf_512(_mm512_sub_ps(_mm512_setzero_ps(), x));
  return _mm512_div_ps(x, _mm512_add_ps(_mm512_set1_ps(1.0f), e));
}

/* The AVX2 form: same reduction, the scale built from exponent bits, with a
 * two-step path for |n| > 126 that avoids overflow of the exponent. */
LE_TARGET_AVX2 static inline __m256 v_expf_256(__m256 x) {
  const __m256 r = _mm256_set1_ps(0x1.8p23f);
  const __m256 z = _mm256_fmadd_ps(x, _mm256_set1_ps(0x1.715476p+0f), r);
  const __m256 n = _mm256_sub_ps(z, r);
  const __m256 b = _mm256_fnmadd_ps(n, _mm256_set1_ps(0x1.7f7d1cp-20f),
                                    _mm256_fnmadd_ps(n, _mm256_set1_ps(0x1.62e4p-1f), x));
  const __m256i e = _mm256_slli_epi32(_mm256_castps_si256(z), 23);
  const __m256 k = _mm256_castsi256_ps(_mm256_add_epi32(e, _mm256_castps_si256(_mm256_set1_ps(1))));
  const __m256 absn = _mm256_andnot_ps(_mm256_set1_ps(-0.0f), n);
  const __m256i c = _mm256_castps_si256(_mm256_cmp_ps(absn, _mm256_set1_ps(126), _CMP_GT_OQ));
  const __m256 u = _mm256_mul_ps(b, b);
  const __m256 hi = _mm256_fmadd_ps(_mm256_set1_ps(0x1.0e4020p-7f), b, _mm256_set1_ps(0x1.573e2ep-5f));
  const __m256 mid = _mm256_fmadd_ps(_mm256_set1_ps(0x1.555e66p-3f), b, _mm256_set1_ps(0x1.fffdb6p-2f));
  const __m256 j = _mm256_fmadd_ps(_mm256_fmadd_ps(hi, u, mid), u,
                                   _mm256_mul_ps(_mm256_set1_ps(0x1.ffffecp-1f), b));
  if (!_mm256_movemask_ps(_mm256_castsi256_ps(c))) return _mm256_fmadd_ps(j, k, k);
  const __m256i g = _mm256_and_si256(
      _mm256_castps_si256(_mm256_cmp_ps(n, _mm256_setzero_ps(), _CMP_LE_OQ)),
      _mm256_set1_epi32((int)0x82000000u));
  const __m256 s1 = _mm256_castsi256_ps(_mm256_add_epi32(g, _mm256_set1_epi32(0x7f000000)));
  const __m256 s2 = _mm256_castsi256_ps(_mm256_sub_epi32(e, g));
  const __m256 d = _mm256_cmp_ps(absn, _mm256_set1_ps(192), _CMP_GT_OQ);
  const __m256 cf = _mm256_castsi256_ps(c);
  const __m256 mid_range = _mm256_or_ps(_mm256_and_ps(cf, _mm256_mul_ps(_mm256_fmadd_ps(s2, j, s2), s1)),
                                        _mm256_andnot_ps(cf, _mm256_fmadd_ps(k, j, k)));
  return _mm256_or_ps(_mm256_and_ps(d, _mm256_mul_ps(s1, s1)), _mm256_andnot_ps(d, mid_range));
}

LE_TARGET_AVX2 static inline __m256 v_silu_256(__m256 x) {
  const __m256 e = v_expf_256(_mm256_sub_ps(_mm256_setzero_ps(), x));
  return _mm256_div_ps(x, _mm256_add_ps(_mm256_set1_ps(1.0f), e));
}

LE_TARGET_AVX512DQ static int64_t soft_max_512(int64_t n, float *y, const float *x, float max, double *sum) {
  int64_t i = 0;
  for (; i + 15 < n; i += 16) {
    const __m512 v = v_expf_512(_mm512_sub_ps(_mm512_loadu_ps(x + i), _mm512_set1_ps(max)));
    _mm512_storeu_ps(y + i, v);
    *sum += (double)_mm512_reduce_add_ps(v);
  }
  return i;
}

LE_TARGET_AVX2 static int64_t soft_max_256(int64_t n, float *y, const float *x, float max, double *sum) {
  int64_t i = 0;
  for (; i + 7 < n; i += 8) {
    const __m256 v = v_expf_256(_mm256_sub_ps(_mm256_loadu_ps(x + i), _mm256_set1_ps(max)));
    _mm256_storeu_ps(y + i, v);
    __m128 h = _mm_add_ps(_mm256_extractf128_ps(v, 1), _mm256_castps256_ps128(v));
    h = _mm_add_ps(h, _mm_movehl_ps(h, h));
    h = _mm_add_ss(h, _mm_movehdup_ps(h));
    *sum += (double)_mm_cvtss_f32(h);
  }
  return i;
}

LE_TARGET_AVX512DQ static int64_t swiglu_512(int64_t n, float *y, const float *x, const float *g) {
  int64_t i = 0;
  for (; i + 15 < n; i += 16)
    _mm512_storeu_ps(y + i, g ? _mm512_mul_ps(v_silu_512(_mm512_loadu_ps(x + i)), _mm512_loadu_ps(g + i))
                              : v_silu_512(_mm512_loadu_ps(x + i)));
  return i;
}

LE_TARGET_AVX2 static int64_t swiglu_256(int64_t n, float *y, const float *x, const float *g) {
  int64_t i = 0;
  for (; i + 7 < n; i += 8)
    _mm256_storeu_ps(y + i, g ? _mm256_mul_ps(v_silu_256(_mm256_loadu_ps(x + i)), _mm256_loadu_ps(g + i))
                              : v_silu_256(_mm256_loadu_ps(x + i)));
  return i;
}

/* The SSE2 form, what ggml's x86 builds without AVX2+FMA run (variants
 * x64, sse42, sandybridge, ivybridge; piledriver too but with FMA): the
 * AVX2 algorithm on 4 lanes, each multiply-add rounded twice (no FMA).
 * Our scalar level uses it on x86, where SSE2 is always present. */
static inline __m128 madd128(__m128 x, __m128 y, __m128 z) { return _mm_add_ps(_mm_mul_ps(x, y), z); }
static inline __m128 nmadd128(__m128 x, __m128 y, __m128 z) { return _mm_sub_ps(z, _mm_mul_ps(x, y)); }

static inline __m128 v_expf_128(__m128 x) {
  const __m128 r = _mm_set1_ps(0x1.8p23f);
  const __m128 z = madd128(x, _mm_set1_ps(0x1.715476p+0f), r);
  const __m128 n = _mm_sub_ps(z, r);
  const __m128 b = nmadd128(n, _mm_set1_ps(0x1.7f7d1cp-20f), nmadd128(n, _mm_set1_ps(0x1.62e4p-1f), x));
  const __m128i e = _mm_slli_epi32(_mm_castps_si128(z), 23);
  const __m128 k = _mm_castsi128_ps(_mm_add_epi32(e, _mm_castps_si128(_mm_set1_ps(1))));
  const __m128 absn = _mm_andnot_ps(_mm_set1_ps(-0.0f), n);
  const __m128i c = _mm_castps_si128(_mm_cmpgt_ps(absn, _mm_set1_ps(126)));
  const __m128 u = _mm_mul_ps(b, b);
  const __m128 j = madd128(madd128(madd128(_mm_set1_ps(0x1.0e4020p-7f), b, _mm_set1_ps(0x1.573e2ep-5f)), u,
                                   madd128(_mm_set1_ps(0x1.555e66p-3f), b, _mm_set1_ps(0x1.fffdb6p-2f))),
                           u, _mm_mul_ps(_mm_set1_ps(0x1.ffffecp-1f), b));
  if (!_mm_movemask_epi8(c)) return madd128(j, k, k);
  const __m128i g = _mm_and_si128(_mm_castps_si128(_mm_cmple_ps(n, _mm_setzero_ps())),
                                  _mm_set1_epi32((int)0x82000000u));
  const __m128 s1 = _mm_castsi128_ps(_mm_add_epi32(g, _mm_set1_epi32(0x7f000000)));
  const __m128 s2 = _mm_castsi128_ps(_mm_sub_epi32(e, g));
  const __m128 d = _mm_cmpgt_ps(absn, _mm_set1_ps(192));
  const __m128 cf = _mm_castsi128_ps(c);
  const __m128 mid_range = _mm_or_ps(_mm_and_ps(cf, _mm_mul_ps(madd128(s2, j, s2), s1)),
                                     _mm_andnot_ps(cf, madd128(k, j, k)));
  return _mm_or_ps(_mm_and_ps(d, _mm_mul_ps(s1, s1)), _mm_andnot_ps(d, mid_range));
}

static inline __m128 v_silu_128(__m128 x) {
  const __m128 e = v_expf_128(_mm_sub_ps(_mm_setzero_ps(), x));
  return _mm_div_ps(x, _mm_add_ps(_mm_set1_ps(1.0f), e));
}

/* 4 lanes at a time; each group's sum in the non-AVX builds' order
 * (v0 + v1) + (v2 + v3) (x64, sse42; the AVX builds' (v0 + v2) + (v1 + v3)
 * differs in the last bit now and then: tolerance only there). */
static int64_t soft_max_128(int64_t n, float *y, const float *x, float max, double *sum) {
  int64_t i = 0;
  for (; i + 3 < n; i += 4) {
    __m128 v = v_expf_128(_mm_sub_ps(_mm_loadu_ps(x + i), _mm_set1_ps(max)));
    _mm_storeu_ps(y + i, v);
    __m128 t = _mm_shuffle_ps(v, v, _MM_SHUFFLE(2, 3, 0, 1));
    v = _mm_add_ps(v, t);
    t = _mm_movehl_ps(t, v);
    v = _mm_add_ss(v, t);
    *sum += (double)_mm_cvtss_f32(v);
  }
  return i;
}

static int64_t swiglu_128(int64_t n, float *y, const float *x, const float *g) {
  int64_t i = 0;
  for (; i + 3 < n; i += 4)
    _mm_storeu_ps(y + i, g ? _mm_mul_ps(v_silu_128(_mm_loadu_ps(x + i)), _mm_loadu_ps(g + i))
                           : v_silu_128(_mm_loadu_ps(x + i)));
  return i;
}

static int has_avx512dq(void) {
  static int cached = -1;
  if (cached < 0) cached = __builtin_cpu_supports("avx512dq") ? 1 : 0;
  return cached;
}
#elif defined(__wasm_simd128__)
/* wasm32 + SIMD128 (the WebAssembly build, which runs the scalar level):
 * the SSE2 form above lane for lane, so it gives our x86 scalar level's
 * bits (llama.cpp's x64 variant). Every op is an IEEE f32 op in both. */
#include <wasm_simd128.h>
#define LE_WASM_128 1

static inline v128_t madd128(v128_t x, v128_t y, v128_t z) {
  return wasm_f32x4_add(wasm_f32x4_mul(x, y), z);
}
static inline v128_t nmadd128(v128_t x, v128_t y, v128_t z) {
  return wasm_f32x4_sub(z, wasm_f32x4_mul(x, y));
}
#define S4 wasm_f32x4_splat

static inline v128_t v_expf_128(v128_t x) {
  const v128_t r = S4(0x1.8p23f);
  const v128_t z = madd128(x, S4(0x1.715476p+0f), r);
  const v128_t n = wasm_f32x4_sub(z, r);
  const v128_t b = nmadd128(n, S4(0x1.7f7d1cp-20f), nmadd128(n, S4(0x1.62e4p-1f), x));
  const v128_t e = wasm_i32x4_shl(z, 23);
  const v128_t k = wasm_i32x4_add(e, S4(1));
  const v128_t absn = wasm_v128_andnot(n, S4(-0.0f));
  const v128_t c = wasm_f32x4_gt(absn, S4(126));
  const v128_t u = wasm_f32x4_mul(b, b);
  const v128_t j = madd128(madd128(madd128(S4(0x1.0e4020p-7f), b, S4(0x1.573e2ep-5f)), u,
                                   madd128(S4(0x1.555e66p-3f), b, S4(0x1.fffdb6p-2f))),
                           u, wasm_f32x4_mul(S4(0x1.ffffecp-1f), b));
  if (!wasm_v128_any_true(c)) return madd128(j, k, k);
  const v128_t g = wasm_v128_and(wasm_f32x4_le(n, wasm_f32x4_splat(0.0f)),
                                 wasm_i32x4_splat((int)0x82000000u));
  const v128_t s1 = wasm_i32x4_add(g, wasm_i32x4_splat(0x7f000000));
  const v128_t s2 = wasm_i32x4_sub(e, g);
  const v128_t d = wasm_f32x4_gt(absn, S4(192));
  const v128_t mid_range = wasm_v128_or(wasm_v128_and(c, wasm_f32x4_mul(madd128(s2, j, s2), s1)),
                                        wasm_v128_andnot(madd128(k, j, k), c));
  return wasm_v128_or(wasm_v128_and(d, wasm_f32x4_mul(s1, s1)), wasm_v128_andnot(mid_range, d));
}

static inline v128_t v_silu_128(v128_t x) {
  const v128_t e = v_expf_128(wasm_f32x4_sub(wasm_f32x4_splat(0.0f), x));
  return wasm_f32x4_div(x, wasm_f32x4_add(S4(1.0f), e));
}

/* the per-4 sum of the non-AVX builds: (v0 + v1) + (v2 + v3) */
static int64_t soft_max_128(int64_t n, float *y, const float *x, float max, double *sum) {
  int64_t i = 0;
  for (; i + 3 < n; i += 4) {
    const v128_t v = v_expf_128(wasm_f32x4_sub(wasm_v128_load(x + i), S4(max)));
    wasm_v128_store(y + i, v);
    const float a = wasm_f32x4_extract_lane(v, 0) + wasm_f32x4_extract_lane(v, 1);
    const float b = wasm_f32x4_extract_lane(v, 2) + wasm_f32x4_extract_lane(v, 3);
    *sum += (double)(a + b);
  }
  return i;
}

static int64_t swiglu_128(int64_t n, float *y, const float *x, const float *g) {
  int64_t i = 0;
  for (; i + 3 < n; i += 4) {
    const v128_t s = v_silu_128(wasm_v128_load(x + i));
    wasm_v128_store(y + i, g ? wasm_f32x4_mul(s, wasm_v128_load(g + i)) : s);
  }
  return i;
}
#undef S4
#endif

double le_vec_soft_max_f32(int64_t n, float *y, const float *x, float max) {
  double sum = 0.0;
  int64_t i = 0;
#if defined(LE_X86)
  const int lvl = le_simd();
  if (lvl >= LE_SIMD_AVX512 && has_avx512dq()) i = soft_max_512(n, y, x, max, &sum);
  else if (lvl >= LE_SIMD_AVX2) i = soft_max_256(n, y, x, max, &sum);
  else i = soft_max_128(n, y, x, max, &sum);
#elif defined(LE_WASM_128)
  i = soft_max_128(n, y, x, max, &sum);
#endif
  for (; i < n; i++) {
    const float e = expf(x[i] - max);
    sum += (double)e;
    y[i] = e;
  }
  return sum;
}

void le_vec_swiglu_f32(int64_t n, float *y, const float *x, const float *g) {
  int64_t i = 0;
#if defined(LE_X86)
  const int lvl = le_simd();
  if (lvl >= LE_SIMD_AVX512 && has_avx512dq()) i = swiglu_512(n, y, x, g);
  else if (lvl >= LE_SIMD_AVX2) i = swiglu_256(n, y, x, g);
  else i = swiglu_128(n, y, x, g);
#elif defined(LE_WASM_128)
  i = swiglu_128(n, y, x, g);
#endif
  for (; i < n; i++) y[i] = g ? silu_f32(x[i]) * g[i] : silu_f32(x[i]);
}
