/* ggml's own (de)quantizers from libggml-base, for bit-exactness tests of
 * lib/backend/ref_quants.ts and the kernels' to_float / reference quantizers. */
#include <stdint.h>

#include "ggml.h"

/* to_float of `type` over n elements; -1 when the type has none */
int32_t oq_to_float(int32_t type, const void *src, float *dst, int64_t n) {
  const struct ggml_type_traits *t = ggml_get_type_traits((enum ggml_type)type);
  if (!t || !t->to_float) return -1;
  t->to_float(src, dst, n);
  return 0;
}

/* ggml_quantize_chunk without an importance matrix (what llama_model_quantize
 * does for a plain file); returns the bytes written */
int64_t oq_quantize(int32_t type, const float *src, void *dst, int64_t nrows, int64_t n_per_row) {
  ggml_quantize_init((enum ggml_type)type);
  return (int64_t)ggml_quantize_chunk((enum ggml_type)type, src, dst, 0, nrows, n_per_row, NULL);
}

/* from_float_ref of `type` (quantize_row_*_ref) */
int32_t oq_quantize_ref(int32_t type, const float *src, void *dst, int64_t n) {
  const struct ggml_type_traits *t = ggml_get_type_traits((enum ggml_type)type);
  if (!t || !t->from_float_ref) return -1;
  t->from_float_ref(src, dst, n);
  return 0;
}
