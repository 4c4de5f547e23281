/* FLASH_ATTN_EXT's x86 pieces (flash_attn.c has the op): the F16 V
 * accumulation, and the cell loop of one query row over an F16 V cache at
 * the AVX2 and AVX-512 levels, every step as flash_attn.c's portable loop
 * and ggml_compute_forward_flash_attn_ext_f16_one_chunk take it. */
#include "flash_attn.h"

#include "expf_libm.h"

#if defined(LE_X86)
/* VKQ16 += x * v: fp16(fma(x, v, y)) per element, rounded to nearest (the
 * same fma and the same round-to-nearest f16 conversion as ggml's 16-wide
 * code and its fused leftovers). */
LE_TARGET_AVX2 void le_fa_mad_f16_avx2(int64_t n, uint16_t *y, const uint16_t *x, float v) {
  const __m256 vv = _mm256_set1_ps(v);
  int64_t i = 0;
#define FA_LD(p) _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(p)))
  for (; i + 8 <= n; i += 8)
    _mm_storeu_si128((__m128i *)(y + i),
                     _mm256_cvtps_ph(_mm256_fmadd_ps(FA_LD(x + i), vv, FA_LD(y + i)), 0));
#undef FA_LD
  for (; i < n; i++)
    y[i] = le_fp32_to_fp16(fmaf(le_fp16_to_fp32(x[i]), v, le_fp16_to_fp32(y[i])));
}
/* kq[tk] (tk < 64) = fma chain over dk of Kt[dk][tk] * q[dk], from 0 */
LE_TARGET_AVX2 void le_fa_kq_tile_avx2(int64_t DK, const float *Kt, const float *q, float *kq) {
  __m256 a[8];
  for (int j = 0; j < 8; j++) a[j] = _mm256_setzero_ps();
  for (int64_t dk = 0; dk < DK; dk++) {
    const __m256 qv = _mm256_set1_ps(q[dk]);
    const float *kr = Kt + dk * 64;
    for (int j = 0; j < 8; j++) a[j] = _mm256_fmadd_ps(_mm256_loadu_ps(kr + 8 * j), qv, a[j]);
  }
  for (int j = 0; j < 8; j++) _mm256_storeu_ps(kq + 8 * j, a[j]);
}
/* acc[d] = fma chain over tk < 64 of Vt[tk][d] * w[tk], from acc[d] (DV % 8 == 0) */
LE_TARGET_AVX2 void le_fa_vacc_tile_avx2(int64_t DV, const float *Vt, const float *w, float *acc) {
  for (int64_t d = 0; d < DV; d += 8) {
    __m256 a = _mm256_loadu_ps(acc + d);
    for (int tk = 0; tk < 64; tk++)
      a = _mm256_fmadd_ps(_mm256_loadu_ps(Vt + tk * DV + d), _mm256_set1_ps(w[tk]), a);
    _mm256_storeu_ps(acc + d, a);
  }
}
/* Cell ic's score (kq dot times the scale, plus the mask times the slope)
 * into *sc, as flash_attn.c's portable loop takes it; 0 when the mask drops
 * the cell. */
LE_TARGET_AVX2 static inline __attribute__((always_inline)) int
fa_cell_score(const le_fa_row *r, int64_t ic, float *sc) {
  const float mv = r->mp ? r->slope * _cvtsh_ss(r->mp[ic]) : 0.0f;
  if (mv == -INFINITY) return 0;
  float s = le_fa_dot(r, ic);
  s = s * r->scale;
  s += mv;
  *sc = s;
  return 1;
}

/* One cell's scalar steps (its score, the online softmax's M and S): 0 when
 * the mask drops the cell; else 1, or 2 when the maximum rose and VKQ must
 * first be scaled by *ms; *vs is the cell's weight. */
LE_TARGET_AVX2 static inline __attribute__((always_inline)) int
fa_cell_step(const le_fa_row *r, int64_t ic, float *M, float *S, float *ms, float *vs) {
  float sc;
  if (!fa_cell_score(r, ic, &sc)) return 0;
  const float Mold = *M;
  int use = 1;
  *ms = 1.0f, *vs = 1.0f;
  if (sc > *M) {
    *M = sc;
    *ms = expf(Mold - *M);
    use = 2;
  } else {
    *vs = expf(sc - *M);
  }
  /* not contracted in ggml's builds: the product and the sum are rounded */
  *S = *S * *ms + *vs;
  return use;
}

