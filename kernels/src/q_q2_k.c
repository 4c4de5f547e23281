/* Q2_K: 256-element super-blocks, 16 groups of 16 two-bit codes; each group
 * has a 4-bit scale and 4-bit min (x = d*sc*q - dmin*m). Code e sits in
 * qs[32*(e/128) + e%32] at bit 2*((e%128)/32). */
#include "q_k_simd.h"

static void q2_k_to_float(const void *vx, float *y, int64_t n) {
  const le_block_q2_k *x = vx;
  for (int64_t i = 0; i < n / LE_QK_K; i++) {
    const float d = le_fp16_to_fp32(x[i].d), min = le_fp16_to_fp32(x[i].dmin);
    for (int e = 0; e < LE_QK_K; e++) {
      const uint8_t sc = x[i].scales[e / 16];
      const float dl = d * (sc & 0xF), ml = min * (sc >> 4);
      const int q = (x[i].qs[32 * (e / 128) + e % 32] >> (2 * ((e % 128) / 32))) & 3;
      *y++ = dl * q - ml;
    }
  }
}

/* quantize_row_q2_K_ref */
static void q2_k_from_float_ref(const float *x, void *vy, int64_t n) {
  le_block_q2_k *y = vy;
  uint8_t L[LE_QK_K], Laux[16];
  float w[16], mins[16], scales[16];
  for (int64_t i = 0; i < n / LE_QK_K; i++, x += LE_QK_K) {
    float max_scale = 0, max_min = 0;
    for (int j = 0; j < 16; j++) {
      for (int l = 0; l < 16; l++) w[l] = fabsf(x[16 * j + l]);
      scales[j] = le_make_qkx2_quants(16, 3, x + 16 * j, w, L + 16 * j, &mins[j], Laux, -0.5f,
                                      0.1f, 15, true);
      if (scales[j] > max_scale) max_scale = scales[j];
      if (mins[j] > max_min) max_min = mins[j];
    }
    if (max_scale > 0) {
      const float iscale = 15.f / max_scale;
      for (int j = 0; j < 16; j++) y[i].scales[j] = (uint8_t)le_nearest_int(iscale * scales[j]);
      y[i].d = le_fp32_to_fp16(max_scale / 15.f);
    } else {
      for (int j = 0; j < 16; j++) y[i].scales[j] = 0;
      y[i].d = le_fp32_to_fp16(0.f);
    }
    if (max_min > 0) {
      const float iscale = 15.f / max_min;
      for (int j = 0; j < 16; j++) {
        y[i].scales[j] |= (uint8_t)(le_nearest_int(iscale * mins[j]) << 4);
      }
      y[i].dmin = le_fp32_to_fp16(max_min / 15.f);
    } else {
      y[i].dmin = le_fp32_to_fp16(0.f);
    }
    for (int j = 0; j < 16; j++) {
      const float d = le_fp16_to_fp32(y[i].d) * (y[i].scales[j] & 0xF);
      if (!d) continue;
      const float dm = le_fp16_to_fp32(y[i].dmin) * (y[i].scales[j] >> 4);
      for (int ii = 0; ii < 16; ii++) {
        const int l = le_nearest_int((x[16 * j + ii] + dm) / d);
        L[16 * j + ii] = (uint8_t)LE_MAX(0, LE_MIN(3, l));
      }
    }
    for (int j = 0; j < LE_QK_K; j += 128)
      for (int l = 0; l < 32; l++)
        y[i].qs[j / 4 + l] = (uint8_t)(L[j + l] | (L[j + l + 32] << 2) | (L[j + l + 64] << 4) |
                                       (L[j + l + 96] << 6));
  }
}

/* ggml_vec_dot_q2_K_q8_K_generic (llama.cpp's x64 build): one float chain,
 * per super-block sumf += dall * isum - dmin * summs with both products
 * rounded (no FMA in that build), isum and summs exact integers. */
static void dot_q2_k_scalar(int64_t n, float *s, const void *vx, const void *vy) {
  const le_block_q2_k *x = vx;
  const le_block_q8_k *y = vy;
  float sumf = 0.0f;
  for (int64_t i = 0; i < n / LE_QK_K; i++) {
    int32_t summs = 0, isum = 0;
    for (int j = 0; j < 16; j++) summs += y[i].bsums[j] * (x[i].scales[j] >> 4);
    for (int e = 0; e < LE_QK_K; e++) {
      const int q = (x[i].qs[32 * (e / 128) + e % 32] >> (2 * ((e % 128) / 32))) & 3;
      isum += (x[i].scales[e / 16] & 0xF) * (q * y[i].qs[e]);
    }
    const float dall = y[i].d * le_fp16_to_fp32(x[i].d);
    const float dmin = y[i].d * le_fp16_to_fp32(x[i].dmin);
    sumf += dall * (float)isum - dmin * (float)summs;
  }
  *s = sumf;
}

#if defined(LE_X86)
/* ggml_vec_dot_q2_K_q8_K's AVX2 order, the kernel llama.cpp runs for q2_K
 * weights it does not repack (all of them in its haswell build; ne1 % 8 != 0
 * in its AVX-512 builds, whose vec_dot has no AVX-512 branch): per
 * super-block, acc = fma(-dmin, mins . bsums in 8 lanes (groups 2l, 2l+1),
 * acc), then acc = fma(d, code sums in 8 lanes, acc); hsum_float_8 at the
 * end. Integer lane l holds bytes 4l..4l+3 of every 32-code chunk, each
 * group's scale applied to 16-bit pair sums. At the AVX-512 level mul_mat
 * always takes the repack tiles below, so this form only serves le_vec_dot
 * there. */
