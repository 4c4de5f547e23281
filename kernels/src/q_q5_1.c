/* Q5_1: blocks of 32 unsigned 5-bit values with f16 scale d and min m
 * (x = q*d + m), fifth bits in a 32-bit mask. Dotted against q8_1. */
#include "q_legacy_simd.h"

static void q5_1_to_float(const void *vx, float *y, int64_t n) {
  const le_block_q5_1 *x = vx;
  for (int64_t i = 0; i < n / LE_QK; i++) {
    const float d = le_fp16_to_fp32(x[i].d), m = le_fp16_to_fp32(x[i].m);
    const uint32_t qh = le_load_u32(x[i].qh);
    for (int j = 0; j < LE_QK / 2; j++) {
      const int x0 = (x[i].qs[j] & 0x0f) | (((qh >> j) & 1) << 4);
      const int x1 = (x[i].qs[j] >> 4) | (((qh >> (j + 16)) & 1) << 4);
      y[i * LE_QK + j] = x0 * d + m;
      y[i * LE_QK + j + LE_QK / 2] = x1 * d + m;
    }
  }
}

/* quantize_row_q5_1_ref: 31 steps from min to max, truncating x + 0.5 */
static void q5_1_from_float_ref(const float *x, void *vy, int64_t n) {
  le_block_q5_1 *y = vy;
  for (int64_t i = 0; i < n / LE_QK; i++) {
    const float *xb = x + i * LE_QK;
    float min = 3.402823466e+38f, max = -3.402823466e+38f;
    for (int j = 0; j < LE_QK; j++) {
      if (xb[j] < min) min = xb[j];
      if (xb[j] > max) max = xb[j];
    }
    const float d = (max - min) / 31;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    y[i].d = le_fp32_to_fp16(d);
    y[i].m = le_fp32_to_fp16(min);
    uint32_t qh = 0;
    for (int j = 0; j < LE_QK / 2; j++) {
      const float x0 = (xb[j] - min) * id, x1 = (xb[j + LE_QK / 2] - min) * id;
      const uint8_t q0 = (uint8_t)(x0 + 0.5f), q1 = (uint8_t)(x1 + 0.5f);
      y[i].qs[j] = (uint8_t)((q0 & 0x0f) | ((q1 & 0x0f) << 4));
      qh |= (uint32_t)((q0 & 0x10u) >> 4) << j;
      qh |= (uint32_t)((q1 & 0x10u) >> 4) << (j + LE_QK / 2);
    }
    memcpy(y[i].qh, &qh, 4);
  }
}

static void dot_q5_1_scalar(int64_t n, float *s, const void *vx, const void *vy) {
  const le_block_q5_1 *x = vx;
  const le_block_q8_1 *y = vy;
  float sum = 0.0f;
  for (int64_t i = 0; i < n / LE_QK; i++) {
    const uint32_t qh = le_load_u32(x[i].qh);
    int32_t si = 0;
    for (int j = 0; j < LE_QK / 2; j++) {
      const int x0 = (x[i].qs[j] & 0x0f) | (((qh >> j) & 1) << 4);
      const int x1 = (x[i].qs[j] >> 4) | (((qh >> (j + 16)) & 1) << 4);
      si += x0 * y[i].qs[j] + x1 * y[i].qs[j + LE_QK / 2];
    }
    sum += (le_fp16_to_fp32(x[i].d) * le_fp16_to_fp32(y[i].d)) * si +
           le_fp16_to_fp32(x[i].m) * le_fp16_to_fp32(y[i].s);
  }
  *s = sum;
}

#if defined(LE_X86)
#define DOT_Q5_1_BODY                                                                     \
  const le_block_q5_1 *x = vx;                                                            \
  const le_block_q8_1 *y = vy;                                                            \
  __m256 acc = _mm256_setzero_ps();                                                       \
  float summs = 0.0f;                                                                     \
  for (int64_t i = 0; i < n / LE_QK; i++) {                                               \
    summs += le_h2f(x[i].m) * le_h2f(y[i].s);                                             \
    const __m256 d = _mm256_set1_ps(le_h2f(x[i].d) * le_h2f(y[i].d));                     \
    const __m256i hi = _mm256_and_si256(le_bits_to_bytes_avx2(le_load_u32(x[i].qh)),      \
                                        _mm256_set1_epi8(0x10));                          \
    const __m256i qx = _mm256_or_si256(le_nibbles_avx2(x[i].qs), hi);                     \
    const __m256i qy = _mm256_loadu_si256((const __m256i *)y[i].qs);                      \
    acc = _mm256_fmadd_ps(d, le_mul_sum_u8i8_avx2(qx, qy), acc);                          \
  }                                                                                       \
  *s = le_hsum_ps256(acc) + summs;

LE_TARGET_AVX2 static void dot_q5_1_avx2(int64_t n, float *s, const void *vx, const void *vy) {
  DOT_Q5_1_BODY
}
LE_TARGET_AVX512 static void dot_q5_1_avx512(int64_t n, float *s, const void *vx,
                                             const void *vy) {
  DOT_Q5_1_BODY
}
#endif

#if defined(LE_NEON)
static void dot_q5_1_neon(int64_t n, float *s, const void *vx, const void *vy) {
  const le_block_q5_1 *x = vx;
  const le_block_q8_1 *y = vy;
  float32x4_t acc = vdupq_n_f32(0);
  float summs = 0.0f;
  for (int64_t i = 0; i < n / LE_QK; i++) {
    summs += le_fp16_to_fp32(x[i].m) * le_fp16_to_fp32(y[i].s);
    const uint32_t qh = le_load_u32(x[i].qh);
    int8_t q[LE_QK];
    for (int j = 0; j < LE_QK / 2; j++) {
      q[j] = (int8_t)((x[i].qs[j] & 0x0f) | (((qh >> j) & 1) << 4));
      q[j + 16] = (int8_t)((x[i].qs[j] >> 4) | (((qh >> (j + 16)) & 1) << 4));
    }
    int32x4_t p = vdupq_n_s32(0);
    for (int h = 0; h < 2; h++) {
      const int8x16_t a = vld1q_s8(q + 16 * h), b = vld1q_s8(y[i].qs + 16 * h);
      p = vpadalq_s16(p, vmull_s8(vget_low_s8(a), vget_low_s8(b)));
      p = vpadalq_s16(p, vmull_s8(vget_high_s8(a), vget_high_s8(b)));
    }
    acc = vmlaq_n_f32(acc, vcvtq_f32_s32(p), le_fp16_to_fp32(x[i].d) * le_fp16_to_fp32(y[i].d));
  }
  *s = vaddvq_f32(acc) + summs;
}
#endif

const le_type_traits le_traits_q5_1 = {
    .type = LE_TYPE_Q5_1,
    .name = "q5_1",
    .blck = LE_QK,
    .size = sizeof(le_block_q5_1),
    .to_float = q5_1_to_float,
    .from_float_ref = q5_1_from_float_ref,
    .from_float_act = NULL,
    .vec_dot_type = LE_TYPE_Q8_1,
    .vec_dot = {
        [LE_SIMD_SCALAR] = dot_q5_1_scalar,
#if defined(LE_X86)
        [LE_SIMD_AVX2] = dot_q5_1_avx2,
        [LE_SIMD_AVX512] = dot_q5_1_avx512,
#endif
#if defined(LE_NEON)
        [LE_SIMD_NEON] = dot_q5_1_neon,
#endif
    },
};
