/* FLASH_ATTN_EXT with ggml's semantics and, per SIMD level, the arithmetic
 * of ggml-cpu's kernel (ggml-cpu/ops.cpp, ggml_compute_forward_flash_attn_ext_f16
 * at the oracle revision). ggml picks one of three paths, and each rounds
 * differently, so we pick the same one:
 *
 * - split KV (decode: one query row, F16/F32 K = V, nKv >= 512): the cache
 *   is cut into nth chunks, one per thread; each thread keeps (M, S, VKQ)
 *   per head, and after a barrier the partials are merged in chunk order.
 *   The result depends on the thread count, as in llama.cpp.
 * - tiled (>= 64 query rows, F16/F32 K = V, DV a multiple of the vector
 *   width): online softmax over KV tiles of 64 with Q in f32, K and V
 *   widened to f32, kq and kq·v as fma chains (simd_gemm), the tile's
 *   exponentials and their sum by ggml_vec_soft_max_f32.
 * - one row at a time (everything else, and every quantized cache): Q
 *   converted to K's vec_dot type, kq by K's vec_dot, an online softmax
 *   with libm expf per cell, V accumulated in f16 (ggml_vec_mad_f16) for
 *   an F16 V and in f32 (dequantized rows, ggml_vec_mad_f32) otherwise.
 *
 * Per query row the result does not depend on how rows are grouped into
 * threads or Q tiles (ggml's tile-level skips only drop terms that are zero
 * for every row), so threads take contiguous row ranges.
 *
 * ggml's FMA builds (haswell, the AVX-512 variants) fuse the vector
 * multiply-adds and the partial merge (checked in the objdump of
 * libggml-cpu-haswell.so); the x64 build (our scalar level) has no FMA.
 *
 * The tiled path is in flash_attn_tiled.c, the x86 cell loops in
 * flash_attn_x86.c, and the decode step at GGML_PREC_F32 (not ggml's
 * arithmetic) in flash_attn_f32.c. */
#include "flash_attn.h"
#include "vexp.h"

/* ---- ggml_vec_* helpers, element-wise (their SIMD lanes are independent) ----
 * The FMA levels run the AVX2 bodies (the AVX-512 level too: per element the
 * same fma and the same round-to-nearest f16 conversion as ggml's 16-wide
 * code and its fused leftovers). */
#if defined(LE_X86)
LE_TARGET_AVX2 static void fa_mad_f32_avx2(int64_t n, float *y, const float *x, float v) {
  const __m256 vv = _mm256_set1_ps(v);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    _mm256_storeu_ps(y + i, _mm256_fmadd_ps(_mm256_loadu_ps(x + i), vv, _mm256_loadu_ps(y + i)));
  for (; i < n; i++) y[i] = fmaf(x[i], v, y[i]);
}
#endif

void le_fa_scale_f16(int64_t n, uint16_t *y, float v) {
  for (int64_t i = 0; i < n; i++) y[i] = le_fp32_to_fp16(le_fp16_to_fp32(y[i]) * v);
}
static void fa_mad_f32(int64_t n, float *y, const float *x, float v, int fused) {
#if defined(LE_X86)
  if (fa_use_avx2(fused)) {
    fa_mad_f32_avx2(n, y, x, v);
    return;
  }
#endif
  for (int64_t i = 0; i < n; i++) y[i] = fa_fma(x[i], v, y[i], fused);
}
static void fa_mad_f16(int64_t n, uint16_t *y, const uint16_t *x, float v, int fused) {
#if defined(LE_X86)
  if (fa_use_avx2(fused)) {
    le_fa_mad_f16_avx2(n, y, x, v);
    return;
  }
#endif
  for (int64_t i = 0; i < n; i++)
    y[i] = le_fp32_to_fp16(fa_fma(le_fp16_to_fp32(x[i]), v, le_fp16_to_fp32(y[i]), fused));
}
/* Bytes of one thread's scratch. */
static size_t fa_thread_bytes(const le_node *n) {
  const int64_t DK = n->src[1].ne[0], DV = n->src[2].ne[0];
  /* one-row path: Q converted (<= DK floats), VKQ32, V32 / VKQ16;
   * tiled path (a Q tile of 64 rows): Q, KQ, mask, VKQ, M and S, K and V tiles. */
  const int64_t row = DK + 2 * DV;
  const int64_t tiled = FA_TILE_Q * (DK + 2 * FA_TILE_KV + DV + 2) + FA_TILE_KV * (DK + DV);
  return (size_t)(LE_MAX(row, tiled) + 16) * 4;
}

