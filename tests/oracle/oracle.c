/*
 * Oracle shim: a pointer-and-int API over llama.cpp's libllama so Deno tests
 * can dlopen it without mirroring llama.cpp's by-value structs, whose layout
 * changes between revisions. Compiled against the headers of the exact
 * revision the prebuilt binaries came from (see setup.ts).
 */
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "ggml-backend.h"
#include "llama.h"

static void quiet_log(enum ggml_log_level level, const char *text, void *user) {
  (void)level; (void)text; (void)user;
}

/* Loads the CPU backend variants from bin_dir; must precede any context. */
int32_t or_init(const char *bin_dir, int32_t verbose) {
  static int done = 0;
  if (done) return 0;
  if (!verbose) llama_log_set(quiet_log, NULL);
  ggml_backend_load_all_from_path(bin_dir);
  llama_backend_init();
  done = 1;
  return ggml_backend_reg_count() > 0 ? 0 : -1;
}

void *or_model_load(const char *path, int32_t vocab_only) {
  struct llama_model_params p = llama_model_default_params();
  p.vocab_only = vocab_only != 0;
  p.n_gpu_layers = 0;
  return llama_model_load_from_file(path, p);
}

void or_model_free(void *m) { llama_model_free((struct llama_model *)m); }

int32_t or_meta_count(void *m) { return llama_model_meta_count((struct llama_model *)m); }
int32_t or_meta_key(void *m, int32_t i, char *buf, int32_t size) {
  return llama_model_meta_key_by_index((struct llama_model *)m, i, buf, (size_t)size);
}
int32_t or_meta_val(void *m, int32_t i, char *buf, int32_t size) {
  return llama_model_meta_val_str_by_index((struct llama_model *)m, i, buf, (size_t)size);
}

static const struct llama_vocab *vocab_of(void *m) {
  return llama_model_get_vocab((struct llama_model *)m);
}

int32_t or_n_vocab(void *m) { return llama_vocab_n_tokens(vocab_of(m)); }
int32_t or_bos(void *m) { return llama_vocab_bos(vocab_of(m)); }
int32_t or_eos(void *m) { return llama_vocab_eos(vocab_of(m)); }

/* Returns the token count, or minus the needed size when out is too small. */
int32_t or_tokenize(void *m, const char *text, int32_t len, int32_t add_special,
                    int32_t parse_special, int32_t *out, int32_t max) {
  return llama_tokenize(vocab_of(m), text, len, out, max, add_special != 0, parse_special != 0);
}

int32_t or_detokenize(void *m, const int32_t *toks, int32_t n, char *out, int32_t max,
                      int32_t remove_special, int32_t unparse_special) {
  return llama_detokenize(vocab_of(m), toks, n, out, max, remove_special != 0,
                          unparse_special != 0);
}

int32_t or_token_to_piece(void *m, int32_t tok, char *out, int32_t max, int32_t lstrip,
                          int32_t special) {
  return llama_token_to_piece(vocab_of(m), tok, out, max, lstrip, special != 0);
}

/* kv_type: ggml type id of the K and V cache (1 = F16, llama.cpp's default). */
void *or_ctx_new(void *m, int32_t n_ctx, int32_t n_batch, int32_t n_threads, int32_t kv_type) {
  struct llama_context_params p = llama_context_default_params();
  p.n_ctx = (uint32_t)n_ctx;
  p.n_batch = (uint32_t)n_batch;
  p.n_ubatch = (uint32_t)n_batch;
  p.n_seq_max = 1;
  p.n_threads = n_threads;
  p.n_threads_batch = n_threads;
  p.flash_attn_type = LLAMA_FLASH_ATTN_TYPE_DISABLED;
  p.type_k = (enum ggml_type)kv_type;
  p.type_v = (enum ggml_type)kv_type;
  p.no_perf = 1;
  return llama_init_from_model((struct llama_model *)m, p);
}

void or_ctx_free(void *c) { llama_free((struct llama_context *)c); }

void or_ctx_clear(void *c) {
  llama_memory_clear(llama_get_memory((struct llama_context *)c), 1);
}

/* Decodes n tokens at positions pos0.. of sequence 0; all_logits asks for
 * logits at every position, otherwise only the last. Returns llama_decode's code. */
int32_t or_decode(void *c, const int32_t *toks, int32_t n, int32_t pos0, int32_t all_logits) {
  struct llama_batch b = llama_batch_init(n, 0, 1);
  for (int32_t i = 0; i < n; i++) {
    b.token[i] = toks[i];
    b.pos[i] = pos0 + i;
    b.n_seq_id[i] = 1;
    b.seq_id[i][0] = 0;
    b.logits[i] = (int8_t)(all_logits || i == n - 1);
  }
  b.n_tokens = n;
  int32_t rc = llama_decode((struct llama_context *)c, b);
  llama_batch_free(b);
  return rc;
}

/* Copies the logits of batch row i (negative counts from the end) into out. */
int32_t or_logits(void *c, int32_t i, float *out, int32_t n_vocab) {
  const float *l = llama_get_logits_ith((struct llama_context *)c, i);
  if (!l) return -1;
  memcpy(out, l, sizeof(float) * (size_t)n_vocab);
  return 0;
}

/* ftype: llama_ftype value (7 = Q8_0, 2 = Q4_0, ...). */
int32_t or_quantize(const char *in, const char *out, int32_t ftype, int32_t n_threads) {
  struct llama_model_quantize_params p = llama_model_quantize_default_params();
  p.ftype = (enum llama_ftype)ftype;
  p.nthread = n_threads;
  return (int32_t)llama_model_quantize(in, out, &p);
}
