/* MUL_MAT: dst[i01, i11, i12, i13] = dot(src0 row i01 of matrix (i12/r2, i13/r3),
 * src1 row (i11, i12, i13)), with ggml's conversion of src1 to the weight
 * type's vec_dot_type first (f16 rounding, q8_0 quantization).
 *
 * Phase 1 converts src1 rows into the context scratch, split across threads
 * and followed by a barrier, or for a small src1 (decode) by every thread
 * into its own part of the scratch with no barrier (le_sched.h); phase 2
 * hands out (matrix, row block) units and runs, for each unit, the AVX2
 * panel kernels (sgemm_avx2.c: F16/F32 in tinyBLAS order, Q8_0 in its
 * vec_dot order, several columns at once), a type's tiles, or one vec_dot
 * per output. Every output element is computed by one fixed chain wherever
 * it sits, so results do not depend on the thread count or the blocking. */
#include "le_sched.h"
#include "q_common.h"

#define BLK_ROWS 16
#define PANEL_ROWS 48 /* a multiple of the panels' 1- and 3-row tiles */
#define BLK_COLS 8
/* Base blocks per unit of a matrix-vector product (64 rows, ggml's chunk). */
#define MV_BLOCKS 4
#define BLK_COLS_TILE 16
#ifndef PF_ROWS
#define PF_ROWS 32
#endif

/* Whether a matrix-vector product prefetches each group of rows PF_ROWS
 * ahead in one burst. It paid on the AVX2 machine it was tuned on (Zen 3);
 * on Zen 4 at the AVX-512 level the bursts stall the loads (F16 weights
 * from DRAM, one thread: 15.8 GB/s with them, 27.8 without; two threads
 * 26.4 vs 35.0; Q8_0 tiles 16.7 vs 19.8), so there the hardware
 * prefetcher alone streams the rows. (The repacked Q4_0 gemv spreads its
 * prefetches over the blocks instead, which helps on both.) */
static int prefetch_bursts(void) { return le_simd() != LE_SIMD_AVX512; }

static int src1_direct(const le_node *n, const le_type_traits *vt) {
  return vt->type == LE_TYPE_F32 && n->src[1].nb[0] == 4;
}

/* ggml_is_contiguous: dims of size 1 may have any stride. */
static int contiguous(const le_tensor *t, size_t esize) {
  int64_t next = (int64_t)esize;
  for (int i = 0; i < 4; i++) {
    if (t->ne[i] != 1 && t->nb[i] != next) return 0;
    next *= t->ne[i];
  }
  return 1;
}

/* Whether this node takes the tinyBLAS path for F32/F16 weights: exactly
 * where llama.cpp calls llamafile_sgemm and tinyBLAS accepts: N >= 2,
 * K % KN == 0 (16 on AVX-512, 8 on AVX2), M % 4 == 0, and for F32 a
 * contiguous src1 (F16 converts src1 first, so any layout). */
static int tinyblas_float(const le_node *n, const le_type_traits *t) {
  const le_tensor *a = &n->src[0], *b = &n->src[1];
  if (t->type != LE_TYPE_F32 && t->type != LE_TYPE_F16) return 0;
  const int kn = le_tinyblas_kn();
  return kn && b->ne[1] >= 2 && a->ne[0] % kn == 0 && a->ne[1] % 4 == 0 &&
         (t->type == LE_TYPE_F16 || contiguous(b, 4)) && n->dst.nb[1] % 4 == 0;
}

/* AVX2 panel kernels (sgemm_avx2.c) take these nodes: F32/F16 weights on
 * the tinyBLAS path (F16: src1 widened to f32 in the scratch, through f16
 * as ggml rounds it; F32: src1 read in place) and Q8_0 weights with N >= 2
 * (src1 quantized as usual plus its block scales as floats). */
