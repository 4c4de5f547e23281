/* F16: IEEE half. mul_mat rounds f32 activations to f16 first (ggml's
 * vec_dot_type for f16 is f16) and accumulates the products in float. */
#include "le_internal.h"
#include "le_wasm_simd.h"

static void cvt_to_f32_scalar(const uint16_t *x, float *y, int64_t n) {
  for (int64_t i = 0; i < n; i++) y[i] = le_fp16_to_fp32(x[i]);
}
static void cvt_to_f16_scalar(const float *x, uint16_t *y, int64_t n) {
  for (int64_t i = 0; i < n; i++) y[i] = le_fp32_to_fp16(x[i]);
}

static void dot_f16_scalar(int64_t n, float *s, const void *vx, const void *vy) {
  const uint16_t *x = vx, *y = vy;
  double sum = 0.0;
  for (int64_t i = 0; i < n; i++) sum += (double)(le_fp16_to_fp32(x[i]) * le_fp16_to_fp32(y[i]));
  *s = (float)sum;
}

#if defined(LE_WASM_SIMD)
float le_wasm_f16_table[65536];
__attribute__((constructor)) static void le_wasm_f16_table_init(void) {
  for (uint32_t h = 0; h < 65536; h++) le_wasm_f16_table[h] = le_fp16_to_fp32((uint16_t)h);
}

/* dot_f16_scalar's float, through wasm_simd.c's certified fast order. */
static void dot_f16_wasm(int64_t n, float *s, const void *vx, const void *vy) {
  *s = le_dot_f16_wasm(n, vx, vy);
}
static void cvt_to_f32_wasm(const uint16_t *x, float *y, int64_t n) {
  int64_t i = 0;
  for (; i + 4 <= n; i += 4) wasm_v128_store(y + i, le_wasm_h2f4(x + i));
  for (; i < n; i++) y[i] = le_fp16_to_fp32(x[i]);
}
#endif

#if defined(LE_X86)
LE_TARGET_AVX2 static void cvt_to_f32_avx2(const uint16_t *x, float *y, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    _mm256_storeu_ps(y + i, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(x + i))));
  for (; i < n; i++) y[i] = le_fp16_to_fp32(x[i]);
}
LE_TARGET_AVX2 static void cvt_to_f16_avx2(const float *x, uint16_t *y, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    _mm_storeu_si128((__m128i *)(y + i), _mm256_cvtps_ph(_mm256_loadu_ps(x + i), 0));
  for (; i < n; i++) y[i] = le_fp32_to_fp16(x[i]);
}

/* GGML_F32Cx8_REDUCE = GGML_F32x8_REDUCE: (a0 + a2) + (a1 + a3), low +
 * high half, two hadds ((t0 + t1) + (t2 + t3)); the elements from np on
 * in double, each product rounded in float (ggml's leftover loop). */
LE_TARGET_AVX2 static inline float f16_finish_avx2(__m256 a0, __m256 a1, __m256 a2, __m256 a3,
                                                   const uint16_t *x, const uint16_t *y,
                                                   int64_t np, int64_t n) {
  __m256 t = _mm256_add_ps(_mm256_add_ps(a0, a2), _mm256_add_ps(a1, a3));
  __m128 r = _mm_add_ps(_mm256_castps256_ps128(t), _mm256_extractf128_ps(t, 1));
  r = _mm_hadd_ps(r, r);
  r = _mm_hadd_ps(r, r);
  double sum = _mm_cvtss_f32(r);
  for (int64_t i = np; i < n; i++) sum += (double)(_cvtsh_ss(x[i]) * _cvtsh_ss(y[i]));
  return (float)sum;
}

LE_TARGET_AVX2 static void dot_f16_avx2(int64_t n, float *s, const void *vx, const void *vy) {
  const uint16_t *x = vx, *y = vy;
  __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
  const int64_t np = n & ~(int64_t)31;
#define LD(p) _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(p)))
  for (int64_t i = 0; i < np; i += 32) {
    a0 = _mm256_fmadd_ps(LD(x + i), LD(y + i), a0);
    a1 = _mm256_fmadd_ps(LD(x + i + 8), LD(y + i + 8), a1);
    a2 = _mm256_fmadd_ps(LD(x + i + 16), LD(y + i + 16), a2);
    a3 = _mm256_fmadd_ps(LD(x + i + 24), LD(y + i + 24), a3);
  }
#undef LD
  *s = f16_finish_avx2(a0, a1, a2, a3, x, y, np, n);
}

/* (a0 + a2) + (a1 + a3) reduced to one lane; then the elements from np on
 * (all of them for an attention head of 32): each product rounded in float,
 * added in double in order, as ggml's leftover loop, converted and
 * multiplied 16 at a time (masked loads). */
