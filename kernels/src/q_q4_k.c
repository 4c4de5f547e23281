/* Q4_K: 256-element super-blocks, 8 groups of 32 four-bit codes, each with a
 * 6-bit scale and 6-bit min (x = d*sc*q - dmin*m). Groups 2p and 2p+1 are the
 * low and high nibbles of qs[32p .. 32p+31]. */
#include "q_k_simd.h"
#include "le_wasm_simd.h"

static void q4_k_to_float(const void *vx, float *y, int64_t n) {
  const le_block_q4_k *x = vx;
  for (int64_t i = 0; i < n / LE_QK_K; i++) {
    const float d = le_fp16_to_fp32(x[i].d), min = le_fp16_to_fp32(x[i].dmin);
    for (int g = 0; g < 8; g++) {
      uint8_t sc, m;
      le_scale_min_k4(g, x[i].scales, &sc, &m);
      const float dl = d * sc, ml = min * m;
      const uint8_t *q = x[i].qs + 32 * (g / 2);
      for (int l = 0; l < 32; l++) *y++ = dl * ((g & 1) ? q[l] >> 4 : q[l] & 0xF) - ml;
    }
  }
}

/* Shared by q4_K and q5_K: packs 8 (scale, min) pairs into the 12-byte
 * array and sets d/dmin (quantize_row_q{4,5}_K_ref's middle step). */
static void pack_scales_k4(const float *scales, const float *mins, float max_scale, float max_min,
                           uint8_t *out, uint16_t *d, uint16_t *dmin) {
  const float inv_scale = max_scale > 0 ? 63.f / max_scale : 0.f;
  const float inv_min = max_min > 0 ? 63.f / max_min : 0.f;
  for (int j = 0; j < 8; j++) {
    uint8_t ls = (uint8_t)le_nearest_int(inv_scale * scales[j]);
    uint8_t lm = (uint8_t)le_nearest_int(inv_min * mins[j]);
    ls = LE_MIN(63, ls);
    lm = LE_MIN(63, lm);
    if (j < 4) {
      out[j] = ls;
      out[j + 4] = lm;
    } else {
      out[j + 4] = (uint8_t)((ls & 0xF) | ((lm & 0xF) << 4));
      out[j - 4] |= (uint8_t)((ls >> 4) << 6);
      out[j] |= (uint8_t)((lm >> 4) << 6);
    }
  }
  *d = le_fp32_to_fp16(max_scale / 63.f);
  *dmin = le_fp32_to_fp16(max_min / 63.f);
}

/* The per-group fit of q4_K/q5_K: weights av_x + |x| around the group RMS. */
void le_fit_groups_k4(const float *x, int nmax, float rmin, int nstep, uint8_t *L,
                      float *scales, float *mins, float *max_scale, float *max_min) {
  float w[32];
  uint8_t Laux[32];
  *max_scale = 0;
  *max_min = 0;
  for (int j = 0; j < 8; j++) {
    float sum_x2 = 0;
    for (int l = 0; l < 32; l++) sum_x2 += x[32 * j + l] * x[32 * j + l];
    const float av_x = sqrtf(sum_x2 / 32);
    for (int l = 0; l < 32; l++) w[l] = av_x + fabsf(x[32 * j + l]);
    scales[j] = le_make_qkx2_quants(32, nmax, x + 32 * j, w, L + 32 * j, &mins[j], Laux, rmin,
                                    0.1f, nstep, false);
    if (scales[j] > *max_scale) *max_scale = scales[j];
    if (mins[j] > *max_min) *max_min = mins[j];
  }
}

/* Final codes from the stored (rounded) scales and mins. */
void le_requant_k4(const float *x, const uint8_t *packed, uint16_t d16, uint16_t dmin16, int nmax,
                   uint8_t *L) {
  for (int j = 0; j < 8; j++) {
    uint8_t sc, m;
    le_scale_min_k4(j, packed, &sc, &m);
    const float d = le_fp16_to_fp32(d16) * sc;
    if (!d) continue;
    const float dm = le_fp16_to_fp32(dmin16) * m;
    for (int ii = 0; ii < 32; ii++) {
      const int l = le_nearest_int((x[32 * j + ii] + dm) / d);
      L[32 * j + ii] = (uint8_t)LE_MAX(0, LE_MIN(nmax, l));
    }
  }
}

/* quantize_row_q4_K_ref */
static void q4_k_from_float_ref(const float *x, void *vy, int64_t n) {
  le_block_q4_k *y = vy;
  uint8_t L[LE_QK_K];
  float scales[8], mins[8], max_scale, max_min;
  for (int64_t i = 0; i < n / LE_QK_K; i++, x += LE_QK_K) {
    le_fit_groups_k4(x, 15, -1.f, 20, L, scales, mins, &max_scale, &max_min);
    memset(y[i].scales, 0, 12);
    pack_scales_k4(scales, mins, max_scale, max_min, y[i].scales, &y[i].d, &y[i].dmin);
    le_requant_k4(x, y[i].scales, y[i].d, y[i].dmin, 15, L);
    for (int p = 0; p < 4; p++)
      for (int l = 0; l < 32; l++)
        y[i].qs[32 * p + l] = (uint8_t)(L[64 * p + l] | (L[64 * p + 32 + l] << 4));
  }
}

