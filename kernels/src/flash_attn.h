/* Internal to flash_attn.c and flash_attn_x86.c. */
#ifndef LE_FLASH_ATTN_H
#define LE_FLASH_ATTN_H
#include "le_internal.h"
#include "q_common.h"

/* ---- The op's shape and addressing, shared by flash_attn*.c ---- */
#include <math.h>
#include <string.h>

#define FA_TILE_Q 64 /* GGML_FA_TILE_Q: the tiled path needs this many query rows */
#define FA_TILE_KV 64 /* GGML_FA_TILE_KV */
#define FA_SPLIT_MIN_KV 512

static inline float fa_param(const le_node *n, int slot) {
  float f;
  memcpy(&f, &n->params[slot], 4);
  return f;
}

/* a*b + c, fused where ggml's build contracts it. */
static inline float fa_fma(float a, float b, float c, int fused) {
  return fused ? fmaf(a, b, c) : a * b + c;
}

static inline const char *fa_at(const le_tensor *t, int64_t i1, int64_t i2, int64_t i3) {
  return (const char *)(uintptr_t)t->data + i1 * t->nb[1] + i2 * t->nb[2] + i3 * t->nb[3];
}

static inline int fa_kv_float(int32_t type) { return type == LE_TYPE_F16 || type == LE_TYPE_F32; }

/* GGML_F32_EPR at our level (the tiled path needs DV % EPR == 0); 0: no SIMD (x64). */
static inline int fa_f32_epr(void) {
  const int l = le_simd();
  return l == LE_SIMD_AVX512 ? 16 : l == LE_SIMD_AVX2 ? 8 : l == LE_SIMD_NEON ? 4 : 0;
}

typedef struct fa_shape {
  int64_t DK, DV, N, nek1, neq2, neq3;
  int64_t rk2, rk3, rv2, rv3;
  float scale, max_bias, m0, m1;
  uint32_t n_head_log2;
  int fused;
} fa_shape;

static inline fa_shape fa_shape_of(const le_node *n) {
  const le_tensor *q = &n->src[0], *k = &n->src[1], *v = &n->src[2];
  fa_shape s;
  s.DK = k->ne[0], s.DV = v->ne[0], s.N = q->ne[1], s.nek1 = k->ne[1];
  s.neq2 = q->ne[2], s.neq3 = q->ne[3];
  s.rk2 = q->ne[2] / k->ne[2], s.rk3 = q->ne[3] / k->ne[3];
  s.rv2 = q->ne[2] / v->ne[2], s.rv3 = q->ne[3] / v->ne[3];
  s.scale = fa_param(n, 0), s.max_bias = fa_param(n, 1);
  const uint32_t n_head = (uint32_t)q->ne[2];
  s.n_head_log2 = 1u << (uint32_t)floor(log2((double)n_head));
  s.m0 = powf(2.0f, -(s.max_bias) / s.n_head_log2);
  s.m1 = powf(2.0f, -(s.max_bias / 2.0f) / s.n_head_log2);
  s.fused = le_simd() != LE_SIMD_SCALAR;
  return s;
}

static inline float fa_slope(const fa_shape *s, uint32_t h) {
  if (!(s->max_bias > 0.0f)) return 1.0f;
  return h < s->n_head_log2 ? powf(s->m0, h + 1) : powf(s->m1, 2 * (h - s->n_head_log2) + 1);
}

static inline const uint16_t *fa_mask_row(const le_node *n, int64_t iq1, int64_t iq2,
                                          int64_t iq3) {
  const le_tensor *m = n->n_src > 3 && n->src[3].data ? &n->src[3] : NULL;
  return m ? (const uint16_t *)fa_at(m, iq1, iq2 % m->ne[2], iq3 % m->ne[3]) : NULL;
}