int le_mm_panel(const le_node *n) {
  const le_type_traits *t = le_traits(n->src[0].type);
  /* a repacked weight has its own kernels (repack*.c), reading src1 as blocks */
  if (!t || le_simd() != LE_SIMD_AVX2 || t->gemm[LE_SIMD_AVX2] || n->src[0].flags)
    return LE_MM_TILES;
  if (t->type == LE_TYPE_F16 || t->type == LE_TYPE_F32)
    return tinyblas_float(n, t) ? (t->type == LE_TYPE_F16 ? LE_MM_PANEL_F16 : LE_MM_PANEL_F32)
                                : LE_MM_TILES;
  if (t->type == LE_TYPE_Q8_0 && n->src[1].ne[1] >= 2 && n->dst.nb[1] % 4 == 0)
    return LE_MM_PANEL_Q8_0;
  return LE_MM_TILES;
}

/* AVX-512 tinyBLAS F16 (N >= 2): src1 is widened to f32 once, through f16
 * as ggml rounds it (its f16 values exactly), so the tiles convert only
 * the weights: the same operands and chains, half the conversions. Only
 * for 2-D weights: attention's KQV (src1 the scores, n_kv x n_tokens x
 * heads) would double the scratch, the largest of a prompt (1.1B at pp512:
 * 16 -> 32 MiB, resident: peak RSS 1258 -> 1276 MiB). */
int le_mm_wide_f16(const le_node *n) {
  const le_type_traits *t = le_traits(n->src[0].type);
  return t && t->type == LE_TYPE_F16 && le_simd() == LE_SIMD_AVX512 && !n->src[0].flags &&
         n->src[0].ne[2] == 1 && n->src[0].ne[3] == 1 && tinyblas_float(n, t);
}

/* Which tiles compute this node when no panel does (NULL: one vec_dot per
 * output). The type's own entry wins (repacked types follow llama.cpp's
 * repack kernels); F32 and F16 take tinyBLAS-order tiles on its path. */
static const le_gemm_tiles *tiles_for(const le_node *n, const le_type_traits *t) {
  const le_tensor *a = &n->src[0];
  /* A type's own tiles are llama.cpp's repacked kernels, and llama.cpp
   * repacks only 2-D weights whose ne1 is a multiple of 8; other weights of
   * those types run its plain vec_dot, so ours must too. */
  const le_gemm_tiles *own = t->gemm[le_simd()];
  if (own && a->ne[1] % 8 == 0 && a->ne[2] == 1 && a->ne[3] == 1) return own;
  if (own) return NULL;
  if (t->type == LE_TYPE_F32 || t->type == LE_TYPE_F16)
    return tinyblas_float(n, t) ? le_gemm_x86(t->type, 1) : NULL;
  /* The other built-in tiles (q8_0) give vec_dot's bits. For one column
   * they read four row streams at once, which ran at half the speed of a
   * vec_dot per row on Zen 4 (Q8_0 weights from DRAM, one thread: 10 vs 21
   * GB/s; two: 19 vs 27). */
  if (n->src[1].ne[1] == 1) return NULL;
  return le_gemm_x86(t->type, 0);
}

/* The longest rows (in blocks) the scaled tiles take: tile_block_scaled
 * keeps 16 rows' scales on the stack. */
#define SCALED_MAX_NB 512

/* The scaled tiles this node runs (le_gemm_scaled), or NULL: the one place
 * that decides, for the scratch's size (le_mm_col_scales) and for mul_mat. */
static const le_gemm_scaled *scaled_tiles(const le_node *n, const le_type_traits *t) {
  if (!t || t->type != LE_TYPE_Q8_0 || n->src[0].flags || n->src[1].ne[1] < 2) return NULL;
  if (le_mm_panel(n) != LE_MM_TILES || n->dst.nb[1] % 4 || n->src[0].ne[0] / LE_QK > SCALED_MAX_NB)
    return NULL;
  if (src1_direct(n, le_traits(t->vec_dot_type))) return NULL;
  return le_gemm_scaled_for(tiles_for(n, t));
}

/* Whether a Q8_0 16x4 weight's kernel reads its columns' block-sum starts
 * (one int32 per block, where the scaled tiles keep their column scales). */
static int q8x16_starts(const le_node *n) {
  return n->src[0].flags == LE_FLAG_Q8_0_16X4 && le_q8_0x16_uses_start();
}

int le_mm_col_scales(const le_node *n) {
  return q8x16_starts(n) || scaled_tiles(n, le_traits(n->src[0].type)) != NULL;
}

int le_mm_col_lanes(const le_node *n) {
  return scaled_tiles(n, le_traits(n->src[0].type)) != NULL;
}

