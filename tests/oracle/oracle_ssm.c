/* ggml's SSM_CONV and SSM_SCAN ops (Mamba) as one CPU variant computes them
 * (its libggml-cpu-<name>.so, opened RTLD_LOCAL as ggml's loader does): a
 * graph of one ggml_ssm_conv or ggml_ssm_scan node run by that variant's
 * ggml_graph_compute_with_ctx, so the float order is exactly what its
 * compiler made of ops.cpp. */
#define _GNU_SOURCE /* RTLD_* */
#include <dlfcn.h>
#include <stdint.h>
#include <string.h>

#include "ggml-cpu.h"
#include "ggml.h"

typedef enum ggml_status (*compute_fn)(struct ggml_context *, struct ggml_cgraph *, int);

static struct ggml_tensor *f32_tensor(struct ggml_context *ctx, const int64_t *ne,
                                      const float **data) {
  struct ggml_tensor *t = ggml_new_tensor_4d(ctx, GGML_TYPE_F32, ne[0], ne[1], ne[2], ne[3]);
  memcpy(t->data, *data, ggml_nbytes(t));
  *data += ggml_nelements(t);
  return t;
}

/* op 0: ggml_ssm_conv(sx, c) with ne[0..3] sx, ne[4..7] c.
 * op 1: ggml_ssm_scan(s, x, dt, A, B, C, ids, k), shapes in ne[4*i..] for
 *       those six (all packed), ids I32 [x ne[3]].
 * `data` holds the F32 sources one after another in that order. out gets
 * n_out floats of the result. Returns -1 when the variant cannot be loaded,
 * -2 when the graph fails, -3 when n_out is not the result's size. */
int32_t og_ssm(const char *path, int32_t op, const int64_t *ne, const float *data,
               const int32_t *ids, int32_t k, int32_t n_threads, float *out, int64_t n_out) {
  void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  if (!h) return -1;
  void (*init)(void) = (void (*)(void))dlsym(h, "ggml_cpu_init");
  const compute_fn compute = (compute_fn)dlsym(h, "ggml_graph_compute_with_ctx");
  if (!init || !compute) return -1;
  init();
  int64_t bytes = 0;
  for (int i = 0; i < (op == 0 ? 2 : 6); i++) bytes += ne[4 * i] * ne[4 * i + 1] * ne[4 * i + 2] * ne[4 * i + 3] * 4;
  struct ggml_init_params ip = {
      .mem_size = (size_t)(2 * bytes + n_out * 4) + ggml_graph_overhead() +
                  16 * ggml_tensor_overhead() + (1 << 20),
      .mem_buffer = NULL,
      .no_alloc = false,
  };
  struct ggml_context *ctx = ggml_init(ip);
  if (!ctx) return -2;
  struct ggml_tensor *res;
  if (op == 0) {
    struct ggml_tensor *sx = f32_tensor(ctx, ne, &data);
    struct ggml_tensor *c = ggml_reshape_2d(ctx, f32_tensor(ctx, ne + 4, &data), ne[4], ne[5]);
    sx = ggml_reshape_3d(ctx, sx, ne[0], ne[1], ne[2]);
    res = ggml_ssm_conv(ctx, sx, c);
  } else {
    struct ggml_tensor *t[6];
    for (int i = 0; i < 6; i++) t[i] = f32_tensor(ctx, ne + 4 * i, &data);
    t[2] = ggml_reshape_3d(ctx, t[2], ne[8], ne[9], ne[10]);
    t[3] = ggml_reshape_2d(ctx, t[3], ne[12], ne[13]);
    struct ggml_tensor *id = ggml_new_tensor_1d(ctx, GGML_TYPE_I32, ne[7]);
    memcpy(id->data, ids, (size_t)ne[7] * 4);
    res = ggml_ssm_scan(ctx, t[0], t[1], t[2], t[3], t[4], t[5], id, k);
  }
  int32_t rc = -3;
  if (ggml_nelements(res) == n_out) {
    struct ggml_cgraph *gf = ggml_new_graph(ctx);
    ggml_build_forward_expand(gf, res);
    rc = compute(ctx, gf, n_threads) == GGML_STATUS_SUCCESS ? 0 : -2;
    if (rc == 0) memcpy(out, res->data, (size_t)n_out * 4);
  }
  ggml_free(ctx);
  return rc;
}
