/* Reductions and transposes of 16 AVX-512 vectors at once, and the 8 x 8
 * transpose of AVX2 (q_f16.c's row kernel, the tinyBLAS-order tiles of
 * gemm_x86.c, f16_rows.c, flash_attn_f32.c). */
#ifndef LE_REDUCE512_H
#define LE_REDUCE512_H
#include "le_internal.h"
#if defined(LE_X86)

/* _mm512_reduce_add_ps of 16 vectors at once, by the same tree (halves,
 * quarters, then pairs: each lane's sum is bit for bit the single
 * reduction's; checked over random inputs of wide range). Output lane l is
 * the reduction of a[RED_SLOT[l]] (a 4 x 4 transpose, its own inverse):
 * storing row j's vector at a[RED_SLOT[j]] gives the rows in order. */
static const int RED_SLOT[16] = {0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15};

LE_TARGET_AVX512 static inline __attribute__((always_inline)) __m512 reduce16(const __m512 a[16]) {
  __m512 s[8], u[4], v[2];
#pragma GCC unroll 8
  for (int p = 0; p < 8; p++) /* lanes 0-7 | 8-15: the two vectors' high + low halves */
    s[p] = _mm512_add_ps(_mm512_shuffle_f32x4(a[2 * p], a[2 * p + 1], 0x44),
                         _mm512_shuffle_f32x4(a[2 * p], a[2 * p + 1], 0xEE));
#pragma GCC unroll 4
  for (int q = 0; q < 4; q++) /* one vector per 128-bit lane: its quarters added */
    u[q] = _mm512_add_ps(_mm512_shuffle_f32x4(s[2 * q], s[2 * q + 1], 0x88),
                         _mm512_shuffle_f32x4(s[2 * q], s[2 * q + 1], 0xDD));
#pragma GCC unroll 2
  for (int r = 0; r < 2; r++) /* per lane: [0] + [2], [1] + [3] of two vectors */
    v[r] = _mm512_add_ps(_mm512_shuffle_ps(u[2 * r], u[2 * r + 1], 0x44),
                         _mm512_shuffle_ps(u[2 * r], u[2 * r + 1], 0xEE));
  return _mm512_add_ps(_mm512_shuffle_ps(v[0], v[1], 0x88), _mm512_shuffle_ps(v[0], v[1], 0xDD));
}
/* In place: r[c] lane j = r[j] lane c, for a 16 x 16 block of floats. */
LE_TARGET_AVX512 static inline __attribute__((always_inline)) void transpose16(__m512 r[16]) {
  __m512 t[16];
#pragma GCC unroll 8
  for (int i = 0; i < 16; i += 2) { /* lane L: pairs of rows at columns 4L, 4L+1 | 4L+2, 4L+3 */
    t[i] = _mm512_unpacklo_ps(r[i], r[i + 1]);
    t[i + 1] = _mm512_unpackhi_ps(r[i], r[i + 1]);
  }
#pragma GCC unroll 4
  for (int i = 0; i < 16; i += 4) { /* r[i + c] lane L: rows i..i+3 at column 4L + c */
    r[i] = _mm512_shuffle_ps(t[i], t[i + 2], 0x44);
    r[i + 1] = _mm512_shuffle_ps(t[i], t[i + 2], 0xEE);
    r[i + 2] = _mm512_shuffle_ps(t[i + 1], t[i + 3], 0x44);
    r[i + 3] = _mm512_shuffle_ps(t[i + 1], t[i + 3], 0xEE);
  }
#pragma GCC unroll 4
  for (int c = 0; c < 4; c++) { /* 128-bit lanes: columns c and 8+c (or 4+c and 12+c) */
    t[c] = _mm512_shuffle_f32x4(r[c], r[4 + c], 0x88);
    t[4 + c] = _mm512_shuffle_f32x4(r[c], r[4 + c], 0xDD);
    t[8 + c] = _mm512_shuffle_f32x4(r[8 + c], r[12 + c], 0x88);
    t[12 + c] = _mm512_shuffle_f32x4(r[8 + c], r[12 + c], 0xDD);
  }
#pragma GCC unroll 4
  for (int c = 0; c < 4; c++) {
    r[c] = _mm512_shuffle_f32x4(t[c], t[8 + c], 0x88);
    r[8 + c] = _mm512_shuffle_f32x4(t[c], t[8 + c], 0xDD);
    r[4 + c] = _mm512_shuffle_f32x4(t[4 + c], t[12 + c], 0x88);
    r[12 + c] = _mm512_shuffle_f32x4(t[4 + c], t[12 + c], 0xDD);
  }
}

