/* BF16: the top half of an f32. Activations are rounded to bf16 (nearest
 * even) for the dot product, as ggml's vec_dot_type for bf16 is bf16. */
#include "le_internal.h"

static void bf16_to_float(const void *vx, float *y, int64_t n) {
  const uint16_t *x = vx;
  for (int64_t i = 0; i < n; i++) y[i] = le_bf16_to_fp32(x[i]);
}
static void bf16_from_float(const float *x, void *vy, int64_t n) {
  uint16_t *y = vy;
  for (int64_t i = 0; i < n; i++) y[i] = le_fp32_to_bf16(x[i]);
}
static void dot_bf16_scalar(int64_t n, float *s, const void *vx, const void *vy) {
  const uint16_t *x = vx, *y = vy;
  double sum = 0.0;
  for (int64_t i = 0; i < n; i++) sum += (double)(le_bf16_to_fp32(x[i]) * le_bf16_to_fp32(y[i]));
  *s = (float)sum;
}

const le_type_traits le_traits_bf16 = {
    .type = LE_TYPE_BF16,
    .name = "bf16",
    .blck = 1,
    .size = 2,
    .to_float = bf16_to_float,
    .from_float_ref = bf16_from_float,
    .from_float_act = bf16_from_float,
    .vec_dot_type = LE_TYPE_BF16,
    .vec_dot = {[LE_SIMD_SCALAR] = dot_bf16_scalar},
};
