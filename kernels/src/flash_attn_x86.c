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
/* fa_one_row's cell loop for an F16 V cache on the F16C levels: the same
 * steps per cell (mask, kq dot, online softmax, VKQ16 += v * vs) with the
 * mask converted by F16C and the accumulation inlined, not a software
 * conversion and two calls per cell. */
#define FA_CELLS_F16_BODY(MAD)                                                                     \
  float S = *pS, M = *pM;                                                                          \
  for (int64_t ic = ic0; ic < ic1; ic++) {                                                         \
    const float mv = mp ? slope * _cvtsh_ss(mp[ic]) : 0.0f;                                        \
    if (mv == -INFINITY) continue;                                                                 \
    float sc;                                                                                      \
    kq_dot(DK, &sc, kb + ic * kst, Q_q);                                                        \
    sc = sc * scale;                                                                            \
    sc += mv;                                                                                      \
    const float Mold = M;                                                                          \
    float ms = 1.0f, vs = 1.0f;                                                                    \
    if (sc > M) {                                                                                  \
      M = sc;                                                                                      \
      ms = expf(Mold - M);                                                                         \
      le_fa_scale_f16(DV, VKQ16, ms);                                                              \
    } else {                                                                                       \
      vs = expf(sc - M);                                                                           \
    }                                                                                              \
    MAD(DV, VKQ16, (const uint16_t *)(const void *)(vb + ic * vst), vs);                        \
    S = S * ms + vs;                                                                               \
  }                                                                                                \
  *pS = S;                                                                                         \
  *pM = M;                                                                                         

LE_TARGET_AVX2 static void fa_cells_f16_avx2(int64_t DK, int64_t DV, float scale, le_vec_dot_fn kq_dot,
                                             const void *Q_q, const char *kb, size_t kst,
                                             const char *vb, size_t vst, const uint16_t *mp,
                                             float slope, int64_t ic0, int64_t ic1,
                                             uint16_t *VKQ16, float *pS, float *pM) {
  FA_CELLS_F16_BODY(le_fa_mad_f16_avx2)
}

/* VKQ16 += x * v 16 at a time: each element is fp16(fma(x, v, y)) with
 * round-to-nearest as in fa_mad_f16_avx2, so the width changes nothing. */
LE_TARGET_AVX512 static inline void fa_mad_f16_avx512(int64_t n, uint16_t *y, const uint16_t *x,
                                                      float v) {
  const __m512 vv = _mm512_set1_ps(v);
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m512 a = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(const void *)(x + i)));
    const __m512 b = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(const void *)(y + i)));
    _mm256_storeu_si256((__m256i *)(void *)(y + i),
                        _mm512_cvtps_ph(_mm512_fmadd_ps(a, vv, b), _MM_FROUND_TO_NEAREST_INT));
  }
  if (i < n) le_fa_mad_f16_avx2(n - i, y + i, x + i, v);
}

LE_TARGET_AVX512 static void fa_cells_f16_avx512(int64_t DK, int64_t DV, float scale, le_vec_dot_fn kq_dot,
                                                 const void *Q_q, const char *kb, size_t kst,
                                                 const char *vb, size_t vst, const uint16_t *mp,
                                                 float slope, int64_t ic0, int64_t ic1,
                                                 uint16_t *VKQ16, float *pS, float *pM) {
  FA_CELLS_F16_BODY(fa_mad_f16_avx512)
}

/* The same cells for DV = 16 * NV (NV <= 8) with VKQ16 held in registers
 * (as floats, each exactly an f16): the cell loop above keeps it in memory,
 * so every cell's accumulation waits for the previous store, and expf (a
 * call) would spill registers anyway. So cells go in blocks: first the
 * scalar part of each (mask, kq dot, the online softmax's M, S, ms, vs),
 * then the block's VKQ updates in order — scale by ms where the maximum
 * rose, then fp16(fma(v, vs, VKQ)) — the same operations on VKQ as one
 * cell at a time, rounded to f16 after each as before (hardware RNE, as
 * ggml's AVX-512 vec_scale_f16/vec_mad_f16). */