/* tile_block with scaled tiles (le_gemm_scaled): per 16 rows each row's
 * block scales converted once, the columns' already converted once per
 * node (yscales, [column][block], with the columns) and their lane terms
 * taken once (ylanes, [column pair][block][16]), then the same tiles in the
 * same order (so the same outputs: the scales are the very floats, the lane
 * terms the very integers, each tile took for itself). */
static void tile_block_scaled(const le_gemm_scaled *sc, int64_t K, const char *x, size_t bx,
                              int64_t ir0, int64_t ir1, const char *y, size_t by, int64_t ne11,
                              float *dst, size_t bs, const float *yscales, const int32_t *ylanes) {
  const int64_t nb = K / LE_QK;
  float xs[16 * SCALED_MAX_NB];
  for (int64_t r16 = ir0; r16 < ir1; r16 += 16) {
    const int64_t r16e = LE_MIN(r16 + 16, ir1);
    for (int64_t r = r16; r < r16e; r++) sc->scales(x + r * bx, nb, xs + (r - r16) * nb);
    for (int64_t jc = 0; jc < ne11; jc += BLK_COLS_TILE) {
      const int64_t jc1 = LE_MIN(jc + BLK_COLS_TILE, ne11);
      const float *ys = yscales + jc * nb;
      const int32_t *yl = ylanes + jc * nb * 8; /* jc is even: a pair's start */
      for (int64_t ir = r16; ir < r16e; ir += 4) {
        const int64_t nr = LE_MIN(4, r16e - ir);
        for (int64_t c = jc; c < jc1; c += 4) {
          const int64_t nc = LE_MIN(4, jc1 - c);
          float *o = dst + c * bs + ir;
          if (sc->t48 && nr == 4 && c + 8 <= jc1) { /* eight columns: the rows' codes once */
            sc->t48(K, o, bs, x + ir * bx, bx, xs + (ir - r16) * nb, (size_t)nb, y + c * by, by,
                    ys + (c - jc) * nb, yl + (c - jc) * nb * 8, (size_t)nb);
            c += 4;
            continue;
          }
          for (int64_t i = 0; i < (nr == 4 ? 1 : nr); i++) {
            const le_gemm_scaled_fn f = nr == 4 ? sc->t44 : sc->t14;
            const char *xr = x + (ir + i) * bx;
            const float *xsr = xs + (ir + i - r16) * nb, *ysc = ys + (c - jc) * nb;
            const int32_t *ylc = yl + (c - jc) * nb * 8; /* pair (c - jc) / 2 */
            if (nc == 4) {
              f(K, o + i, bs, xr, bx, xsr, (size_t)nb, y + c * by, by, ysc, ylc, (size_t)nb);
            } else {
              for (int64_t j = 0; j < nc; j++)
                f(K, o + j * bs + i, 0, xr, bx, xsr, (size_t)nb, y + (c + j) * by, 0,
                  ysc + j * nb, ylc + (j / 2) * nb * 16 + (j % 2) * 8, 0);
            }
          }
        }
      }
    }
  }
}

/* Rows [ir0, ir1) of one weight matrix against all ne11 columns, in tiles
 * (see le_gemm_tiles for which shape computes what); column blocks keep a
 * few activation rows hot in L1 while this block's weight rows are reused
 * across them. */