#define FA_CELL_BLOCK 32
typedef void (*fa_vexpf_fn)(const float *x, float *y, int n);

/* fa_cell_step over cells [c0, c0 + nc) of one row (nc <= FA_CELL_BLOCK),
 * in three passes: the scores and the running maximum (each exp's
 * argument), the block's exps at once by vexpf (expf_libm.h; NULL: libm's
 * expf one by one), then S. The same operations as cell by cell. */
LE_TARGET_AVX2 static inline __attribute__((always_inline)) void
fa_block_steps(const le_fa_row *r, int64_t c0, int nc, fa_vexpf_fn vexpf, float *pM, float *pS,
               uint8_t *use, float *msb, float *vsb) {
  float M = *pM, S = *pS; /* in registers over the block */
  float arg[FA_CELL_BLOCK], e[FA_CELL_BLOCK];
  for (int c = 0; c < nc; c++) {
    float sc;
    arg[c] = 0.0f;
    use[c] = 0;
    if (!fa_cell_score(r, c0 + c, &sc)) continue;
    if (sc > M) {
      arg[c] = M - sc; /* ms = expf(Mold - M) */
      M = sc;
      use[c] = 2;
    } else {
      arg[c] = sc - M; /* vs = expf(sc - M) */
      use[c] = 1;
    }
  }
  if (vexpf) vexpf(arg, e, nc);
  else
    for (int c = 0; c < nc; c++) e[c] = use[c] ? expf(arg[c]) : 0.0f;
  for (int c = 0; c < nc; c++) {
    if (!use[c]) continue;
    msb[c] = use[c] == 2 ? e[c] : 1.0f;
    vsb[c] = use[c] == 2 ? 1.0f : e[c];
    S = S * msb[c] + vsb[c]; /* not contracted, as in ggml */
  }
  *pM = M, *pS = S;
}

/* fa_block_steps of NH query heads that share a V head over cells
 * [c0, c0 + nc), each V row's first row_bytes prefetched before (the rows
 * are read after the scalar steps; 0: none). */
LE_TARGET_AVX2 static inline __attribute__((always_inline)) void
fa_heads_block_steps(const int NH, const le_fa_row *r, int64_t c0, int nc, int64_t row_bytes,
                     fa_vexpf_fn vexpf, float *M, float *S, uint8_t (*use)[FA_CELL_BLOCK],
                     float (*msb)[FA_CELL_BLOCK], float (*vsb)[FA_CELL_BLOCK]) {
  for (int c = 0; c < nc; c++)
    for (int64_t o = 0; o < row_bytes; o += 64)
      __builtin_prefetch(r[0].vb + (c0 + c) * r[0].vst + o, 0, 3);
  for (int h = 0; h < NH; h++)
    fa_block_steps(&r[h], c0, nc, vexpf, &M[h], &S[h], use[h], msb[h], vsb[h]);
}

/* The cell loop on the F16C levels: the steps above, VKQ16 in memory.
 * Cell by cell, so that each cell's scalar steps overlap the previous
 * cell's VKQ16 update (a store, then a load of the same row); taken in
 * blocks, the updates wait on each other (+20% at DV = 64). */
LE_TARGET_AVX2 static void fa_cells_f16_avx2(const le_fa_row *r, int64_t ic0, int64_t ic1,
                                             uint16_t *VKQ16, float *pS, float *pM) {
  float S = *pS, M = *pM;
  for (int64_t ic = ic0; ic < ic1; ic++) {
    float ms, vs;
    const int use = fa_cell_step(r, ic, &M, &S, &ms, &vs);
    if (!use) continue;
    if (use == 2) le_fa_scale_f16(r->DV, VKQ16, ms);
    le_fa_mad_f16_avx2(r->DV, VKQ16, (const uint16_t *)(const void *)(r->vb + ic * r->vst), vs);
  }
  *pS = S;
  *pM = M;
}

/* AVX2, DV = 64: VKQ16 in eight registers (as floats, each exactly an f16)
 * over blocks of cells, as fa_cells_heads does at AVX-512: the block's steps
 * (exps by le_vexpf_avx2), then its updates, each rounded to f16 with hardware
 * RNE as ggml's AVX2 vec_scale_f16/vec_mad_f16 round. */
