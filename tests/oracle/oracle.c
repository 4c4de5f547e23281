/*
 * Oracle shim: a pointer-and-int API over llama.cpp's libllama so Deno tests
 * can dlopen it without mirroring llama.cpp's by-value structs, whose layout
 * changes between revisions. Compiled against the headers of the exact
 * revision the prebuilt binaries came from (see setup.ts).
 */
#define _GNU_SOURCE /* dladdr */
#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "ggml-backend.h"
#include "llama.h"

static void quiet_log(enum ggml_log_level level, const char *text, void *user) {
  (void)level; (void)text; (void)user;
}

/* Loads the CPU backend from bin_dir; must precede any context. With an
 * empty variant, ggml picks the best libggml-cpu-<variant>.so this CPU can
 * run (what llama.cpp does); otherwise only libggml-cpu-<variant>.so is
 * loaded. Returns 0, -1 when no backend loaded, -2 when the named variant
 * is missing or this CPU cannot run it (ggml_backend_load refuses a
 * variant whose ggml_backend_score is 0). */
int32_t or_init(const char *bin_dir, int32_t verbose, const char *variant) {
  static int done = 0;
  if (done) return 0;
  if (!verbose) llama_log_set(quiet_log, NULL);
  if (variant && variant[0]) {
    char path[4096];
    snprintf(path, sizeof path, "%s/libggml-cpu-%s.so", bin_dir, variant);
    if (!ggml_backend_load(path)) return -2;
  } else {
    ggml_backend_load_all_from_path(bin_dir);
  }
  llama_backend_init();
  done = 1;
  return ggml_backend_reg_count() > 0 ? 0 : -1;
}

/* Writes the loaded CPU variant as "<name>\t<features>": the name from the
 * file the CPU backend's code lives in (libggml-cpu-<name>.so), the features
 * as ggml_backend_get_features lists them ("AVX2=1;FMA=1;..."). Returns the
 * length, or -1 when no CPU backend is loaded. */
int32_t or_cpu_variant(char *out, int32_t size) {
  ggml_backend_reg_t reg = ggml_backend_reg_by_name("CPU");
  if (!reg || size < 1) return -1;
  void *fn = ggml_backend_reg_get_proc_address(reg, "ggml_backend_get_features");
  const char *file = "?";
  Dl_info info;
  if (fn && dladdr(fn, &info) && info.dli_fname) file = info.dli_fname;
  const char *base = strrchr(file, '/');
  base = base ? base + 1 : file;
  const char *prefix = "libggml-cpu-";
  char name[128];
  if (strncmp(base, prefix, strlen(prefix)) == 0) {
    snprintf(name, sizeof name, "%s", base + strlen(prefix));
    char *dot = strstr(name, ".so");
    if (dot) *dot = 0;
  } else {
    snprintf(name, sizeof name, "%s", base);
  }
  int32_t n = snprintf(out, (size_t)size, "%s\t", name);
  if (fn) {
    const struct ggml_backend_feature *f = ((ggml_backend_get_features_t)fn)(reg);
    for (; f && f->name && n < size; f++) {
      n += snprintf(out + n, (size_t)(size - n), "%s%s=%s", n > (int32_t)strlen(name) + 1 ? ";" : "",
                    f->name, f->value);
    }
  }
  return n < size ? n : size - 1;
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

/* ggml_backend_score of the CPU variant library at path (0: this CPU
 * cannot run it; -1: no such library), without registering it: the same
 * dlopen/score/dlclose ggml_backend_load_best does for every variant. */
int32_t or_variant_score(const char *path) {
  void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  if (!h) return -1;
  int (*score)(void) = (int (*)(void))dlsym(h, "ggml_backend_score");
  const int32_t s = score ? score() : -1;
  dlclose(h);
  return s;
}
