/* The type registry and the row helpers exported for tests and tools. */
#include "q_common.h"

#include <stdlib.h>

/* Adding a type: write q_<type>.c with its traits and list it here. */
static const le_type_traits *const le_all_traits[] = {
    &le_traits_f32,  &le_traits_f16,  &le_traits_bf16, &le_traits_q8_0, &le_traits_q4_0,
    &le_traits_q4_1, &le_traits_q5_0, &le_traits_q5_1, &le_traits_q8_1, &le_traits_q2_k,
    &le_traits_q3_k, &le_traits_q4_k, &le_traits_q5_k, &le_traits_q6_k, &le_traits_q8_k,
};

const le_type_traits *le_traits(int32_t type) {
  for (size_t i = 0; i < sizeof le_all_traits / sizeof le_all_traits[0]; i++)
    if (le_all_traits[i]->type == type) return le_all_traits[i];
  return NULL;
}

le_vec_dot_fn le_get_vec_dot(const le_type_traits *t) {
  const le_vec_dot_fn f = t->vec_dot[le_simd()];
  return f ? f : t->vec_dot[LE_SIMD_SCALAR];
}

static const le_type_traits *row_traits(const char *fn, int32_t type, int64_t n) {
  const le_type_traits *t = le_traits(type);
  if (!t) {
    le_set_error("%s: unsupported type %d", fn, type);
    return NULL;
  }
  if (n < 0 || n % t->blck != 0) {
    le_set_error("%s: %lld elements is not a multiple of %s block size %lld", fn, (long long)n,
                 t->name, (long long)t->blck);
    return NULL;
  }
  return t;
}

int32_t le_dequantize_row(int32_t type, const void *src, float *dst, int64_t n) {
  const le_type_traits *t = row_traits("le_dequantize_row", type, n);
  if (!t) return -1;
  t->to_float(src, dst, n);
  return 0;
}

int32_t le_quantize_row(int32_t type, const float *src, void *dst, int64_t n) {
  const le_type_traits *t = row_traits("le_quantize_row", type, n);
  if (!t) return -1;
  t->from_float_ref(src, dst, n);
  return 0;
}

int32_t le_vec_dot(int32_t type, int64_t n, const void *x, const float *y, float *out) {
  const le_type_traits *t = row_traits("le_vec_dot", type, n);
  if (!t) return -1;
  const le_type_traits *vt = le_traits(t->vec_dot_type);
  if (!t->vec_dot[LE_SIMD_SCALAR] || !vt || !vt->from_float_act) {
    le_set_error("le_vec_dot: %s is an activation type, not a weight type", t->name);
    return -1;
  }
  void *tmp = malloc(le_row_size(vt, n) + 64);
  if (!tmp) {
    le_set_error("le_vec_dot: out of memory");
    return -2;
  }
  vt->from_float_act(y, tmp, n);
  le_get_vec_dot(t)(n, out, x, tmp);
  free(tmp);
  return 0;
}
