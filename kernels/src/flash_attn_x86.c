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
/* One cell's scalar steps (mask, kq dot, the online softmax's M and S), as
 * flash_attn.c's portable loop takes them: 0 when the mask drops the cell;
 * else 1, or 2 when the maximum rose and VKQ must first be scaled by *ms;
 * *vs is the cell's weight. */
LE_TARGET_AVX2 static inline __attribute__((always_inline)) int
fa_cell_step(const le_fa_row *r, int64_t ic, float *M, float *S, float *ms, float *vs) {
  const float mv = r->mp ? r->slope * _cvtsh_ss(r->mp[ic]) : 0.0f;
  if (mv == -INFINITY) return 0;
  float sc = le_fa_dot(r, ic);
  sc = sc * r->scale;
  sc += mv;
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

/* fa_cell_step over cells [c0, c0 + nc) of one row (nc <= FA_CELL_BLOCK).
 * With vexp (le_vexpf_ok) in three passes: the scores and the running
 * maximum (each exp's argument), the block's exps at once (expf_libm.h),
 * then S; the same
 * operations, each exp as libm's. Without, cell by cell. One copy per
 * level (fa_block_steps_512, fa_block_steps_2). */
#define FA_BLOCK_STEPS(NAME, TARGET, VEXPF)                                                   \
  TARGET static inline __attribute__((always_inline)) void NAME(                             \
      const le_fa_row *r, int64_t c0, int nc, int vexp, float *pM, float *pS, uint8_t *use,   \
      float *msb, float *vsb) {                                                              \
    float M = *pM, S = *pS; /* in registers over the block */                                \
    if (!vexp) {                                                                             \
      for (int c = 0; c < nc; c++)                                                           \
        use[c] = (uint8_t)fa_cell_step(r, c0 + c, &M, &S, &msb[c], &vsb[c]);                 \
      *pM = M, *pS = S;                                                                      \
      return;                                                                                \
    }                                                                                        \
    float arg[FA_CELL_BLOCK], e[FA_CELL_BLOCK];                                              \
    for (int c = 0; c < nc; c++) {                                                           \
      const float mv = r->mp ? r->slope * _cvtsh_ss(r->mp[c0 + c]) : 0.0f;                   \
      arg[c] = 0.0f;                                                                         \
      use[c] = 0;                                                                            \
      if (mv == -INFINITY) continue;                                                         \
      float sc = le_fa_dot(r, c0 + c);                                                       \
      sc = sc * r->scale;                                                                    \
      sc += mv;                                                                              \
      if (sc > M) {                                                                          \
        arg[c] = M - sc; /* ms = expf(Mold - M) */                                           \
        M = sc;                                                                              \
        use[c] = 2;                                                                          \
      } else {                                                                               \
        arg[c] = sc - M; /* vs = expf(sc - M) */                                             \
        use[c] = 1;                                                                          \
      }                                                                                      \
    }                                                                                        \
    VEXPF(arg, e, nc);                                                                       \
    for (int c = 0; c < nc; c++) {                                                           \
      if (!use[c]) continue;                                                                 \
      msb[c] = use[c] == 2 ? e[c] : 1.0f;                                                    \
      vsb[c] = use[c] == 2 ? 1.0f : e[c];                                                    \
      S = S * msb[c] + vsb[c]; /* not contracted, as in ggml */                              \
    }                                                                                        \
    *pM = M, *pS = S;                                                                        \
  }
/* Out of line: inlined, its constants stay in registers across the
 * callers' VKQ loops and push their accumulators to the stack (a direct
 * call is ~10% faster at DV = 64 on Zen 4). */
LE_TARGET_AVX512 __attribute__((noinline)) static void fa_vexpf_512(const float *x, float *y,
                                                                    int n) {
  le_vexpf_avx512(x, y, n);
}
LE_TARGET_AVX2 __attribute__((noinline)) static void fa_vexpf_2(const float *x, float *y, int n) {
  le_vexpf_avx2(x, y, n);
}
FA_BLOCK_STEPS(fa_block_steps_512, LE_TARGET_AVX512, fa_vexpf_512)
FA_BLOCK_STEPS(fa_block_steps_2, LE_TARGET_AVX2, fa_vexpf_2)

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
 * over blocks of cells, as fa_cells_reg does at AVX-512: the block's steps
 * (exps by le_vexpf), then its updates, each rounded to f16 with hardware
 * RNE as ggml's AVX2 vec_scale_f16/vec_mad_f16 round. */
LE_TARGET_AVX2 static void fa_cells_f16_reg8_avx2(const le_fa_row *r, int64_t ic0, int64_t ic1,
                                                  uint16_t *VKQ16, float *pS, float *pM) {
#define FA_RNE8(x) _mm256_cvtph_ps(_mm256_cvtps_ph((x), _MM_FROUND_TO_NEAREST_INT))
#define FA_LD8(p) _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(const void *)(p)))
  __m256 acc[8];
#pragma GCC unroll 8
  for (int j = 0; j < 8; j++) acc[j] = FA_LD8(VKQ16 + 8 * j);
  const int vexp = le_vexpf_ok();
  for (int64_t c0 = ic0; c0 < ic1; c0 += FA_CELL_BLOCK) {
    const int nc = (int)LE_MIN((int64_t)FA_CELL_BLOCK, ic1 - c0);
    float vsb[FA_CELL_BLOCK], msb[FA_CELL_BLOCK];
    uint8_t use[FA_CELL_BLOCK];
    fa_block_steps_2(r, c0, nc, vexp, pM, pS, use, msb, vsb);
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

/* The same cells for DV = 16 * NV (NV <= 8) with VKQ16 held in registers
 * (as floats, each exactly an f16): in memory every cell's accumulation
 * waits for the previous store, and expf (a call) would spill registers
 * anyway. So cells go in blocks: first each one's scalar steps, then the
 * block's VKQ updates in order — scale by ms where the maximum rose, then
 * fp16(fma(v, vs, VKQ)) — the same operations on VKQ as one cell at a
 * time, rounded to f16 after each (hardware RNE, as ggml's AVX-512
 * vec_scale_f16/vec_mad_f16). */
LE_TARGET_AVX512 static inline __attribute__((always_inline)) void
fa_cells_reg(const int NV, const le_fa_row *r, int64_t ic0, int64_t ic1, uint16_t *VKQ16,
             float *pS, float *pM) {
#define FA_RNE(x) _mm512_cvtph_ps(_mm512_cvtps_ph((x), _MM_FROUND_TO_NEAREST_INT))
  __m512 acc[8];
  for (int j = 0; j < NV; j++)
    acc[j] = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(const void *)(VKQ16 + 16 * j)));
  const int vexp = le_vexpf_ok();
  for (int64_t c0 = ic0; c0 < ic1; c0 += FA_CELL_BLOCK) {
    const int nc = (int)LE_MIN((int64_t)FA_CELL_BLOCK, ic1 - c0);
    float vsb[FA_CELL_BLOCK], msb[FA_CELL_BLOCK];
    uint8_t use[FA_CELL_BLOCK];
    fa_block_steps_512(r, c0, nc, vexp, pM, pS, use, msb, vsb);
    for (int c = 0; c < nc; c++) {
      if (!use[c]) continue;
      if (use[c] == 2) {
        const __m512 m = _mm512_set1_ps(msb[c]);
        for (int j = 0; j < NV; j++) acc[j] = FA_RNE(_mm512_mul_ps(acc[j], m));
      }
      const uint16_t *x = (const uint16_t *)(const void *)(r->vb + (c0 + c) * r->vst);
      const __m512 v = _mm512_set1_ps(vsb[c]);
      for (int j = 0; j < NV; j++)
        acc[j] = FA_RNE(_mm512_fmadd_ps(
            _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(const void *)(x + 16 * j))), v,
            acc[j]));
    }
  }
  for (int j = 0; j < NV; j++)
    _mm256_storeu_si256((__m256i *)(void *)(VKQ16 + 16 * j),
                        _mm512_cvtps_ph(acc[j], _MM_FROUND_TO_NEAREST_INT));