/* dst row of query (iq1, iq2, iq3): ggml's permute(0, 2, 1, 3) output. */
static inline float *fa_dst_row(const le_node *n, int64_t iq1, int64_t iq2, int64_t iq3) {
  const le_tensor *d = &n->dst;
  return (float *)((char *)(uintptr_t)d->data +
                   (iq3 * d->ne[2] * d->ne[1] + iq2 + iq1 * d->ne[1]) * d->nb[1]);
}

/* Whether the FMA levels' AVX2 bodies run (flash_attn.c's ggml_vec_* helpers). */
static inline int fa_use_avx2(int fused) {
#if defined(LE_X86)
  return fused && (le_simd() == LE_SIMD_AVX2 || le_simd() == LE_SIMD_AVX512);
#else
  (void)fused;
  return 0;
#endif
}

static inline void fa_scale_f32(int64_t n, float *y, float v) {
  for (int64_t i = 0; i < n; i++) y[i] *= v;
}

/* y = fp16(f32(y) * v) element by element (ggml_vec_scale_f16). */
void le_fa_scale_f16(int64_t n, uint16_t *y, float v);

/* What the cell loop of one query row reads: the kq dot of DK elements
 * against Q_q, K and V rows kst and vst bytes apart from kb and vb (V: DV
 * f16 values), the mask row mp (NULL: none) times slope, the KQ scale.
 * Where dots is given, dots[ic - dots0] is cell ic's kq dot, computed
 * beforehand (the same chain; le_flash_attn's split path). */
typedef struct {
  int64_t DK, DV;
  float scale, slope;
  le_vec_dot_fn kq_dot;
  const void *Q_q;
  const char *kb, *vb;
  size_t kst, vst;
  const uint16_t *mp;
  const float *dots;
  int64_t dots0;
} le_fa_row;

/* Cell ic's kq dot: precomputed, or by kq_dot. */
static inline float le_fa_dot(const le_fa_row *r, int64_t ic) {
  if (r->dots) return r->dots[ic - r->dots0];
  float sc;
  r->kq_dot(r->DK, &sc, r->kb + ic * r->kst, r->Q_q);
  return sc;
}

/* Cells [ic0, ic1) of a row over an F16 V cache: online softmax (*pS, *pM)
 * and the f16 accumulator VKQ16. */
typedef void (*le_fa_cells_fn)(const le_fa_row *r, int64_t ic0, int64_t ic1, uint16_t *VKQ16,
                               float *pS, float *pM);

/* The cell loop for heads of DV values at the current SIMD level, or NULL. */
le_fa_cells_fn le_fa_cells_f16(int64_t DV);

/* The same for *nh query heads at once (r[h], VKQ16[h], pS[h], pM[h]) that
 * share one V head, their dots precomputed; NULL where there is none. */
typedef void (*le_fa_heads_fn)(const le_fa_row *r, int64_t ic0, int64_t ic1,
                               uint16_t *const *VKQ16, float *pS, float *pM);
le_fa_heads_fn le_fa_cells_f16_heads(int64_t DV, int *nh);

/* The same over a Q8_0 V head with f32 accumulators VKQ32[h] (ggml's one-row
 * path over a quantized V), the dots by each row's kq_dot. */
typedef void (*le_fa_heads32_fn)(const le_fa_row *r, int64_t ic0, int64_t ic1,
                                 float *const *VKQ32, float *pS, float *pM);
le_fa_heads32_fn le_fa_cells_q8_heads(int64_t DV, int *nh);

/* The tiled path's products for query rows rows[0..n) of a tile of 64
 * cells, four rows at a time (flash_attn_x86.c; 0: not done, take them
 * one by one): KQ[t][tk] = fma chain over dk of Kt[dk][tk] * Q[t][dk] from
 * 0, and VKQ[t][d] = fma chain over tk of Vt[tk][d] * W[t][tk] from
 * VKQ[t][d] (rows of KQ and W 64 apart, of Q DK, of VKQ DV). */
