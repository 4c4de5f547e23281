/* Q8_0 weights repacked 16 rows at a time (LE_FLAG_Q8_0_16X4): the faster
 * float order behind ContextOptions.matmulOrder "fast". llama.cpp's CPU
 * variants that our kernels follow (zen4, icelake, haswell) keep Q8_0 as
 * plain rows, so this layout is never the default (le_repack_flag).
 *
 * Why: ggml's Q8_0 dot (vec_dot, and tinyBLAS's tiles for N >= 2) keeps 8
 * float lanes per output and per block converts 8 int32 partial sums, scales
 * them and adds them: three float instructions per 32 products of one
 * output. The prompt's products sat at that float rate (PARITY section 33).
 * Here one vpdpbusd multiplies 4 bytes of each of 16 rows by the same 4
 * bytes of the column, so after 8 of them each lane holds its row's whole
 * block sum (exact int32), and the floats are one convert, one scale and
 * one fma per 16 outputs and block.
 *
 * Layout, per group of 16 rows and block b of 32 elements, 544 bytes (as
 * many as the 16 plain blocks): d[16] (the rows' f16 scales), then qs[512]:
 * qs[j * 64 + r * 4 + t] = row r's code 4j + t, XOR 0x80 (the code + 128,
 * unsigned, as vpdpbusd's first operand must be). Groups follow each other,
 * blocks in order inside a group.
 *
 * Per output: acc = fma((float)isum_b, d_x * d_y, acc) over the blocks in
 * order, where isum_b is the block's exact integer dot (the +128 comes back
 * out as the accumulator's start, -128 times the column's block sum). ggml
 * sums each block into 8 lanes with one fma each and adds the lanes last,
 * so results differ from llama.cpp's in the last bits (the AVX2 form, below,
 * gets the same integer sums another way: the same bits); the scalar form
 * below runs the same chain (over the scalar level's activations, which
 * llama.cpp's reference quantizer makes: rarely other bytes than the x86
 * one's). */
#include "q_common.h"

#ifndef LE_INLINE
#define LE_INLINE static inline __attribute__((always_inline))
#endif

#define Q8X16_BYTES 544
typedef struct { uint16_t d[16]; uint8_t qs[512]; } le_block_q8_0x16;
_Static_assert(sizeof(le_block_q8_0x16) == Q8X16_BYTES, "q8_0x16 block is 544 bytes");

int64_t le_repack_q8_0_16x4_size(int64_t ne0, int64_t ne1) {
  if (ne0 <= 0 || ne0 % LE_QK || ne1 <= 0 || ne1 % 16) return -1;
  return ne0 / LE_QK * ne1 * (int64_t)sizeof(le_block_q8_0);
}

/* Whether the layout pays at the SIMD level in effect: AVX-512 with VNNI
 * (vpdpbusd) and AVX2 (vpmaddubsw); elsewhere the plain rows keep
 * llama.cpp's order. */
int le_q8_0x16_wanted(void) {
#if defined(LE_X86)
  return (le_simd() == LE_SIMD_AVX512 && le_cpu_vnni()) || le_simd() == LE_SIMD_AVX2;
#else
  return 0;
#endif
}

int le_repack_q8_0_16x4(const void *src, void *dst, int64_t ne0, int64_t ne1) {
  if (ne0 <= 0 || ne0 % LE_QK || ne1 <= 0 || ne1 % 16) {
    le_set_error("repack q8_0: shape %lld x %lld is not a multiple of 32 x 16", (long long)ne0,
                 (long long)ne1);
    return -1;
  }
  const int64_t nb = ne0 / LE_QK;
  const le_block_q8_0 *x = src;
  le_block_q8_0x16 *out = dst;
  for (int64_t g = 0; g < ne1 / 16; g++)
    for (int64_t b = 0; b < nb; b++, out++)
      for (int r = 0; r < 16; r++) {
        const le_block_q8_0 *row = &x[(g * 16 + r) * nb + b];
        out->d[r] = row->d;
        for (int k = 0; k < LE_QK; k++)
          out->qs[(k / 4) * 64 + r * 4 + k % 4] = (uint8_t)row->qs[k] ^ 0x80;
      }
  return 0;
}

/* Whether le_q8_0x16_rows reads the columns' starts at the SIMD level in
 * effect (the VNNI form; the AVX2 and scalar forms take the codes signed). */
int le_q8_0x16_uses_start(void) {
#if defined(LE_X86)
  return le_simd() == LE_SIMD_AVX512 && le_cpu_vnni();
#else
  return 0;
#endif
}

/* Column row y (nb Q8_0 blocks): start[b] = -128 * (sum of block b's codes),
 * the accumulators' start that takes the weights' +128 back out. */
void le_q8_0x16_col_start(const void *vy, int64_t nb, int32_t *start) {
  const le_block_q8_0 *y = vy;
  for (int64_t b = 0; b < nb; b++) {
    int32_t s = 0;
    for (int k = 0; k < LE_QK; k++) s += y[b].qs[k];
    start[b] = -128 * s;
  }
}

