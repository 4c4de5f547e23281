/* Q6_K: 256-element super-blocks, 16 groups of 16 six-bit codes (offset 32)
 * with int8 group scales. In each 128-element half h, code 128h + 32k + l has
 * its low nibble in ql[64h + l + 32*(k&1)] (high nibble when k >= 2) and its
 * top two bits at bit 2k of qh[32h + l]. */
#include "q_k_simd.h"
#include "le_wasm_simd.h"

static inline int q6_k_code(const le_block_q6_k *b, int e) {
  const int h = e / 128, k = (e % 128) / 32, l = e % 32;
  const uint8_t q = b->ql[64 * h + l + 32 * (k & 1)];
  return ((k >= 2) ? q >> 4 : q & 0xF) | (((b->qh[32 * h + l] >> (2 * k)) & 3) << 4);
}

static void q6_k_to_float(const void *vx, float *y, int64_t n) {
  const le_block_q6_k *x = vx;
  for (int64_t i = 0; i < n / LE_QK_K; i++) {
    const float d = le_fp16_to_fp32(x[i].d);
    for (int e = 0; e < LE_QK_K; e++) {
      const int8_t q = (int8_t)(q6_k_code(&x[i], e) - 32);
      *y++ = d * x[i].scales[e / 16] * q;
    }
  }
}

/* quantize_row_q6_K_ref */
static void q6_k_from_float_ref(const float *x, void *vy, int64_t n) {
  le_block_q6_k *y = vy;
  int8_t L[LE_QK_K];
  float scales[16];
  for (int64_t i = 0; i < n / LE_QK_K; i++, x += LE_QK_K) {
    float max_scale = 0, max_abs = 0;
    for (int g = 0; g < 16; g++) {
      scales[g] = le_make_qx_quants(16, 32, x + 16 * g, L + 16 * g, 1);
      const float a = fabsf(scales[g]);
      if (a > max_abs) {
        max_abs = a;
        max_scale = scales[g];
      }
    }
    if (max_abs < LE_GROUP_MAX_EPS) {
      memset(&y[i], 0, sizeof y[i]);
      continue;
    }
    const float iscale = -128.f / max_scale;
    y[i].d = le_fp32_to_fp16(1 / iscale);
    for (int g = 0; g < 16; g++)
      y[i].scales[g] = (int8_t)LE_MIN(127, le_nearest_int(iscale * scales[g]));
    for (int g = 0; g < 16; g++) {
      const float d = le_fp16_to_fp32(y[i].d) * y[i].scales[g];
      if (!d) continue;
      for (int ii = 0; ii < 16; ii++) {
        const int l = le_nearest_int(x[16 * g + ii] / d);
        L[16 * g + ii] = (int8_t)(LE_MAX(-32, LE_MIN(31, l)) + 32);
      }
    }
    for (int h = 0; h < 2; h++) {
      const int8_t *Lh = L + 128 * h;
      for (int l = 0; l < 32; l++) {
        y[i].ql[64 * h + l] = (uint8_t)((Lh[l] & 0xF) | ((Lh[l + 64] & 0xF) << 4));
        y[i].ql[64 * h + l + 32] = (uint8_t)((Lh[l + 32] & 0xF) | ((Lh[l + 96] & 0xF) << 4));
        y[i].qh[32 * h + l] = (uint8_t)((Lh[l] >> 4) | ((Lh[l + 32] >> 4) << 2) |
                                        ((Lh[l + 64] >> 4) << 4) | ((Lh[l + 96] >> 4) << 6));
      }
    }
  }
}

/* ggml_vec_dot_q6_K_q8_K_generic (llama.cpp's x64 build): lane e % 8 of
 * each element's scaled product (code minus 32 taken off per element),
 * le_k_lanes_generic's float sums. */
static void dot_q6_k_scalar(int64_t n, float *s, const void *vx, const void *vy) {
  const le_block_q6_k *x = vx;
  const le_block_q8_k *y = vy;
  float sums[8] = {0};
  for (int64_t i = 0; i < n / LE_QK_K; i++) {
    const int8_t *sc = x[i].scales;
    int32_t lane[8] = {0};
    for (int e = 0; e < LE_QK_K; e++)
      lane[e % 8] += sc[e / 16] * ((q6_k_code(&x[i], e) - 32) * y[i].qs[e]);
    le_k_lanes_generic(sums, lane, le_fp16_to_fp32(x[i].d) * y[i].d);
  }
  *s = le_k_reduce_generic(0.0f, sums);
}

