/*
 * Oracle shim for sampling and grammars: llama.cpp's sampler chain applied to
 * a candidate array built from caller logits, and its grammar matcher driven
 * one code point at a time (the way test-grammar-integration does).
 *
 * Sampler specs arrive as a flat float array: kind, nparams, params... so the
 * TS side never builds llama.cpp structs.
 */
#define _POSIX_C_SOURCE 199309L
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "llama.h"

enum {
  ORS_LOGIT_BIAS = 1, /* n pairs: id, bias */
  ORS_PENALTIES = 2,  /* last_n, repeat, freq, present */
  ORS_TOP_K = 3,      /* k */
  ORS_TYPICAL = 4,    /* p, min_keep */
  ORS_TOP_P = 5,      /* p, min_keep */
  ORS_MIN_P = 6,      /* p, min_keep */
  ORS_TEMP = 7,       /* t */
  ORS_TEMP_EXT = 8,   /* t, delta, exponent */
  ORS_MIROSTAT = 9,   /* seed, tau, eta, m */
  ORS_MIROSTAT2 = 10, /* seed, tau, eta */
  ORS_GREEDY = 11,
  ORS_DIST = 12, /* seed */
};

struct ors_chain {
  struct llama_sampler *chain;
  int32_t n_vocab;
  llama_token_data *buf;
  int32_t cap;
};

/* Builds a chain from specs; returns NULL on an unknown kind or short spec. */
void *ors_chain_new(const float *spec, int32_t n, int32_t n_vocab) {
  struct llama_sampler_chain_params cp = llama_sampler_chain_default_params();
  cp.no_perf = true;
  struct llama_sampler *chain = llama_sampler_chain_init(cp);
  int32_t i = 0;
  while (i + 2 <= n) {
    int kind = (int)spec[i];
    int np = (int)spec[i + 1];
    const float *p = spec + i + 2;
    if (i + 2 + np > n) break;
    struct llama_sampler *s = NULL;
    switch (kind) {
      case ORS_LOGIT_BIAS: {
        int nb = np / 2;
        llama_logit_bias *lb = calloc((size_t)(nb > 0 ? nb : 1), sizeof(llama_logit_bias));
        for (int j = 0; j < nb; j++) {
          lb[j].token = (llama_token)p[2 * j];
          lb[j].bias = p[2 * j + 1];
        }
        s = llama_sampler_init_logit_bias(n_vocab, nb, lb);
        free(lb);
        break;
      }
      case ORS_PENALTIES: s = llama_sampler_init_penalties(n_vocab, (int32_t)p[0], p[1], p[2], p[3]); break;
      case ORS_TOP_K: s = llama_sampler_init_top_k((int32_t)p[0]); break;
      case ORS_TYPICAL: s = llama_sampler_init_typical(p[0], (size_t)p[1]); break;
      case ORS_TOP_P: s = llama_sampler_init_top_p(p[0], (size_t)p[1]); break;
      case ORS_MIN_P: s = llama_sampler_init_min_p(p[0], (size_t)p[1]); break;
      case ORS_TEMP: s = llama_sampler_init_temp(p[0]); break;
      case ORS_TEMP_EXT: s = llama_sampler_init_temp_ext(p[0], p[1], p[2]); break;
      case ORS_MIROSTAT:
        s = llama_sampler_init_mirostat(n_vocab, (uint32_t)p[0], p[1], p[2], (int32_t)p[3]);
        break;
      case ORS_MIROSTAT2: s = llama_sampler_init_mirostat_v2((uint32_t)p[0], p[1], p[2]); break;
      case ORS_GREEDY: s = llama_sampler_init_greedy(); break;
      case ORS_DIST: s = llama_sampler_init_dist((uint32_t)p[0]); break;
      default: break;
    }
    if (!s) {
      llama_sampler_free(chain);
      return NULL;
    }
    llama_sampler_chain_add(chain, s);
    i += 2 + np;
  }
  struct ors_chain *c = calloc(1, sizeof(struct ors_chain));
  c->chain = chain;
  c->n_vocab = n_vocab;
  return c;
}