/* In place: r[c] element j = r[j] element c, for a 16 x 16 block of 16-bit
 * values (halves before they are widened: 256-bit shuffles, which Zen 4
 * issues at twice the rate of transpose16's 512-bit ones). */
LE_TARGET_AVX2 static inline __attribute__((always_inline)) void transpose16_epi16(__m256i r[16]) {
  __m256i t[16];
#pragma GCC unroll 8
  for (int i = 0; i < 16; i += 2) { /* 128-bit lane L: rows i, i+1 interleaved, columns 8L.. */
    t[i] = _mm256_unpacklo_epi16(r[i], r[i + 1]);
    t[i + 1] = _mm256_unpackhi_epi16(r[i], r[i + 1]);
  }
#pragma GCC unroll 4
  for (int i = 0; i < 16; i += 4) { /* rows i..i+3, two columns per lane */
    r[i] = _mm256_unpacklo_epi32(t[i], t[i + 2]);
    r[i + 1] = _mm256_unpackhi_epi32(t[i], t[i + 2]);
    r[i + 2] = _mm256_unpacklo_epi32(t[i + 1], t[i + 3]);
    r[i + 3] = _mm256_unpackhi_epi32(t[i + 1], t[i + 3]);
  }
#pragma GCC unroll 2
  for (int i = 0; i < 16; i += 8) /* rows i..i+7, one column per lane */
#pragma GCC unroll 4
    for (int c = 0; c < 4; c++) {
      t[i + 2 * c] = _mm256_unpacklo_epi64(r[i + c], r[i + 4 + c]);
      t[i + 2 * c + 1] = _mm256_unpackhi_epi64(r[i + c], r[i + 4 + c]);
    }
#pragma GCC unroll 8
  for (int c = 0; c < 8; c++) { /* rows 0..7 | 8..15 */
    r[c] = _mm256_permute2x128_si256(t[c], t[8 + c], 0x20);
    r[8 + c] = _mm256_permute2x128_si256(t[c], t[8 + c], 0x31);
  }
}

/* In place: r[c] lane j = r[j] lane c, for an 8 x 8 block of floats. */
LE_TARGET_AVX2 static inline __attribute__((always_inline)) void transpose8(__m256 r[8]) {
  __m256 t[8], u[8];
#pragma GCC unroll 4
  for (int i = 0; i < 8; i += 2) { /* 128-bit half L: rows i, i+1 at columns 4L..4L+3 */
    t[i] = _mm256_unpacklo_ps(r[i], r[i + 1]);
    t[i + 1] = _mm256_unpackhi_ps(r[i], r[i + 1]);
  }
#pragma GCC unroll 2
  for (int i = 0; i < 8; i += 4) { /* u[i + c] half L: rows i..i+3 at column 4L + c */
    u[i] = _mm256_shuffle_ps(t[i], t[i + 2], 0x44);
    u[i + 1] = _mm256_shuffle_ps(t[i], t[i + 2], 0xEE);
    u[i + 2] = _mm256_shuffle_ps(t[i + 1], t[i + 3], 0x44);
    u[i + 3] = _mm256_shuffle_ps(t[i + 1], t[i + 3], 0xEE);
  }
#pragma GCC unroll 4
  for (int c = 0; c < 4; c++) {
    r[c] = _mm256_permute2f128_ps(u[c], u[4 + c], 0x20);
    r[4 + c] = _mm256_permute2f128_ps(u[c], u[4 + c], 0x31);
  }
}
#endif
#endif
