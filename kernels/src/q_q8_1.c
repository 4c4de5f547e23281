/* Q8_1: q8_0 plus s = d * sum(qs) per block; the activation type of q4_1 and
 * q5_1, whose dots add min * s instead of summing the activations again. */
#include "q_common.h"

static void q8_1_to_float(const void *vx, float *y, int64_t n) {
  const le_block_q8_1 *x = vx;
  for (int64_t i = 0; i < n / LE_QK; i++) {
    const float d = le_fp16_to_fp32(x[i].d);
    for (int j = 0; j < LE_QK; j++) y[i * LE_QK + j] = x[i].qs[j] * d;
  }
}

/* quantize_row_q8_1_ref: id = 1/d, round half away, s from the rounded ints */
static void q8_1_from_float_ref(const float *x, void *vy, int64_t n) {
  le_block_q8_1 *y = vy;
  for (int64_t i = 0; i < n / LE_QK; i++) {
    const float *xb = x + i * LE_QK;
    float amax = 0.0f;
    for (int j = 0; j < LE_QK; j++) amax = LE_MAX(amax, fabsf(xb[j]));
    const float d = amax / 127.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    y[i].d = le_fp32_to_fp16(d);
    int sum = 0;
    for (int j = 0; j < LE_QK / 2; j++) {
      const int8_t a = (int8_t)roundf(xb[j] * id), b = (int8_t)roundf(xb[j + LE_QK / 2] * id);
      y[i].qs[j] = a;
      y[i].qs[j + LE_QK / 2] = b;
      sum += a + b;
    }
    y[i].s = le_fp32_to_fp16(sum * d);
  }
}

/* ggml-cpu's x86 quantize_row_q8_1: multiplier 127/amax, round half to even,
 * s = d * (integer sum). Exact IEEE steps, so scalar code gives its bytes.
 * Without AVX (llama.cpp's x64 build, which our scalar level follows) it is
 * quantize_row_q8_1_ref. */
void le_quantize_q8_1_act(const float *x, void *vy, int64_t n) {
  if (le_simd() == LE_SIMD_SCALAR) {
    q8_1_from_float_ref(x, vy, n);
    return;
  }
  le_block_q8_1 *y = vy;
  for (int64_t i = 0; i < n / LE_QK; i++) {
    const float *xb = x + i * LE_QK;
    float amax = 0.0f;
    for (int j = 0; j < LE_QK; j++) amax = LE_MAX(amax, fabsf(xb[j]));
    const float d = amax / 127.0f;
    y[i].d = le_fp32_to_fp16(d);
    const float id = amax != 0.0f ? 127.0f / amax : 0.0f;
    int sum = 0;
    for (int j = 0; j < LE_QK; j++) {
      y[i].qs[j] = (int8_t)nearbyintf(xb[j] * id);
      sum += y[i].qs[j];
    }
    y[i].s = le_fp32_to_fp16(d * (float)sum);
  }
}

const le_type_traits le_traits_q8_1 = {
    .type = LE_TYPE_Q8_1,
    .name = "q8_1",
    .blck = LE_QK,
    .size = sizeof(le_block_q8_1),
    .to_float = q8_1_to_float,
    .from_float_ref = q8_1_from_float_ref,
    .from_float_act = le_quantize_q8_1_act,
    .vec_dot_type = LE_TYPE_Q8_1,
    .vec_dot = {NULL},
};
