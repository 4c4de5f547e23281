/* Q4_1: blocks of 32 unsigned 4-bit values with an f16 scale d and min m
 * (x = q*d + m); dotted against q8_1, whose s = d*sum(q) carries the min term. */
#include "q_legacy_simd.h"

static void q4_1_to_float(const void *vx, float *y, int64_t n) {
  const le_block_q4_1 *x = vx;
  for (int64_t i = 0; i < n / LE_QK; i++) {
    const float d = le_fp16_to_fp32(x[i].d), m = le_fp16_to_fp32(x[i].m);
    for (int j = 0; j < LE_QK / 2; j++) {
      y[i * LE_QK + j] = (x[i].qs[j] & 0x0f) * d + m;
      y[i * LE_QK + j + LE_QK / 2] = (x[i].qs[j] >> 4) * d + m;
    }
  }
}

/* quantize_row_q4_1_ref: 15 steps from min to max, truncating x + 0.5 */
static void q4_1_from_float_ref(const float *x, void *vy, int64_t n) {
  le_block_q4_1 *y = vy;
  for (int64_t i = 0; i < n / LE_QK; i++) {
    const float *xb = x + i * LE_QK;
    float min = 3.402823466e+38f, max = -3.402823466e+38f;
    for (int j = 0; j < LE_QK; j++) {
      if (xb[j] < min) min = xb[j];
      if (xb[j] > max) max = xb[j];
    }
    const float d = (max - min) / 15;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    y[i].d = le_fp32_to_fp16(d);
    y[i].m = le_fp32_to_fp16(min);
    for (int j = 0; j < LE_QK / 2; j++) {
      const float x0 = (xb[j] - min) * id, x1 = (xb[j + LE_QK / 2] - min) * id;
      const uint8_t q0 = (uint8_t)LE_MIN(15, (int8_t)(x0 + 0.5f));
      const uint8_t q1 = (uint8_t)LE_MIN(15, (int8_t)(x1 + 0.5f));
      y[i].qs[j] = (uint8_t)(q0 | (q1 << 4));
    }
  }
}

static void dot_q4_1_scalar(int64_t n, float *s, const void *vx, const void *vy) {
  const le_block_q4_1 *x = vx;
  const le_block_q8_1 *y = vy;
  float sum = 0.0f;
  for (int64_t i = 0; i < n / LE_QK; i++) {
    int32_t si = 0;
    for (int j = 0; j < LE_QK / 2; j++) {
      si += (x[i].qs[j] & 0x0f) * y[i].qs[j];
      si += (x[i].qs[j] >> 4) * y[i].qs[j + LE_QK / 2];
    }
    sum += (le_fp16_to_fp32(x[i].d) * le_fp16_to_fp32(y[i].d)) * si +
           le_fp16_to_fp32(x[i].m) * le_fp16_to_fp32(y[i].s);
  }
  *s = sum;
}

#if defined(LE_X86)
#define DOT_Q4_1_BODY                                                                  \
  const le_block_q4_1 *x = vx;                                                         \
  const le_block_q8_1 *y = vy;                                                         \
  __m256 acc = _mm256_setzero_ps();                                                    \
  float summs = 0.0f;                                                                  \
  for (int64_t i = 0; i < n / LE_QK; i++) {                                            \
    summs += le_h2f(x[i].m) * le_h2f(y[i].s);                                          \
    const __m256 d = _mm256_set1_ps(le_h2f(x[i].d) * le_h2f(y[i].d));                  \
    const __m256i qy = _mm256_loadu_si256((const __m256i *)y[i].qs);                   \
    acc = _mm256_fmadd_ps(d, le_mul_sum_u8i8_avx2(le_nibbles_avx2(x[i].qs), qy), acc); \
  }                                                                                    \
  *s = le_hsum_ps256(acc) + summs;

LE_TARGET_AVX2 static void dot_q4_1_avx2(int64_t n, float *s, const void *vx, const void *vy) {
  DOT_Q4_1_BODY
}
/* the AVX2 algorithm compiled for AVX-512VL (EVEX encoding, 32 registers) */
LE_TARGET_AVX512 static void dot_q4_1_avx512(int64_t n, float *s, const void *vx,
                                             const void *vy) {
  DOT_Q4_1_BODY
}
#endif

#if defined(LE_NEON)
static void dot_q4_1_neon(int64_t n, float *s, const void *vx, const void *vy) {
  const le_block_q4_1 *x = vx;
  const le_block_q8_1 *y = vy;
  float32x4_t acc = vdupq_n_f32(0);
  float summs = 0.0f;
  for (int64_t i = 0; i < n / LE_QK; i++) {
    summs += le_fp16_to_fp32(x[i].m) * le_fp16_to_fp32(y[i].s);
    const uint8x16_t q = vld1q_u8(x[i].qs);
    const int8x16_t lo = vreinterpretq_s8_u8(vandq_u8(q, vdupq_n_u8(0x0f)));
    const int8x16_t hi = vreinterpretq_s8_u8(vshrq_n_u8(q, 4));
    const int8x16_t y0 = vld1q_s8(y[i].qs), y1 = vld1q_s8(y[i].qs + 16);
    int32x4_t p = vdupq_n_s32(0);
    p = vpadalq_s16(p, vmull_s8(vget_low_s8(lo), vget_low_s8(y0)));
    p = vpadalq_s16(p, vmull_s8(vget_high_s8(lo), vget_high_s8(y0)));
    p = vpadalq_s16(p, vmull_s8(vget_low_s8(hi), vget_low_s8(y1)));
    p = vpadalq_s16(p, vmull_s8(vget_high_s8(hi), vget_high_s8(y1)));
    acc = vmlaq_n_f32(acc, vcvtq_f32_s32(p), le_fp16_to_fp32(x[i].d) * le_fp16_to_fp32(y[i].d));
  }
  *s = vaddvq_f32(acc) + summs;
}
#endif

const le_type_traits le_traits_q4_1 = {
    .type = LE_TYPE_Q4_1,
    .name = "q4_1",
    .blck = LE_QK,
    .size = sizeof(le_block_q4_1),
    .to_float = q4_1_to_float,
    .from_float_ref = q4_1_from_float_ref,
    .from_float_act = NULL,
    .vec_dot_type = LE_TYPE_Q8_1,
    .vec_dot = {
        [LE_SIMD_SCALAR] = dot_q4_1_scalar,
#if defined(LE_X86)
        [LE_SIMD_AVX2] = dot_q4_1_avx2,
        [LE_SIMD_AVX512] = dot_q4_1_avx512,
#endif
#if defined(LE_NEON)
        [LE_SIMD_NEON] = dot_q4_1_neon,
#endif
    },
};
