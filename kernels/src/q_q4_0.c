/* Q4_0: blocks of 32 4-bit values (offset 8) with one f16 scale; element j
 * is the low nibble of qs[j], element j+16 the high nibble. */
#include "q_k_simd.h"

static void q4_0_to_float(const void *vx, float *y, int64_t n) {
  const le_block_q4_0 *x = vx;
  for (int64_t i = 0; i < n / LE_QK; i++) {
    const float d = le_fp16_to_fp32(x[i].d);
    for (int j = 0; j < LE_QK / 2; j++) {
      y[i * LE_QK + j] = ((x[i].qs[j] & 0x0f) - 8) * d;
      y[i * LE_QK + j + LE_QK / 2] = ((x[i].qs[j] >> 4) - 8) * d;
    }
  }
}

/* quantize_row_q4_0_ref: the signed value of largest magnitude maps to -8 */
static void q4_0_from_float_ref(const float *x, void *vy, int64_t n) {
  le_block_q4_0 *y = vy;
  for (int64_t i = 0; i < n / LE_QK; i++) {
    const float *xb = x + i * LE_QK;
    float amax = 0.0f, max = 0.0f;
    for (int j = 0; j < LE_QK; j++) {
      if (amax < fabsf(xb[j])) {
        amax = fabsf(xb[j]);
        max = xb[j];
      }
    }
    const float d = max / -8.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    y[i].d = le_fp32_to_fp16(d);
    for (int j = 0; j < LE_QK / 2; j++) {
      const float x0 = xb[j] * id, x1 = xb[j + LE_QK / 2] * id;
      const uint8_t q0 = (uint8_t)LE_MIN(15, (int8_t)(x0 + 8.5f));
      const uint8_t q1 = (uint8_t)LE_MIN(15, (int8_t)(x1 + 8.5f));
      y[i].qs[j] = (uint8_t)(q0 | (q1 << 4));
    }
  }
}

static void dot_q4_0_scalar(int64_t n, float *s, const void *vx, const void *vy) {
  const le_block_q4_0 *x = vx;
  const le_block_q8_0 *y = vy;
  float sum = 0.0f;
  for (int64_t i = 0; i < n / LE_QK; i++) {
    int32_t si = 0;
    for (int j = 0; j < LE_QK / 2; j++) {
      si += ((x[i].qs[j] & 0x0f) - 8) * y[i].qs[j];
      si += ((x[i].qs[j] >> 4) - 8) * y[i].qs[j + LE_QK / 2];
    }
    sum += (float)si * (le_fp16_to_fp32(x[i].d) * le_fp16_to_fp32(y[i].d));
  }
  *s = sum;
}

#if defined(LE_X86)
LE_TARGET_AVX2 static void dot_q4_0_avx2(int64_t n, float *s, const void *vx, const void *vy) {
  const le_block_q4_0 *x = vx;
  const le_block_q8_0 *y = vy;
  __m256 acc = _mm256_setzero_ps();
  for (int64_t i = 0; i < n / LE_QK; i++) {
    const __m256 d = _mm256_set1_ps(le_h2f(x[i].d) * le_h2f(y[i].d));
    const __m256i qy = _mm256_loadu_si256((const __m256i *)y[i].qs);
    acc = _mm256_fmadd_ps(d, le_mul_sum_i8_avx2(le_q4_0_unpack_avx2(x[i].qs), qy), acc);
  }
  *s = le_hsum_ps256(acc);
}

LE_TARGET_AVX512 static void dot_q4_0_avx512(int64_t n, float *s, const void *vx, const void *vy) {
  const le_block_q4_0 *x = vx;
  const le_block_q8_0 *y = vy;
  const int64_t nb = n / LE_QK;
  __m512 acc = _mm512_setzero_ps();
  int64_t i = 0;
  for (; i + 1 < nb; i += 2) {
    const __m512i qx = _mm512_inserti64x4(_mm512_castsi256_si512(le_q4_0_unpack_avx2(x[i].qs)),
                                          le_q4_0_unpack_avx2(x[i + 1].qs), 1);
    const __m512i qy = _mm512_inserti64x4(
        _mm512_castsi256_si512(_mm256_loadu_si256((const __m256i *)y[i].qs)),
        _mm256_loadu_si256((const __m256i *)y[i + 1].qs), 1);
    const __m512 d =
        le_join_ps256(_mm256_set1_ps(le_h2f(x[i].d) * le_h2f(y[i].d)),
                      _mm256_set1_ps(le_h2f(x[i + 1].d) * le_h2f(y[i + 1].d)));
    acc = _mm512_fmadd_ps(d, le_mul_sum_i8_avx512(qx, qy), acc);
  }
  __m256 acc2 = le_fold_ps512(acc);
  for (; i < nb; i++) {
    const __m256 d = _mm256_set1_ps(le_h2f(x[i].d) * le_h2f(y[i].d));
    const __m256i qy = _mm256_loadu_si256((const __m256i *)y[i].qs);
    acc2 = _mm256_fmadd_ps(d, le_mul_sum_i8_avx2(le_q4_0_unpack_avx2(x[i].qs), qy), acc2);
  }
  *s = le_hsum_ps256(acc2);
}
#endif

