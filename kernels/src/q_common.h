/* SIMD helpers shared by the 32-element block types (q8_0, q4_0, ...). */
#ifndef LE_Q_COMMON_H
#define LE_Q_COMMON_H
#include "le_internal.h"

#define LE_QK 32

/* ggml type ids of the types added beside le_internal.h's */
enum {
  LE_TYPE_Q4_1 = 3,
  LE_TYPE_Q5_0 = 6,
  LE_TYPE_Q5_1 = 7,
  LE_TYPE_Q8_1 = 9,
  LE_TYPE_Q2_K = 10,
  LE_TYPE_Q3_K = 11,
  LE_TYPE_Q4_K = 12,
  LE_TYPE_Q5_K = 13,
  LE_TYPE_Q6_K = 14,
  LE_TYPE_Q8_K = 15,
};
extern const le_type_traits le_traits_q4_1, le_traits_q5_0, le_traits_q5_1, le_traits_q8_1,
    le_traits_q2_k, le_traits_q3_k, le_traits_q4_k, le_traits_q5_k, le_traits_q6_k,
    le_traits_q8_k;

typedef struct { uint16_t d; int8_t qs[LE_QK]; } le_block_q8_0;      /* 34 bytes */
typedef struct { uint16_t d; uint8_t qs[LE_QK / 2]; } le_block_q4_0; /* 18 bytes */

typedef struct { uint16_t d, m; uint8_t qs[LE_QK / 2]; } le_block_q4_1;               /* 20 */
typedef struct { uint16_t d; uint8_t qh[4]; uint8_t qs[LE_QK / 2]; } le_block_q5_0;    /* 22 */
typedef struct { uint16_t d, m; uint8_t qh[4]; uint8_t qs[LE_QK / 2]; } le_block_q5_1; /* 24 */
/* s = d * sum(qs), kept so q4_1/q5_1 dots can add their min term per block */
typedef struct { uint16_t d, s; int8_t qs[LE_QK]; } le_block_q8_1; /* 36 */

/* K-quants: super-blocks of 256 elements */
#define LE_QK_K 256
typedef struct { uint8_t scales[16]; uint8_t qs[64]; uint16_t d, dmin; } le_block_q2_k;   /* 84 */
typedef struct { uint8_t hmask[32]; uint8_t qs[64]; uint8_t scales[12]; uint16_t d; } le_block_q3_k;
typedef struct { uint16_t d, dmin; uint8_t scales[12]; uint8_t qs[128]; } le_block_q4_k; /* 144 */
typedef struct { uint16_t d, dmin; uint8_t scales[12]; uint8_t qh[32]; uint8_t qs[128]; } le_block_q5_k;
typedef struct { uint8_t ql[128]; uint8_t qh[64]; int8_t scales[16]; uint16_t d; } le_block_q6_k;
typedef struct { float d; int8_t qs[LE_QK_K]; int16_t bsums[16]; } le_block_q8_k; /* 292 */

_Static_assert(sizeof(le_block_q4_1) == 20, "q4_1 block is 20 bytes");
_Static_assert(sizeof(le_block_q5_0) == 22, "q5_0 block is 22 bytes");
_Static_assert(sizeof(le_block_q5_1) == 24, "q5_1 block is 24 bytes");
_Static_assert(sizeof(le_block_q8_1) == 36, "q8_1 block is 36 bytes");
_Static_assert(sizeof(le_block_q2_k) == 84, "q2_K block is 84 bytes");
_Static_assert(sizeof(le_block_q3_k) == 110, "q3_K block is 110 bytes");
_Static_assert(sizeof(le_block_q4_k) == 144, "q4_K block is 144 bytes");
_Static_assert(sizeof(le_block_q5_k) == 176, "q5_K block is 176 bytes");
_Static_assert(sizeof(le_block_q6_k) == 210, "q6_K block is 210 bytes");
_Static_assert(sizeof(le_block_q8_k) == 292, "q8_K block is 292 bytes");
_Static_assert(sizeof(le_block_q8_0) == 34, "q8_0 block is 34 bytes");
_Static_assert(sizeof(le_block_q4_0) == 18, "q4_0 block is 18 bytes");

#if defined(LE_X86)
/* f16 scale to f32 with F16C (same value as le_fp16_to_fp32, no branches) */
LE_TARGET_AVX2 static inline float le_h2f(uint16_t h) { return _cvtsh_ss(h); }

/* 8 int32 partial sums (as float) of the signed byte products x*y. */
LE_TARGET_AVX2 static inline __m256 le_mul_sum_i8_avx2(__m256i x, __m256i y) {
  const __m256i ax = _mm256_sign_epi8(x, x);
  const __m256i sy = _mm256_sign_epi8(y, x);
  const __m256i d16 = _mm256_maddubs_epi16(ax, sy);
  return _mm256_cvtepi32_ps(_mm256_madd_epi16(d16, _mm256_set1_epi16(1)));
}