static int fa_row_dots(const le_node *n);
static int fa32_takes(const le_node *n);

/* Bytes of the split path's partials, all threads (the f32 kernel: every
 * KV stream's, merged after one barrier). */
static size_t fa_partials_bytes(const le_node *n, int n_threads) {
  const int64_t DV = n->src[2].ne[0], neq2 = n->src[0].ne[2];
  const int64_t streams = fa32_takes(n) ? n->src[0].ne[3] : 1;
  return (size_t)(streams * neq2) * (size_t)n_threads * (size_t)(2 + DV) * 4;
}

/* Floats of one thread's split-path scratch: four heads' VKQ16 (2 DV
 * floats; fa_rows_heads), then fa_split_dots's dots of a group of query
 * heads over the thread's cells and the group's Q in f16 (or, for the f32
 * kernel over a Q8_0 cache, every head's quantized Q). */
static size_t fa_dots_floats(const le_node *n, int n_threads) {
  const int64_t DK = n->src[1].ne[0], DV = n->src[2].ne[0], nek1 = n->src[1].ne[1];
  /* the f32 kernel takes every head's scores at once */
  const int f32 = fa32_takes(n);
  const int64_t g = f32 ? n->src[0].ne[2] : n->src[0].ne[2] / n->src[1].ne[2];
  /* a thread's chunk of the split path, or every cell (fa_row_dots) */
  const int64_t chunk = le_flash_attn_split(n) ? (nek1 + n_threads - 1) / n_threads : nek1;
  const int64_t qfloats = f32 && n->src[1].type == LE_TYPE_Q8_0 ? g * LE_FA32_Q8_HEAD_BYTES / 4
                                                                  : (g * DK + 1) / 2;
  return (size_t)(2 * DV + g * chunk + qfloats + 16);
}

size_t le_flash_attn_wsize(const le_node *n, int n_threads) {
  size_t w = fa_thread_bytes(n) * (size_t)n_threads + fa_partials_bytes(n, n_threads);
  if (le_flash_attn_split(n) || fa_row_dots(n))
    w += fa_dots_floats(n, n_threads) * 4 * (size_t)n_threads;
  return w;
}

/* Whether the f32 kernel (flash_attn_f32.c, or flash_attn_q8.c over a
 * Q8_0 cache) takes a split-KV node: its GGML_PREC_F32 param, K and V of
 * one type, one KV stream per query stream (a batch of sequences with a
 * stream each) and heads it has a kernel for. It owns its order, so it
 * splits from fewer cells than ggml does. */
#define FA32_SPLIT_MIN_KV 32
static int fa32_takes(const le_node *n) {
  const le_tensor *q = &n->src[0], *k = &n->src[1], *v = &n->src[2];
  if (n->params[3] != LE_FA_PREC_F32 || k->type != v->type || k->ne[3] != q->ne[3] ||
      v->ne[3] != q->ne[3] || q->ne[2] % k->ne[2] != 0 || k->ne[2] != v->ne[2])
    return 0;
  if (k->type == LE_TYPE_F16) return le_fa32_ok(k->ne[0], v->ne[0], q->ne[2]);
  if (k->type == LE_TYPE_Q8_0) return le_fa32_q8_ok(k->ne[0], v->ne[0], q->ne[2]);
  return 0;
}

