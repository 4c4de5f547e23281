/* FLASH_ATTN_EXT's x86 pieces (flash_attn.c has the op): the F16 V
 * accumulation, and the cell loop of one query row over an F16 V cache at
 * the AVX2 and AVX-512 levels, every step as flash_attn.c's portable loop
 * and ggml_compute_forward_flash_attn_ext_f16_one_chunk take it. */
#include "flash_attn.h"

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
/* One cell's scalar steps (mask, kq dot, the online softmax's M and S), as
 * flash_attn.c's portable loop takes them: 0 when the mask drops the cell;
 * else 1, or 2 when the maximum rose and VKQ must first be scaled by *ms;
 * *vs is the cell's weight. */
LE_TARGET_AVX2 static inline __attribute__((always_inline)) int
fa_cell_step(const le_fa_row *r, int64_t ic, float *M, float *S, float *ms, float *vs) {
  const float mv = r->mp ? r->slope * _cvtsh_ss(r->mp[ic]) : 0.0f;
  if (mv == -INFINITY) return 0;
  float sc;
  r->kq_dot(r->DK, &sc, r->kb + ic * r->kst, r->Q_q);
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

/* The cell loop on the F16C levels: the steps above, VKQ16 in memory. */
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

/* The same cells for DV = 16 * NV (NV <= 8) with VKQ16 held in registers
 * (as floats, each exactly an f16): in memory every cell's accumulation
 * waits for the previous store, and expf (a call) would spill registers
 * anyway. So cells go in blocks: first each one's scalar steps, then the
 * block's VKQ updates in order — scale by ms where the maximum rose, then
 * fp16(fma(v, vs, VKQ)) — the same operations on VKQ as one cell at a
 * time, rounded to f16 after each (hardware RNE, as ggml's AVX-512
 * vec_scale_f16/vec_mad_f16). */
#define FA_CELL_BLOCK 32
LE_TARGET_AVX512 static inline __attribute__((always_inline)) void
fa_cells_reg(const int NV, const le_fa_row *r, int64_t ic0, int64_t ic1, uint16_t *VKQ16,
             float *pS, float *pM) {
#define FA_RNE(x) _mm512_cvtph_ps(_mm512_cvtps_ph((x), _MM_FROUND_TO_NEAREST_INT))
  __m512 acc[8];
  for (int j = 0; j < NV; j++)
    acc[j] = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(const void *)(VKQ16 + 16 * j)));
  float S = *pS, M = *pM;
  for (int64_t c0 = ic0; c0 < ic1; c0 += FA_CELL_BLOCK) {
    const int nc = (int)LE_MIN((int64_t)FA_CELL_BLOCK, ic1 - c0);
    float vsb[FA_CELL_BLOCK], msb[FA_CELL_BLOCK];
    uint8_t use[FA_CELL_BLOCK];
    for (int c = 0; c < nc; c++) use[c] = (uint8_t)fa_cell_step(r, c0 + c, &M, &S, &msb[c], &vsb[c]);
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
  *pS = S;
  *pM = M;
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

le_fa_cells_fn le_fa_cells_f16(int64_t DV) {
  if (le_simd() == LE_SIMD_AVX512 && DV == 64) return fa_cells_f16_reg4;
  if (le_simd() == LE_SIMD_AVX512 && DV == 128) return fa_cells_f16_reg8;
  return le_simd() == LE_SIMD_AVX2 || le_simd() == LE_SIMD_AVX512 ? fa_cells_f16_avx2 : NULL;
}
#else
le_fa_cells_fn le_fa_cells_f16(int64_t DV) {
  (void)DV;
  return NULL;
}
#endif