void ors_chain_free(void *h) {
  struct ors_chain *c = h;
  if (!c) return;
  llama_sampler_free(c->chain);
  free(c->buf);
  free(c);
}

void ors_chain_accept(void *h, int32_t token) { llama_sampler_accept(((struct ors_chain *)h)->chain, token); }

void ors_chain_reset(void *h) { llama_sampler_reset(((struct ors_chain *)h)->chain); }

static int ensure_cap(struct ors_chain *c, int32_t n) {
  if (c->cap >= n) return 0;
  llama_token_data *b = realloc(c->buf, (size_t)n * sizeof(llama_token_data));
  if (!b) return -1;
  c->buf = b;
  c->cap = n;
  return 0;
}

/*
 * Applies the chain to candidates {id i, logits[i], p 0}. Writes the
 * surviving candidates in llama.cpp's order to out_*; meta[0] = selected,
 * meta[1] = sorted flag. Returns the candidate count (or -1).
 */
int32_t ors_chain_apply(void *h, const float *logits, int32_t n, int32_t *out_ids,
                        float *out_logits, float *out_p, int32_t *meta) {
  struct ors_chain *c = h;
  if (n <= 0 || ensure_cap(c, n) != 0) return -1;
  for (int32_t i = 0; i < n; i++) {
    c->buf[i].id = i;
    c->buf[i].logit = logits[i];
    c->buf[i].p = 0.0f;
  }
  llama_token_data_array arr = {c->buf, (size_t)n, -1, false};
  llama_sampler_apply(c->chain, &arr);
  for (size_t i = 0; i < arr.size; i++) {
    out_ids[i] = arr.data[i].id;
    out_logits[i] = arr.data[i].logit;
    out_p[i] = arr.data[i].p;
  }
  meta[0] = (int32_t)arr.selected;
  meta[1] = arr.sorted ? 1 : 0;
  return (int32_t)arr.size;
}

/* Average nanoseconds per apply over reps calls (candidates rebuilt each time). */
double ors_chain_bench(void *h, const float *logits, int32_t n, int32_t reps) {
  struct ors_chain *c = h;
  if (n <= 0 || reps <= 0 || ensure_cap(c, n) != 0) return -1;
  struct timespec t0, t1;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  for (int32_t r = 0; r < reps; r++) {
    for (int32_t i = 0; i < n; i++) {
      c->buf[i].id = i;
      c->buf[i].logit = logits[i];
      c->buf[i].p = 0.0f;
    }
    llama_token_data_array arr = {c->buf, (size_t)n, -1, false};
    llama_sampler_apply(c->chain, &arr);
  }
  clock_gettime(CLOCK_MONOTONIC, &t1);
  return ((double)(t1.tv_sec - t0.tv_sec) * 1e9 + (double)(t1.tv_nsec - t0.tv_nsec)) / reps;
}

/* ---- grammar matcher (C++ internals reached through their mangled names) ---- */

struct llama_grammar;
struct llama_grammar *ors_grammar_init_impl(const struct llama_vocab *vocab, const char *str,
                                            const char *root, bool lazy, const char **pats,
                                            size_t npats, const llama_token *toks, size_t ntoks)
    __asm__("_Z23llama_grammar_init_implPK11llama_vocabPKcS3_bPS3_mPKim");
void ors_grammar_free_impl(struct llama_grammar *g) __asm__("_Z23llama_grammar_free_implP13llama_grammar");
void ors_grammar_accept_chr(struct llama_grammar *g, uint32_t chr)
    __asm__("_Z20llama_grammar_acceptP13llama_grammarj");
void *ors_grammar_get_stacks(struct llama_grammar *g) __asm__("_Z24llama_grammar_get_stacksP13llama_grammar");

/* libstdc++ std::vector layout: begin, end, end of storage. */
struct vec {
  char *begin, *end, *cap;
};

void *ors_grammar_new(const char *str, const char *root) {
  return ors_grammar_init_impl(NULL, str, root, false, NULL, 0, NULL, 0);
}