/* Whether ggml takes the split-KV path (its result depends on the thread
 * count, so such a node must run on every thread; see threads.c le_solo). */
int le_flash_attn_split(const le_node *n) {
  const le_tensor *q = &n->src[0], *k = &n->src[1], *v = &n->src[2];
  /* ours splits a Q8_0 cache too, and there, having no tiled path, several
   * query rows one at a time (over F16 the tiled path was faster: 1.1B
   * Q4_0 prompt of 128 at depth 2048, Zen 4, 2 threads: 89 against 71 t/s) */
  const int f32 = fa32_takes(n);
  return (q->ne[1] == 1 || (f32 && k->type == LE_TYPE_Q8_0)) && (q->ne[3] == 1 || f32) &&
         (fa_kv_float(k->type) || f32) &&
         k->type == v->type && q->type == LE_TYPE_F32 &&
         k->ne[1] >= (f32 ? FA32_SPLIT_MIN_KV : FA_SPLIT_MIN_KV);
}

/* fa32_rows takes a decode step by head where the K/V heads split evenly. */
int le_fa32_by_head(const le_node *n, int64_t nth) {
  return fa32_takes(n) && n->src[0].ne[1] == 1 && nth > 1 && n->src[1].ne[2] % nth == 0;
}

int le_flash_attn_nth_bound(const le_node *n, int n_threads) {
  return le_flash_attn_split(n) && !le_fa32_by_head(n, n_threads);
}

/* The cell loop's view of query row (iq1, iq2, iq3): its K and V heads,
 * mask row and slope, Q converted to K's vec_dot type (Q_q), and the row's
 * precomputed dots from cell dots0 (or NULL). */
le_fa_row le_fa_row_of(const le_node *n, const fa_shape *s, int64_t iq1, int64_t iq2,
                           int64_t iq3, const void *Q_q, const float *dots, int64_t dots0) {
  const le_tensor *k = &n->src[1], *v = &n->src[2];
  return (le_fa_row){.DK = s->DK,
                     .DV = s->DV,
                     .scale = s->scale,
                     .slope = fa_slope(s, (uint32_t)iq2),
                     .kq_dot = le_get_vec_dot(le_traits(k->type)),
                     .Q_q = Q_q,
                     .kb = fa_at(k, 0, iq2 / s->rk2, iq3 / s->rk3),
                     .vb = fa_at(v, 0, iq2 / s->rv2, iq3 / s->rv3),
                     .kst = (size_t)k->nb[1],
                     .vst = (size_t)v->nb[1],
                     .mp = fa_mask_row(n, iq1, iq2, iq3),
                     .dots = dots,
                     .dots0 = dots0};
}

/* Query row (iq1, iq2, iq3)'s dst row: VKQ / S (0 where S is 0), as ggml
 * normalizes a row. */
static void fa_write_row(const le_node *n, int64_t DV, int64_t iq1, int64_t iq2, int64_t iq3,
                         float *VKQ, float S) {
  fa_scale_f32(DV, VKQ, S == 0.0f ? 0.0f : 1.0f / S);
  memcpy(fa_dst_row(n, iq1, iq2, iq3), VKQ, (size_t)DV * 4);
}

/* ggml_compute_forward_flash_attn_ext_f16_one_chunk for query row ir over
 * cells [ic0, ic1). Writes the normalized row to dst, or (M, S, VKQ) to
 * `partial` when given. `dots` (or NULL): the row's kq dots of those cells,
 * computed beforehand (fa_split_dots). */