LE_TARGET_AVX2 LE_INLINE void dot_q2_k_body(int64_t n, float *s, const void *vx, const void *vy) {
  const le_block_q2_k *x = vx;
  const le_block_q8_k *y = vy;
  __m256 acc = _mm256_setzero_ps();
  for (int64_t i = 0; i < n / LE_QK_K; i++) {
    const float d = y[i].d * le_h2f(x[i].d);
    const float mdmin = -y[i].d * le_h2f(x[i].dmin);
    const __m128i sc = _mm_loadu_si128((const __m128i *)x[i].scales);
    const __m256i mins =
        _mm256_cvtepu8_epi16(_mm_and_si128(_mm_srli_epi16(sc, 4), _mm_set1_epi8(0x0f)));
    const __m256i prod = _mm256_madd_epi16(mins, le_load256(y[i].bsums));
    acc = _mm256_fmadd_ps(_mm256_set1_ps(mdmin), _mm256_cvtepi32_ps(prod), acc);
    __m256i sumi = _mm256_setzero_si256();
    for (int h = 0; h < 2; h++) {
      const __m256i q = le_load256(x[i].qs + 32 * h);
      for (int k = 0; k < 4; k++) {
        const int c = 4 * h + k;
        sumi = _mm256_add_epi32(sumi, le_kdot32_avx2(le_shr_mask_avx2(q, 2 * k, 3),
                                                     y[i].qs + 32 * c, x[i].scales[2 * c] & 0xF,
                                                     x[i].scales[2 * c + 1] & 0xF));
      }
    }
    acc = _mm256_fmadd_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(sumi), acc);
  }
  *s = le_hsum_ps256(acc);
}
LE_K_SIMD_VARIANTS(dot_q2_k)

/* llama.cpp repacks q2_K (ne1 % 8 == 0) only where AVX-512 exists; its
 * kernels keep a scale chain and a min chain per output and subtract them at
 * the end, adding once per super-block in gemv and once per 128-element half
 * in gemm. isum[h]/msum[h] are the exact integer pieces of half h. */
LE_TARGET_AVX2 static void q2_k_halves(const le_block_q2_k *x, const le_block_q8_k *y,
                                       int32_t isum[2], int32_t msum[2]) {
  for (int h = 0; h < 2; h++) {
    const __m256i q = le_load256(x->qs + 32 * h);
    __m256i acc = _mm256_setzero_si256();
    for (int k = 0; k < 4; k++) {
      const int c = 4 * h + k;
      acc = _mm256_add_epi32(acc, le_kdot32_avx2(le_shr_mask_avx2(q, 2 * k, 3), y->qs + 32 * c,
                                                 x->scales[2 * c] & 0xF,
                                                 x->scales[2 * c + 1] & 0xF));
    }
    isum[h] = le_hsum_i32_avx2(acc);
    msum[h] = 0;
    for (int g = 8 * h; g < 8 * h + 8; g++) msum[h] += (x->scales[g] >> 4) * y->bsums[g];
  }
}
LE_TARGET_AVX2 LE_INLINE float q2_k_repack_dot(int64_t n, const void *vx, const void *vy,
                                               int per_half) {
  const le_block_q2_k *x = vx;
  const le_block_q8_k *y = vy;
  float acc = 0.0f, accm = 0.0f;
  int32_t isum[2], msum[2];
  for (int64_t i = 0; i < n / LE_QK_K; i++) {
    q2_k_halves(&x[i], &y[i], isum, msum);
    const float d = le_h2f(x[i].d) * y[i].d, dm = le_h2f(x[i].dmin) * y[i].d;
    if (per_half) {
      for (int h = 0; h < 2; h++) {
        acc = fmaf((float)isum[h], d, acc);
        accm = fmaf((float)msum[h], dm, accm);
      }
    } else {
      acc = fmaf((float)(isum[0] + isum[1]), d, acc);
      accm = fmaf((float)(msum[0] + msum[1]), dm, accm);
    }
  }
  return acc - accm;
}
LE_TARGET_AVX512 static void q2_k_gemv(int64_t n, float *s, const void *vx, const void *vy) {
  *s = q2_k_repack_dot(n, vx, vy, 0);
}
LE_TARGET_AVX512 static void q2_k_gemm(int64_t n, float *s, const void *vx, const void *vy) {
  *s = q2_k_repack_dot(n, vx, vy, 1);
}
LE_K_REPACK_TILES(q2_k_tiles_avx512, q2_k_gemv, q2_k_gemm)
#endif

const le_type_traits le_traits_q2_k = {
    .type = LE_TYPE_Q2_K,
    .name = "q2_K",
    .blck = LE_QK_K,
    .size = sizeof(le_block_q2_k),
    .to_float = q2_k_to_float,
    .from_float_ref = q2_k_from_float_ref,
    .from_float_act = NULL,
    .vec_dot_type = LE_TYPE_Q8_K,
    .vec_dot = {
        [LE_SIMD_SCALAR] = dot_q2_k_scalar,
#if defined(LE_X86)
        [LE_SIMD_AVX2] = dot_q2_k_avx2,
        [LE_SIMD_AVX512] = dot_q2_k_avx512,
#endif
    },
#if defined(LE_X86)
    .gemm = {[LE_SIMD_AVX512] = &q2_k_tiles_avx512},
#endif
};
