/* Q5_K: q4_K's layout plus a fifth bit per code: bit e/32 of qh[e%32]. */
#include "q_k_simd.h"

static inline int q5_k_code(const le_block_q5_k *b, int e) {
  const int g = e / 32, l = e % 32;
  const uint8_t q = b->qs[32 * (g / 2) + l];
  return ((g & 1) ? q >> 4 : q & 0xF) | (((b->qh[l] >> g) & 1) << 4);
}

static void q5_k_to_float(const void *vx, float *y, int64_t n) {
  const le_block_q5_k *x = vx;
  for (int64_t i = 0; i < n / LE_QK_K; i++) {
    const float d = le_fp16_to_fp32(x[i].d), min = le_fp16_to_fp32(x[i].dmin);
    for (int g = 0; g < 8; g++) {
      uint8_t sc, m;
      le_scale_min_k4(g, x[i].scales, &sc, &m);
      const float dl = d * sc, ml = min * m;
      for (int l = 0; l < 32; l++) *y++ = dl * q5_k_code(&x[i], 32 * g + l) - ml;
    }
  }
}

/* quantize_row_q5_K_ref */
static void q5_k_from_float_ref(const float *x, void *vy, int64_t n) {
  le_block_q5_k *y = vy;
  uint8_t L[LE_QK_K];
  float scales[8], mins[8], max_scale, max_min;
  for (int64_t i = 0; i < n / LE_QK_K; i++, x += LE_QK_K) {
    le_fit_groups_k4(x, 31, -0.5f, 15, L, scales, mins, &max_scale, &max_min);
    memset(y[i].scales, 0, 12);
    le_pack_scales_k4(scales, mins, max_scale, max_min, y[i].scales, &y[i].d, &y[i].dmin);
    le_requant_k4(x, y[i].scales, y[i].d, y[i].dmin, 31, L);
    memset(y[i].qh, 0, 32);
    for (int p = 0; p < 4; p++) {
      for (int l = 0; l < 32; l++) {
        int l1 = L[64 * p + l], l2 = L[64 * p + 32 + l];
        if (l1 > 15) {
          l1 -= 16;
          y[i].qh[l] |= (uint8_t)(1 << (2 * p));
        }
        if (l2 > 15) {
          l2 -= 16;
          y[i].qh[l] |= (uint8_t)(2 << (2 * p));
        }
        y[i].qs[32 * p + l] = (uint8_t)(l1 | (l2 << 4));
      }
    }
  }
}

/* ggml_vec_dot_q5_K_q8_K_generic (llama.cpp's x64 build): as q4_K's
 * scalar dot with the fifth bit; the min product is rounded (no FMA). */
static void dot_q5_k_scalar(int64_t n, float *s, const void *vx, const void *vy) {
  const le_block_q5_k *x = vx;
  const le_block_q8_k *y = vy;
  float sums[8] = {0}, sumf = 0.0f;
  uint8_t sc[8], m[8];
  for (int64_t i = 0; i < n / LE_QK_K; i++) {
    for (int g = 0; g < 8; g++) le_scale_min_k4(g, x[i].scales, &sc[g], &m[g]);
    int32_t lane[8] = {0};
    for (int e = 0; e < LE_QK_K; e++)
      lane[e % 8] += sc[e / 32] * (q5_k_code(&x[i], e) * y[i].qs[e]);
    le_k_lanes_generic(sums, lane, le_fp16_to_fp32(x[i].d) * y[i].d);
    sumf -= (le_fp16_to_fp32(x[i].dmin) * y[i].d) * (float)le_summs_k4(m, &y[i]);
  }
  *s = le_k_reduce_generic(sumf, sums);
}

#if defined(LE_X86)
/* ggml's AVX2 order (the one its icelake build runs): each super-block's
 * 8 int32 lanes are scaled into a float vector accumulator by one fma, the
 * min terms go to a separate scalar sum, and the two meet at the end.
 * `summs += dmin * (float)isum` is compiled to an fma in both llama.cpp
 * builds (vfmadd231ss in libggml-cpu-haswell.so and -icelake.so), so both
 * levels fuse it; fma_summs = 0 (a rounded product) is what ggml's generic
 * C would do without contraction. */
LE_TARGET_AVX2 LE_INLINE void dot_q5_k_body(int64_t n, float *s, const void *vx, const void *vy,
                                            int fma_summs) {
  const le_block_q5_k *x = vx;
  const le_block_q8_k *y = vy;
  __m256 accf = _mm256_setzero_ps();
  float summs = 0.0f;
  uint8_t sc[8], m[8];
  for (int64_t i = 0; i < n / LE_QK_K; i++) {
    for (int g = 0; g < 8; g++) le_scale_min_k4(g, x[i].scales, &sc[g], &m[g]);
    const __m256i qh = le_load256(x[i].qh);
    __m256i acc = _mm256_setzero_si256();
    for (int p = 0; p < 4; p++) {
      const __m256i q = le_load256(x[i].qs + 32 * p);
      const __m256i h0 = _mm256_slli_epi16(le_shr_mask_avx2(qh, 2 * p, 1), 4);
      const __m256i h1 = _mm256_slli_epi16(le_shr_mask_avx2(qh, 2 * p + 1, 1), 4);
      const __m256i lo = _mm256_or_si256(_mm256_and_si256(q, _mm256_set1_epi8(0x0f)), h0);
      const __m256i hi = _mm256_or_si256(le_shr_mask_avx2(q, 4, 0x0f), h1);
      acc = _mm256_add_epi32(acc, le_kdot32_avx2(lo, y[i].qs + 64 * p, sc[2 * p], sc[2 * p]));
      acc = _mm256_add_epi32(
          acc, le_kdot32_avx2(hi, y[i].qs + 64 * p + 32, sc[2 * p + 1], sc[2 * p + 1]));
    }
    const float d = y[i].d * le_h2f(x[i].d);
    const float mdmin = -y[i].d * le_h2f(x[i].dmin);
    if (fma_summs) {
      summs = _mm_cvtss_f32(_mm_fmadd_ss(_mm_set_ss(mdmin),
                                         _mm_set_ss((float)le_summs_k4(m, &y[i])),
                                         _mm_set_ss(summs)));
    } else {
      summs += mdmin * (float)le_summs_k4(m, &y[i]);
    }
    accf = _mm256_fmadd_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(acc), accf);
  }
  *s = le_hsum_ps256(accf) + summs;
}
LE_TARGET_AVX2 static void dot_q5_k_avx2(int64_t n, float *s, const void *vx, const void *vy) {
  dot_q5_k_body(n, s, vx, vy, 1);
}
LE_TARGET_AVX512 static void dot_q5_k_avx512(int64_t n, float *s, const void *vx, const void *vy) {
  dot_q5_k_body(n, s, vx, vy, 1);
}
#endif

const le_type_traits le_traits_q5_k = {
    .type = LE_TYPE_Q5_K,
    .name = "q5_K",
    .blck = LE_QK_K,
    .size = sizeof(le_block_q5_k),
    .to_float = q5_k_to_float,
    .from_float_ref = q5_k_from_float_ref,
    .from_float_act = NULL,
    .vec_dot_type = LE_TYPE_Q8_K,
    .vec_dot = {
        [LE_SIMD_SCALAR] = dot_q5_k_scalar,
#if defined(LE_X86)
        [LE_SIMD_AVX2] = dot_q5_k_avx2,
        [LE_SIMD_AVX512] = dot_q5_k_avx512,
#endif
    },
};