static void fa_one_row(const le_node *n, const fa_shape *s, int64_t ir, int64_t ic0, int64_t ic1,
                       float *work, float *partial, const float *dots) {
  const le_tensor *q = &n->src[0], *k = &n->src[1], *v = &n->src[2];
  const int64_t DK = s->DK, DV = s->DV;
  const int64_t iq3 = ir / (s->neq2 * s->N);
  const int64_t iq2 = (ir - iq3 * s->neq2 * s->N) / s->N;
  const int64_t iq1 = ir - iq3 * s->neq2 * s->N - iq2 * s->N;

  const le_type_traits *kt = le_traits(k->type);
  const le_type_traits *qt = le_traits(kt->vec_dot_type);
  const int v_f16 = v->type == LE_TYPE_F16;
  const le_type_traits *vt = le_traits(v->type);

  float *VKQ32 = work;
  float *V32 = VKQ32 + DV;
  uint16_t *VKQ16 = (uint16_t *)(VKQ32 + DV);
  void *Q_q = VKQ32 + 2 * DV;
  if (v_f16) memset(VKQ16, 0, (size_t)DV * 2);
  else memset(VKQ32, 0, (size_t)DV * 4);

  const float *pq = (const float *)fa_at(q, iq1, iq2, iq3);
  if (dots) { /* no dot left to take */
  } else if (kt->vec_dot_type == LE_TYPE_F32) memcpy(Q_q, pq, (size_t)DK * 4);
  else if (kt->vec_dot_type == LE_TYPE_F16) le_fp32_to_fp16_row(pq, Q_q, DK);
  else qt->from_float_act(pq, Q_q, DK);

  float S = 0.0f, M = -INFINITY;
  const le_fa_row row = le_fa_row_of(n, s, iq1, iq2, iq3, Q_q, dots, ic0);
  const le_fa_cells_fn cells = v_f16 && fa_use_avx2(s->fused) ? le_fa_cells_f16(DV) : NULL;
  if (cells) {
    cells(&row, ic0, ic1, VKQ16, &S, &M);
    ic0 = ic1; /* done */
  }
  for (int64_t ic = ic0; ic < ic1; ic++) {
    const float mv = row.mp ? row.slope * le_fp16_to_fp32(row.mp[ic]) : 0.0f;
    if (mv == -INFINITY) continue;
    float sc = le_fa_dot(&row, ic);
    sc = sc * s->scale;
    sc += mv;
    const float Mold = M;
    float ms = 1.0f, vs = 1.0f;
    const char *v_data = row.vb + ic * row.vst;
    if (v_f16) {
      if (sc > M) {
        M = sc;
        ms = expf(Mold - M);
        le_fa_scale_f16(DV, VKQ16, ms);
      } else {
        vs = expf(sc - M);
      }
      fa_mad_f16(DV, VKQ16, (const uint16_t *)v_data, vs, s->fused);
    } else {
      if (sc > M) {
        M = sc;
        ms = expf(Mold - M);
        fa_scale_f32(DV, VKQ32, ms);
      } else {
        vs = expf(sc - M);
      }
      if (v->type == LE_TYPE_F32) {
        fa_mad_f32(DV, VKQ32, (const float *)v_data, vs, s->fused);
      } else {
        vt->to_float(v_data, V32, DV);
        fa_mad_f32(DV, VKQ32, V32, vs, s->fused);
      }
    }
    /* not contracted in ggml's builds: the product and the sum are rounded */
    S = S * ms + vs;
  }
  if (v_f16)
    for (int64_t d = 0; d < DV; d++) VKQ32[d] = le_fp16_to_fp32(VKQ16[d]);

  if (partial) {
    partial[0] = M;
    partial[1] = S;
    memcpy(partial + 2, VKQ32, (size_t)DV * 4);
    return;
  }
  fa_write_row(n, DV, iq1, iq2, iq3, VKQ32, S);
}

/* The split path's kq dots by a row kernel (le_f16_rows: vec_dot_f16's
 * chain per output, so the same bits as kq_dot), or NULL. With it the
 * query heads that share a K head take their dots together: each K row of
 * the thread's cells is read once for four heads, and 16 rows' final
 * reductions run as one, instead of one dot call per cell and head
 * between the online softmax's steps. */
static le_f16_rows_fn fa_dots_fn(const le_node *n, const fa_shape *s) {
  if (n->src[1].type != LE_TYPE_F16 || s->rk3 != 1) return NULL;
  return le_f16_rows(s->DK, 1, s->rk2 % 4 == 0);
}

