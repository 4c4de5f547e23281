/* Register-tiled dot products for mul_mat on AVX-512 VNNI: up to 4 weight
 * rows x 4 activation columns per call, so each weight block is unpacked
 * once per 4 columns and each activation block loaded once per 4 rows.
 *
 * Every output element goes through exactly the arithmetic of the type's
 * AVX-512 vec_dot (blocks in pairs in the two 256-bit halves, per-block
 * scale d_x*d_y rounded to float, fold, odd tail block, horizontal sum), so
 * tiles and single dots give the same bits. The int32 lane sums are formed
 * with vpdpbusd on an unsigned view of the weights: for q8_0 x+128, for
 * q4_0 the raw nibble, with the bias (128 or 8 times the lane sum of y)
 * preloaded into the accumulator; integer arithmetic, so exactly the lanes
 * the sign/maddubs/madd sequence gives. */
#include "q_common.h"

#if defined(LE_X86)
#include <cpuid.h>

#define LE_TARGET_VNNI \
  __attribute__((target("avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")))

static int vnni_state = -1;

static int has_vnni(void) {
  if (vnni_state < 0) {
    unsigned a, b, c, d;
    int ok = 0;
    if (__get_cpuid_max(0, NULL) >= 7) {
      __cpuid_count(7, 0, a, b, c, d);
      ok = (c >> 11) & 1;
    }
    vnni_state = ok;
  }
  return vnni_state;
}

LE_TARGET_VNNI static inline __m512 pair_scale(uint16_t d0, uint16_t d1) {
  return le_join_ps256(_mm256_set1_ps(_cvtsh_ss(d0)), _mm256_set1_ps(_cvtsh_ss(d1)));
}

LE_TARGET_VNNI static inline __m512i pair_load(const int8_t *a, const int8_t *b) {
  return _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_loadu_si256((const __m256i *)a)),
                            _mm256_loadu_si256((const __m256i *)b), 1);
}

/* The 32 nibbles of a q4_0 block, unsigned 0..15, in element order. */
LE_TARGET_VNNI static inline __m256i nib_u8(const uint8_t *qs) {
  const __m128i t = _mm_loadu_si128((const __m128i *)qs);
  const __m256i b = _mm256_set_m128i(_mm_srli_epi16(t, 4), t);
  return _mm256_and_si256(b, _mm256_set1_epi8(0x0f));
}

/* Weight rows of q8_0 (Q4 = 0) or q4_0 (Q4 = 1) against q8_0 columns. RM
 * and RN are compile-time constants after inlining. */
