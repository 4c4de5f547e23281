/* ggml's MUL_MAT as one CPU variant computes it (its libggml-cpu-<name>.so,
 * opened RTLD_LOCAL as ggml's loader does): a graph of one ggml_mul_mat in a
 * plain context (no repacked buffers), run by that variant's
 * ggml_graph_compute_with_ctx. So N >= 2 goes wherever that build sends it
 * (llamafile's tinyBLAS for F32/F16/Q8_0 where it accepts the shape,
 * vec_dot otherwise): the reference for our mul_mat tiles and panels. */
#define _GNU_SOURCE /* RTLD_* */
#include <dlfcn.h>
#include <stdint.h>
#include <string.h>

#include "ggml-cpu.h"
#include "ggml.h"

typedef enum ggml_status (*compute_fn)(struct ggml_context *, struct ggml_cgraph *, int);

/* out[M, N, ne2] = mul_mat(a [K, M, ne2a] of `type` (raw rows, contiguous),
 * b [K, N, ne2] f32 (contiguous)) with `threads` threads, computed by the
 * variant at `path`. Returns -1 when it cannot be loaded, -2 when the graph
 * fails, -3 for shapes ggml refuses. */
int32_t om_mul_mat(const char *path, int32_t type, int64_t K, int64_t M, int64_t ne2a, int64_t N,
                   int64_t ne2, const void *a, const float *b, float *out, int32_t threads) {
  void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  if (!h) return -1;
  void (*init)(void) = (void (*)(void))dlsym(h, "ggml_cpu_init");
  const compute_fn compute = (compute_fn)dlsym(h, "ggml_graph_compute_with_ctx");
  if (!init || !compute) return -1;
  init();
  if (K % ggml_blck_size((enum ggml_type)type) || ne2a < 1 || ne2 % ne2a) return -3;
  const size_t abytes = ggml_row_size((enum ggml_type)type, K) * (size_t)(M * ne2a);
  const size_t bbytes = (size_t)(K * N * ne2) * sizeof(float);
  const size_t obytes = (size_t)(M * N * ne2) * sizeof(float);
  struct ggml_init_params ip = {
      .mem_size = abytes + bbytes + obytes + ggml_graph_overhead() + 4 * ggml_tensor_overhead() +
                  (1 << 20),
      .mem_buffer = NULL,
      .no_alloc = false,
  };
  struct ggml_context *ctx = ggml_init(ip);
  if (!ctx) return -2;
  struct ggml_tensor *ta = ggml_new_tensor_3d(ctx, (enum ggml_type)type, K, M, ne2a);
  struct ggml_tensor *tb = ggml_new_tensor_3d(ctx, GGML_TYPE_F32, K, N, ne2);
  memcpy(ta->data, a, abytes);
  memcpy(tb->data, b, bbytes);
  struct ggml_tensor *to = ggml_mul_mat(ctx, ta, tb);
  struct ggml_cgraph *gf = ggml_new_graph(ctx);
  ggml_build_forward_expand(gf, to);
  const int32_t rc = compute(ctx, gf, threads) == GGML_STATUS_SUCCESS ? 0 : -2;
  if (rc == 0) memcpy(out, to->data, obytes);
  ggml_free(ctx);
  return rc;
}

typedef ggml_backend_buffer_type_t (*buft_fn)(void);

/* The same 2-D product with `a` in the variant's CPU_REPACK buffer, as
 * llama.cpp loads a weight that ggml_repack_get_optimal_repack_type takes
 * (Q4_0 / Q4_K with M % 8 == 0 on AVX2): set_tensor repacks it and the
 * mul_mat runs the repack kernels (gemv for N % 4 leftovers, gemm for groups
 * of 4 columns). Returns -4 when the variant has no repack buffer, -3 when
 * it would not repack this weight. */
int32_t om_mul_mat_repacked(const char *path, int32_t type, int64_t K, int64_t M, int64_t N,
                            const void *a, const float *b, float *out, int32_t threads) {
  void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  if (!h) return -1;
  void (*init)(void) = (void (*)(void))dlsym(h, "ggml_cpu_init");
  const compute_fn compute = (compute_fn)dlsym(h, "ggml_graph_compute_with_ctx");
  const buft_fn repack = (buft_fn)dlsym(h, "_Z35ggml_backend_cpu_repack_buffer_typev");
  if (!init || !compute) return -1;
  if (!repack || !repack()) return -4;
  init();
  if ((type != GGML_TYPE_Q4_0 && type != GGML_TYPE_Q4_K) || K % ggml_blck_size((enum ggml_type)type) ||
      M % 8)
    return -3;
  const size_t abytes = ggml_row_size((enum ggml_type)type, K) * (size_t)M;
  const size_t bbytes = (size_t)(K * N) * sizeof(float), obytes = (size_t)(M * N) * sizeof(float);
  struct ggml_init_params wp = {ggml_tensor_overhead() + 1024, NULL, true};
  struct ggml_context *wctx = ggml_init(wp);
  struct ggml_init_params ip = {bbytes + obytes + ggml_graph_overhead() + 4 * ggml_tensor_overhead() +
                                    (16 << 20),
                                NULL, false};
  struct ggml_context *ctx = ggml_init(ip);
  if (!wctx || !ctx) return -2;
  int32_t rc = -2;
  struct ggml_tensor *ta = ggml_new_tensor_2d(wctx, (enum ggml_type)type, K, M);
  ggml_backend_buffer_t buf = ggml_backend_buft_alloc_buffer(repack(), ggml_nbytes(ta) + 64);
  if (buf && ggml_backend_tensor_alloc(buf, ta, ggml_backend_buffer_get_base(buf)) == GGML_STATUS_SUCCESS &&
      ta->extra) {
    ggml_backend_tensor_set(ta, a, 0, abytes);
    struct ggml_tensor *tb = ggml_new_tensor_2d(ctx, GGML_TYPE_F32, K, N);
    memcpy(tb->data, b, bbytes);
    struct ggml_tensor *to = ggml_mul_mat(ctx, ta, tb);
    struct ggml_cgraph *gf = ggml_new_graph(ctx);
    ggml_build_forward_expand(gf, to);
    rc = compute(ctx, gf, threads) == GGML_STATUS_SUCCESS ? 0 : -2;
    if (rc == 0) memcpy(out, to->data, obytes);
  } else if (buf) {
    rc = -3;
  }
  if (buf) ggml_backend_buffer_free(buf);
  ggml_free(ctx);
  ggml_free(wctx);
  return rc;
}
