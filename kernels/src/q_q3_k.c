/* Q3_K: 256-element super-blocks, 16 groups of 16 three-bit codes (offset 4)
 * with signed 6-bit group scales. Low two bits as in q2_K; the third bit of
 * code e is bit e/32 of hmask[e%32]. */
#include "q_k_simd.h"

static inline int q3_k_code(const le_block_q3_k *b, int e) {
  const int lo = (b->qs[32 * (e / 128) + e % 32] >> (2 * ((e % 128) / 32))) & 3;
  return lo | (((b->hmask[e % 32] >> (e / 32)) & 1) << 2); /* 0..7, value is code - 4 */
}

static void q3_k_to_float(const void *vx, float *y, int64_t n) {
  const le_block_q3_k *x = vx;
  int8_t sc[16];
  for (int64_t i = 0; i < n / LE_QK_K; i++) {
    const float d_all = le_fp16_to_fp32(x[i].d);
    le_q3k_scales(x[i].scales, sc);
    for (int e = 0; e < LE_QK_K; e++) {
      const float dl = d_all * sc[e / 16];
      *y++ = dl * (q3_k_code(&x[i], e) - 4);
    }
  }
}

/* quantize_row_q3_K_ref */
static void q3_k_from_float_ref(const float *x, void *vy, int64_t n) {
  le_block_q3_k *y = vy;
  int8_t L[LE_QK_K];
  float scales[16];
  for (int64_t i = 0; i < n / LE_QK_K; i++, x += LE_QK_K) {
    float max_scale = 0, amax = 0;
    for (int j = 0; j < 16; j++) {
      scales[j] = le_make_q3_quants(16, 4, x + 16 * j, L + 16 * j, true);
      const float a = fabsf(scales[j]);
      if (a > amax) {
        amax = a;
        max_scale = scales[j];
      }
    }
    memset(y[i].scales, 0, 12);
    if (max_scale) {
      const float iscale = -32.f / max_scale;
      for (int j = 0; j < 16; j++) {
        int8_t l = (int8_t)le_nearest_int(iscale * scales[j]);
        l = (int8_t)(LE_MAX(-32, LE_MIN(31, l)) + 32);
        if (j < 8) y[i].scales[j] = l & 0xF;
        else y[i].scales[j - 8] |= (uint8_t)((l & 0xF) << 4);
        l >>= 4;
        y[i].scales[j % 4 + 8] |= (uint8_t)(l << (2 * (j / 4)));
      }
      y[i].d = le_fp32_to_fp16(1 / iscale);
    } else {
      y[i].d = le_fp32_to_fp16(0.f);
    }
    int8_t sc[16];
    le_q3k_scales(y[i].scales, sc);
    for (int j = 0; j < 16; j++) {
      const float d = le_fp16_to_fp32(y[i].d) * sc[j];
      if (!d) continue;
      for (int ii = 0; ii < 16; ii++) {
        const int l = le_nearest_int(x[16 * j + ii] / d);
        L[16 * j + ii] = (int8_t)(LE_MAX(-4, LE_MIN(3, l)) + 4);
      }
    }
    memset(y[i].hmask, 0, 32);
    for (int e = 0; e < LE_QK_K; e++) {
      if (L[e] > 3) {
        y[i].hmask[e % 32] |= (uint8_t)(1 << (e / 32));
        L[e] -= 4;
      }
    }
    for (int j = 0; j < LE_QK_K; j += 128)
      for (int l = 0; l < 32; l++)
        y[i].qs[j / 4 + l] = (uint8_t)(L[j + l] | (L[j + l + 32] << 2) | (L[j + l + 64] << 4) |
                                       (L[j + l + 96] << 6));
  }
}

/* ggml_vec_dot_q3_K_q8_K_generic (llama.cpp's x64 build): lane e % 8 of
 * each element's scaled product, le_k_lanes_generic's float sums. */
static void dot_q3_k_scalar(int64_t n, float *s, const void *vx, const void *vy) {
  const le_block_q3_k *x = vx;
  const le_block_q8_k *y = vy;
  float sums[8] = {0};
  int8_t sc[16];
  for (int64_t i = 0; i < n / LE_QK_K; i++) {
    le_q3k_scales(x[i].scales, sc);
    int32_t lane[8] = {0};
    for (int e = 0; e < LE_QK_K; e++)
      lane[e % 8] += sc[e / 16] * ((q3_k_code(&x[i], e) - 4) * y[i].qs[e]);
    le_k_lanes_generic(sums, lane, le_fp16_to_fp32(x[i].d) * y[i].d);
  }
  *s = le_k_reduce_generic(0.0f, sums);
}

#if defined(LE_X86)
/* ggml's AVX2 order (its icelake build has no AVX-512 q3_K dot): the
 * offset 4 is taken off each code pair inside the 16-bit products, so every
 * int32 lane holds its own signed partial sum; the lanes go through one fma
 * per super-block into a float vector summed horizontally at the end. */
LE_TARGET_AVX2 LE_INLINE void dot_q3_k_body(int64_t n, float *s, const void *vx, const void *vy) {
  const le_block_q3_k *x = vx;
  const le_block_q8_k *y = vy;
  __m256 accf = _mm256_setzero_ps();
  int8_t sc[16];
  for (int64_t i = 0; i < n / LE_QK_K; i++) {
    le_q3k_scales(x[i].scales, sc);
    const __m256i hm = le_load256(x[i].hmask);
    __m256i acc = _mm256_setzero_si256();
    for (int h = 0; h < 2; h++) {
      const __m256i q = le_load256(x[i].qs + 32 * h);
      for (int k = 0; k < 4; k++) {
        const int c = 4 * h + k;
        /* 4 where the high bit is clear: the amount the code sits below its offset */
        const __m256i neg = _mm256_slli_epi16(
            le_shr_mask_avx2(_mm256_andnot_si256(hm, _mm256_set1_epi8((char)(1 << c))), c, 1), 2);
        const __m256i qy = le_load256(y[i].qs + 32 * c);
        const __m256i p16 = _mm256_sub_epi16(_mm256_maddubs_epi16(le_shr_mask_avx2(q, 2 * k, 3), qy),
                                             _mm256_maddubs_epi16(neg, qy));
        acc = _mm256_add_epi32(
            acc, _mm256_madd_epi16(p16, _mm256_set_m128i(_mm_set1_epi16(sc[2 * c + 1]),
                                                         _mm_set1_epi16(sc[2 * c]))));
      }
    }
    const float d = y[i].d * le_h2f(x[i].d);
    accf = _mm256_fmadd_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(acc), accf);
  }
  *s = le_hsum_ps256(accf);
}
LE_K_SIMD_VARIANTS(dot_q3_k)
#endif

const le_type_traits le_traits_q3_k = {
    .type = LE_TYPE_Q3_K,
    .name = "q3_K",
    .blck = LE_QK_K,
    .size = sizeof(le_block_q3_k),
    .to_float = q3_k_to_float,
    .from_float_ref = q3_k_from_float_ref,
    .from_float_act = NULL,
    .vec_dot_type = LE_TYPE_Q8_K,
    .vec_dot = {
        [LE_SIMD_SCALAR] = dot_q3_k_scalar,
#if defined(LE_X86)
        [LE_SIMD_AVX2] = dot_q3_k_avx2,
        [LE_SIMD_AVX512] = dot_q3_k_avx512,
#endif
    },
};