static void tile_block(const le_gemm_tiles *gt, int64_t K, const char *x, size_t bx, int64_t ir0,
                       int64_t ir1, int64_t M, const char *y, size_t by, int64_t ne11, float *dst,
                       size_t bs) {
  if (ne11 == 1) {
    const int pf_bursts = prefetch_bursts();
    int64_t ir = ir0;
    for (; ir + 4 <= ir1; ir += 4) {
      /* Matrix-vector products stream the weights once: fetch the group
       * after next ahead of the hardware prefetcher, which stops at pages. */
      const char *pf = x + LE_MIN(ir + PF_ROWS, M) * bx;
      const char *pf_end = x + LE_MIN(ir + PF_ROWS + 4, M) * bx;
      if (pf_bursts)
        for (; pf < pf_end; pf += 64) __builtin_prefetch(pf, 0, 3);
      gt->t41(K, dst + ir, bs, x + ir * bx, bx, y, by);
    }
    for (; ir < ir1; ir++) gt->t11(K, dst + ir, bs, x + ir * bx, bx, y, by);
    return;
  }
  for (int64_t jc = 0; jc < ne11; jc += BLK_COLS_TILE) {
    const int64_t jc1 = LE_MIN(jc + BLK_COLS_TILE, ne11);
    for (int64_t ir = ir0; ir < ir1; ir += 4) {
      const int64_t nr = LE_MIN(4, ir1 - ir);
      const char *xr = x + ir * bx;
      for (int64_t c = jc; c < jc1; c += 4) {
        const int64_t nc = LE_MIN(4, jc1 - c);
        const char *yc = y + c * by;
        float *o = dst + c * bs + ir;
        for (int64_t i = 0; i < (nr == 4 ? 1 : nr); i++) {
          const le_gemm_fn f = nr == 4 ? gt->t44 : gt->t14;
          if (nc == 4) {
            f(K, o + i, bs, xr + i * bx, bx, yc, by);
          } else {
            for (int64_t j = 0; j < nc; j++)
              f(K, o + j * bs + i, 0, xr + i * bx, bx, yc + j * by, 0);
          }
        }
      }
    }
  }
}

/* Shapes and strides are checked in TypeScript (lib/graph/ops.ts); what
 * stays guards the trait lookups and function pointers mul_mat calls. */
int le_mul_mat_check(const le_node *n) {
  const le_type_traits *t = le_traits(n->src[0].type);
  if (n->src[0].flags && le_repacked_check(n)) return -1;
  if (!t) {
    le_set_error("mul_mat: unsupported src0 type %d", n->src[0].type);
    return -1;
  }
  if (!le_traits(t->vec_dot_type) || !le_traits(t->vec_dot_type)->from_float_act) {
    le_set_error("mul_mat: src0 type %s has no activation converter", t->name);
    return -1;
  }
  return 0;
}

size_t le_mul_mat_wsize(const le_node *n) {
  const size_t bytes = le_mm_src1_bytes(n);
  return bytes ? bytes + 64 : 0;
}

/* src1 row x (K f32) to f32 values rounded through the vec_dot type f16:
 * the very values the f16 path would widen. */
static void widen_row(const le_type_traits *vt, const float *x, float *y, int64_t K) {
  uint16_t h[256];
  for (int64_t i = 0; i < K; i += 256) {
    const int64_t m = LE_MIN(256, K - i);
    vt->from_float_act(x + i, h, m);
    le_fp16_to_fp32_row(h, y + i, m);
  }
}

/* src1 row x quantized as ggml does (q8_0), split for the Q8_0 panel into
 * its codes (yq, 32 per block) and its block scales as floats (d, 8 floats
 * apart: the row's lane in its group of 8 columns). */
static void q8_split_row(const le_type_traits *vt, const float *x, int8_t *yq, float *d,
                         int64_t K) {
  le_block_q8_0 q[8];
  for (int64_t i = 0; i < K; i += 8 * LE_QK) {
    const int64_t m = LE_MIN(8 * LE_QK, K - i);
    vt->from_float_act(x + i, q, m);
    for (int64_t j = 0; j < m / LE_QK; j++) {
      memcpy(yq + i + j * LE_QK, q[j].qs, LE_QK);
      d[(i / LE_QK + j) * 8] = le_fp16_to_fp32(q[j].d);
    }
  }
}