/* Portable form: the same integer sums (the codes signed again) and the
 * same float chain with fmaf. */
static void q8x16_dot_scalar(int64_t nb, const le_block_q8_0x16 *x, const le_block_q8_0 *y,
                             float *s) {
  float acc[16] = {0};
  for (int64_t b = 0; b < nb; b++) {
    const float dy = le_fp16_to_fp32(y[b].d);
    for (int r = 0; r < 16; r++) {
      int32_t isum = 0;
      for (int k = 0; k < LE_QK; k++)
        isum += (int8_t)(x[b].qs[(k / 4) * 64 + r * 4 + k % 4] ^ 0x80) * y[b].qs[k];
      acc[r] = fmaf((float)isum, le_fp16_to_fp32(x[b].d[r]) * dy, acc[r]);
    }
  }
  memcpy(s, acc, sizeof acc);
}

#if defined(LE_X86)
#define LE_TARGET_Q8X16 __attribute__((target("avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")))

/* One group (16 rows) against RN columns (by bytes apart, their starts
 * nb apart), outputs bs floats apart: the group-block's codes loaded once
 * for the RN columns, each column's 8 steps in two chains. */
LE_TARGET_Q8X16 LE_INLINE void q8x16_tile(const int RN, int64_t nb, const le_block_q8_0x16 *x,
                                          const char *vy, size_t by, const int32_t *start,
                                          float *s, size_t bs) {
  __m512 acc[8];
#pragma GCC unroll 8
  for (int c = 0; c < RN; c++) acc[c] = _mm512_setzero_ps();
  for (int64_t b = 0; b < nb; b++) {
    __m512i w[8];
#pragma GCC unroll 8
    for (int j = 0; j < 8; j++) w[j] = _mm512_loadu_si512((const void *)(x[b].qs + j * 64));
    const __m512 dx = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(const void *)x[b].d));
#pragma GCC unroll 8
    for (int c = 0; c < RN; c++) {
      const le_block_q8_0 *y = (const le_block_q8_0 *)(const void *)(vy + c * by) + b;
      int32_t p[8];
      memcpy(p, y->qs, 32);
      __m512i u = _mm512_set1_epi32(start[c * nb + b]), v = _mm512_setzero_si512();
#pragma GCC unroll 4
      for (int j = 0; j < 8; j += 2) {
        u = _mm512_dpbusd_epi32(u, w[j], _mm512_set1_epi32(p[j]));
        v = _mm512_dpbusd_epi32(v, w[j + 1], _mm512_set1_epi32(p[j + 1]));
      }
      const __m512 dxy = _mm512_mul_ps(dx, _mm512_set1_ps(le_h2f(y->d)));
      acc[c] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_add_epi32(u, v)), dxy, acc[c]);
    }
  }
#pragma GCC unroll 8
  for (int c = 0; c < RN; c++) _mm512_storeu_ps(s + c * bs, acc[c]);
}

/* AVX2 (no vpdpbusd): the same block sums by vpmaddubsw, which needs an
 * unsigned side whose pair sums fit int16: |x| against y with x's sign
 * (at most 2 * 127 * 127), the codes' +128 taken off first. A group is two
 * halves of 8 rows (the 32 bytes of a step's 64 that hold them); each
 * step's products go pairwise into int16, then (vpmaddwd by ones) into
 * one int32 lane per row. Exact, so the same isum and the same float chain
 * as the VNNI form: the same bits. Two columns at a time fit the 16
 * registers with the codes unpacked once for both. */
LE_TARGET_AVX2 LE_INLINE void q8x16_tile_avx2(const int RN, int64_t nb, const le_block_q8_0x16 *x,
                                              const char *vy, size_t by, float *s, size_t bs) {
  const __m256i flip = _mm256_set1_epi8((char)0x80), ones = _mm256_set1_epi16(1);
  __m256 acc[2][2];
#pragma GCC unroll 2
  for (int c = 0; c < RN; c++) acc[c][0] = acc[c][1] = _mm256_setzero_ps();
  for (int64_t b = 0; b < nb; b++) {
    __m256i sum[2][2];
#pragma GCC unroll 2
    for (int c = 0; c < RN; c++) sum[c][0] = sum[c][1] = _mm256_setzero_si256();
    int32_t p[2][8];
#pragma GCC unroll 2
    for (int c = 0; c < RN; c++)
      memcpy(p[c], ((const le_block_q8_0 *)(const void *)(vy + c * by) + b)->qs, 32);
#pragma GCC unroll 8
    for (int j = 0; j < 8; j++) {
#pragma GCC unroll 2
      for (int h = 0; h < 2; h++) {
        const __m256i w = _mm256_xor_si256(
            _mm256_loadu_si256((const __m256i *)(const void *)(x[b].qs + j * 64 + h * 32)), flip);
        const __m256i aw = _mm256_abs_epi8(w);
#pragma GCC unroll 2
        for (int c = 0; c < RN; c++) {
          const __m256i sy = _mm256_sign_epi8(_mm256_set1_epi32(p[c][j]), w);
          sum[c][h] = _mm256_add_epi32(
              sum[c][h], _mm256_madd_epi16(_mm256_maddubs_epi16(aw, sy), ones));
        }
      }
    }
    const __m256 dx0 = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(const void *)x[b].d));
    const __m256 dx1 = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(const void *)(x[b].d + 8)));
