/* ggml's FLASH_ATTN_EXT as one CPU variant computes it (its
 * libggml-cpu-<name>.so, opened RTLD_LOCAL as ggml's loader does): one
 * ggml_flash_attn_ext node with F32 accumulation (ggml_prec_set_acc, as
 * llama.cpp's build_attn_mha) run by that variant's
 * ggml_graph_compute_with_ctx with n_threads threads (its split-KV decode
 * path cuts the cache by thread count). */
#define _GNU_SOURCE /* RTLD_* */
#include <dlfcn.h>
#include <stdint.h>
#include <string.h>

#include "ggml-cpu.h"
#include "ggml.h"

typedef enum ggml_status (*compute_fn)(struct ggml_context *, struct ggml_cgraph *, int);

static struct ggml_tensor *new_filled(struct ggml_context *ctx, int type, const int64_t *ne,
                                      const void *data) {
  struct ggml_tensor *t = ggml_new_tensor_4d(ctx, (enum ggml_type)type, ne[0], ne[1], ne[2], ne[3]);
  memcpy(t->data, data, ggml_nbytes(t));
  return t;
}

/* out [Dv, nHead, n, ne3] = flash_attn_ext(q, k, v, mask). ne holds four
 * shapes of four dims: q (F32), k (type kt), v (type vt), mask (F16; ne[12]
 * == 0: none); tensors are contiguous. Returns -1 when the variant cannot be
 * loaded, -2 when the graph fails. */
int32_t ofa_flash_attn(const char *path, const int64_t *ne, int32_t kt, int32_t vt,
                       const float *q, const void *k, const void *v, const uint16_t *mask,
                       float scale, float max_bias, int32_t n_threads, float *out) {
  void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  if (!h) return -1;
  void (*init)(void) = (void (*)(void))dlsym(h, "ggml_cpu_init");
  const compute_fn compute = (compute_fn)dlsym(h, "ggml_graph_compute_with_ctx");
  if (!init || !compute) return -1;
  init();
  size_t bytes = 0;
  for (int i = 0; i < 4; i++) {
    const int64_t n = ne[4 * i] * ne[4 * i + 1] * ne[4 * i + 2] * ne[4 * i + 3];
    bytes += (size_t)n * 4 + 256;
  }
  bytes += (size_t)ne[8] * ne[2] * ne[1] * ne[3] * 4; /* dst */
  struct ggml_init_params ip = {
      .mem_size = bytes + ggml_graph_overhead() + 8 * ggml_tensor_overhead() + (64 << 20),
      .mem_buffer = NULL,
      .no_alloc = false,
  };
  struct ggml_context *ctx = ggml_init(ip);
  if (!ctx) return -2;
  struct ggml_tensor *tq = new_filled(ctx, GGML_TYPE_F32, ne, q);
  struct ggml_tensor *tk = new_filled(ctx, kt, ne + 4, k);
  struct ggml_tensor *tv = new_filled(ctx, vt, ne + 8, v);
  struct ggml_tensor *tm = ne[12] ? new_filled(ctx, GGML_TYPE_F16, ne + 12, mask) : NULL;
  struct ggml_tensor *o = ggml_flash_attn_ext(ctx, tq, tk, tv, tm, scale, max_bias, 0.0f);
  ggml_flash_attn_ext_set_n_kv_max(o, 0);
  ggml_prec_set_acc(o, GGML_PREC_F32);
  struct ggml_cgraph *gf = ggml_new_graph(ctx);
  ggml_build_forward_expand(gf, o);
  const int32_t rc = compute(ctx, gf, n_threads) == GGML_STATUS_SUCCESS ? 0 : -2;
  if (rc == 0) memcpy(out, o->data, ggml_nbytes(o));
  ggml_free(ctx);
  return rc;
}

/* llama_kv_cache::build_rope_shift's quantized branch on one layer's K
 * (ggml type kt, [n_embd_head * n_head_kv, size] in k, rewritten in place):
 * the view of the first n_rot elements of every head is cast to F32, roped
 * by shift[cell] with the given settings (rope f[0..5]: freq_base,
 * freq_scale, ext_factor, attn_factor, beta_fast, beta_slow) and copied back
 * (quantized again). Without the Hadamard rotation: at this revision
 * llama.cpp's own graph dereferences the missing rotation matrix (k_rot is
 * NULL when attn_rot_k is off) and crashes, so the K-shift of a quantized
 * cache is checked op by op here. */
int32_t ofa_k_shift(const char *path, int32_t kt, void *k, int64_t n_embd_head, int64_t n_head_kv,
                    int64_t size, int32_t n_rot, int32_t mode, int32_t n_ctx_orig,
                    const float *f, const int32_t *shift, int32_t n_threads) {
  void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  if (!h) return -1;
  void (*init)(void) = (void (*)(void))dlsym(h, "ggml_cpu_init");
  const compute_fn compute = (compute_fn)dlsym(h, "ggml_graph_compute_with_ctx");
  if (!init || !compute) return -1;
  init();
  const size_t row = ggml_row_size((enum ggml_type)kt, n_embd_head * n_head_kv);
  struct ggml_init_params ip = {
      .mem_size = row * (size_t)size + (size_t)(n_rot * n_head_kv * size) * 4 * 2 +
                  (size_t)size * 4 + ggml_graph_overhead() + 16 * ggml_tensor_overhead() +
                  (16 << 20),
      .mem_buffer = NULL,
      .no_alloc = false,
  };
  struct ggml_context *ctx = ggml_init(ip);
  if (!ctx) return -2;
  struct ggml_tensor *kc = ggml_new_tensor_2d(ctx, (enum ggml_type)kt, n_embd_head * n_head_kv, size);
  memcpy(kc->data, k, ggml_nbytes(kc));
  struct ggml_tensor *sh = ggml_new_tensor_1d(ctx, GGML_TYPE_I32, size);
  memcpy(sh->data, shift, (size_t)size * 4);
  struct ggml_tensor *view = ggml_view_3d(ctx, kc, n_rot, n_head_kv, size,
                                          ggml_row_size(kc->type, n_embd_head), row, 0);
  struct ggml_tensor *tmp = ggml_cast(ctx, view, GGML_TYPE_F32);
  tmp = ggml_rope_ext(ctx, tmp, sh, NULL, n_rot, mode, n_ctx_orig, f[0], f[1], f[2], f[3], f[4], f[5]);
  tmp = ggml_cpy(ctx, tmp, view);
  struct ggml_cgraph *gf = ggml_new_graph(ctx);
  ggml_build_forward_expand(gf, tmp);
  const int32_t rc = compute(ctx, gf, n_threads) == GGML_STATUS_SUCCESS ? 0 : -2;
  if (rc == 0) memcpy(k, kc->data, ggml_nbytes(kc));
  ggml_free(ctx);
  return rc;
}