/* Whether a one-row decode (one query row, fewer cells than the split
 * path takes, or one KV stream per sequence: ggml's per-row path) takes
 * its kq dots beforehand by the row kernel, as the split path does: the
 * same chain per dot, so the same bits, a K head's query heads together
 * instead of one dot call per cell. */
static int fa_row_dots(const le_node *n) {
  const le_tensor *q = &n->src[0], *k = &n->src[1];
  return q->ne[1] == 1 && k->ne[3] == q->ne[3] && q->type == LE_TYPE_F32 &&
         k->type == LE_TYPE_F16 && q->ne[2] % k->ne[2] == 0 && !le_flash_attn_split(n) &&
         le_f16_rows(k->ne[0], 1, (q->ne[2] / k->ne[2]) % 4 == 0) != NULL;
}

/* dots[j * (ic1 - ic0) + ic - ic0]: the kq dot of query head h0 + j
 * (j < rk2, the heads of one K head) of stream iq3 and cell ic, Q
 * converted to f16 as fa_one_row converts it. */
static void fa_split_dots(const le_node *n, const fa_shape *s, le_f16_rows_fn rows, int64_t h0,
                          int64_t iq3, int64_t ic0, int64_t ic1, float *dots) {
  const le_tensor *q = &n->src[0], *k = &n->src[1];
  const int64_t nc = ic1 - ic0, g = s->rk2, DK = s->DK;
  uint16_t *Qh = (uint16_t *)(dots + g * nc);
  for (int64_t j = 0; j < g; j++)
    le_fp32_to_fp16_row((const float *)fa_at(q, 0, h0 + j, iq3), Qh + j * DK, DK);
  const char *kb = fa_at(k, ic0, h0 / g, iq3);
  for (int64_t j = 0; j < g;) {
    const int ny = g - j >= 4 ? 4 : 1;
    const void *ys[4];
    float *outs[4];
    for (int t = 0; t < ny; t++) ys[t] = Qh + (j + t) * DK, outs[t] = dots + (j + t) * nc;
    rows(DK, nc, kb, (size_t)k->nb[1], ny, ys, outs);
    j += ny;
  }
}

/* fa_one_row's partials (pt[j]: M, S, VKQ) of query heads h0 .. h0+nh-1,
 * which share one K and V head, over cells [ic0, ic1), their dots
 * precomputed (dots + j * (ic1 - ic0)), by a kernel that takes the heads
 * together (le_fa_cells_f16_heads). vkq: room for nh f16 rows of DV. */
static void fa_rows_heads(const le_node *n, const fa_shape *s, le_fa_heads_fn heads, int nh,
                          int64_t h0, int64_t iq3, int64_t ic0, int64_t ic1, const float *dots,
                          float *const *pt, uint16_t *vkq) {
  le_fa_row r[4] = {{0}};
  uint16_t *V16[4] = {0};
  float S[4], M[4];
  for (int j = 0; j < nh; j++) {
    r[j] = le_fa_row_of(n, s, 0, h0 + j, iq3, NULL, dots + j * (ic1 - ic0), ic0);
    V16[j] = vkq + j * s->DV;
    memset(V16[j], 0, (size_t)s->DV * 2);
    S[j] = 0.0f, M[j] = -INFINITY;
  }
  heads(r, ic0, ic1, V16, S, M);
  for (int j = 0; j < nh; j++) {
    pt[j][0] = M[j], pt[j][1] = S[j];
    for (int64_t d = 0; d < s->DV; d++) pt[j][2 + d] = le_fp16_to_fp32(V16[j][d]);
  }
}

/* fa_one_row of query heads h0 .. h0+nh-1 (one query row, every cell) by
 * fa_rows_heads: the heads' chains overlap, and each is fa_one_row's (the
 * same cell kernel, the same normalization), so the same bits. */
