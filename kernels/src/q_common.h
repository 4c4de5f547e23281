/* SIMD helpers shared by the 32-element block types (q8_0, q4_0, ...). */
#ifndef LE_Q_COMMON_H
#define LE_Q_COMMON_H
#include "le_internal.h"

#define LE_QK 32

typedef struct { uint16_t d; int8_t qs[LE_QK]; } le_block_q8_0;      /* 34 bytes */
typedef struct { uint16_t d; uint8_t qs[LE_QK / 2]; } le_block_q4_0; /* 18 bytes */

_Static_assert(sizeof(le_block_q8_0) == 34, "q8_0 block is 34 bytes");
_Static_assert(sizeof(le_block_q4_0) == 18, "q4_0 block is 18 bytes");

#if defined(LE_X86)
/* f16 scale to f32 with F16C (same value as le_fp16_to_fp32, no branches) */
LE_TARGET_AVX2 static inline float le_h2f(uint16_t h) { return _cvtsh_ss(h); }

/* 8 int32 partial sums (as float) of the signed byte products x*y. */
LE_TARGET_AVX2 static inline __m256 le_mul_sum_i8_avx2(__m256i x, __m256i y) {
  const __m256i ax = _mm256_sign_epi8(x, x);
  const __m256i sy = _mm256_sign_epi8(y, x);
  const __m256i d16 = _mm256_maddubs_epi16(ax, sy);
  return _mm256_cvtepi32_ps(_mm256_madd_epi16(d16, _mm256_set1_epi16(1)));
}

LE_TARGET_AVX512 static inline __m512 le_mul_sum_i8_avx512(__m512i x, __m512i y) {
  const __m512i ax = _mm512_abs_epi8(x);
  /* y with the sign of x: negate where x < 0 (and zero where x == 0 is harmless) */
  const __mmask64 neg = _mm512_movepi8_mask(x);
  const __m512i sy = _mm512_mask_sub_epi8(y, neg, _mm512_setzero_si512(), y);
  const __m512i d16 = _mm512_maddubs_epi16(ax, sy);
  return _mm512_cvtepi32_ps(_mm512_madd_epi16(d16, _mm512_set1_epi16(1)));
}

LE_TARGET_AVX2 static inline float le_hsum_ps256(__m256 v) {
  __m128 r = _mm_add_ps(_mm256_extractf128_ps(v, 1), _mm256_castps256_ps128(v));
  r = _mm_add_ps(r, _mm_movehl_ps(r, r));
  r = _mm_add_ss(r, _mm_movehdup_ps(r));
  return _mm_cvtss_f32(r);
}

/* AVX-512F-only (no DQ) halves of a float vector */
LE_TARGET_AVX512 static inline __m512 le_join_ps256(__m256 lo, __m256 hi) {
  return _mm512_castpd_ps(_mm512_insertf64x4(_mm512_castpd256_pd512(_mm256_castps_pd(lo)),
                                             _mm256_castps_pd(hi), 1));
}
LE_TARGET_AVX512 static inline __m256 le_fold_ps512(__m512 v) {
  return _mm256_add_ps(_mm512_castps512_ps256(v),
                       _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1)));
}

/* the 32 nibbles of a q4_0 block as signed bytes in element order */
LE_TARGET_AVX2 static inline __m256i le_q4_0_unpack_avx2(const uint8_t *qs) {
  const __m128i t = _mm_loadu_si128((const __m128i *)qs);
  const __m256i b = _mm256_set_m128i(_mm_srli_epi16(t, 4), t);
  return _mm256_sub_epi8(_mm256_and_si256(b, _mm256_set1_epi8(0x0f)), _mm256_set1_epi8(8));
}
#endif

void le_quantize_q8_0_act(const float *x, void *y, int64_t n);

#endif