#undef FA_RNE
}

LE_TARGET_AVX512 static void fa_cells_f16_reg4(const le_fa_row *r, int64_t ic0, int64_t ic1,
                                               uint16_t *VKQ16, float *pS, float *pM) {
  fa_cells_reg(4, r, ic0, ic1, VKQ16, pS, pM);
}
LE_TARGET_AVX512 static void fa_cells_f16_reg8(const le_fa_row *r, int64_t ic0, int64_t ic1,
                                               uint16_t *VKQ16, float *pS, float *pM) {
  fa_cells_reg(8, r, ic0, ic1, VKQ16, pS, pM);
}

/* le_fa_kq_rows / le_fa_vacc_rows at AVX-512: four rows share each load
 * of the K or V tile (16 accumulators); every element keeps its own fma
 * chain in ggml's order, so the lane width and the row grouping change
 * nothing. Leftover rows go one at a time through the same code. */
LE_TARGET_AVX512 static inline __attribute__((always_inline)) void
fa_kq4(const int NR, int64_t DK, const float *Kt, const float *const q[4], float *const o[4]) {
  __m512 a[4][4];
#pragma GCC unroll 4
  for (int t = 0; t < NR; t++)
#pragma GCC unroll 4
    for (int j = 0; j < 4; j++) a[t][j] = _mm512_setzero_ps();
  for (int64_t dk = 0; dk < DK; dk++) {
    const float *kr = Kt + dk * 64;
    const __m512 k0 = _mm512_loadu_ps(kr), k1 = _mm512_loadu_ps(kr + 16),
                 k2 = _mm512_loadu_ps(kr + 32), k3 = _mm512_loadu_ps(kr + 48);
#pragma GCC unroll 4
    for (int t = 0; t < NR; t++) {
      const __m512 qv = _mm512_set1_ps(q[t][dk]);
      a[t][0] = _mm512_fmadd_ps(k0, qv, a[t][0]);
      a[t][1] = _mm512_fmadd_ps(k1, qv, a[t][1]);
      a[t][2] = _mm512_fmadd_ps(k2, qv, a[t][2]);
      a[t][3] = _mm512_fmadd_ps(k3, qv, a[t][3]);
    }
  }
#pragma GCC unroll 4
  for (int t = 0; t < NR; t++)
#pragma GCC unroll 4
    for (int j = 0; j < 4; j++) _mm512_storeu_ps(o[t] + 16 * j, a[t][j]);
}

