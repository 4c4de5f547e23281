/*
 * Debug shim: a llama.cpp context whose scheduler eval callback copies the
 * values of named graph tensors ("attn_norm-3", "kq_soft_max-0", "l_out-5",
 * "result_output", ...) out after they are computed, so tests can compare
 * llama.cpp with our engine op by op instead of only at the logits.
 *
 * The callback makes ggml's scheduler stop after each wanted node, which
 * changes where graph chunks end but not any op's arithmetic.
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ggml-backend.h"
#include "ggml.h"
#include "llama.h"

#define ORD_MAX_TAPS 256
#define ORD_NAME 64

typedef struct {
  char name[ORD_NAME];
  float *data;       /* F32 copy of the last tensor computed under this name */
  int64_t len;       /* elements held, -1 until recorded */
  int64_t cap;       /* elements allocated */
  int64_t ne[4];
} ord_tap;

typedef struct {
  struct llama_context *ctx;
  int32_t n_taps;
  ord_tap taps[ORD_MAX_TAPS];
  int32_t listing;   /* 1: append every node name to names instead of recording */
  char *names;
  size_t names_len, names_cap;
} ord_dbg;

static ord_tap *find_tap(ord_dbg *d, const char *name) {
  for (int32_t i = 0; i < d->n_taps; i++)
    if (strncmp(d->taps[i].name, name, ORD_NAME) == 0) return &d->taps[i];
  return NULL;
}

static void list_name(ord_dbg *d, const struct ggml_tensor *t) {
  char line[160];
  int n = snprintf(line, sizeof line, "%s\t%s\t%s\t%lld,%lld,%lld,%lld\n", t->name, ggml_op_desc(t),
                   ggml_type_name(t->type), (long long)t->ne[0], (long long)t->ne[1],
                   (long long)t->ne[2], (long long)t->ne[3]);
  if (n <= 0) return;
  if (d->names_len + (size_t)n + 1 > d->names_cap) {
    size_t cap = d->names_cap ? d->names_cap * 2 : 1 << 16;
    while (cap < d->names_len + (size_t)n + 1) cap *= 2;
    char *p = realloc(d->names, cap);
    if (!p) return;
    d->names = p;
    d->names_cap = cap;
  }
  memcpy(d->names + d->names_len, line, (size_t)n + 1);
  d->names_len += (size_t)n;
}

/* Copies t's logical elements (ggml order, any strides) to f32. */
static void record(ord_tap *tap, struct ggml_tensor *t) {
  const int64_t n = ggml_nelements(t);
  if (n > tap->cap) {
    float *p = realloc(tap->data, (size_t)n * sizeof(float));
    if (!p) return;
    tap->data = p;
    tap->cap = n;
  }
  const size_t bytes = ggml_nbytes(t);
  uint8_t *raw = malloc(bytes);
  if (!raw) return;
  ggml_backend_tensor_get(t, raw, 0, bytes);
  int64_t k = 0;
  for (int64_t i3 = 0; i3 < t->ne[3]; i3++)
    for (int64_t i2 = 0; i2 < t->ne[2]; i2++)
      for (int64_t i1 = 0; i1 < t->ne[1]; i1++)
        for (int64_t i0 = 0; i0 < t->ne[0]; i0++) {
          const uint8_t *e = raw + i0 * t->nb[0] + i1 * t->nb[1] + i2 * t->nb[2] + i3 * t->nb[3];
          float v;
          if (t->type == GGML_TYPE_F32) memcpy(&v, e, 4);
          else if (t->type == GGML_TYPE_F16) v = ggml_fp16_to_fp32(*(const ggml_fp16_t *)e);
          else if (t->type == GGML_TYPE_I32) v = (float)*(const int32_t *)e;
          else v = NAN;
          tap->data[k++] = v;
        }
  free(raw);
  tap->len = n;
  for (int i = 0; i < 4; i++) tap->ne[i] = t->ne[i];
}