LE_TARGET_VNNI static inline __attribute__((always_inline)) void
tile(const int Q4, const int RM, const int RN, int64_t n, float *s, size_t bs, const void *vx,
     size_t bx, const void *vy, size_t by) {
  const int64_t nb = n / LE_QK;
  const __m512i ones = _mm512_set1_epi8(1);
  const __m512i flip = _mm512_set1_epi8((char)0x80);
  const int shift = Q4 ? 3 : 7;
  __m512 acc[4][4];
#pragma GCC unroll 4
  for (int r = 0; r < RM; r++)
#pragma GCC unroll 4
    for (int c = 0; c < RN; c++) acc[r][c] = _mm512_setzero_ps();
  int64_t i = 0;
  for (; i + 1 < nb; i += 2) {
    __m512i xq[4];
    __m512 xd[4];
#pragma GCC unroll 4
    for (int r = 0; r < RM; r++) {
      if (Q4) {
        const le_block_q4_0 *x = (const le_block_q4_0 *)((const char *)vx + r * bx);
        xq[r] = _mm512_inserti64x4(_mm512_castsi256_si512(nib_u8(x[i].qs)), nib_u8(x[i + 1].qs), 1);
        xd[r] = pair_scale(x[i].d, x[i + 1].d);
      } else {
        const le_block_q8_0 *x = (const le_block_q8_0 *)((const char *)vx + r * bx);
        xq[r] = _mm512_xor_si512(pair_load(x[i].qs, x[i + 1].qs), flip);
        xd[r] = pair_scale(x[i].d, x[i + 1].d);
      }
    }
#pragma GCC unroll 4
    for (int c = 0; c < RN; c++) {
      const le_block_q8_0 *y = (const le_block_q8_0 *)((const char *)vy + c * by);
      const __m512i yq = pair_load(y[i].qs, y[i + 1].qs);
      const __m512 yd = pair_scale(y[i].d, y[i + 1].d);
      const __m512i bias = _mm512_sub_epi32(
          _mm512_setzero_si512(),
          _mm512_slli_epi32(_mm512_dpbusd_epi32(_mm512_setzero_si512(), ones, yq), shift));
#pragma GCC unroll 4
      for (int r = 0; r < RM; r++) {
        const __m512 sum = _mm512_cvtepi32_ps(_mm512_dpbusd_epi32(bias, xq[r], yq));
        acc[r][c] = _mm512_fmadd_ps(_mm512_mul_ps(xd[r], yd), sum, acc[r][c]);
      }
    }
  }
#pragma GCC unroll 4
  for (int r = 0; r < RM; r++) {
#pragma GCC unroll 4
    for (int c = 0; c < RN; c++) {
      __m256 a = le_fold_ps512(acc[r][c]);
      if (i < nb) { /* the odd last block, as the 256-bit tail of vec_dot */
        const le_block_q8_0 *y = (const le_block_q8_0 *)((const char *)vy + c * by);
        const __m256i yq = _mm256_loadu_si256((const __m256i *)y[i].qs);
        __m256i xq;
        uint16_t xd;
        if (Q4) {
          const le_block_q4_0 *x = (const le_block_q4_0 *)((const char *)vx + r * bx);
          xq = _mm256_sub_epi8(nib_u8(x[i].qs), _mm256_set1_epi8(8));
          xd = x[i].d;
        } else {
          const le_block_q8_0 *x = (const le_block_q8_0 *)((const char *)vx + r * bx);
          xq = _mm256_loadu_si256((const __m256i *)x[i].qs);
          xd = x[i].d;
        }
        const __m256 d = _mm256_set1_ps(_cvtsh_ss(xd) * _cvtsh_ss(y[i].d));
        a = _mm256_fmadd_ps(d, le_mul_sum_i8_avx2(xq, yq), a);
      }
      s[c * bs + r] = le_hsum_ps256(a);
    }
  }
}

#define TILE_FN(name, Q4, RM, RN)                                                          \
  LE_TARGET_VNNI static void name(int64_t n, float *s, size_t bs, const void *x, size_t bx, \
                                  const void *y, size_t by) {                              \
    tile(Q4, RM, RN, n, s, bs, x, bx, y, by);                                              \
  }

TILE_FN(q8_4x4, 0, 4, 4)
TILE_FN(q8_4x1, 0, 4, 1)
TILE_FN(q8_1x4, 0, 1, 4)
TILE_FN(q8_1x1, 0, 1, 1)
TILE_FN(q4_4x4, 1, 4, 4)
TILE_FN(q4_4x1, 1, 4, 1)
TILE_FN(q4_1x4, 1, 1, 4)
TILE_FN(q4_1x1, 1, 1, 1)

static const le_gemm_tiles tiles_q8_0 = {.t44 = q8_4x4, .t41 = q8_4x1, .t14 = q8_1x4, .t11 = q8_1x1};
static const le_gemm_tiles tiles_q4_0 = {.t44 = q4_4x4, .t41 = q4_4x1, .t14 = q4_1x4, .t11 = q4_1x1};
#endif

const le_gemm_tiles *le_gemm_x86(int32_t type) {
#if defined(LE_X86)
  if (le_simd() != LE_SIMD_AVX512 || !has_vnni()) return NULL;
  if (type == LE_TYPE_Q8_0) return &tiles_q8_0;
  if (type == LE_TYPE_Q4_0) return &tiles_q4_0;
#else
  (void)type;
#endif
  return NULL;
}
