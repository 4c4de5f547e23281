/* ggml's GELU and GeGLU ops as one CPU variant computes them (its
 * libggml-cpu-<name>.so, opened RTLD_LOCAL as ggml's loader does): a 1-D
 * graph of ggml_gelu or ggml_geglu_split run by that variant's
 * ggml_graph_compute_with_ctx. The variant's gelu table is built by its
 * ggml_cpu_init, whose float code the compiler may have contracted. */
#define _GNU_SOURCE /* RTLD_* */
#include <dlfcn.h>
#include <stdint.h>
#include <string.h>

#include "ggml-cpu.h"
#include "ggml.h"

typedef enum ggml_status (*compute_fn)(struct ggml_context *, struct ggml_cgraph *, int);

/* y = gelu(x) (g == NULL) or gelu(x) * g (ggml_geglu_split) over n floats,
 * computed by the variant at `path`. Returns -1 when it cannot be loaded,
 * -2 when the graph fails. */
int32_t og_gelu(const char *path, const float *x, const float *g, float *y, int64_t n) {
  void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  if (!h) return -1;
  void (*init)(void) = (void (*)(void))dlsym(h, "ggml_cpu_init");
  const compute_fn compute = (compute_fn)dlsym(h, "ggml_graph_compute_with_ctx");
  if (!init || !compute) return -1;
  init();
  const size_t bytes = (size_t)n * sizeof(float);
  struct ggml_init_params ip = {
      .mem_size = 3 * bytes + ggml_graph_overhead() + 4 * ggml_tensor_overhead() + (1 << 20),
      .mem_buffer = NULL,
      .no_alloc = false,
  };
  struct ggml_context *ctx = ggml_init(ip);
  if (!ctx) return -2;
  struct ggml_tensor *a = ggml_new_tensor_1d(ctx, GGML_TYPE_F32, n);
  memcpy(a->data, x, bytes);
  struct ggml_tensor *out;
  if (g) {
    struct ggml_tensor *b = ggml_new_tensor_1d(ctx, GGML_TYPE_F32, n);
    memcpy(b->data, g, bytes);
    out = ggml_geglu_split(ctx, a, b);
  } else {
    out = ggml_gelu(ctx, a);
  }
  struct ggml_cgraph *gf = ggml_new_graph(ctx);
  ggml_build_forward_expand(gf, out);
  const int32_t rc = compute(ctx, gf, 1) == GGML_STATUS_SUCCESS ? 0 : -2;
  if (rc == 0) memcpy(y, out->data, bytes);
  ggml_free(ctx);
  return rc;
}