#pragma GCC unroll 2
    for (int c = 0; c < RN; c++) {
      const __m256 dy = _mm256_set1_ps(
          le_h2f(((const le_block_q8_0 *)(const void *)(vy + c * by) + b)->d));
      acc[c][0] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(sum[c][0]), _mm256_mul_ps(dx0, dy), acc[c][0]);
      acc[c][1] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(sum[c][1]), _mm256_mul_ps(dx1, dy), acc[c][1]);
    }
  }
#pragma GCC unroll 2
  for (int c = 0; c < RN; c++) {
    _mm256_storeu_ps(s + c * bs, acc[c][0]);
    _mm256_storeu_ps(s + c * bs + 8, acc[c][1]);
  }
}

LE_TARGET_AVX2 static void q8x16_avx2_2(int64_t nb, const le_block_q8_0x16 *x, const char *vy,
                                        size_t by, float *s, size_t bs) {
  q8x16_tile_avx2(2, nb, x, vy, by, s, bs);
}
LE_TARGET_AVX2 static void q8x16_avx2_1(int64_t nb, const le_block_q8_0x16 *x, const char *vy,
                                        size_t by, float *s, size_t bs) {
  q8x16_tile_avx2(1, nb, x, vy, by, s, bs);
}

#define Q8X16_FN(RN)                                                                        \
  LE_TARGET_Q8X16 static void q8x16_tile##RN(int64_t nb, const le_block_q8_0x16 *x,       \
                                             const char *vy, size_t by, const int32_t *st, \
                                             float *s, size_t bs) {                        \
    q8x16_tile(RN, nb, x, vy, by, st, s, bs);                                              \
  }
Q8X16_FN(1)
Q8X16_FN(2)
Q8X16_FN(4)
Q8X16_FN(8)
#endif

/* Rows [ir0, ir1) (multiples of 16) of a repacked weight against ne11 Q8_0
 * columns (by bytes apart; start: le_q8_0x16_col_start of each, nb apart,
 * where le_q8_0x16_uses_start, else unread), outputs dst[c * bs + r]. The
 * chain per output does not depend on how the columns are grouped. */
void le_q8_0x16_rows(int64_t K, const void *vx, int64_t ir0, int64_t ir1, const char *vy,
                     size_t by, int64_t ne11, const int32_t *start, float *dst, size_t bs) {
  const int64_t nb = K / LE_QK;
  const le_block_q8_0x16 *x = vx;
#if defined(LE_X86)
  if (le_q8_0x16_uses_start()) {
    for (int64_t ir = ir0; ir < ir1; ir += 16) {
      const le_block_q8_0x16 *xg = x + (ir / 16) * nb;
      int64_t c = 0;
      for (; c + 8 <= ne11; c += 8)
        q8x16_tile8(nb, xg, vy + c * by, by, start + c * nb, dst + c * bs + ir, bs);
      if (c + 4 <= ne11) {
        q8x16_tile4(nb, xg, vy + c * by, by, start + c * nb, dst + c * bs + ir, bs);
        c += 4;
      }
      if (c + 2 <= ne11) {
        q8x16_tile2(nb, xg, vy + c * by, by, start + c * nb, dst + c * bs + ir, bs);
        c += 2;
      }
      if (c < ne11) q8x16_tile1(nb, xg, vy + c * by, by, start + c * nb, dst + c * bs + ir, bs);
    }
    return;
  }
  if (le_simd() == LE_SIMD_AVX2) {
    for (int64_t ir = ir0; ir < ir1; ir += 16) {
      const le_block_q8_0x16 *xg = x + (ir / 16) * nb;
      int64_t c = 0;
      for (; c + 2 <= ne11; c += 2) q8x16_avx2_2(nb, xg, vy + c * by, by, dst + c * bs + ir, bs);
      if (c < ne11) q8x16_avx2_1(nb, xg, vy + c * by, by, dst + c * bs + ir, bs);
    }
    return;
  }
#endif
  for (int64_t c = 0; c < ne11; c++)
    for (int64_t ir = ir0; ir < ir1; ir += 16)
      q8x16_dot_scalar(nb, x + (ir / 16) * nb, (const le_block_q8_0 *)(const void *)(vy + c * by),
                       dst + c * bs + ir);
}
