/*
 * Embeddings shim: a llama.cpp context with embeddings on and pooling NONE,
 * so an encoder's (bert's) per-token hidden states can be read back
 * unpooled, as llama_get_embeddings_ith returns them. Flash attention is
 * off as in oracle.c: our engine follows the mul_mat/soft_max/mul_mat path.
 */
#include <stdint.h>
#include <string.h>

#include "llama.h"

/* n_batch is also n_ubatch: llama.cpp evaluates an encoder's input in one
 * micro-batch (its non-causal attention cannot be split). */
void *oe_ctx_new(void *m, int32_t n_ctx, int32_t n_batch, int32_t n_threads) {
  struct llama_context_params p = llama_context_default_params();
  p.n_ctx = (uint32_t)n_ctx;
  p.n_batch = (uint32_t)n_batch;
  p.n_ubatch = (uint32_t)n_batch;
  p.n_seq_max = 1;
  p.n_threads = n_threads;
  p.n_threads_batch = n_threads;
  p.flash_attn_type = LLAMA_FLASH_ATTN_TYPE_DISABLED;
  p.embeddings = true;
  p.pooling_type = LLAMA_POOLING_TYPE_NONE;
  p.no_perf = 1;
  return llama_init_from_model((struct llama_model *)m, p);
}

/* oe_ctx_new with flash attention ON (k and v cast to F16, an F16 mask). */
void *oe_ctx_new_fa(void *m, int32_t n_ctx, int32_t n_batch, int32_t n_threads) {
  struct llama_context_params p = llama_context_default_params();
  p.n_ctx = (uint32_t)n_ctx;
  p.n_batch = (uint32_t)n_batch;
  p.n_ubatch = (uint32_t)n_batch;
  p.n_threads = n_threads;
  p.n_threads_batch = n_threads;
  p.flash_attn_type = LLAMA_FLASH_ATTN_TYPE_ENABLED;
  p.embeddings = true;
  p.pooling_type = LLAMA_POOLING_TYPE_NONE;
  p.no_perf = 1;
  return llama_init_from_model((struct llama_model *)m, p);
}

/* llama_model_n_embd: the width of one hidden state. */
int32_t oe_n_embd(void *m) { return llama_model_n_embd((struct llama_model *)m); }

/* Evaluates n tokens of sequence 0 at positions 0..n-1, every one an
 * output, with llama_decode (which runs llama_encode for a model without
 * memory, as llama-embedding does). Returns llama_decode's code. */
int32_t oe_decode(void *c, const int32_t *toks, int32_t n) {
  struct llama_batch b = llama_batch_init(n, 0, 1);
  for (int32_t i = 0; i < n; i++) {
    b.token[i] = toks[i];
    b.pos[i] = i;
    b.n_seq_id[i] = 1;
    b.seq_id[i][0] = 0;
    b.logits[i] = 1;
  }
  b.n_tokens = n;
  int32_t rc = llama_decode((struct llama_context *)c, b);
  llama_batch_free(b);
  return rc;
}

/* Copies the hidden state of batch row i into out (n_embd floats); -1 when
 * llama.cpp has none for that row. */
int32_t oe_embd(void *c, int32_t i, float *out, int32_t n_embd) {
  const float *e = llama_get_embeddings_ith((struct llama_context *)c, i);
  if (!e) return -1;
  memcpy(out, e, sizeof(float) * (size_t)n_embd);
  return 0;
}