int le_fa_kq_rows(int64_t DK, const float *Kt, const float *Q, float *KQ, const int *rows, int n);
int le_fa_vacc_rows(int64_t DV, const float *Vt, const float *W, float *VKQ, const int *rows,
                    int n);

/* GGML_PREC_F32 in FLASH_ATTN_EXT's params[3] (ggml_flash_attn_ext_set_prec):
 * the decode step may take flash_attn_f32.c's kernel. */
#define LE_FA_PREC_F32 10
#define LE_FA32_MAX_HEADS 128

/* Whether flash_attn_f32.c has a kernel for heads of DK (K) and DV (V)
 * values and `heads` query heads at the current SIMD level. */
int le_fa32_ok(int64_t DK, int64_t DV, int64_t heads);

/* flash_attn_f32.c: the partials pt[j] (M, S, unnormalized VKQ in f32) of
 * query heads r[0..nh) (f32 query rows q[j]; each g consecutive heads share
 * one K/V head) over cells [ic0, ic1); scores: room for nh * (ic1 - ic0)
 * floats. */
void le_fa32_heads(const le_fa_row *r, int nh, int g, int64_t ic0, int64_t ic1,
                   const float *const *q, float *scores, float *const *pt);

/* flash_attn.c's pieces the f32 path's rows (flash_attn_f32.c) share:
 * the cell loop's view of query row (iq1, iq2, iq3); a row's cells up to
 * its last live one; one head's np partials merged into its output row
 * (ggml_flash_attn_ext_reduce_partials), and every head's of a row split
 * over the threads (heads ith, ith + nth, ...). */
le_fa_row le_fa_row_of(const le_node *n, const fa_shape *s, int64_t iq1, int64_t iq2, int64_t iq3,
                       const void *Q_q, const float *dots, int64_t dots0);
int64_t le_fa_live_cells(const le_node *n, const fa_shape *s, int64_t iq1, int64_t iq3);
void le_fa_merge(const le_node *n, const fa_shape *s, const float *pt0, int64_t np, int64_t iq1,
                 int64_t h, int64_t iq3, float *work);
void le_fa_reduce(const le_node *n, const fa_shape *s, const le_compute_params *p,
                  const float *partials, int64_t iq1, int64_t iq3, float *work);
/* Whether the f32 kernel takes a decode step by K/V head on nth threads. */
int le_fa32_by_head(const le_node *n, int64_t nth);
/* The f32 kernel's split-KV node (flash_attn_f32.c): by K/V head, or its
 * rows one at a time with the cells split over the threads; dots: this
 * thread's scratch, partials: every thread's, work: DV floats. */
void le_fa32_rows(const le_node *n, const fa_shape *s, const le_compute_params *p, float *dots,
                  float *partials, float *work);

/* flash_attn_f32.c's last steps, shared with flash_attn_q8.c: each head's
 * scores s[j] (nc cells from ic0) scaled, masked and exponentiated in place
 * (the chunk's maximum and sum into pt[j][0..1]), and its VKQ zeroed. */
void le_fa32_softmax(const le_fa_row *r, int nh, int64_t ic0, int64_t nc, float *const *s,
                     float *const *pt);
/* Whether any of p[j][0..m) (j < nh) is 0 (AVX-512). */
int le_fa32_any_zero(const float *const *p, int nh, int64_t m);
/* The V pass at AVX-512: out[j] += sum over cells c < m of pc[j][c] * V row
 * c (at vb + c * vst: f16, or f32 with wide), rows `ahead` cells on
 * prefetched (f16 only). */
void le_fa32_vpass(int64_t DV, int wide, const char *vb, size_t vst, int64_t m, int64_t ahead,
                   const float *const *pc, int nh, float *const *out);

/* flash_attn_q8.c: le_fa32_heads over a Q8_0 cache (K and V), at AVX-512
 * with VNNI; le_fa32_q8_ok says where. qq: room for nh query heads of
 * LE_FA32_Q8_HEAD_BYTES, 4-byte aligned. */