/* min term shared by q4_K/q5_K: sum over groups of m * (group activation sum) */
int32_t le_summs_k4(const uint8_t *mins, const le_block_q8_k *y) {
  int32_t s = 0;
  for (int g = 0; g < 8; g++) s += mins[g] * (y->bsums[2 * g] + y->bsums[2 * g + 1]);
  return s;
}

/* llama.cpp's repacked q4_K kernels (ggml-cpu/arch/x86/repack.cpp, weights
 * with ne1 % 8 == 0): two float chains per output, one for the scale terms
 * and one for the min terms, subtracted at the end. Its gemv (one activation
 * column, or the ne11 % 4 leftover columns) adds once per super-block, its
 * gemm (columns in groups of 4) once per 64-element chunk. */
typedef void (*q4_k_chunks_fn)(const le_block_q4_k *, const le_block_q8_k *, int32_t *, int32_t *);
LE_INLINE float q4_k_repack_dot(int64_t n, const void *vx, const void *vy, int per_chunk,
                                q4_k_chunks_fn chunks) {
  const le_block_q4_k *x = vx;
  const le_block_q8_k *y = vy;
  float acc = 0.0f, accm = 0.0f;
  int32_t isum[4], msum[4];
  for (int64_t i = 0; i < n / LE_QK_K; i++) {
    chunks(&x[i], &y[i], isum, msum);
    const float d = le_fp16_to_fp32(x[i].d) * y[i].d;
    const float dm = le_fp16_to_fp32(x[i].dmin) * y[i].d;
    if (per_chunk) {
      for (int p = 0; p < 4; p++) {
        acc = fmaf((float)isum[p], d, acc);
        accm = fmaf((float)msum[p], dm, accm);
      }
    } else {
      acc = fmaf((float)(isum[0] + isum[1] + isum[2] + isum[3]), d, acc);
      accm = fmaf((float)(msum[0] + msum[1] + msum[2] + msum[3]), dm, accm);
    }
  }
  return acc - accm;
}

/* ggml_vec_dot_q4_K_q8_K_generic (llama.cpp's x64 build, which never
 * repacks: its repack buffer types need AVX2): lane e % 8 of each element's
 * scaled product into le_k_lanes_generic's float sums, the min terms
 * subtracted from sumf as rounded products, the sums added in at the end. */
static void dot_q4_k_scalar(int64_t n, float *s, const void *vx, const void *vy) {
  const le_block_q4_k *x = vx;
  const le_block_q8_k *y = vy;
  float sums[8] = {0}, sumf = 0.0f;
  uint8_t sc[8], m[8];
  for (int64_t i = 0; i < n / LE_QK_K; i++) {
    for (int g = 0; g < 8; g++) le_scale_min_k4(g, x[i].scales, &sc[g], &m[g]);
    int32_t lane[8] = {0};
    for (int g = 0; g < 8; g++)
      for (int e = 0; e < 32; e++) {
        const uint8_t b = x[i].qs[32 * (g / 2) + e];
        lane[e % 8] += sc[g] * (((g & 1) ? b >> 4 : b & 0xF) * y[i].qs[32 * g + e]);
      }
    le_k_lanes_generic(sums, lane, le_fp16_to_fp32(x[i].d) * y[i].d);
    sumf -= (le_fp16_to_fp32(x[i].dmin) * y[i].d) * (float)le_summs_k4(m, &y[i]);
  }
  *s = le_k_reduce_generic(sumf, sums);
}

