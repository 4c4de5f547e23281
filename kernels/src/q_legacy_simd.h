/* AVX2 building blocks of the 32-element q4_1/q5_0/q5_1 dots. */
#ifndef LE_Q_LEGACY_SIMD_H
#define LE_Q_LEGACY_SIMD_H
#include "q_common.h"

#if defined(LE_X86)
/* 0xff in byte j where bit j of `bits` is set */
LE_TARGET_AVX2 static inline __m256i le_bits_to_bytes_avx2(uint32_t bits) {
  const __m256i shuf = _mm256_setr_epi8(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 2, 2,
                                        2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3);
  const __m256i v = _mm256_shuffle_epi8(_mm256_set1_epi32((int)bits), shuf);
  const __m256i bit = _mm256_set1_epi64x((int64_t)0x7fbfdfeff7fbfdfeLL);
  return _mm256_cmpeq_epi8(_mm256_or_si256(v, bit), _mm256_set1_epi64x(-1));
}

/* nibbles of 16 bytes as 32 unsigned bytes in element order (lo nibbles first) */
LE_TARGET_AVX2 static inline __m256i le_nibbles_avx2(const uint8_t *qs) {
  const __m128i t = _mm_loadu_si128((const __m128i *)qs);
  const __m256i b = _mm256_set_m128i(_mm_srli_epi16(t, 4), t);
  return _mm256_and_si256(b, _mm256_set1_epi8(0x0f));
}

/* 8 int32 partial sums (as float) of unsigned x times signed y */
LE_TARGET_AVX2 static inline __m256 le_mul_sum_u8i8_avx2(__m256i x, __m256i y) {
  const __m256i d16 = _mm256_maddubs_epi16(x, y);
  return _mm256_cvtepi32_ps(_mm256_madd_epi16(d16, _mm256_set1_epi16(1)));
}
#endif
#endif
