/* ggml's own (de)quantizers from libggml-base, for bit-exactness tests of
 * lib/ggml/ref_quants.ts and the kernels' to_float / reference quantizers. */
#define _GNU_SOURCE /* RTLD_* */
#include <dlfcn.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "ggml-cpu.h"
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

/* One CPU variant's vec_dot of `type` (path: its libggml-cpu-<name>.so,
 * opened RTLD_LOCAL as ggml's loader does, and kept open): y is quantized
 * with that build's from_float of the vec_dot type, then dotted with the
 * weight row x of n elements. Returns -1 when the variant cannot be opened
 * or has no vec_dot for the type. */
int32_t oq_variant_vec_dot(const char *path, int32_t type, int64_t n, const void *x,
                           const float *y, float *out) {
  static void *handle;
  static char opened[4096];
  if (!handle || strcmp(opened, path) != 0) {
    void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!h) return -1;
    void (*init)(void) = (void (*)(void))dlsym(h, "ggml_cpu_init");
    if (init) init();
    handle = h;
    strncpy(opened, path, sizeof opened - 1);
  }
  typedef const struct ggml_type_traits_cpu *(*traits_fn)(enum ggml_type);
  const traits_fn traits = (traits_fn)dlsym(handle, "ggml_get_type_traits_cpu");
  if (!traits) return -1;
  const struct ggml_type_traits_cpu *t = traits((enum ggml_type)type);
  if (!t || !t->vec_dot) return -1;
  const struct ggml_type_traits_cpu *vt = traits(t->vec_dot_type);
  if (!vt || !vt->from_float) return -1;
  void *q = malloc(ggml_row_size(t->vec_dot_type, n));
  if (!q) return -1;
  vt->from_float(y, q, n);
  t->vec_dot((int)n, out, 0, x, 0, q, 0, 1);
  free(q);
  return 0;
}