#if defined(LE_X86)
/* llama.cpp repacks q4_0 weights with ne1 % 8 == 0 (q4_0_8x8, any AVX2 CPU);
 * its gemv and gemm (ggml-cpu/arch/x86/repack.cpp) both keep one float
 * chain per output: acc = fma(block integer dot, d_x * d_y, acc). */
LE_TARGET_AVX2 static void q4_0_repack_dot(int64_t n, float *s, const void *vx, const void *vy) {
  const le_block_q4_0 *x = vx;
  const le_block_q8_0 *y = vy;
  float acc = 0.0f;
  for (int64_t i = 0; i < n / LE_QK; i++) {
    const __m256i qy = _mm256_loadu_si256((const __m256i *)y[i].qs);
    /* small integers: the float lane sum is exact */
    const float isum = le_hsum_ps256(le_mul_sum_i8_avx2(le_q4_0_unpack_avx2(x[i].qs), qy));
    acc = fmaf(isum, le_h2f(x[i].d) * le_h2f(y[i].d), acc);
  }
  *s = acc;
}
LE_K_REPACK_TILES(q4_0_repack_tiles, q4_0_repack_dot, q4_0_repack_dot)
#endif

#if defined(LE_NEON)
static void dot_q4_0_neon(int64_t n, float *s, const void *vx, const void *vy) {
  const le_block_q4_0 *x = vx;
  const le_block_q8_0 *y = vy;
  float32x4_t acc = vdupq_n_f32(0);
  for (int64_t i = 0; i < n / LE_QK; i++) {
    const uint8x16_t q = vld1q_u8(x[i].qs);
    const int8x16_t lo = vsubq_s8(vreinterpretq_s8_u8(vandq_u8(q, vdupq_n_u8(0x0f))), vdupq_n_s8(8));
    const int8x16_t hi = vsubq_s8(vreinterpretq_s8_u8(vshrq_n_u8(q, 4)), vdupq_n_s8(8));
    const int8x16_t y0 = vld1q_s8(y[i].qs), y1 = vld1q_s8(y[i].qs + 16);
    int32x4_t p = vdupq_n_s32(0);
    p = vpadalq_s16(p, vmull_s8(vget_low_s8(lo), vget_low_s8(y0)));
    p = vpadalq_s16(p, vmull_s8(vget_high_s8(lo), vget_high_s8(y0)));
    p = vpadalq_s16(p, vmull_s8(vget_low_s8(hi), vget_low_s8(y1)));
    p = vpadalq_s16(p, vmull_s8(vget_high_s8(hi), vget_high_s8(y1)));
    acc = vmlaq_n_f32(acc, vcvtq_f32_s32(p), le_fp16_to_fp32(x[i].d) * le_fp16_to_fp32(y[i].d));
  }
  *s = vaddvq_f32(acc);
}
#endif

const le_type_traits le_traits_q4_0 = {
    .type = LE_TYPE_Q4_0,
    .name = "q4_0",
    .blck = LE_QK,
    .size = sizeof(le_block_q4_0),
    .to_float = q4_0_to_float,
    .from_float_ref = q4_0_from_float_ref,
    .from_float_act = NULL,
    .vec_dot_type = LE_TYPE_Q8_0,
    .vec_dot = {
        [LE_SIMD_SCALAR] = dot_q4_0_scalar,
#if defined(LE_X86)
        [LE_SIMD_AVX2] = dot_q4_0_avx2,
        [LE_SIMD_AVX512] = dot_q4_0_avx512,
#endif
#if defined(LE_NEON)
        [LE_SIMD_NEON] = dot_q4_0_neon,
#endif
    },
#if defined(LE_X86)
    .gemm = {[LE_SIMD_AVX2] = &q4_0_repack_tiles, [LE_SIMD_AVX512] = &q4_0_repack_tiles},
#endif
};