LE_TARGET_AVX2 static void fa_cells_f16_reg8_avx2(const le_fa_row *r, int64_t ic0, int64_t ic1,
                                                  uint16_t *VKQ16, float *pS, float *pM) {
#define FA_RNE8(x) _mm256_cvtph_ps(_mm256_cvtps_ph((x), _MM_FROUND_TO_NEAREST_INT))
#define FA_LD8(p) _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(const void *)(p)))
  __m256 acc[8];
#pragma GCC unroll 8
  for (int j = 0; j < 8; j++) acc[j] = FA_LD8(VKQ16 + 8 * j);
  const fa_vexpf_fn vexpf = le_vexpf_ok() ? le_vexpf_avx2 : NULL;
  for (int64_t c0 = ic0; c0 < ic1; c0 += FA_CELL_BLOCK) {
    const int nc = (int)LE_MIN((int64_t)FA_CELL_BLOCK, ic1 - c0);
    float vsb[FA_CELL_BLOCK], msb[FA_CELL_BLOCK];
    uint8_t use[FA_CELL_BLOCK];
    fa_block_steps(r, c0, nc, vexpf, pM, pS, use, msb, vsb);
    for (int c = 0; c < nc; c++) {
      if (!use[c]) continue;
      if (use[c] == 2) {
        const __m256 m = _mm256_set1_ps(msb[c]);
#pragma GCC unroll 8
        for (int j = 0; j < 8; j++) acc[j] = FA_RNE8(_mm256_mul_ps(acc[j], m));
      }
      const uint16_t *x = (const uint16_t *)(const void *)(r->vb + (c0 + c) * r->vst);
      const __m256 v = _mm256_set1_ps(vsb[c]);
#pragma GCC unroll 8
      for (int j = 0; j < 8; j++) acc[j] = FA_RNE8(_mm256_fmadd_ps(FA_LD8(x + 8 * j), v, acc[j]));
    }
  }
#pragma GCC unroll 8
  for (int j = 0; j < 8; j++)
    _mm_storeu_si128((__m128i *)(void *)(VKQ16 + 8 * j),
                     _mm256_cvtps_ph(acc[j], _MM_FROUND_TO_NEAREST_INT));
#undef FA_LD8
#undef FA_RNE8
}

/* le_fa_kq_rows / le_fa_vacc_rows at AVX-512, one product for both:
 * o[t][j] (j < 64) = fma chain over k < K of B[k * ldb + j] * a[t][k], from
 * 0 or (acc) from o[t][j]. NR rows (<= 4) share each load of B (16
 * accumulators); each element keeps its own chain in ggml's order, so the
 * lane width and the row grouping change nothing. */
LE_TARGET_AVX512 static inline __attribute__((always_inline)) void
fa_rows4(const int NR, int acc, int64_t K, const float *B, int64_t ldb, const float *const a[4],
         float *const o[4]) {
  __m512 s[4][4];
#pragma GCC unroll 4
  for (int t = 0; t < NR; t++)
#pragma GCC unroll 4
    for (int j = 0; j < 4; j++) s[t][j] = acc ? _mm512_loadu_ps(o[t] + 16 * j) : _mm512_setzero_ps();
  for (int64_t k = 0; k < K; k++) {
    const float *br = B + k * ldb;
    const __m512 b0 = _mm512_loadu_ps(br), b1 = _mm512_loadu_ps(br + 16),
                 b2 = _mm512_loadu_ps(br + 32), b3 = _mm512_loadu_ps(br + 48);
#pragma GCC unroll 4
    for (int t = 0; t < NR; t++) {
      const __m512 av = _mm512_set1_ps(a[t][k]);
      s[t][0] = _mm512_fmadd_ps(b0, av, s[t][0]);
      s[t][1] = _mm512_fmadd_ps(b1, av, s[t][1]);
      s[t][2] = _mm512_fmadd_ps(b2, av, s[t][2]);
      s[t][3] = _mm512_fmadd_ps(b3, av, s[t][3]);
    }
  }
#pragma GCC unroll 4
  for (int t = 0; t < NR; t++)
#pragma GCC unroll 4
    for (int j = 0; j < 4; j++) _mm512_storeu_ps(o[t] + 16 * j, s[t][j]);
}

