/* llama.cpp's own GGUF reader (gguf.h, exported by libggml-base) behind a
 * plain handle API, so tests compare our parser with it field by field. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ggml.h"
#include "gguf.h"

typedef struct {
  struct gguf_context *g;
  struct ggml_context *ctx;
} og_file;

static int32_t og_copy(const char *s, char *buf, int32_t len) {
  const int32_t n = (int32_t)strlen(s);
  if (buf && len > 0) {
    const int32_t m = n < len - 1 ? n : len - 1;
    memcpy(buf, s, (size_t)m);
    buf[m] = 0;
  }
  return n;
}

/* Opens with no_alloc and a ggml context, as llama_model_loader does. */
og_file *og_open(const char *path) {
  struct ggml_context *ctx = NULL;
  struct gguf_init_params p = {true, &ctx};
  struct gguf_context *g = gguf_init_from_file(path, p);
  if (!g) return NULL;
  og_file *f = (og_file *)calloc(1, sizeof(og_file));
  f->g = g;
  f->ctx = ctx;
  return f;
}

void og_close(og_file *f) {
  if (!f) return;
  gguf_free(f->g);
  if (f->ctx) ggml_free(f->ctx);
  free(f);
}

/* 1: gguf_init_from_file accepts and every tensor's data lies in the file
 * (the bound llama_model_loader adds); 0: gguf rejects; -1: data out of bounds. */
int32_t og_accepts(const char *path) {
  og_file *f = og_open(path);
  if (!f) return 0;
  FILE *fp = fopen(path, "rb");
  int32_t ok = 1;
  if (!fp) ok = 0;
  else {
    fseek(fp, 0, SEEK_END);
    const uint64_t size = (uint64_t)ftell(fp);
    fclose(fp);
    const uint64_t base = gguf_get_data_offset(f->g);
    for (int64_t i = 0; i < gguf_get_n_tensors(f->g); i++) {
      const uint64_t end = base + gguf_get_tensor_offset(f->g, i) + gguf_get_tensor_size(f->g, i);
      if (end > size) ok = -1;
    }
  }
  og_close(f);
  return ok;
}

uint32_t og_version(og_file *f) { return gguf_get_version(f->g); }
int64_t og_alignment(og_file *f) { return (int64_t)gguf_get_alignment(f->g); }
int64_t og_data_offset(og_file *f) { return (int64_t)gguf_get_data_offset(f->g); }
int64_t og_n_kv(og_file *f) { return gguf_get_n_kv(f->g); }
int32_t og_key(og_file *f, int64_t i, char *buf, int32_t len) {
  return og_copy(gguf_get_key(f->g, i), buf, len);
}
int32_t og_kv_type(og_file *f, int64_t i) { return (int32_t)gguf_get_kv_type(f->g, i); }
int32_t og_arr_type(og_file *f, int64_t i) { return (int32_t)gguf_get_arr_type(f->g, i); }
int64_t og_arr_n(og_file *f, int64_t i) { return (int64_t)gguf_get_arr_n(f->g, i); }

static size_t og_type_size(enum gguf_type t) {
  static const size_t sizes[] = {1, 1, 2, 2, 4, 4, 4, 1, 0, 0, 8, 8, 8};
  return (int)t >= 0 && (int)t < 13 ? sizes[t] : 0;
}

/* Raw little-endian bytes of a scalar that is not a string (up to 8). */
int32_t og_val_bytes(og_file *f, int64_t i, uint8_t *out) {
  const enum gguf_type t = gguf_get_kv_type(f->g, i);
  if (t == GGUF_TYPE_STRING || t == GGUF_TYPE_ARRAY) return -1;
  const size_t n = og_type_size(t);
  memcpy(out, gguf_get_val_data(f->g, i), n);
  return (int32_t)n;
}

int32_t og_val_str(og_file *f, int64_t i, char *buf, int32_t len) {
  return og_copy(gguf_get_val_str(f->g, i), buf, len);
}

int32_t og_arr_str(og_file *f, int64_t i, int64_t j, char *buf, int32_t len) {
  return og_copy(gguf_get_arr_str(f->g, i, (size_t)j), buf, len);
}

/* Copies a numeric array's items; returns the byte count (out may be NULL). */
int64_t og_arr_data(og_file *f, int64_t i, uint8_t *out, int64_t cap) {
  const enum gguf_type t = gguf_get_arr_type(f->g, i);
  if (t == GGUF_TYPE_STRING || t == GGUF_TYPE_ARRAY) return -1;
  const int64_t n = (int64_t)(gguf_get_arr_n(f->g, i) * og_type_size(t));
  if (out && cap >= n) memcpy(out, gguf_get_arr_data(f->g, i), (size_t)n);
  return n;
}

int64_t og_n_tensors(og_file *f) { return gguf_get_n_tensors(f->g); }
int32_t og_tensor_name(og_file *f, int64_t i, char *buf, int32_t len) {
  return og_copy(gguf_get_tensor_name(f->g, i), buf, len);
}
int32_t og_tensor_type(og_file *f, int64_t i) { return (int32_t)gguf_get_tensor_type(f->g, i); }
int64_t og_tensor_offset(og_file *f, int64_t i) { return (int64_t)gguf_get_tensor_offset(f->g, i); }
int64_t og_tensor_size(og_file *f, int64_t i) { return (int64_t)gguf_get_tensor_size(f->g, i); }

/* Shape from the ggml tensor llama.cpp built; n_dims as ggml_n_dims reports it. */
int32_t og_tensor_shape(og_file *f, int64_t i, int64_t *ne4) {
  const struct ggml_tensor *t = ggml_get_tensor(f->ctx, gguf_get_tensor_name(f->g, i));
  if (!t) return -1;
  for (int d = 0; d < 4; d++) ne4[d] = t->ne[d];
  return ggml_n_dims(t);
}