static bool eval_cb(struct ggml_tensor *t, bool ask, void *user) {
  ord_dbg *d = user;
  if (ask) {
    if (d->listing) {
      list_name(d, t);
      return false;
    }
    return find_tap(d, t->name) != NULL;
  }
  ord_tap *tap = find_tap(d, t->name);
  if (tap) record(tap, t);
  return true;
}

/* A context like or_ctx_new's with the recording callback installed. */
void *ord_new(void *m, int32_t n_ctx, int32_t n_threads, int32_t kv_type) {
  ord_dbg *d = calloc(1, sizeof *d);
  if (!d) return NULL;
  struct llama_context_params p = llama_context_default_params();
  p.n_ctx = (uint32_t)n_ctx;
  p.n_batch = (uint32_t)n_ctx;
  p.n_ubatch = (uint32_t)n_ctx;
  p.n_seq_max = 1;
  p.n_threads = n_threads;
  p.n_threads_batch = n_threads;
  p.flash_attn_type = LLAMA_FLASH_ATTN_TYPE_DISABLED;
  p.type_k = (enum ggml_type)kv_type;
  p.type_v = (enum ggml_type)kv_type;
  p.no_perf = 1;
  p.cb_eval = eval_cb;
  p.cb_eval_user_data = d;
  d->ctx = llama_init_from_model((struct llama_model *)m, p);
  if (!d->ctx) {
    free(d);
    return NULL;
  }
  return d;
}

void ord_free(void *h) {
  ord_dbg *d = h;
  if (!d) return;
  llama_free(d->ctx);
  for (int32_t i = 0; i < d->n_taps; i++) free(d->taps[i].data);
  free(d->names);
  free(d);
}

/* The llama_context, for or_decode / or_logits / or_ctx_clear. */
void *ord_ctx(void *h) { return ((ord_dbg *)h)->ctx; }

/* Replaces the wanted names with the NUL-separated list (count names). */
int32_t ord_want(void *h, const char *names, int32_t count) {
  ord_dbg *d = h;
  if (count < 0 || count > ORD_MAX_TAPS) return -1;
  for (int32_t i = 0; i < d->n_taps; i++) free(d->taps[i].data);
  memset(d->taps, 0, sizeof d->taps);
  d->n_taps = 0;
  const char *s = names;
  for (int32_t i = 0; i < count; i++) {
    const size_t n = strlen(s);
    if (n == 0 || n >= ORD_NAME) return -1;
    memcpy(d->taps[i].name, s, n + 1);
    d->taps[i].len = -1;
    d->n_taps = i + 1;
    s += n + 1;
  }
  return 0;
}

/* Forgets recorded values (before a decode). */
void ord_reset(void *h) {
  ord_dbg *d = h;
  for (int32_t i = 0; i < d->n_taps; i++) d->taps[i].len = -1;
  d->names_len = 0;
  if (d->names) d->names[0] = 0;
}

/* 1: the next decodes list node names instead of recording. */
void ord_listing(void *h, int32_t on) { ((ord_dbg *)h)->listing = on != 0; }

/* Length of the name listing including the NUL; copies it when it fits. */
int32_t ord_names(void *h, char *out, int32_t cap) {
  ord_dbg *d = h;
  const int32_t need = (int32_t)d->names_len + 1;
  if (out && cap >= need) {
    if (d->names_len) memcpy(out, d->names, d->names_len);
    out[d->names_len] = 0;
  }
  return need;
}

/* Elements recorded for tap i (-1: none) and its shape into ne (4 values). */
int64_t ord_tap_len(void *h, int32_t i, int64_t *ne) {
  ord_dbg *d = h;
  if (i < 0 || i >= d->n_taps) return -1;
  if (ne) memcpy(ne, d->taps[i].ne, sizeof d->taps[i].ne);
  return d->taps[i].len;
}

/* Copies tap i's values into out (cap elements); returns the count copied or -1. */
int64_t ord_tap_copy(void *h, int32_t i, float *out, int64_t cap) {
  ord_dbg *d = h;
  if (i < 0 || i >= d->n_taps || d->taps[i].len < 0 || cap < d->taps[i].len) return -1;
  memcpy(out, d->taps[i].data, (size_t)d->taps[i].len * sizeof(float));
  return d->taps[i].len;
}