#define LE_FA32_Q8_HEAD_BYTES 320
int le_fa32_q8_ok(int64_t DK, int64_t DV, int64_t heads);
void le_fa32_q8_heads(const le_fa_row *r, int nh, int g, int64_t ic0, int64_t ic1,
                      const float *const *q, float *scores, void *qq, float *const *pt);

#if defined(LE_X86)
/* A Q8_0 block's 32 values, d times each int8 (exact in f32, as ggml's
 * dequantize_row_q8_0), as two vectors of 16 (AVX-512) or four of 8. */
LE_TARGET_AVX512 static inline __attribute__((always_inline)) void
fa_q8_widen16(const le_block_q8_0 *b, __m512 v[2]) {
  const __m512 d = _mm512_set1_ps(_cvtsh_ss(b->d));
  for (int t = 0; t < 2; t++) {
    const __m128i q = _mm_loadu_si128((const __m128i *)(const void *)(b->qs + 16 * t));
    v[t] = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(q)), d);
  }
}
LE_TARGET_AVX2 static inline __attribute__((always_inline)) void
fa_q8_widen8(const le_block_q8_0 *b, __m256 v[4]) {
  const __m256 d = _mm256_set1_ps(_cvtsh_ss(b->d));
  for (int t = 0; t < 4; t++) {
    const __m128i q = _mm_loadl_epi64((const __m128i *)(const void *)(b->qs + 8 * t));
    v[t] = _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(q)), d);
  }
}

/* Software prefetch spread through a compute loop, one line per step: the
 * next block's K (or V a few cells on) arrives while this one is computed.
 * Measured on Zen 4 at depth 2048 (44 MB of K and V, out of cache): the
 * head-strided reads (16 cells of 128 B, 512 B apart) are not followed by
 * the hardware prefetcher, so each burst waited on memory and a thread
 * read ~4 GB/s; a burst of prefetches at the block's start was no better
 * (it stalls on the miss buffers), one line per few fmas hides the memory. */
typedef struct {
  const char *p; /* the current row */
  size_t st;     /* bytes from row to row */
  int per;       /* lines per row */
  int line;      /* the next line of the current row */
  int left;      /* lines still to prefetch */
} fa32_pf;

static inline fa32_pf fa32_pf_rows(const char *p, size_t st, int64_t row_bytes, int64_t rows) {
  /* a row that is not a whole number of lines may straddle one more */
  const int per = (int)((row_bytes + 63) / 64) + (row_bytes % 64 != 0);
  return (fa32_pf){.p = p, .st = st, .per = per, .line = 0, .left = rows > 0 ? (int)rows * per : 0};
}

static inline __attribute__((always_inline)) void fa32_pf_next(fa32_pf *f) {
  if (f->left <= 0) return;
  _mm_prefetch(f->p + (size_t)f->line * 64, _MM_HINT_T0);
  f->left--;
  if (++f->line == f->per) f->line = 0, f->p += f->st;
}

#endif

/* flash_attn_tiled.c: query rows [ir, ir + nr) of one head (consecutive
 * tokens, nr <= 64) by ggml's tiled path. */
void le_fa_tiled_block(const le_node *n, const fa_shape *s, int64_t ir, int64_t nr, float *work);

#if defined(LE_X86)
/* The tiled path's products of one query row, 8 lanes wide (flash_attn_x86.c). */
void le_fa_kq_tile_avx2(int64_t DK, const float *Kt, const float *q, float *kq);
void le_fa_vacc_tile_avx2(int64_t DV, const float *Vt, const float *w, float *acc);
/* y = fp16(fma(x, v, y)), 8 at a time (flash_attn_x86.c). */
void le_fa_mad_f16_avx2(int64_t n, uint16_t *y, const uint16_t *x, float v);
#endif
#endif