#if defined(LE_X86)
LE_TARGET_AVX2 LE_INLINE void dot_q4_k_body(int64_t n, float *s, const void *vx, const void *vy) {
  const le_block_q4_k *x = vx;
  const le_block_q8_k *y = vy;
  __m256 acc = _mm256_setzero_ps();
  __m128 accm = _mm_setzero_ps();
  uint8_t sc[8], m[8];
  for (int64_t i = 0; i < n / LE_QK_K; i++) {
    for (int g = 0; g < 8; g++) le_scale_min_k4(g, x[i].scales, &sc[g], &m[g]);
    __m256i sumi = _mm256_setzero_si256();
    for (int p = 0; p < 4; p++) {
      const __m256i q = le_load256(x[i].qs + 32 * p);
      const __m256i lo = _mm256_and_si256(q, _mm256_set1_epi8(0x0f));
      const __m256i hi = le_shr_mask_avx2(q, 4, 0x0f);
      sumi = _mm256_add_epi32(sumi, _mm256_add_epi32(
          le_kdot32_avx2(lo, y[i].qs + 64 * p, sc[2 * p], sc[2 * p]),
          le_kdot32_avx2(hi, y[i].qs + 64 * p + 32, sc[2 * p + 1], sc[2 * p + 1])));
    }
    const __m128i bs = _mm_hadd_epi16(_mm_loadu_si128((const __m128i *)y[i].bsums),
                                      _mm_loadu_si128((const __m128i *)(y[i].bsums + 8)));
    const __m128i pm = _mm_madd_epi16(
        _mm_set_epi16(m[7], m[6], m[5], m[4], m[3], m[2], m[1], m[0]), bs);
    const float d = y[i].d * le_h2f(x[i].d);
    const float mdmin = -y[i].d * le_h2f(x[i].dmin);
    accm = _mm_fmadd_ps(_mm_set1_ps(mdmin), _mm_cvtepi32_ps(pm), accm);
    acc = _mm256_fmadd_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(sumi), acc);
  }
  accm = _mm_add_ps(accm, _mm_movehl_ps(accm, accm));
  accm = _mm_add_ss(accm, _mm_movehdup_ps(accm));
  *s = le_hsum_ps256(acc) + _mm_cvtss_f32(accm);
}
LE_K_SIMD_VARIANTS(dot_q4_k)

LE_TARGET_AVX2 static void q4_k_chunks_avx2(const le_block_q4_k *x, const le_block_q8_k *y,
                                            int32_t isum[4], int32_t msum[4]) {
  uint8_t sc[8], m[8];
  for (int g = 0; g < 8; g++) le_scale_min_k4(g, x->scales, &sc[g], &m[g]);
  for (int p = 0; p < 4; p++) {
    const __m256i q = le_load256(x->qs + 32 * p);
    const __m256i lo = _mm256_and_si256(q, _mm256_set1_epi8(0x0f));
    const __m256i hi = le_shr_mask_avx2(q, 4, 0x0f);
    isum[p] = le_hsum_i32_avx2(
        _mm256_add_epi32(le_kdot32_avx2(lo, y->qs + 64 * p, sc[2 * p], sc[2 * p]),
                         le_kdot32_avx2(hi, y->qs + 64 * p + 32, sc[2 * p + 1], sc[2 * p + 1])));
    const int g = 2 * p;
    msum[p] = m[g] * (y->bsums[2 * g] + y->bsums[2 * g + 1]) +
              m[g + 1] * (y->bsums[2 * g + 2] + y->bsums[2 * g + 3]);
  }
}
LE_TARGET_AVX2 static void q4_k_gemv_avx2(int64_t n, float *s, const void *vx, const void *vy) {
  *s = q4_k_repack_dot(n, vx, vy, 0, q4_k_chunks_avx2);
}
LE_TARGET_AVX2 static void q4_k_gemm_avx2(int64_t n, float *s, const void *vx, const void *vy) {
  *s = q4_k_repack_dot(n, vx, vy, 1, q4_k_chunks_avx2);
}
/* Leftover columns in gemv order at every level: llama.cpp's split of a
 * repacked mul_mat (repack.cpp forward_mul_mat) is the same C++ in all its
 * x86 builds. */
LE_K_REPACK_TILES(q4_k_tiles_avx2, q4_k_gemv_avx2, q4_k_gemm_avx2)
LE_K_REPACK_TILES(q4_k_tiles_avx512, q4_k_gemv_avx2, q4_k_gemm_avx2)
#endif

const le_type_traits le_traits_q4_k = {
    .type = LE_TYPE_Q4_K,
    .name = "q4_K",
    .blck = LE_QK_K,
    .size = sizeof(le_block_q4_k),
    .to_float = q4_k_to_float,
    .from_float_ref = q4_k_from_float_ref,
    .from_float_act = NULL,
    .vec_dot_type = LE_TYPE_Q8_K,
    .vec_dot = {
#if defined(LE_WASM_SIMD)
        [LE_SIMD_SCALAR] = le_dot_q4_k_wasm,
#else
        [LE_SIMD_SCALAR] = dot_q4_k_scalar,
#endif
#if defined(LE_X86)
        [LE_SIMD_AVX2] = dot_q4_k_avx2,
        [LE_SIMD_AVX512] = dot_q4_k_avx512,
#endif
    },
    /* none at the scalar level: llama.cpp's x64 build runs plain vec_dot */
    .gemm = {
#if defined(LE_X86)
        [LE_SIMD_AVX2] = &q4_k_tiles_avx2,
        [LE_SIMD_AVX512] = &q4_k_tiles_avx512,
#endif
    },
};

/* exported to q_q5_k.c */
void le_pack_scales_k4(const float *scales, const float *mins, float max_scale, float max_min,
                       uint8_t *out, uint16_t *d, uint16_t *dmin) {
  pack_scales_k4(scales, mins, max_scale, max_min, out, d, dmin);
}