static void fa_heads_rows(const le_node *n, const fa_shape *s, le_fa_heads_fn heads, int nh,
                          int64_t h0, int64_t iq3, int64_t nc, const float *dots, float *work,
                          uint16_t *vkq) {
  float *pt[4];
  for (int t = 0; t < nh; t++) pt[t] = work + t * (2 + s->DV);
  fa_rows_heads(n, s, heads, nh, h0, iq3, 0, nc, dots, pt, vkq);
  for (int t = 0; t < nh; t++) fa_write_row(n, s->DV, 0, h0 + t, iq3, pt[t] + 2, pt[t][1]);
}

/* fa_one_row of query heads h0 .. h0+nh-1 of token iq1 (stream iq3) over a
 * Q8_0 V, by fa_cells_q8_heads (each head's operations are fa_one_row's, so
 * the same bits); work: room for nh rows of DV floats and quantized Q. */
static void fa_heads_rows_q8(const le_node *n, const fa_shape *s, le_fa_heads32_fn heads, int nh,
                             int64_t h0, int64_t iq1, int64_t iq3, float *work) {
  const le_type_traits *qt = le_traits(le_traits(n->src[1].type)->vec_dot_type);
  le_fa_row r[4];
  float *VKQ[4], S[4], M[4];
  char *qq = (char *)(work + nh * s->DV);
  for (int t = 0; t < nh; t++) {
    void *Q_q = qq + (size_t)t * (size_t)(s->DK * 2);
    qt->from_float_act((const float *)fa_at(&n->src[0], iq1, h0 + t, iq3), Q_q, s->DK);
    r[t] = le_fa_row_of(n, s, iq1, h0 + t, iq3, Q_q, NULL, 0);
    VKQ[t] = work + t * s->DV;
    memset(VKQ[t], 0, (size_t)s->DV * 4);
    S[t] = 0.0f, M[t] = -INFINITY;
  }
  heads(r, 0, le_fa_live_cells(n, s, iq1, iq3), VKQ, S, M);
  for (int t = 0; t < nh; t++) fa_write_row(n, s->DV, iq1, h0 + t, iq3, VKQ[t], S[t]);
}

/* ggml_flash_attn_ext_reduce_partials of one head: its np partials
 * (M, S, VKQ; psize floats apart) merged in order into its output row. A
 * thread whose chunk held no cells wrote (-inf, 0) partials, which S = 0
 * skips as it skips a wholly masked one. */
void le_fa_merge(const le_node *n, const fa_shape *s, const float *pt0, int64_t np,
                     int64_t iq1, int64_t h, int64_t iq3, float *work) {
  const int64_t DV = s->DV, psize = 2 + DV;
  float Mf = -INFINITY, Sf = 0.0f;
  float *VKQ = work;
  memset(VKQ, 0, (size_t)DV * 4);
  for (int64_t c = 0; c < np; c++) {
    const float *pt = pt0 + c * psize;
    const float Mc = pt[0], Sc = pt[1];
    if (Sc == 0.0f) continue;
    const float Mn = fmaxf(Mf, Mc);
    const float so = expf(Mf - Mn), sn = expf(Mc - Mn);
    for (int64_t d = 0; d < DV; d++) VKQ[d] = fa_fma(VKQ[d], so, pt[2 + d] * sn, s->fused);
    Sf = fa_fma(Sf, so, Sc * sn, s->fused);
    Mf = Mn;
  }
  if (Sf != 0.0f) fa_scale_f32(DV, VKQ, 1.0f / Sf);
  memcpy(fa_dst_row(n, iq1, h, iq3), VKQ, (size_t)DV * 4);
}

/* The merges of query row iq1 of stream iq3: heads ith, ith + nth, ... */
void le_fa_reduce(const le_node *n, const fa_shape *s, const le_compute_params *p,
                      const float *partials, int64_t iq1, int64_t iq3, float *work) {
  const int64_t nth = p->nth, psize = 2 + s->DV;
  for (int64_t h = p->ith; h < s->neq2; h += nth)
    le_fa_merge(n, s, partials + h * nth * psize, nth, iq1, h, iq3, work);
}

