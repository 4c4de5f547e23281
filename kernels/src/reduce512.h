/* Reductions of 16 AVX-512 vectors at once (q_f16.c's row kernel, the
 * tinyBLAS-order tiles of gemm_x86.c). */
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
#endif
#endif