LE_TARGET_AVX512 static void fa_kq_rows_avx512(int64_t DK, const float *Kt, const float *Q,
                                               float *KQ, const int *rows, int n) {
  int i = 0;
  for (; i + 4 <= n; i += 4) {
    const float *q[4];
    float *o[4];
    for (int t = 0; t < 4; t++) q[t] = Q + rows[i + t] * DK, o[t] = KQ + rows[i + t] * 64;
    fa_kq4(4, DK, Kt, q, o);
  }
  for (; i < n; i++) {
    const float *q[4] = {Q + rows[i] * DK};
    float *o[4] = {KQ + rows[i] * 64};
    fa_kq4(1, DK, Kt, q, o);
  }
}

int le_fa_kq_rows(int64_t DK, const float *Kt, const float *Q, float *KQ, const int *rows, int n) {
  if (le_simd() != LE_SIMD_AVX512) return 0;
  fa_kq_rows_avx512(DK, Kt, Q, KQ, rows, n);
  return 1;
}

/* Columns [d0, d0 + 64) of VKQ for NR rows. */
LE_TARGET_AVX512 static inline __attribute__((always_inline)) void
fa_vacc4(const int NR, int64_t DV, int64_t d0, const float *Vt, const float *const w[4],
         float *const o[4]) {
  __m512 a[4][4];
#pragma GCC unroll 4
  for (int t = 0; t < NR; t++)
#pragma GCC unroll 4
    for (int j = 0; j < 4; j++) a[t][j] = _mm512_loadu_ps(o[t] + d0 + 16 * j);
  for (int tk = 0; tk < 64; tk++) {
    const float *vr = Vt + tk * DV + d0;
    const __m512 v0 = _mm512_loadu_ps(vr), v1 = _mm512_loadu_ps(vr + 16),
                 v2 = _mm512_loadu_ps(vr + 32), v3 = _mm512_loadu_ps(vr + 48);
#pragma GCC unroll 4
    for (int t = 0; t < NR; t++) {
      const __m512 wv = _mm512_set1_ps(w[t][tk]);
      a[t][0] = _mm512_fmadd_ps(v0, wv, a[t][0]);
      a[t][1] = _mm512_fmadd_ps(v1, wv, a[t][1]);
      a[t][2] = _mm512_fmadd_ps(v2, wv, a[t][2]);
      a[t][3] = _mm512_fmadd_ps(v3, wv, a[t][3]);
    }
  }
#pragma GCC unroll 4
  for (int t = 0; t < NR; t++)
#pragma GCC unroll 4
    for (int j = 0; j < 4; j++) _mm512_storeu_ps(o[t] + d0 + 16 * j, a[t][j]);
}