/* Cells of query row iq1 of stream iq3 up to its last one the mask leaves
 * (-inf in f16 is 0xfc00): a causal prompt row's later cells add nothing,
 * nor the cells past a sequence's end in a batch's window (the window is
 * padded to 256 cells, so a decode at depth 20 has 236 such cells). Every
 * cell loop skips a masked cell before its dot, as ggml's does, so
 * stopping at the last live cell changes no bit. Only for a mask shared by
 * every head. */
int64_t le_fa_live_cells(const le_node *n, const fa_shape *s, int64_t iq1, int64_t iq3) {
  const le_tensor *m = n->n_src > 3 && n->src[3].data ? &n->src[3] : NULL;
  int64_t len = s->nek1;
  if (!m || m->ne[2] != 1) return len;
  const uint16_t *mp = fa_mask_row(n, iq1, 0, iq3);
  while (len > 0 && mp[len - 1] == 0xfc00) len--;
  return len;
}

void le_flash_attn(const le_node *n, const le_compute_params *p) {
  const fa_shape s = fa_shape_of(n);
  const le_tensor *k = &n->src[1], *v = &n->src[2];
  const size_t tb = fa_thread_bytes(n);
  float *work = (float *)((char *)p->wdata + tb * (size_t)p->ith);

  if (le_flash_attn_split(n)) {
    const int64_t nth = p->nth, chunk = (s.nek1 + nth - 1) / nth, psize = 2 + s.DV;
    float *partials = (float *)((char *)p->wdata + tb * (size_t)nth);
    /* ggml's chunks (the merge's bits depend on them), each cut at the
     * row's last live cell: a chunk past it adds nothing either way */
    const int64_t ic0 = p->ith * chunk, ic1 = LE_MIN(ic0 + chunk, le_fa_live_cells(n, &s, 0, 0));
    const le_f16_rows_fn rows = fa_dots_fn(n, &s);
    float *scratch = (float *)((char *)partials + fa_partials_bytes(n, p->nth)) +
                     fa_dots_floats(n, p->nth) * (size_t)p->ith;
    uint16_t *vkq = (uint16_t *)scratch;
    float *dots = scratch + 2 * s.DV;
    /* the heads of one K/V head together where a kernel takes them so */
    int gh = 0;
    const le_fa_heads_fn heads = rows && v->type == LE_TYPE_F16 && s.rv2 == s.rk2 &&
                                         fa_use_avx2(s.fused)
                                     ? le_fa_cells_f16_heads(s.DV, &gh)
                                     : NULL;
    const int grouped = heads && s.rk2 % gh == 0;
    /* a thread past the cells: partials that add nothing; the f32 kernel:
     * every head at once (flash_attn_f32.c) */
    if (fa32_takes(n)) {
      le_fa32_rows(n, &s, p, dots, partials, work);
      return;
    }
    const int none = ic0 >= ic1;
    for (int64_t h = 0; h < s.neq2; h++) {
      float *pt = partials + (h * nth + p->ith) * psize;
      if (none) {
        pt[0] = -INFINITY;
        pt[1] = 0.0f;
        continue;
      }
      if (rows && h % s.rk2 == 0) fa_split_dots(n, &s, rows, h, 0, ic0, ic1, dots);
      const float *hd = rows ? dots + (h % s.rk2) * (ic1 - ic0) : NULL;
      if (!grouped) {
        fa_one_row(n, &s, h, ic0, ic1, work, pt, hd);
      } else if (h % gh == 0) {
        float *pts[4];
        for (int j = 0; j < gh; j++) pts[j] = partials + ((h + j) * nth + p->ith) * psize;
        fa_rows_heads(n, &s, heads, gh, h, 0, ic0, ic1, hd, pts, vkq);
      }
    }
    if (nth > 1) le_barrier(p->ctx);
    le_fa_reduce(n, &s, p, partials, 0, 0, work);
    return;
  }

  const int epr = fa_f32_epr();
  const int tiled = s.N >= FA_TILE_Q && fa_kv_float(k->type) && k->type == v->type &&
                    (epr == 0 || s.DV % epr == 0);
  const int64_t nr = s.N * s.neq2 * s.neq3;
  const int64_t dr = (nr + p->nth - 1) / p->nth;
  const int64_t r0 = LE_MIN(dr * p->ith, nr), r1 = LE_MIN(r0 + dr, nr);
  if (!tiled) {
    /* one query row: ir is the head; a K head's dots at its first head */
    const le_f16_rows_fn rows = fa_row_dots(n) ? fa_dots_fn(n, &s) : NULL;
    float *dots = (float *)((char *)p->wdata + tb * (size_t)p->nth +
                            fa_partials_bytes(n, p->nth)) +
                  fa_dots_floats(n, p->nth) * (size_t)p->ith + 2 * s.DV;
    int gh = 0;
    const le_fa_heads_fn heads = rows && v->type == LE_TYPE_F16 && s.rv2 == s.rk2 &&
                                         fa_use_avx2(s.fused)
                                     ? le_fa_cells_f16_heads(s.DV, &gh)
                                     : NULL;
    /* over a Q8_0 cache, a K/V head's query heads together: the units are
     * (stream, group of heads, token), split over the threads as the rows */
    int gq = 0;
    const le_fa_heads32_fn q8heads = v->type == LE_TYPE_Q8_0 && k->type == LE_TYPE_Q8_0 &&
                                             s.rv2 == s.rk2 && fa_use_avx2(s.fused)
                                         ? le_fa_cells_q8_heads(s.DV, &gq)
                                         : NULL;
    if (q8heads && s.rk2 % gq == 0) {
      const int64_t per3 = s.N * (s.neq2 / gq), nu = per3 * s.neq3;
      const int64_t du = (nu + p->nth - 1) / p->nth;
      const int64_t u0 = LE_MIN(du * p->ith, nu), u1 = LE_MIN(u0 + du, nu);
      for (int64_t u = u0; u < u1; u++) { /* the head group outer: its K/V rows stay warm */
        const int64_t w = u % per3;
        fa_heads_rows_q8(n, &s, q8heads, gq, w / s.N * gq, w % s.N, u / per3, work);
      }
      return;
    }
    /* a row's cells [0, nc): its stream's live ones where only a token per
     * stream (the dots' rows are nc apart), found once per stream */
    int64_t nc = s.nek1, nc3 = -1;
    for (int64_t ir = r0; ir < r1;) {
      const int64_t j = ir % s.rk2;
      const int64_t h = ir % s.neq2, iq3 = ir / s.neq2; /* one token: rows are (head, stream) */
      if (rows && iq3 != nc3) nc = le_fa_live_cells(n, &s, 0, nc3 = iq3);
      if (rows && (ir == r0 || j == 0)) fa_split_dots(n, &s, rows, h - j, iq3, 0, nc, dots);
      if (heads && s.rk2 % gh == 0 && ir % gh == 0 && ir + gh <= r1) {
        fa_heads_rows(n, &s, heads, gh, h, iq3, nc, dots + j * nc, work,
                      (uint16_t *)(dots - 2 * s.DV));
        ir += gh;
        continue;
      }
      fa_one_row(n, &s, ir, 0, nc, work, NULL, rows ? dots + j * nc : NULL);
      ir++;
    }
    return;
  }
  /* blocks of up to 64 consecutive tokens of one head */
  for (int64_t ir = r0; ir < r1;) {
    const int64_t iq1 = ir % s.N;
    const int64_t nr = LE_MIN((int64_t)FA_TILE_Q, LE_MIN(r1 - ir, s.N - iq1));
    le_fa_tiled_block(n, &s, ir, nr, work);
    ir += nr;
  }
}
