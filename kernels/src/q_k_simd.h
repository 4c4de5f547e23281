/* Integer dot helpers shared by the K-quant kernels. Every K-quant dot works
 * on unsigned weight codes (signed offsets are folded in through q8_K's
 * per-16 sums), so integer partial sums are exact; what must match ggml is
 * which integers are formed (SIMD lanes, chunks) and the float operations
 * that combine them, which each type file copies from the ggml kernel
 * llama.cpp runs on x86 (ggml_vec_dot_* AVX2, or repack.cpp's gemv/gemm;
 * at the scalar level the generic C of its x64 build). */
#ifndef LE_Q_K_SIMD_H
#define LE_Q_K_SIMD_H
#include "q_common.h"

#define LE_INLINE static inline __attribute__((always_inline))

/* ggml's generic K-quant dots (ggml_vec_dot_q{3,4,5,6}_K_q8_K_generic, what
 * llama.cpp's x64 build runs and our scalar level follows) keep 8 int32
 * lanes per super-block, lane l holding the scaled products of elements
 * e % 8 == l, and 8 float sums across super-blocks: sums[l] += d * lane[l]
 * (a rounded product, then a rounded add: x64 has no FMA to contract into).
 * The lanes are added into sumf one by one at the end. */
static inline void le_k_lanes_generic(float sums[8], const int32_t lane[8], float d) {
  for (int l = 0; l < 8; l++) sums[l] += d * (float)lane[l];
}
static inline float le_k_reduce_generic(float sumf, const float sums[8]) {
  for (int l = 0; l < 8; l++) sumf += sums[l];
  return sumf;
}

#if defined(LE_X86)
/* 8 int32: s0 * (codes 0..15 . y) and s1 * (codes 16..31 . y), in pieces */
LE_TARGET_AVX2 LE_INLINE __m256i le_kdot32_avx2(__m256i qu, const int8_t *y, int s0, int s1) {
  const __m256i p = _mm256_maddubs_epi16(qu, _mm256_loadu_si256((const __m256i *)y));
  return _mm256_madd_epi16(p, _mm256_set_m128i(_mm_set1_epi16((short)s1),
                                                _mm_set1_epi16((short)s0)));
}
LE_TARGET_AVX2 LE_INLINE int32_t le_hsum_i32_avx2(__m256i v) {
  __m128i r = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
  r = _mm_add_epi32(r, _mm_shuffle_epi32(r, 0x4e));
  r = _mm_add_epi32(r, _mm_shuffle_epi32(r, 0xb1));
  return _mm_cvtsi128_si32(r);
}
/* bytes of v shifted right by k bits, masked */
LE_TARGET_AVX2 LE_INLINE __m256i le_shr_mask_avx2(__m256i v, int k, int mask) {
  return _mm256_and_si256(_mm256_srl_epi16(v, _mm_cvtsi32_si128(k)),
                          _mm256_set1_epi8((char)mask));
}
LE_TARGET_AVX2 LE_INLINE __m256i le_load256(const void *p) {
  return _mm256_loadu_si256((const __m256i *)p);
}
#endif

/* Tiles (le_gemm_tiles) for a type llama.cpp repacks on x86, split as its
 * repacked mul_mat splits the columns: ggml_gemm_* runs them in full groups
 * of 4 (i11 < ne11 - ne11 % 4) and ggml_gemv_* the ne11 % 4 leftovers (all
 * columns when ne11 < 4). mul_mat passes exactly those leftover columns to
 * t44/t14 one at a time with by == 0 (see le_gemm_tiles), so by == 0 selects
 * the gemv order there; each tile calls the per-element dot in that
 * kernel's order. */
#define LE_K_REPACK_TILES(name, gemv, gemm)                                                   \
  static void name##_t44(int64_t n, float *s, size_t bs, const void *x, size_t bx,            \
                         const void *y, size_t by) {                                          \
    for (int c = 0; c < 4; c++)                                                               \
      for (int r = 0; r < 4; r++)                                                             \
        (by ? gemm : gemv)(n, s + c * bs + r, (const char *)x + r * bx,                       \
                           (const char *)y + c * by);                                         \
  }                                                                                           \
  static void name##_t41(int64_t n, float *s, size_t bs, const void *x, size_t bx,            \
                         const void *y, size_t by) {                                          \
    for (int r = 0; r < 4; r++) gemv(n, s + r, (const char *)x + r * bx, y);                  \
  }                                                                                           \
  static void name##_t14(int64_t n, float *s, size_t bs, const void *x, size_t bx,            \
                         const void *y, size_t by) {                                          \
    for (int c = 0; c < 4; c++) (by ? gemm : gemv)(n, s + c * bs, x, (const char *)y + c * by); \
  }                                                                                           \
  static void name##_t11(int64_t n, float *s, size_t bs, const void *x, size_t bx,            \
                         const void *y, size_t by) {                                          \
    gemv(n, s, x, y);                                                                         \
  }                                                                                           \
  static const le_gemm_tiles name = {name##_t44, name##_t41, name##_t14, name##_t11};

/* Defines name_avx2 and name_avx512 from one always-inline body
 * `name_body(n, s, vx, vy)`: the AVX-512 variant is the same algorithm built
 * for AVX-512VL (EVEX encoding, 32 vector registers). */
#define LE_K_SIMD_VARIANTS(name)                                                            \
  LE_TARGET_AVX2 static void name##_avx2(int64_t n, float *s, const void *vx, const void *vy) { \
    name##_body(n, s, vx, vy);                                                              \
  }                                                                                         \
  LE_TARGET_AVX512 static void name##_avx512(int64_t n, float *s, const void *vx,           \
                                             const void *vy) {                              \
    name##_body(n, s, vx, vy);                                                              \
  }
#endif
