/*
 * Embeddings shim: a llama.cpp context with embeddings on and pooling NONE,
 * so an encoder's (bert's) per-token hidden states can be read back
 * unpooled, as llama_get_embeddings_ith returns them; and contexts with a
 * pooling type and several sequences per batch, as llama-embedding makes
 * them (llama_get_embeddings_seq), with common_embd_normalize. Flash
 * attention is off as in oracle.c: our engine follows the
 * mul_mat/soft_max/mul_mat path.
 */
#include <stdint.h>
#include <stdlib.h>
#include <math.h>
#include <string.h>

#include "llama.h"

/* Every embeddings context of this shim: embeddings on, the pooling type
 * given (-1: the model's), one unified cache, flash attention set
 * explicitly. */
static void *embd_ctx(void *m, int32_t n_ctx, int32_t n_batch, int32_t n_ubatch, int32_t n_seq_max,
                      int32_t n_threads, int32_t pooling, int flash) {
  struct llama_context_params p = llama_context_default_params();
  p.n_ctx = (uint32_t)n_ctx;
  p.n_batch = (uint32_t)n_batch;
  p.n_ubatch = (uint32_t)n_ubatch;
  p.n_seq_max = (uint32_t)n_seq_max;
  p.kv_unified = true;
  p.n_threads = n_threads;
  p.n_threads_batch = n_threads;
  p.flash_attn_type = flash ? LLAMA_FLASH_ATTN_TYPE_ENABLED : LLAMA_FLASH_ATTN_TYPE_DISABLED;
  p.embeddings = true;
  p.pooling_type = (enum llama_pooling_type)pooling;
  p.no_perf = 1;
  return llama_init_from_model((struct llama_model *)m, p);
}

/* Pooling NONE, one sequence. n_batch is also n_ubatch: llama.cpp evaluates
 * an encoder's input in one micro-batch (its non-causal attention cannot be
 * split). */
void *oe_ctx_new(void *m, int32_t n_ctx, int32_t n_batch, int32_t n_threads) {
  return embd_ctx(m, n_ctx, n_batch, n_batch, 1, n_threads, LLAMA_POOLING_TYPE_NONE, 0);
}

/* oe_ctx_new with flash attention ON (k and v cast to F16, an F16 mask). */
void *oe_ctx_new_fa(void *m, int32_t n_ctx, int32_t n_batch, int32_t n_threads) {
  return embd_ctx(m, n_ctx, n_batch, n_batch, 1, n_threads, LLAMA_POOLING_TYPE_NONE, 1);
}

/* llama_model_n_embd: the width of one hidden state. */
int32_t oe_n_embd(void *m) { return llama_model_n_embd((struct llama_model *)m); }

/* Evaluates n tokens of sequence 0 at positions 0..n-1, every one an
 * output, with llama_decode (which runs llama_encode for a model without
 * memory, as llama-embedding does). Returns llama_decode's code. */
int32_t oe_decode_seqs(void *c, const int32_t *toks, const int32_t *pos, const int32_t *seq,
                       int32_t n);

int32_t oe_decode(void *c, const int32_t *toks, int32_t n) {
  int32_t *pos = malloc(sizeof(int32_t) * (size_t)n), *seq = calloc((size_t)n, sizeof(int32_t));
  if (!pos || !seq) {
    free(pos), free(seq);
    return -3;
  }
  for (int32_t i = 0; i < n; i++) pos[i] = i;
  int32_t rc = oe_decode_seqs(c, toks, pos, seq, n);
  free(pos), free(seq);
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

/*
 * Pooled embeddings, as llama-embedding runs them: embeddings on, a pooling
 * type (-1: the model's, LLAMA_POOLING_TYPE_UNSPECIFIED), n_seq_max
 * sequences over one unified cache (llama-embedding sets kv_unified when
 * --parallel is 1), every token an output.
 */
void *oe_ctx_new_pooled(void *m, int32_t n_ctx, int32_t n_batch, int32_t n_ubatch,
                        int32_t n_seq_max, int32_t n_threads, int32_t pooling) {
  return embd_ctx(m, n_ctx, n_batch, n_ubatch, n_seq_max, n_threads, pooling, 0);
}

/* llama_pooling_type: the pooling the context applies (the model's when unspecified). */
int32_t oe_pooling(void *c) { return (int32_t)llama_pooling_type((struct llama_context *)c); }

/* Clears the cache, as llama-embedding's batch_decode does before each batch. */
void oe_clear(void *c) { llama_memory_clear(llama_get_memory((struct llama_context *)c), true); }

/* One batch of n tokens: token i at pos[i] in sequence seq[i], every token
 * an output (batch_add_seq), through oracle_batch.c's general decode.
 * Returns llama_decode's code. */
int32_t ob_decode(void *c, int32_t n, const int32_t *tokens, const int32_t *pos,
                  const int32_t *n_seq_id, const int32_t *seq_ids, const uint8_t *logits);

int32_t oe_decode_seqs(void *c, const int32_t *toks, const int32_t *pos, const int32_t *seq,
                       int32_t n) {
  int32_t *ones = malloc(sizeof(int32_t) * (size_t)n);
  uint8_t *all = malloc((size_t)n);
  if (!ones || !all) {
    free(ones), free(all);
    return -3;
  }
  for (int32_t i = 0; i < n; i++) ones[i] = 1, all[i] = 1;
  int32_t rc = ob_decode(c, n, toks, pos, ones, seq, all);
  free(ones), free(all);
  return rc;
}

/* Copies sequence seq's pooled embedding (llama_get_embeddings_seq) into out;
 * -1 when llama.cpp has none. */
int32_t oe_embd_seq(void *c, int32_t seq, float *out, int32_t n_embd) {
  const float *e = llama_get_embeddings_seq((struct llama_context *)c, seq);
  if (!e) return -1;
  memcpy(out, e, sizeof(float) * (size_t)n_embd);
  return 0;
}

/* common_embd_normalize (common/common.cpp), line for line in C: the types
 * of each step (float products summed in double, a float scale) decide the
 * last bits. */
void oe_normalize(const float *inp, float *out, int32_t n, int32_t embd_norm) {
  double sum = 0.0;
  switch (embd_norm) {
    case -1:
      sum = 1.0;
      break;
    case 0:
      for (int32_t i = 0; i < n; i++) {
        if (sum < fabsf(inp[i])) sum = fabsf(inp[i]);
      }
      sum /= 32760.0;
      break;
    case 2:
      for (int32_t i = 0; i < n; i++) sum += inp[i] * inp[i];
      sum = sqrt(sum);
      break;
    default:
      for (int32_t i = 0; i < n; i++) sum += pow(fabsf(inp[i]), embd_norm);
      sum = pow(sum, 1.0 / embd_norm);
      break;
  }
  const float norm = sum > 0.0 ? 1.0 / sum : 0.0f;
  for (int32_t i = 0; i < n; i++) out[i] = inp[i] * norm;
}