LE_TARGET_AVX512 static inline float f16_finish_avx512(__m512 a0, __m512 a1, __m512 a2, __m512 a3,
                                                       const uint16_t *x, const uint16_t *y,
                                                       int64_t np, int64_t n) {
  double sum = _mm512_reduce_add_ps(_mm512_add_ps(_mm512_add_ps(a0, a2), _mm512_add_ps(a1, a3)));
  for (int64_t i = np; i < n; i += 16) {
    const int64_t m = LE_MIN(16, n - i);
    const __mmask16 k = (__mmask16)((1u << m) - 1);
    float t[16];
    _mm512_storeu_ps(t, _mm512_mul_ps(_mm512_cvtph_ps(_mm256_maskz_loadu_epi16(k, x + i)),
                                      _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(k, y + i))));
    for (int64_t j = 0; j < m; j++) sum += (double)t[j];
  }
  return (float)sum;
}

LE_TARGET_AVX512 static void dot_f16_avx512(int64_t n, float *s, const void *vx, const void *vy) {
  const uint16_t *x = vx, *y = vy;
  __m512 a0 = _mm512_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
  const int64_t np = n & ~(int64_t)63;
#define LD(p) _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(p)))
  for (int64_t i = 0; i < np; i += 64) {
    a0 = _mm512_fmadd_ps(LD(x + i), LD(y + i), a0);
    a1 = _mm512_fmadd_ps(LD(x + i + 16), LD(y + i + 16), a1);
    a2 = _mm512_fmadd_ps(LD(x + i + 32), LD(y + i + 32), a2);
    a3 = _mm512_fmadd_ps(LD(x + i + 48), LD(y + i + 48), a3);
  }
#undef LD
  *s = f16_finish_avx512(a0, a1, a2, a3, x, y, np, n);
}
#endif

#if defined(LE_NEON)
static void dot_f16_neon(int64_t n, float *s, const void *vx, const void *vy) {
  const __fp16 *x = vx, *y = vy;
  float32x4_t a0 = vdupq_n_f32(0), a1 = a0;
  const int64_t np = n & ~(int64_t)7;
  for (int64_t i = 0; i < np; i += 8) {
    float16x8_t hx = vld1q_f16(x + i), hy = vld1q_f16(y + i);
    a0 = vfmaq_f32(a0, vcvt_f32_f16(vget_low_f16(hx)), vcvt_f32_f16(vget_low_f16(hy)));
    a1 = vfmaq_f32(a1, vcvt_high_f32_f16(hx), vcvt_high_f32_f16(hy));
  }
  double sum = vaddvq_f32(vaddq_f32(a0, a1));
  const uint16_t *ux = vx, *uy = vy;
  for (int64_t i = np; i < n; i++) sum += (double)(le_fp16_to_fp32(ux[i]) * le_fp16_to_fp32(uy[i]));
  *s = (float)sum;
}
#endif

void le_fp16_to_fp32_row(const uint16_t *x, float *y, int64_t n) {
#if defined(LE_X86)
  if (le_simd() >= LE_SIMD_AVX2) {
    cvt_to_f32_avx2(x, y, n);
    return;
  }
#endif
#if defined(LE_WASM_SIMD)
  cvt_to_f32_wasm(x, y, n);
  return;
#endif
  cvt_to_f32_scalar(x, y, n);
}

void le_fp32_to_fp16_row(const float *x, uint16_t *y, int64_t n) {
#if defined(LE_X86)
  if (le_simd() >= LE_SIMD_AVX2) {
    cvt_to_f16_avx2(x, y, n);
    return;
  }
#endif
  cvt_to_f16_scalar(x, y, n);
}

static void f16_to_float(const void *x, float *y, int64_t n) { le_fp16_to_fp32_row(x, y, n); }
static void f16_from_float(const float *x, void *y, int64_t n) { le_fp32_to_fp16_row(x, y, n); }

const le_type_traits le_traits_f16 = {
    .type = LE_TYPE_F16,
    .name = "f16",
    .blck = 1,
    .size = 2,
    .to_float = f16_to_float,
    .from_float_ref = f16_from_float,
    .from_float_act = f16_from_float,
    .vec_dot_type = LE_TYPE_F16,
    .vec_dot = {
#if defined(LE_WASM_SIMD)
        [LE_SIMD_SCALAR] = dot_f16_wasm,
#else
        [LE_SIMD_SCALAR] = dot_f16_scalar,
#endif
#if defined(LE_X86)
        [LE_SIMD_AVX2] = dot_f16_avx2,
        [LE_SIMD_AVX512] = dot_f16_avx512,
#endif
#if defined(LE_NEON)
        [LE_SIMD_NEON] = dot_f16_neon,
#endif
    },
#if defined(LE_WASM_SIMD)
    .gemm = {[LE_SIMD_SCALAR] = &le_f16_tiles_wasm},
#endif
};