/* fa_rows4 over rows[0..n): a[t] = A + rows[i] * lda, o[t] = O + rows[i] *
 * ldo; four at a time, leftovers one by one. */
LE_TARGET_AVX512 static void fa_rows_avx512(int acc, int64_t K, const float *B, int64_t ldb,
                                            const float *A, int64_t lda, float *O, int64_t ldo,
                                            const int *rows, int n) {
  int i = 0;
  for (; i + 4 <= n; i += 4) {
    const float *a[4];
    float *o[4];
    for (int t = 0; t < 4; t++) a[t] = A + rows[i + t] * lda, o[t] = O + rows[i + t] * ldo;
    fa_rows4(4, acc, K, B, ldb, a, o);
  }
  for (; i < n; i++) {
    const float *a[4] = {A + rows[i] * lda};
    float *o[4] = {O + rows[i] * ldo};
    fa_rows4(1, acc, K, B, ldb, a, o);
  }
}

int le_fa_kq_rows(int64_t DK, const float *Kt, const float *Q, float *KQ, const int *rows, int n) {
  if (le_simd() != LE_SIMD_AVX512) return 0;
  fa_rows_avx512(0, DK, Kt, 64, Q, DK, KQ, 64, rows, n);
  return 1;
}

int le_fa_vacc_rows(int64_t DV, const float *Vt, const float *W, float *VKQ, const int *rows,
                    int n) {
  if (le_simd() != LE_SIMD_AVX512 || DV % 64) return 0;
  for (int64_t d0 = 0; d0 < DV; d0 += 64) /* 64 columns at a time */
    fa_rows_avx512(1, 64, Vt + d0, DV, W, 64, VKQ + d0, DV, rows, n);
  return 1;
}

/* The cells of NH query heads that share one V head (NH = 1: a row alone),
 * DV = 16 * NV, with each head's VKQ16 held in registers (as floats, each
 * exactly an f16): in memory every cell's accumulation waits for the
 * previous store. So cells go in blocks: first each head's scalar steps
 * (fa_block_steps), then per cell its V row widened once and, per head,
 * the same operations on VKQ as one cell at a time — scale by ms where the
 * maximum rose, then fp16(fma(v, vs, VKQ)) — each rounded to f16 (hardware
 * RNE, as ggml's AVX-512 vec_scale_f16/vec_mad_f16). Across heads the
 * operations are independent, so the heads' f16 round trips (a long
 * latency per cell in one head's chain) overlap. */
LE_TARGET_AVX512 static inline __attribute__((always_inline)) void
fa_cells_heads(const int NV, const int NH, const le_fa_row *r, int64_t ic0, int64_t ic1,
               uint16_t *const *VKQ16, float *pS, float *pM) {
#define FA_RNE(x) _mm512_cvtph_ps(_mm512_cvtps_ph((x), _MM_FROUND_TO_NEAREST_INT))
  __m512 acc[4][8];
  float S[4], M[4];
  const fa_vexpf_fn vexpf = le_vexpf_ok() ? le_vexpf_avx512 : NULL;
#pragma GCC unroll 4
  for (int h = 0; h < NH; h++) {
#pragma GCC unroll 8
    for (int j = 0; j < NV; j++)
      acc[h][j] =
          _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(const void *)(VKQ16[h] + 16 * j)));
    S[h] = pS[h], M[h] = pM[h];
  }
  for (int64_t c0 = ic0; c0 < ic1; c0 += FA_CELL_BLOCK) {
    const int nc = (int)LE_MIN((int64_t)FA_CELL_BLOCK, ic1 - c0);
    float vsb[4][FA_CELL_BLOCK], msb[4][FA_CELL_BLOCK];
    uint8_t use[4][FA_CELL_BLOCK];
    fa_heads_block_steps(NH, r, c0, nc, 2 * 16 * NV, vexpf, M, S, use, msb, vsb);
    for (int c = 0; c < nc; c++) {
      const uint16_t *x = (const uint16_t *)(const void *)(r[0].vb + (c0 + c) * r[0].vst);
      __m512 v[8];
#pragma GCC unroll 8
      for (int j = 0; j < NV; j++)
        v[j] = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(const void *)(x + 16 * j)));