void ors_grammar_free(void *g) { ors_grammar_free_impl(g); }

/* Number of stacks; *n_empty gets how many are empty (grammar may end here). */
static int32_t stacks_info(struct llama_grammar *g, int32_t *n_empty) {
  struct vec *stacks = ors_grammar_get_stacks(g);
  int32_t n = (int32_t)((stacks->end - stacks->begin) / (ptrdiff_t)sizeof(struct vec));
  int32_t e = 0;
  for (int32_t i = 0; i < n; i++) {
    struct vec *s = (struct vec *)stacks->begin + i;
    if (s->begin == s->end) e++;
  }
  *n_empty = e;
  return n;
}

/*
 * Feeds code points one by one; returns 1 if the whole input is accepted and
 * the grammar can end, 0 if not, -1 if the grammar does not build.
 * The grammar is rebuilt per call so calls are independent.
 */
int32_t ors_grammar_match(const char *str, const char *root, const uint32_t *cps, int32_t n) {
  struct llama_grammar *g = ors_grammar_init_impl(NULL, str, root, false, NULL, 0, NULL, 0);
  if (!g) return -1;
  int32_t e = 0;
  for (int32_t i = 0; i < n; i++) {
    ors_grammar_accept_chr(g, cps[i]);
    if (stacks_info(g, &e) == 0) {
      ors_grammar_free_impl(g);
      return 0;
    }
  }
  stacks_info(g, &e);
  ors_grammar_free_impl(g);
  return e > 0 ? 1 : 0;
}

/* ---- grammar sampler over a real vocabulary ---- */

void *ors_grammar_sampler_new(void *model, const char *str, const char *root) {
  return llama_sampler_init_grammar(llama_model_get_vocab((struct llama_model *)model), str, root);
}

void ors_sampler_free(void *s) { llama_sampler_free(s); }

void ors_sampler_accept(void *s, int32_t token) { llama_sampler_accept(s, token); }

/* Applies to all n_vocab tokens with logit 0; writes 1 (allowed) or 0 per id. */
int32_t ors_grammar_sampler_allowed(void *s, int32_t n_vocab, uint8_t *out) {
  llama_token_data *buf = malloc((size_t)n_vocab * sizeof(llama_token_data));
  if (!buf) return -1;
  for (int32_t i = 0; i < n_vocab; i++) {
    buf[i].id = i;
    buf[i].logit = 0.0f;
    buf[i].p = 0.0f;
  }
  llama_token_data_array arr = {buf, (size_t)n_vocab, -1, false};
  llama_sampler_apply(s, &arr);
  int32_t n_ok = 0;
  for (int32_t i = 0; i < n_vocab; i++) {
    out[buf[i].id] = isinf(buf[i].logit) ? 0 : 1;
    n_ok += out[buf[i].id];
  }
  free(buf);
  return n_ok;
}

/* Average nanoseconds of one grammar apply over the whole vocabulary. */
double ors_grammar_sampler_bench(void *s, int32_t n_vocab, int32_t reps) {
  llama_token_data *buf = malloc((size_t)n_vocab * sizeof(llama_token_data));
  if (!buf || reps <= 0) return -1;
  struct timespec t0, t1;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  for (int32_t r = 0; r < reps; r++) {
    for (int32_t i = 0; i < n_vocab; i++) {
      buf[i].id = i;
      buf[i].logit = 0.0f;
      buf[i].p = 0.0f;
    }
    llama_token_data_array arr = {buf, (size_t)n_vocab, -1, false};
    llama_sampler_apply(s, &arr);
  }
  clock_gettime(CLOCK_MONOTONIC, &t1);
  free(buf);
  return ((double)(t1.tv_sec - t0.tv_sec) * 1e9 + (double)(t1.tv_nsec - t0.tv_nsec)) / reps;
}

/* llama_vocab_is_eog for a model's vocabulary. */
int32_t ors_vocab_is_eog(void *model, int32_t token) {
  return llama_vocab_is_eog(llama_model_get_vocab((struct llama_model *)model), token) ? 1 : 0;
}
