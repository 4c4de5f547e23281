/* ggml_vec_cvar_f32 (ggml-cpu/vec.cpp), the variance pass of ggml_norm, at
 * each SIMD level: the squares of a group of 16 (AVX-512F+DQ builds), 8
 * (AVX2+FMA) or 4 (SSE2) lanes are summed in float, halves first, and each
 * group's sum is added to a double; leftovers one by one. A plain double
 * sum per element rounds differently in the last bit now and then, which
 * LayerNorm passes on to every element of the row. */
#include "le_internal.h"
#include "vnorm.h"

#if defined(LE_X86)
#define LE_TARGET_AVX512DQ_N __attribute__((target("avx512f,avx512dq,avx512bw,avx512vl,avx2,fma,f16c")))

/* _mm512_reduce_add_ps: 16 → 8 → 4 → 2 → 1 by halves. */
LE_TARGET_AVX512DQ_N static int64_t cvar_512(int64_t n, float *y, const float *x, float mean, double *sum) {
  int64_t i = 0;
  for (; i + 15 < n; i += 16) {
    const __m512 v = _mm512_sub_ps(_mm512_loadu_ps(x + i), _mm512_set1_ps(mean));
    _mm512_storeu_ps(y + i, v);
    *sum += (double)_mm512_reduce_add_ps(_mm512_mul_ps(v, v));
  }
  return i;
}

LE_TARGET_AVX2 static int64_t cvar_256(int64_t n, float *y, const float *x, float mean, double *sum) {
  int64_t i = 0;
  for (; i + 7 < n; i += 8) {
    __m256 v = _mm256_sub_ps(_mm256_loadu_ps(x + i), _mm256_set1_ps(mean));
    _mm256_storeu_ps(y + i, v);
    v = _mm256_mul_ps(v, v);
    __m128 h = _mm_add_ps(_mm256_extractf128_ps(v, 1), _mm256_castps256_ps128(v));
    h = _mm_add_ps(h, _mm_movehl_ps(h, h));
    h = _mm_add_ss(h, _mm_movehdup_ps(h));
    *sum += (double)_mm_cvtss_f32(h);
  }
  return i;
}

/* The SSE2 branch without AVX (x64, sse42: what our scalar level follows):
 * (v0 + v1) + (v2 + v3). */
static int64_t cvar_128(int64_t n, float *y, const float *x, float mean, double *sum) {
  int64_t i = 0;
  for (; i + 3 < n; i += 4) {
    __m128 v = _mm_sub_ps(_mm_loadu_ps(x + i), _mm_set1_ps(mean));
    _mm_storeu_ps(y + i, v);
    v = _mm_mul_ps(v, v);
    __m128 t = _mm_shuffle_ps(v, v, _MM_SHUFFLE(2, 3, 0, 1));
    v = _mm_add_ps(v, t);
    t = _mm_movehl_ps(t, v);
    v = _mm_add_ss(v, t);
    *sum += (double)_mm_cvtss_f32(v);
  }
  return i;
}

static int has_avx512dq_n(void) {
  static int cached = -1;
  if (cached < 0) cached = __builtin_cpu_supports("avx512dq") ? 1 : 0;
  return cached;
}
#elif defined(__wasm_simd128__)
/* wasm32 + SIMD128: cvar_128 above, lane for lane (x86's scalar level). */
#include <wasm_simd128.h>
#define LE_WASM_128 1
static int64_t cvar_128(int64_t n, float *y, const float *x, float mean, double *sum) {
  int64_t i = 0;
  for (; i + 3 < n; i += 4) {
    v128_t v = wasm_f32x4_sub(wasm_v128_load(x + i), wasm_f32x4_splat(mean));
    wasm_v128_store(y + i, v);
    v = wasm_f32x4_mul(v, v);
    const float a = wasm_f32x4_extract_lane(v, 0) + wasm_f32x4_extract_lane(v, 1);
    const float b = wasm_f32x4_extract_lane(v, 2) + wasm_f32x4_extract_lane(v, 3);
    *sum += (double)(a + b);
  }
  return i;
}
#endif

double le_vec_cvar_f32(int64_t n, float *y, const float *x, float mean) {
  double sum = 0.0;
  int64_t i = 0;
#if defined(LE_X86)
  const int lvl = le_simd();
  if (lvl >= LE_SIMD_AVX512 && has_avx512dq_n()) i = cvar_512(n, y, x, mean, &sum);
  else if (lvl >= LE_SIMD_AVX2) i = cvar_256(n, y, x, mean, &sum);
  else i = cvar_128(n, y, x, mean, &sum);
#elif defined(LE_WASM_128)
  i = cvar_128(n, y, x, mean, &sum);
#endif
  for (; i < n; i++) {
    const float v = x[i] - mean;
    y[i] = v;
    sum += (double)(v * v);
  }
  return sum;
}