#pragma GCC unroll 4
      for (int h = 0; h < NH; h++) {
        if (!use[h][c]) continue;
        if (use[h][c] == 2) {
          const __m512 m = _mm512_set1_ps(msb[h][c]);
#pragma GCC unroll 8
          for (int j = 0; j < NV; j++) acc[h][j] = FA_RNE(_mm512_mul_ps(acc[h][j], m));
        }
        const __m512 w = _mm512_set1_ps(vsb[h][c]);
#pragma GCC unroll 8
        for (int j = 0; j < NV; j++) acc[h][j] = FA_RNE(_mm512_fmadd_ps(v[j], w, acc[h][j]));
      }
    }
  }
#pragma GCC unroll 4
  for (int h = 0; h < NH; h++) {
#pragma GCC unroll 8
    for (int j = 0; j < NV; j++)
      _mm256_storeu_si256((__m256i *)(void *)(VKQ16[h] + 16 * j),
                          _mm512_cvtps_ph(acc[h][j], _MM_FROUND_TO_NEAREST_INT));
    pS[h] = S[h], pM[h] = M[h];
  }
#undef FA_RNE
}

LE_TARGET_AVX512 static void fa_cells_f16_reg4(const le_fa_row *r, int64_t ic0, int64_t ic1,
                                               uint16_t *VKQ16, float *pS, float *pM) {
  fa_cells_heads(4, 1, r, ic0, ic1, &VKQ16, pS, pM);
}
LE_TARGET_AVX512 static void fa_cells_f16_reg8(const le_fa_row *r, int64_t ic0, int64_t ic1,
                                               uint16_t *VKQ16, float *pS, float *pM) {
  fa_cells_heads(8, 1, r, ic0, ic1, &VKQ16, pS, pM);
}
LE_TARGET_AVX512 static void fa_cells_f16_heads4(const le_fa_row *r, int64_t ic0, int64_t ic1,
                                                 uint16_t *const *VKQ16, float *pS, float *pM) {
  fa_cells_heads(4, 4, r, ic0, ic1, VKQ16, pS, pM);
}
LE_TARGET_AVX512 static void fa_cells_f16_heads2(const le_fa_row *r, int64_t ic0, int64_t ic1,
                                                 uint16_t *const *VKQ16, float *pS, float *pM) {
  fa_cells_heads(8, 2, r, ic0, ic1, VKQ16, pS, pM);
}
/* Heads of 32 (tolstoy-6m: two query heads per K/V head) in pairs. */
LE_TARGET_AVX512 static void fa_cells_f16_heads2x32(const le_fa_row *r, int64_t ic0,
                                                    int64_t ic1, uint16_t *const *VKQ16,
                                                    float *pS, float *pM) {
  fa_cells_heads(2, 2, r, ic0, ic1, VKQ16, pS, pM);
}

/* The cells of NH query heads that share one Q8_0 V head, with ggml's f32
 * accumulator (VKQ32) held in registers: each block's scalar steps per head
 * (fa_block_steps), then per cell its V row dequantized once (d times each
 * int8, exact, as dequantize_row_q8_0) and, per head, the one-cell
 * operations: VKQ32 * ms where the maximum rose (vec_scale_f32), then
 * fma(v, vs, VKQ32) (vec_mad_f32's fused lanes). Before, each head took
 * every cell alone: a dequantization, a scale and a mad through memory. */
