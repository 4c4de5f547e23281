/*
 * Multi-sequence shim: a llama.cpp context with n_seq_max sequences over one
 * unified KV pool (kv_unified = true; ob_ctx_new_ex also one stream each), a
 * general batch decode (positions, several sequence ids per token, per-token
 * output flags) and the llama_memory_seq_* operations. Flash attention is off
 * as in oracle.c: our engine follows the mul_mat/soft_max/mul_mat path.
 */
#include <stdint.h>
#include <string.h>

#include "llama.h"

/* type_k/type_v: ggml type ids of the K and V cache (1 = F16, llama.cpp's
 * default). n_ctx is padded to a multiple of 256 by llama.cpp (ob_n_ctx
 * reads back what it made). Flash attention is set explicitly either way. */
static void *ctx_new(void *m, int32_t n_ctx, int32_t n_batch, int32_t n_ubatch, int32_t n_seq_max,
                     int32_t n_threads, int32_t type_k, int32_t type_v, int flash, int unified) {
  struct llama_context_params p = llama_context_default_params();
  p.n_ctx = (uint32_t)n_ctx;
  p.n_batch = (uint32_t)n_batch;
  p.n_ubatch = (uint32_t)n_ubatch;
  p.n_seq_max = (uint32_t)n_seq_max;
  p.n_threads = n_threads;
  p.n_threads_batch = n_threads;
  p.flash_attn_type = flash ? LLAMA_FLASH_ATTN_TYPE_ENABLED : LLAMA_FLASH_ATTN_TYPE_DISABLED;
  p.type_k = (enum ggml_type)type_k;
  p.type_v = (enum ggml_type)type_v;
  p.kv_unified = unified != 0;
  p.no_perf = 1;
  return llama_init_from_model((struct llama_model *)m, p);
}

/* A context with flash attention off: the oracle of our default contexts. */
void *ob_ctx_new(void *m, int32_t n_ctx, int32_t n_batch, int32_t n_ubatch, int32_t n_seq_max,
                 int32_t n_threads, int32_t type_k, int32_t type_v) {
  return ctx_new(m, n_ctx, n_batch, n_ubatch, n_seq_max, n_threads, type_k, type_v, 0, 1);
}

/* ob_ctx_new with flash attention ON (LLAMA_FLASH_ATTN_TYPE_ENABLED): the
 * oracle of our flashAttn contexts, the only ones with a quantized V cache. */
void *ob_ctx_new_fa(void *m, int32_t n_ctx, int32_t n_batch, int32_t n_ubatch, int32_t n_seq_max,
                    int32_t n_threads, int32_t type_k, int32_t type_v) {
  return ctx_new(m, n_ctx, n_batch, n_ubatch, n_seq_max, n_threads, type_k, type_v, 1, 1);
}

/* ctx_new with flash attention and kv_unified as given: kv_unified = 0 gives
 * one KV stream per sequence (n_ctx / n_seq_max cells each, padded to 256). */
void *ob_ctx_new_ex(void *m, int32_t n_ctx, int32_t n_batch, int32_t n_ubatch, int32_t n_seq_max,
                    int32_t n_threads, int32_t type_k, int32_t type_v, int32_t flash,
                    int32_t unified) {
  return ctx_new(m, n_ctx, n_batch, n_ubatch, n_seq_max, n_threads, type_k, type_v, flash, unified);
}

/* llama_n_ctx: the context size after llama.cpp's padding (the KV cells). */
int32_t ob_n_ctx(void *c) { return (int32_t)llama_n_ctx((struct llama_context *)c); }

/* Decodes a general batch of n tokens: token i at pos[i], in the n_seq_id[i]
 * sequences listed next in seq_ids (the lists of all tokens concatenated),
 * an output when logits[i] != 0. Returns llama_decode's code (0 ok, 1 no
 * KV slot, -1 invalid batch, ...). */
int32_t ob_decode(void *c, int32_t n, const int32_t *tokens, const int32_t *pos,
                  const int32_t *n_seq_id, const int32_t *seq_ids, const uint8_t *logits) {
  int32_t most = 1;
  for (int32_t i = 0; i < n; i++) {
    if (n_seq_id[i] > most) most = n_seq_id[i];
  }
  struct llama_batch b = llama_batch_init(n, 0, most);
  int32_t k = 0;
  for (int32_t i = 0; i < n; i++) {
    b.token[i] = tokens[i];
    b.pos[i] = pos[i];
    b.n_seq_id[i] = n_seq_id[i];
    for (int32_t s = 0; s < n_seq_id[i]; s++) b.seq_id[i][s] = seq_ids[k++];
    b.logits[i] = (int8_t)(logits[i] != 0);
  }
  b.n_tokens = n;
  int32_t rc = llama_decode((struct llama_context *)c, b);
  llama_batch_free(b);
  return rc;
}

/* Copies the logits of batch index i (llama_get_logits_ith) into out; -1
 * when that token was not an output. */
int32_t ob_logits(void *c, int32_t i, float *out, int32_t n_vocab) {
  const float *l = llama_get_logits_ith((struct llama_context *)c, i);
  if (!l) return -1;
  memcpy(out, l, sizeof(float) * (size_t)n_vocab);
  return 0;
}

static llama_memory_t mem_of(void *c) { return llama_get_memory((struct llama_context *)c); }

/* llama_memory_seq_rm: 1 when removed, 0 when refused. */
int32_t ob_seq_rm(void *c, int32_t seq, int32_t p0, int32_t p1) {
  return llama_memory_seq_rm(mem_of(c), seq, p0, p1) ? 1 : 0;
}

void ob_seq_cp(void *c, int32_t src, int32_t dst, int32_t p0, int32_t p1) {
  llama_memory_seq_cp(mem_of(c), src, dst, p0, p1);
}

void ob_seq_keep(void *c, int32_t seq) { llama_memory_seq_keep(mem_of(c), seq); }

void ob_seq_add(void *c, int32_t seq, int32_t p0, int32_t p1, int32_t delta) {
  llama_memory_seq_add(mem_of(c), seq, p0, p1, delta);
}

void ob_seq_div(void *c, int32_t seq, int32_t p0, int32_t p1, int32_t d) {
  llama_memory_seq_div(mem_of(c), seq, p0, p1, d);
}

int32_t ob_seq_pos_min(void *c, int32_t seq) { return llama_memory_seq_pos_min(mem_of(c), seq); }

int32_t ob_seq_pos_max(void *c, int32_t seq) { return llama_memory_seq_pos_max(mem_of(c), seq); }

/* llama_memory_clear with its data buffers too (as oracle.c's or_ctx_clear). */
void ob_clear(void *c) { llama_memory_clear(mem_of(c), true); }