LE_TARGET_AVX2 static inline float le_hsum_ps256(__m256 v) {
  __m128 r = _mm_add_ps(_mm256_extractf128_ps(v, 1), _mm256_castps256_ps128(v));
  r = _mm_add_ps(r, _mm_movehl_ps(r, r));
  r = _mm_add_ss(r, _mm_movehdup_ps(r));
  return _mm_cvtss_f32(r);
}

/* The largest lane, in ggml's quantize_row_q8_0 order (the same value in any
 * order for non-NaN lanes). */
LE_TARGET_AVX2 static inline float le_hmax_ps256(__m256 v) {
  __m128 m = _mm_max_ps(_mm256_extractf128_ps(v, 1), _mm256_castps256_ps128(v));
  m = _mm_max_ps(m, _mm_movehl_ps(m, m));
  m = _mm_max_ss(m, _mm_movehdup_ps(m));
  return _mm_cvtss_f32(m);
}

/* AVX-512F-only (no DQ): two float halves joined */
LE_TARGET_AVX512 static inline __m512 le_join_ps256(__m256 lo, __m256 hi) {
  return _mm512_castpd_ps(_mm512_insertf64x4(_mm512_castpd256_pd512(_mm256_castps_pd(lo)),
                                             _mm256_castps_pd(hi), 1));
}

/* the 32 nibbles of a q4_0 block as signed bytes in element order */
LE_TARGET_AVX2 static inline __m256i le_q4_0_unpack_avx2(const uint8_t *qs) {
  const __m128i t = _mm_loadu_si128((const __m128i *)qs);
  const __m256i b = _mm256_set_m128i(_mm_srli_epi16(t, 4), t);
  return _mm256_sub_epi8(_mm256_and_si256(b, _mm256_set1_epi8(0x0f)), _mm256_set1_epi8(8));
}
#endif

void le_quantize_q8_0_act(const float *x, void *y, int64_t n);
void le_quantize_q8_1_act(const float *x, void *y, int64_t n);
void le_quantize_q8_k(const float *x, void *y, int64_t n);

/* ggml's nearest_int: the magic-number round (ties to even), valid for
 * |v| <= 2^22 */
static inline int le_nearest_int(float v) {
  const float t = v + 12582912.f;
  int32_t i;
  memcpy(&i, &t, 4);
  return (i & 0x007fffff) - 0x00400000;
}

/* the 16-element q5 high bits: bit j of qh is element j's fifth bit */
static inline uint32_t le_load_u32(const uint8_t *p) {
  uint32_t v;
  memcpy(&v, p, 4);
  return v;
}

/* Shared K-quant search routines (q_kquants.c), same arithmetic as
 * ggml-quants.c's non-imatrix reference path. */
#define LE_GROUP_MAX_EPS 1e-15f
float le_make_qx_quants(int n, int nmax, const float *x, int8_t *L, int rmse_type);
float le_make_q3_quants(int n, int nmax, const float *x, int8_t *L, bool do_rmse);
float le_make_qkx2_quants(int n, int nmax, const float *x, const float *w, uint8_t *L,
                          float *the_min, uint8_t *Laux, float rmin, float rdelta, int nstep,
                          bool use_mad);
/* q4_K/q5_K reference-quantizer steps shared by both (q_q4_k.c) */
void le_fit_groups_k4(const float *x, int nmax, float rmin, int nstep, uint8_t *L,
                      float *scales, float *mins, float *max_scale, float *max_min);
void le_pack_scales_k4(const float *scales, const float *mins, float max_scale, float max_min,
                       uint8_t *out, uint16_t *d, uint16_t *dmin);
void le_requant_k4(const float *x, const uint8_t *packed, uint16_t d16, uint16_t dmin16, int nmax,
                   uint8_t *L);
int32_t le_summs_k4(const uint8_t *mins, const le_block_q8_k *y);
/* 6-bit scale j and min j of the 12-byte q4_K/q5_K scale array */
static inline void le_scale_min_k4(int j, const uint8_t *q, uint8_t *d, uint8_t *m) {
  if (j < 4) {
    *d = q[j] & 63;
    *m = q[j + 4] & 63;
  } else {
    *d = (q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4);
    *m = (q[j + 4] >> 4) | ((q[j] >> 6) << 4);
  }
}
/* the 16 signed 6-bit scales of a q3_K block, each minus 32 */
static inline void le_q3k_scales(const uint8_t *s, int8_t out[16]) {
  for (int j = 0; j < 16; j++) {
    const int lo = j < 8 ? s[j] & 0xF : s[j - 8] >> 4;
    const int hi = (s[8 + j % 4] >> (2 * (j / 4))) & 3;
    out[j] = (int8_t)((lo | (hi << 4)) - 32);
  }
}

#endif