LE_TARGET_AVX512 static void fa_vacc_rows_avx512(int64_t DV, const float *Vt, const float *W,
                                                 float *VKQ, const int *rows, int n) {
  for (int64_t d0 = 0; d0 < DV; d0 += 64) {
    int i = 0;
    for (; i + 4 <= n; i += 4) {
      const float *w[4];
      float *o[4];
      for (int t = 0; t < 4; t++) w[t] = W + rows[i + t] * 64, o[t] = VKQ + rows[i + t] * DV;
      fa_vacc4(4, DV, d0, Vt, w, o);
    }
    for (; i < n; i++) {
      const float *w[4] = {W + rows[i] * 64};
      float *o[4] = {VKQ + rows[i] * DV};
      fa_vacc4(1, DV, d0, Vt, w, o);
    }
  }
}

int le_fa_vacc_rows(int64_t DV, const float *Vt, const float *W, float *VKQ, const int *rows,
                    int n) {
  if (le_simd() != LE_SIMD_AVX512 || DV % 64) return 0;
  fa_vacc_rows_avx512(DV, Vt, W, VKQ, rows, n);
  return 1;
}

/* fa_cells_reg for NH query heads that share one V head (their dots
 * precomputed): the heads' scalar steps for a block of cells, then each
 * cell's V row widened once and added to every head's VKQ. Per head the
 * same operations in the same order as fa_cells_reg; across heads they are
 * independent, so the heads' f16 round trips (fma, then RNE to f16 and
 * back: a long latency per cell in one head's chain) overlap. */
LE_TARGET_AVX512 static inline __attribute__((always_inline)) void
fa_cells_heads(const int NV, const int NH, const le_fa_row *r, int64_t ic0, int64_t ic1,
               uint16_t *const *VKQ16, float *pS, float *pM) {
#define FA_RNE(x) _mm512_cvtph_ps(_mm512_cvtps_ph((x), _MM_FROUND_TO_NEAREST_INT))
  __m512 acc[4][8];
  float S[4], M[4];
  const int vexp = le_vexpf_ok();
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
    /* the block's V rows are read after its scalar steps: ask for them first */
    for (int c = 0; c < nc; c++)
      for (int64_t o = 0; o < 2 * 16 * NV; o += 64)
        __builtin_prefetch(r[0].vb + (c0 + c) * r[0].vst + o, 0, 3);
    for (int h = 0; h < NH; h++)
      fa_block_steps_512(&r[h], c0, nc, vexp, &M[h], &S[h], use[h], msb[h], vsb[h]);
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

LE_TARGET_AVX512 static void fa_cells_f16_heads4(const le_fa_row *r, int64_t ic0, int64_t ic1,
                                                 uint16_t *const *VKQ16, float *pS, float *pM) {
  fa_cells_heads(4, 4, r, ic0, ic1, VKQ16, pS, pM);
}
LE_TARGET_AVX512 static void fa_cells_f16_heads2(const le_fa_row *r, int64_t ic0, int64_t ic1,
                                                 uint16_t *const *VKQ16, float *pS, float *pM) {
  fa_cells_heads(8, 2, r, ic0, ic1, VKQ16, pS, pM);
}

le_fa_heads_fn le_fa_cells_f16_heads(int64_t DV, int *nh) {
  if (le_simd() == LE_SIMD_AVX512 && DV == 64) return *nh = 4, fa_cells_f16_heads4;
  if (le_simd() == LE_SIMD_AVX512 && DV == 128) return *nh = 2, fa_cells_f16_heads2;
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