#if defined(LE_X86)
/* ggml's AVX2 order (its icelake build has no AVX-512 q6_K dot): lane j of
 * a super-block's int32 vector also carries the offset term of the 16-code
 * groups 2j and 2j+1, and the lanes go through one fma into a float vector
 * that is summed horizontally at the end. */
LE_TARGET_AVX2 LE_INLINE void dot_q6_k_body(int64_t n, float *s, const void *vx, const void *vy) {
  const le_block_q6_k *x = vx;
  const le_block_q8_k *y = vy;
  __m256 accf = _mm256_setzero_ps();
  for (int64_t i = 0; i < n / LE_QK_K; i++) {
    const int8_t *sc = x[i].scales;
    /* The 16 scales as words, 8 per copy in both lanes: chunk c's pair
     * (2c | 2c+1) is one byte shuffle away. */
    const __m256i sw0 = _mm256_broadcastsi128_si256(_mm_cvtepi8_epi16(_mm_loadl_epi64((const __m128i *)sc)));
    const __m256i sw1 = _mm256_broadcastsi128_si256(_mm_cvtepi8_epi16(_mm_loadl_epi64((const __m128i *)(sc + 8))));
    __m256i acc = _mm256_setzero_si256();
    /* Unrolled: the shifts are constants and no branch picks l0/l1 (the
     * integer sums are exact, so only the lanes' totals matter). */
#pragma GCC unroll 2
    for (int h = 0; h < 2; h++) {
      const __m256i l0 = le_load256(x[i].ql + 64 * h), l1 = le_load256(x[i].ql + 64 * h + 32);
      const __m256i qh = le_load256(x[i].qh + 32 * h);
#pragma GCC unroll 4
      for (int k = 0; k < 4; k++) {
        const int c = 4 * h + k;
        const __m256i lq = (k & 1) ? l1 : l0;
        const __m256i lo = k >= 2 ? le_shr_mask_avx2(lq, 4, 0x0f)
                                  : _mm256_and_si256(lq, _mm256_set1_epi8(0x0f));
        const __m256i hi = _mm256_slli_epi16(le_shr_mask_avx2(qh, 2 * k, 3), 4);
        const int w = 2 * (c % 4); /* words w | w + 1 of sw0 or sw1 */
        const __m256i pick = _mm256_set_epi8(
            2 * w + 3, 2 * w + 2, 2 * w + 3, 2 * w + 2, 2 * w + 3, 2 * w + 2, 2 * w + 3, 2 * w + 2,
            2 * w + 3, 2 * w + 2, 2 * w + 3, 2 * w + 2, 2 * w + 3, 2 * w + 2, 2 * w + 3, 2 * w + 2,
            2 * w + 1, 2 * w, 2 * w + 1, 2 * w, 2 * w + 1, 2 * w, 2 * w + 1, 2 * w,
            2 * w + 1, 2 * w, 2 * w + 1, 2 * w, 2 * w + 1, 2 * w, 2 * w + 1, 2 * w);
        const __m256i scv = _mm256_shuffle_epi8(c < 4 ? sw0 : sw1, pick);
        const __m256i p = _mm256_maddubs_epi16(_mm256_or_si256(lo, hi), le_load256(y[i].qs + 32 * c));
        acc = _mm256_add_epi32(acc, _mm256_madd_epi16(p, scv));
      }
    }
    const __m256i off = _mm256_madd_epi16(le_load256(y[i].bsums),
                                          _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)sc)));
    acc = _mm256_sub_epi32(acc, _mm256_slli_epi32(off, 5));
    const float d = y[i].d * le_h2f(x[i].d);
    accf = _mm256_fmadd_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(acc), accf);
  }
  *s = le_hsum_ps256(accf);
}
LE_K_SIMD_VARIANTS(dot_q6_k)
#endif

const le_type_traits le_traits_q6_k = {
    .type = LE_TYPE_Q6_K,
    .name = "q6_K",
    .blck = LE_QK_K,
    .size = sizeof(le_block_q6_k),
    .to_float = q6_k_to_float,
    .from_float_ref = q6_k_from_float_ref,
    .from_float_act = NULL,
    .vec_dot_type = LE_TYPE_Q8_K,
    .vec_dot = {
#if defined(LE_WASM_SIMD)
        [LE_SIMD_SCALAR] = le_dot_q6_k_wasm,
#else
        [LE_SIMD_SCALAR] = dot_q6_k_scalar,
#endif
#if defined(LE_X86)
        [LE_SIMD_AVX2] = dot_q6_k_avx2,
        [LE_SIMD_AVX512] = dot_q6_k_avx512,
#endif
    },
};