#define FA_CELL_BLOCK 32
LE_TARGET_AVX512 static inline __attribute__((always_inline)) void
fa_cells_reg(const int NV, int64_t DK, int64_t DV, float scale, le_vec_dot_fn kq_dot, const void *Q_q,
             const char *kb, size_t kst, const char *vb, size_t vst, const uint16_t *mp,
             float slope, int64_t ic0, int64_t ic1, uint16_t *VKQ16, float *pS, float *pM) {
#define FA_RNE(x) _mm512_cvtph_ps(_mm512_cvtps_ph((x), _MM_FROUND_TO_NEAREST_INT))
  __m512 acc[8];
  for (int j = 0; j < NV; j++)
    acc[j] = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(const void *)(VKQ16 + 16 * j)));
  float S = *pS, M = *pM;
  for (int64_t c0 = ic0; c0 < ic1; c0 += FA_CELL_BLOCK) {
    const int nc = (int)LE_MIN((int64_t)FA_CELL_BLOCK, ic1 - c0);
    float vsb[FA_CELL_BLOCK], msb[FA_CELL_BLOCK];
    uint8_t use[FA_CELL_BLOCK]; /* 0 masked, 1 accumulate, 2 rescale first */
    for (int c = 0; c < nc; c++) {
      const int64_t ic = c0 + c;
      const float mv = mp ? slope * _cvtsh_ss(mp[ic]) : 0.0f;
      use[c] = 0;
      if (mv == -INFINITY) continue;
      float sc;
      kq_dot(DK, &sc, kb + ic * kst, Q_q);
      sc = sc * scale;
      sc += mv;
      const float Mold = M;
      float ms = 1.0f, vs = 1.0f;
      if (sc > M) {
        M = sc;
        ms = expf(Mold - M);
        use[c] = 2;
      } else {
        vs = expf(sc - M);
        use[c] = 1;
      }
      vsb[c] = vs;
      msb[c] = ms;
      S = S * ms + vs;
    }
    for (int c = 0; c < nc; c++) {
      if (!use[c]) continue;
      if (use[c] == 2) {
        const __m512 m = _mm512_set1_ps(msb[c]);
        for (int j = 0; j < NV; j++) acc[j] = FA_RNE(_mm512_mul_ps(acc[j], m));
      }
      const uint16_t *x = (const uint16_t *)(const void *)(vb + (c0 + c) * vst);
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

LE_TARGET_AVX512 static void fa_cells_f16_reg4(int64_t DK, int64_t DV, float scale, le_vec_dot_fn kq_dot,
                                               const void *Q_q, const char *kb, size_t kst,
                                               const char *vb, size_t vst, const uint16_t *mp,
                                               float slope, int64_t ic0, int64_t ic1,
                                               uint16_t *VKQ16, float *pS, float *pM) {
  fa_cells_reg(4, DK, DV, scale, kq_dot, Q_q, kb, kst, vb, vst, mp, slope, ic0, ic1, VKQ16, pS, pM);
}
LE_TARGET_AVX512 static void fa_cells_f16_reg8(int64_t DK, int64_t DV, float scale, le_vec_dot_fn kq_dot,
                                               const void *Q_q, const char *kb, size_t kst,
                                               const char *vb, size_t vst, const uint16_t *mp,
                                               float slope, int64_t ic0, int64_t ic1,
                                               uint16_t *VKQ16, float *pS, float *pM) {
  fa_cells_reg(8, DK, DV, scale, kq_dot, Q_q, kb, kst, vb, vst, mp, slope, ic0, ic1, VKQ16, pS, pM);
}

le_fa_cells_fn le_fa_cells_f16(int64_t DV) {
  if (le_simd() == LE_SIMD_AVX512) {
    if (DV == 64) return fa_cells_f16_reg4;
    if (DV == 128) return fa_cells_f16_reg8;
    return fa_cells_f16_avx512;
  }
  return le_simd() == LE_SIMD_AVX2 ? fa_cells_f16_avx2 : NULL;
}
#else
le_fa_cells_fn le_fa_cells_f16(int64_t DV) {
  (void)DV;
  return NULL;
}
#endif