LE_TARGET_AVX512 static inline __attribute__((always_inline)) void
fa_cells_heads_q8(const int NV, const int NH, const le_fa_row *r, int64_t ic0, int64_t ic1,
                  float *const *VKQ32, float *pS, float *pM) {
  __m512 acc[4][8];
  float S[4], M[4];
  const fa_vexpf_fn vexpf = le_vexpf_ok() ? le_vexpf_avx512 : NULL;
#pragma GCC unroll 4
  for (int h = 0; h < NH; h++) {
#pragma GCC unroll 8
    for (int j = 0; j < NV; j++) acc[h][j] = _mm512_loadu_ps(VKQ32[h] + 16 * j);
    S[h] = pS[h], M[h] = pM[h];
  }
  for (int64_t c0 = ic0; c0 < ic1; c0 += FA_CELL_BLOCK) {
    const int nc = (int)LE_MIN((int64_t)FA_CELL_BLOCK, ic1 - c0);
    float vsb[4][FA_CELL_BLOCK], msb[4][FA_CELL_BLOCK];
    uint8_t use[4][FA_CELL_BLOCK];
    fa_heads_block_steps(NH, r, c0, nc, NV / 2 * (int64_t)sizeof(le_block_q8_0), vexpf, M, S, use,
                         msb, vsb);
    for (int c = 0; c < nc; c++) {
      int live = 0;
#pragma GCC unroll 4
      for (int h = 0; h < NH; h++) live |= use[h][c];
      if (!live) continue; /* masked for every head: its V is not read */
      const le_block_q8_0 *x = (const le_block_q8_0 *)(const void *)(r[0].vb + (c0 + c) * r[0].vst);
      __m512 v[8];
#pragma GCC unroll 4
      for (int b = 0; b < NV / 2; b++) fa_q8_widen16(x + b, v + 2 * b);
#pragma GCC unroll 4
      for (int h = 0; h < NH; h++) {
        if (!use[h][c]) continue;
        if (use[h][c] == 2) {
          const __m512 m = _mm512_set1_ps(msb[h][c]);
#pragma GCC unroll 8
          for (int j = 0; j < NV; j++) acc[h][j] = _mm512_mul_ps(acc[h][j], m);
        }
        const __m512 w = _mm512_set1_ps(vsb[h][c]);
#pragma GCC unroll 8
        for (int j = 0; j < NV; j++) acc[h][j] = _mm512_fmadd_ps(v[j], w, acc[h][j]);
      }
    }
  }
#pragma GCC unroll 4
  for (int h = 0; h < NH; h++) {
#pragma GCC unroll 8
    for (int j = 0; j < NV; j++) _mm512_storeu_ps(VKQ32[h] + 16 * j, acc[h][j]);
    pS[h] = S[h], pM[h] = M[h];
  }
}

LE_TARGET_AVX512 static void fa_cells_q8_heads4(const le_fa_row *r, int64_t ic0, int64_t ic1,
                                                float *const *VKQ32, float *pS, float *pM) {
  fa_cells_heads_q8(4, 4, r, ic0, ic1, VKQ32, pS, pM);
}
LE_TARGET_AVX512 static void fa_cells_q8_heads2(const le_fa_row *r, int64_t ic0, int64_t ic1,
                                                float *const *VKQ32, float *pS, float *pM) {
  fa_cells_heads_q8(8, 2, r, ic0, ic1, VKQ32, pS, pM);
}

/* fa_cells_heads_q8 at AVX2 (ggml's haswell lanes are 8 wide, the same
 * operations per element): NH heads, DV a multiple of 64; within 16
 * registers each 64 columns of a V row are dequantized once for the heads,
 * whose accumulators stay in memory (L1) between cells. */
LE_TARGET_AVX2 static inline __attribute__((always_inline)) void
fa_cells_heads_q8_avx2(const int NH, const le_fa_row *r, int64_t ic0, int64_t ic1,
                       float *const *VKQ32, float *pS, float *pM) {
  const int64_t DV = r[0].DV;
  const fa_vexpf_fn vexpf = le_vexpf_ok() ? le_vexpf_avx2 : NULL;
  for (int64_t c0 = ic0; c0 < ic1; c0 += FA_CELL_BLOCK) {
    const int nc = (int)LE_MIN((int64_t)FA_CELL_BLOCK, ic1 - c0);
    float vsb[4][FA_CELL_BLOCK], msb[4][FA_CELL_BLOCK];
    uint8_t use[4][FA_CELL_BLOCK];
    fa_heads_block_steps(NH, r, c0, nc, 0, vexpf, pM, pS, use, msb, vsb);
    for (int c = 0; c < nc; c++) {
      int live = 0;
      for (int h = 0; h < NH; h++) live |= use[h][c];
      if (!live) continue; /* masked for every head: its V is not read */
      const le_block_q8_0 *x = (const le_block_q8_0 *)(const void *)(r[0].vb + (c0 + c) * r[0].vst);
      for (int64_t d0 = 0; d0 < DV; d0 += 64) { /* two Q8_0 blocks */
        __m256 v[8];
        fa_q8_widen8(x + d0 / LE_QK, v);
        fa_q8_widen8(x + d0 / LE_QK + 1, v + 4);
#pragma GCC unroll 4
        for (int h = 0; h < NH; h++) {
          if (!use[h][c]) continue;
          float *y = VKQ32[h] + d0;
          const __m256 m = _mm256_set1_ps(msb[h][c]), w = _mm256_set1_ps(vsb[h][c]);
#pragma GCC unroll 8
          for (int j = 0; j < 8; j++) {
            __m256 a = _mm256_loadu_ps(y + 8 * j);
            if (use[h][c] == 2) a = _mm256_mul_ps(a, m);
            _mm256_storeu_ps(y + 8 * j, _mm256_fmadd_ps(v[j], w, a));
          }
        }
      }
    }
  }
}

