/*
 * State shim: a llama.cpp context with several sequences over one unified
 * cache (kv_unified, flash attention off, F16 cache) and
 * llama_state_seq_get_data / llama_state_seq_set_data, so a sequence saved
 * from one context and restored into another sequence of a busy context can
 * be compared with ours: where its cells land and the logits that follow.
 */
#include <stdint.h>
#include <string.h>

#include "llama.h"

void *ost_ctx_new(void *m, int32_t n_ctx, int32_t n_seq_max, int32_t n_threads) {
  struct llama_context_params p = llama_context_default_params();
  p.n_ctx = (uint32_t)n_ctx;
  p.n_batch = 512;
  p.n_ubatch = 512;
  p.n_seq_max = (uint32_t)n_seq_max;
  p.kv_unified = true;
  p.n_threads = n_threads;
  p.n_threads_batch = n_threads;
  p.flash_attn_type = LLAMA_FLASH_ATTN_TYPE_DISABLED;
  p.no_perf = 1;
  return llama_init_from_model((struct llama_model *)m, p);
}

/* Decodes n tokens of sequence seq at positions pos0..; logits of the last
 * one only. Returns llama_decode's code. */
int32_t ost_decode(void *c, const int32_t *toks, int32_t n, int32_t seq, int32_t pos0) {
  struct llama_batch b = llama_batch_init(n, 0, 1);
  for (int32_t i = 0; i < n; i++) {
    b.token[i] = toks[i];
    b.pos[i] = pos0 + i;
    b.n_seq_id[i] = 1;
    b.seq_id[i][0] = seq;
    b.logits[i] = (int8_t)(i == n - 1);
  }
  b.n_tokens = n;
  int32_t rc = llama_decode((struct llama_context *)c, b);
  llama_batch_free(b);
  return rc;
}

/* llama_memory_seq_rm; returns 1 on success. */
int32_t ost_seq_rm(void *c, int32_t seq, int32_t p0, int32_t p1) {
  return llama_memory_seq_rm(llama_get_memory((struct llama_context *)c), seq, p0, p1) ? 1 : 0;
}

/* Size of sequence seq's state; with out (of max bytes), also its bytes. */
int64_t ost_seq_get(void *c, int32_t seq, uint8_t *out, int64_t max) {
  struct llama_context *ctx = (struct llama_context *)c;
  size_t n = llama_state_seq_get_size(ctx, seq);
  if (out && (int64_t)n <= max) n = llama_state_seq_get_data(ctx, out, (size_t)max, seq);
  return (int64_t)n;
}

/* Restores a sequence state into dst; bytes read, 0 on failure. */
int64_t ost_seq_set(void *c, const uint8_t *src, int64_t n, int32_t dst) {
  return (int64_t)llama_state_seq_set_data((struct llama_context *)c, src, (size_t)n, dst);
}