void le_mul_mat(const le_node *n, const le_compute_params *p) {
  const le_tensor *a = &n->src[0], *b = &n->src[1], *d = &n->dst;
  const le_type_traits *t = le_traits(a->type);
  const le_type_traits *vt = le_traits(t->vec_dot_type);
  const le_vec_dot_fn dot = le_get_vec_dot(t);
  const int64_t K = a->ne[0], M = a->ne[1];
  const int64_t ne11 = b->ne[1], ne12 = b->ne[2], ne13 = b->ne[3];
  const int64_t r2 = ne12 / a->ne[2], r3 = ne13 / a->ne[3];
  const int direct = src1_direct(n, vt);
  const int panel = le_mm_panel(n);
  const int wide = le_mm_wide_f16(n);
  const int widen = panel == LE_MM_PANEL_F16 || wide, q8 = panel == LE_MM_PANEL_Q8_0;
  const size_t vrow = le_mm_src1_row(n, vt);
  const int64_t nb = K / LE_QK, groups = (ne11 + 7) / 8; /* Q8_0 panel */
  /* A small src1 is converted whole by every thread into its own part of
   * the scratch (see le_sched.h): no barrier, and threads.c may let this
   * node start while others still finish the previous one. */
  const size_t priv = le_mm_private_bytes(n, p->nth);
  char *const wdata = (char *)p->wdata + (size_t)p->ith * priv;
  float *const dyt = q8 ? (float *)(void *)(wdata + le_mm_scales_offset(n)) : NULL;
  /* the AVX-512 q8_0 tiles' column scales, [src1 row][block], converted with the rows */
  const le_gemm_scaled *const colsc = scaled_tiles(n, t);
  float *const ysc = colsc ? (float *)(void *)(wdata + le_mm_col_scales_offset(n, vt)) : NULL;
  int32_t *const ylanes =
      colsc ? (int32_t *)(void *)(wdata + le_mm_col_lanes_offset(n, vt)) : NULL;
  int32_t *const ystart =
      q8x16_starts(n) ? (int32_t *)(void *)(wdata + le_mm_col_scales_offset(n, vt)) : NULL;

  if (!direct) {
    const int64_t nr = ne11 * ne12 * ne13;
    const int64_t dr = priv ? nr : (nr + p->nth - 1) / p->nth;
    const int64_t r0 = priv ? 0 : LE_MIN(dr * p->ith, nr), r1 = LE_MIN(r0 + dr, nr);
    for (int64_t r = r0; r < r1; r++) {
      const int64_t i13 = r / (ne12 * ne11), i12 = (r / ne11) % ne12, i11 = r % ne11;
      const float *src = (const float *)((const char *)(uintptr_t)b->data + i11 * b->nb[1] +
                                         i12 * b->nb[2] + i13 * b->nb[3]);
      if (widen) {
        widen_row(vt, src, (float *)(void *)(wdata + (size_t)r * vrow), K);
        continue;
      }
      if (q8) {
        float *d = dyt + ((r / ne11 * groups + i11 / 8) * nb * 8 + i11 % 8);
        q8_split_row(vt, src, (int8_t *)wdata + r * K, d, K);
        /* the last group's unused lanes: zeros, not stale scratch (their
         * products are never read, but denormal garbage could be slow) */
        if (i11 == ne11 - 1)
          for (int64_t i = 0; i < nb; i++)
            for (int64_t j = 1; j < 8 - i11 % 8; j++) d[i * 8 + j] = 0.0f;
        continue;
      }
      vt->from_float_act(src, wdata + (size_t)r * vrow, K);
      if (colsc) {
        colsc->scales(wdata + (size_t)r * vrow, K / LE_QK, ysc + r * (K / LE_QK));
        /* each matrix's columns in pairs, [pair][block][16] (le_gemm_scaled.lanes) */
        const int64_t slot = r / ne11 * ((ne11 + 1) / 2 * 2) + i11;
        colsc->lanes(wdata + (size_t)r * vrow, K / LE_QK,
                     ylanes + slot / 2 * (K / LE_QK) * 16 + slot % 2 * 8);
      }
      if (ystart) le_q8_0x16_col_start(wdata + (size_t)r * vrow, K / LE_QK, ystart + r * (K / LE_QK));
    }
    if (!priv && p->nth > 1) le_barrier(p->ctx); /* nth == 1: thread 0 alone (threads.c) */
  }

  const int32_t repacked = a->flags; /* a LE_FLAG_* layout (le_repacked_check) */
  const int pf_bursts = prefetch_bursts();
  const le_gemm_tiles *gt = panel || repacked || d->nb[1] % 4 ? NULL
                            : wide                               ? le_gemm_x86_f16w()
                                                                 : tiles_for(n, t);
  /* Units of whole base blocks (rows aligned as with one block per unit, so
   * every row meets the same tile wherever the unit boundaries fall), sized
   * as ggml sizes its chunks: a matrix-vector product takes 64 rows at a
   * time, and a node with fewer than 4 units per thread is cut into one unit
   * per thread. Each unit taken costs an atomic on a line all threads
   * contend for, which on a small model's decode step cost more than the
   * work split (16-row units: ~1200 per tolstoy-6m token). */
  /* One-column F16 products several rows at a time where that pays
   * (le_f16_rows, 16 rows at AVX-512, 8 at AVX2: vec_dot's chain per
   * output, the rows' final reductions as one, the serial double leftovers
   * lane-parallel). */
  const le_f16_rows_fn rows = !gt && !panel && !repacked && !direct && ne11 == 1 &&
                                      t->type == LE_TYPE_F16
                                  ? le_f16_rows(K, a->ne[2] > 1 || a->ne[3] > 1, r2 % 4 == 0)
                                  : NULL;
  /* Decode attention with grouped KV heads (src0 broadcast over r2 query
   * heads, one column each): the r2 planes that share a K matrix are one
   * unit, and each K row meets their queries four (or, with two query
   * heads per KV head, two) at a time (le_f16_rows with several y: the row
   * read once). */
  const int gy = r2 % 4 == 0 ? 4 : 2; /* query heads per row read */
  const int grouped = rows && r2 % gy == 0;
  const int64_t grp = grouped ? r2 : 1; /* query planes per unit */
  const int64_t base = panel ? PANEL_ROWS : BLK_ROWS;
  const int64_t nbase = (M + base - 1) / base, planes = ne12 / grp * ne13;
  int64_t per = ne11 == 1 && !panel ? MV_BLOCKS : 1;
  if ((nbase + per - 1) / per * planes < 4 * p->nth && planes < p->nth)
    per = (nbase + p->nth - 1) / p->nth;
  /* A matrix-vector product streams its weights once: one contiguous
   * range per thread, as llama.cpp's repack gemv splits ne01, keeps each
   * thread's reads sequential for the hardware prefetcher (1.1B Q4_0
   * decode, Zen 4, 2 threads: ~42 -> ~47 t/s against 64-row units taken in
   * turn, whose streams restart every 72 KiB). The same for plain rows
   * (session 18, Zen 4, 2 threads, tg128 medians of 12-16 alternating runs:
   * 1.1B Q8_0 24.3 -> 26.9, F16 14.9 -> 15.0; 125M F16 101.9 -> 111.1, Q8_0
   * 155 -> 161); the outputs are the same, each row meets the same kernel
   * wherever units end. No units are left to take from a preempted thread;
   * le_adapt covers a busy machine. */
  if (!panel && ne11 == 1 && planes == 1) per = (nbase + p->nth - 1) / p->nth;
  const int64_t blk_rows = per * base; /* a multiple of 16: repacked rows go 8 at a time */
  const int64_t nrb = (M + blk_rows - 1) / blk_rows;
  const int64_t units = nrb * planes;
  /* Each thread starts with unit ith, then takes the next free one: a
   * thread that another process preempts leaves its later units to the
   * others (ggml's current_chunk starts at nth the same way). With no more
   * units than threads there is nothing to take, and no atomic on the
   * node's counter (a cache line the other threads would pull back). */
  const int steal = units > p->nth;
  for (int64_t u = p->ith; u < units; u = steal ? p->nth + le_next_chunk(p->ctx) : units) {
    const int64_t plane = u / nrb, rb = u % nrb;
    const int64_t i12 = plane % (ne12 / grp) * grp, i13 = plane / (ne12 / grp);
    const char *arow = (const char *)(uintptr_t)a->data + (i12 / r2) * a->nb[2] + (i13 / r3) * a->nb[3];
    const int64_t ir0 = rb * blk_rows, ir1 = LE_MIN(ir0 + blk_rows, M);
    if (panel) {
      const char *ybase = direct
          ? (const char *)(uintptr_t)b->data + i12 * b->nb[2] + i13 * b->nb[3]
          : (const char *)wdata + (size_t)((i13 * ne12 + i12) * ne11) * vrow;
      float *dbase = (float *)((char *)(uintptr_t)d->data + i12 * d->nb[2] + i13 * d->nb[3]);
      if (q8) {
        le_q8_0_panel(K, arow + ir0 * a->nb[1], (size_t)a->nb[1], ir1 - ir0,
                      (const int8_t *)ybase, dyt + plane * groups * nb * 8, ne11, dbase + ir0,
                      (size_t)d->nb[1] / 4);
        continue;
      }
      le_sgemm8_panel(panel == LE_MM_PANEL_F16, K, arow + ir0 * a->nb[1], (size_t)a->nb[1],
                      ir1 - ir0, (const float *)(const void *)ybase,
                      (direct ? (size_t)b->nb[1] : vrow) / 4, ne11, dbase + ir0,
                      (size_t)d->nb[1] / 4);
      continue;
    }
    if (repacked) { /* 2-D: plane 0 only; ir0, ir1 multiples of 8 (M % 8 == 0) */
      le_repacked_rows(repacked, K, arow, ir0, ir1, M, (const char *)wdata, vrow, ne11, ystart,
                       (float *)(uintptr_t)d->data, (size_t)d->nb[1] / 4);
      continue;
    }
    if (grouped) {
      for (int64_t g = 0; g < grp; g += gy) {
        const void *ys[4];
        float *o4[4];
        for (int k = 0; k < gy; k++) {
          ys[k] = wdata + (size_t)((i13 * ne12 + i12 + g + k) * ne11) * vrow;
          o4[k] = (float *)((char *)(uintptr_t)d->data + (i12 + g + k) * d->nb[2] +
                            i13 * d->nb[3]) + ir0;
        }
        rows(K, ir1 - ir0, arow + ir0 * a->nb[1], (size_t)a->nb[1], gy, ys, o4);
      }
      continue;
    }
    if (gt) {
      const char *ybase = direct
          ? (const char *)(uintptr_t)b->data + i12 * b->nb[2] + i13 * b->nb[3]
          : (const char *)wdata + (size_t)((i13 * ne12 + i12) * ne11) * vrow;
      float *dbase = (float *)((char *)(uintptr_t)d->data + i12 * d->nb[2] + i13 * d->nb[3]);
      const size_t by = direct ? (size_t)b->nb[1] : vrow;
      const size_t mat = (size_t)(i13 * ne12 + i12), nbk = (size_t)(K / LE_QK);
      if (colsc)
        tile_block_scaled(colsc, K, arow, (size_t)a->nb[1], ir0, ir1, ybase, by, ne11, dbase,
                          (size_t)d->nb[1] / 4, ysc + mat * (size_t)ne11 * nbk,
                          ylanes + mat * (size_t)((ne11 + 1) / 2 * 2) * nbk * 8);
      else
        tile_block(gt, K, arow, (size_t)a->nb[1], ir0, ir1, M, ybase, by, ne11, dbase,
                   (size_t)d->nb[1] / 4);
      continue;
    }
    for (int64_t jc = 0; jc < ne11; jc += BLK_COLS) {
      const int64_t jc1 = LE_MIN(jc + BLK_COLS, ne11);
      for (int64_t i11 = jc; i11 < jc1; i11++) {
        const void *y = direct
            ? (const void *)((const char *)(uintptr_t)b->data + i11 * b->nb[1] + i12 * b->nb[2] + i13 * b->nb[3])
            : (const void *)((const char *)wdata + (size_t)((i13 * ne12 + i12) * ne11 + i11) * vrow);
        float *out = (float *)((char *)(uintptr_t)d->data + i11 * d->nb[1] + i12 * d->nb[2] + i13 * d->nb[3]);
        if (rows) {
          float *o1 = out + ir0;
          rows(K, ir1 - ir0, arow + ir0 * a->nb[1], (size_t)a->nb[1], 1, &y, &o1);
          continue;
        }
        for (int64_t i01 = ir0; i01 < ir1; i01++) {
          if (pf_bursts && ne11 == 1 && i01 + PF_ROWS < M) { /* see tile_block */
            const char *pf = arow + (i01 + PF_ROWS) * a->nb[1];
            for (int64_t o = 0; o < a->nb[1]; o += 64) __builtin_prefetch(pf + o, 0, 3);
          }
          dot(K, &out[i01], arow + i01 * a->nb[1], y);
        }
      }
    }
  }
}