LE_TARGET_AVX2 static void fa_cells_q8_heads4_avx2(const le_fa_row *r, int64_t ic0, int64_t ic1,
                                                   float *const *VKQ32, float *pS, float *pM) {
  fa_cells_heads_q8_avx2(4, r, ic0, ic1, VKQ32, pS, pM);
}
LE_TARGET_AVX2 static void fa_cells_q8_heads2_avx2(const le_fa_row *r, int64_t ic0, int64_t ic1,
                                                   float *const *VKQ32, float *pS, float *pM) {
  fa_cells_heads_q8_avx2(2, r, ic0, ic1, VKQ32, pS, pM);
}

le_fa_heads32_fn le_fa_cells_q8_heads(int64_t DV, int *nh) {
  if (le_simd() == LE_SIMD_AVX512 && DV == 64) return *nh = 4, fa_cells_q8_heads4;
  if (le_simd() == LE_SIMD_AVX512 && DV == 128) return *nh = 2, fa_cells_q8_heads2;
  if (le_simd() == LE_SIMD_AVX2 && DV == 64) return *nh = 4, fa_cells_q8_heads4_avx2;
  if (le_simd() == LE_SIMD_AVX2 && DV == 128) return *nh = 2, fa_cells_q8_heads2_avx2;
  return NULL;
}

le_fa_heads_fn le_fa_cells_f16_heads(int64_t DV, int *nh) {
  if (le_simd() == LE_SIMD_AVX512 && DV == 64) return *nh = 4, fa_cells_f16_heads4;
  if (le_simd() == LE_SIMD_AVX512 && DV == 128) return *nh = 2, fa_cells_f16_heads2;
  if (le_simd() == LE_SIMD_AVX512 && DV == 32) return *nh = 2, fa_cells_f16_heads2x32;
  return NULL;
}

le_fa_cells_fn le_fa_cells_f16(int64_t DV) {
  if (le_simd() == LE_SIMD_AVX512 && DV == 64) return fa_cells_f16_reg4;
  if (le_simd() == LE_SIMD_AVX512 && DV == 128) return fa_cells_f16_reg8;
  if (le_simd() == LE_SIMD_AVX2 && DV == 64) return fa_cells_f16_reg8_avx2;
  return le_simd() == LE_SIMD_AVX2 || le_simd() == LE_SIMD_AVX512 ? fa_cells_f16_avx2 : NULL;
}
#else
le_fa_cells_fn le_fa_cells_f16(int64_t DV) {
  (void)DV;
  return NULL;
}
le_fa_heads_fn le_fa_cells_f16_heads(int64_t DV, int *nh) {
  (void)DV, (void)nh;
  return NULL;
}
le_fa_heads32_fn le_fa_cells_q8_heads(int64_t DV, int *nh) {
  (void)DV, (void)nh;
  return NULL;
}
int le_fa_kq_rows(int64_t DK, const float *Kt, const float *Q, float *KQ, const int *rows, int n) {
  (void)DK, (void)Kt, (void)Q, (void)KQ, (void)rows, (void)n;
  return 0;
}
int le_fa_vacc_rows(int64_t DV, const float *Vt, const float *W, float *VKQ, const int *rows,
                    int n) {
  (void)DV, (void)Vt, (void)W, (void)VKQ, (void)rows, (void)n;
  return 0;
}
#endif
