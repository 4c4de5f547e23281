/* Register-tiled dot products for mul_mat on AVX-512 VNNI (and, for F32/F16
 * only, AVX2): up to 4 weight
 * rows x 4 activation columns per call (8 for q8_0's scaled form, whose
 * rows' codes are then widened once per 8 columns: 16 accumulators), so
 * each weight block is loaded once per 4 columns and each activation block
 * once per 4 rows.
 *
 * q8_0: every output element goes through exactly the arithmetic of ggml's
 * 8-lane AVX2 q8_0 dot (the order llama.cpp runs on x86 for N = 1 and, via
 * tinyBLAS_Q0_AVX, for N >= 2): per block, int32 lane sums, scale
 * d_x*d_y rounded to float, one fma into an 8-lane accumulator, horizontal
 * sum at the end. The lane sums are formed with vpdpbusd on x+128 with
 * 128 times the lane sum of y preloaded as bias: integer arithmetic, so the
 * same lanes the sign/maddubs/madd sequence gives. Two dots share one
 * 512-bit register. (q4_0 has its own repack-order tiles in q_q4_0.c.)
 *
 * F32/F16 tiles follow llamafile tinyBLAS instead (llama.cpp uses it for
 * N >= 2); see tile_float (icelake-like variants) and tile_float8 (haswell). */
#include "q_common.h"
#include "reduce512.h"

#if defined(LE_X86)
#define LE_TARGET_VNNI \
  __attribute__((target("avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")))

LE_TARGET_VNNI static inline __m512 pair_scale(uint16_t d0, uint16_t d1) {
  return le_join_ps256(_mm256_set1_ps(_cvtsh_ss(d0)), _mm256_set1_ps(_cvtsh_ss(d1)));
}

LE_TARGET_VNNI static inline __m512i pair_load(const int8_t *a, const int8_t *b) {
  return _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_loadu_si256((const __m256i *)a)),
                            _mm256_loadu_si256((const __m256i *)b), 1);
}

/* The same products in the 8-lane sequential form (one 256-bit accumulator
 * per dot, blocks in order: ggml's AVX2 dot, which the q8_0 trait uses at
 * every x86 level). Two dots share one 512-bit register: two columns when
 * RN is even, else two rows, so the unit still works at full width. */
LE_TARGET_VNNI static inline __m512i load_x2(const void *x0, const void *x1, int64_t i) {
  const le_block_q8_0 *a = x0, *b = x1;
  return _mm512_xor_si512(pair_load(a[i].qs, b[i].qs), _mm512_set1_epi8((char)0x80));
}

LE_TARGET_VNNI static inline uint16_t x_scale(const void *x, int64_t i) {
  return ((const le_block_q8_0 *)x)[i].d;
}

/* The bias lanes of a column pair's block at yb + at * 16 (mul_mat.c's
 * [pair][block][16]), or with `one` a lone column's 8 in both halves. */
LE_TARGET_VNNI static inline __m512i col_lanes(const int32_t *yb, int64_t at, int one) {
  const int32_t *p = yb + at * 16;
  return one ? _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)(const void *)p))
             : _mm512_loadu_si512((const void *)p);
}

LE_TARGET_VNNI static inline __attribute__((always_inline)) void
tile_seq(const int RM, const int RN, const int SCALED, int64_t n, float *s, size_t bs,
         const void *vx, size_t bx, const void *vy, size_t by,
         const float *xs, size_t xss, const float *ys, const int32_t *yb, size_t yss) {
  const int64_t nb = n / LE_QK;
  /* bias: 128 times the lane sum of y, one vpdpbusd with bytes of 128 */
  const __m512i b128 = _mm512_set1_epi8((char)0x80);
  const int by_cols = RN % 2 == 0; /* else rows are paired (RM even) */
  const int NP = by_cols ? RM * (RN / 2) : (RM / 2) * RN;
  __m512 acc[16];
#pragma GCC unroll 16
  for (int k = 0; k < NP; k++) acc[k] = _mm512_setzero_ps();
#define XR(r) ((const char *)vx + (r) * bx)
#define YC(c) ((const le_block_q8_0 *)((const char *)vy + (c) * by))
  for (int64_t i = 0; i < nb; i++) {
    if (by_cols) {
      __m512i xq[4];
      __m512 xd[4];
#pragma GCC unroll 4
      for (int r = 0; r < RM; r++) { /* one row in both halves: one broadcast load */
        const le_block_q8_0 *xb = (const le_block_q8_0 *)(const void *)XR(r) + i;
        xq[r] = _mm512_xor_si512(_mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)xb->qs)),
                                 _mm512_set1_epi8((char)0x80));
        /* the same floats: a converted scale (xs) or the block's */
        xd[r] = SCALED ? _mm512_set1_ps(xs[r * xss + i]) : _mm512_set1_ps(_cvtsh_ss(xb->d));
      }
#pragma GCC unroll 4
      for (int cp = 0; cp < RN / 2; cp++) {
        const le_block_q8_0 *y0 = YC(2 * cp), *y1 = YC(2 * cp + 1);
        const __m512i yq = pair_load(y0[i].qs, y1[i].qs);
        const __m512 yd = SCALED ? le_join_ps256(_mm256_set1_ps(ys[2 * cp * yss + i]),
                                             _mm256_set1_ps(ys[(2 * cp + 1) * yss + i]))
                             : pair_scale(y0[i].d, y1[i].d);
        /* the scaled form reads the columns' bias terms (q8_0_col_lanes), the
         * same integers, instead of taking them again in every row's tile */
        const __m512i bias =
            !SCALED ? _mm512_sub_epi32(_mm512_setzero_si512(),
                                       _mm512_dpbusd_epi32(_mm512_setzero_si512(), b128, yq))
                    : col_lanes(yb, cp * yss + i, yss == 0);
#pragma GCC unroll 4
        for (int r = 0; r < RM; r++) {
          const __m512 sum = _mm512_cvtepi32_ps(_mm512_dpbusd_epi32(bias, xq[r], yq));
          __m512 *a = &acc[r * (RN / 2) + cp];
          *a = _mm512_fmadd_ps(_mm512_mul_ps(xd[r], yd), sum, *a);
        }
      }
    } else {
#pragma GCC unroll 4
      for (int c = 0; c < RN; c++) {
        const le_block_q8_0 *y = YC(c);
        const __m512i yq = pair_load(y[i].qs, y[i].qs);
        const __m512 yd = _mm512_set1_ps(_cvtsh_ss(y[i].d));
        const __m512i bias = _mm512_sub_epi32(
            _mm512_setzero_si512(), _mm512_dpbusd_epi32(_mm512_setzero_si512(), b128, yq));
#pragma GCC unroll 2
        for (int rp = 0; rp < RM / 2; rp++) {
          const __m512i xq = load_x2(XR(2 * rp), XR(2 * rp + 1), i);
          const __m512 xd = pair_scale(x_scale(XR(2 * rp), i), x_scale(XR(2 * rp + 1), i));
          const __m512 sum = _mm512_cvtepi32_ps(_mm512_dpbusd_epi32(bias, xq, yq));
          __m512 *a = &acc[c * (RM / 2) + rp];
          *a = _mm512_fmadd_ps(_mm512_mul_ps(xd, yd), sum, *a);
        }
      }
    }
  }
#undef XR
#undef YC
#pragma GCC unroll 16
  for (int k = 0; k < NP; k++) {
    const __m256 lo = _mm512_castps512_ps256(acc[k]);
    const __m256 hi = _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(acc[k]), 1));
    int r0, c0, r1, c1;
    if (by_cols) {
      r0 = r1 = k / (RN / 2);
      c0 = 2 * (k % (RN / 2));
      c1 = c0 + 1;
    } else {
      c0 = c1 = k / (RM / 2);
      r0 = 2 * (k % (RM / 2));
      r1 = r0 + 1;
    }
    s[c0 * bs + r0] = le_hsum_ps256(lo);
    s[c1 * bs + r1] = le_hsum_ps256(hi);
  }
}

/* One dot in the sequential form, 256 bits wide. */
LE_TARGET_VNNI static void seq_1x1(int64_t n, float *s, const void *vx, const void *vy) {
  const le_block_q8_0 *x = vx, *y = vy;
  __m256 acc = _mm256_setzero_ps();
  for (int64_t i = 0; i < n / LE_QK; i++) {
    const __m256i xq = _mm256_loadu_si256((const __m256i *)x[i].qs);
    const __m256 d = _mm256_set1_ps(_cvtsh_ss(x[i].d) * _cvtsh_ss(y[i].d));
    acc = _mm256_fmadd_ps(
        d, le_mul_sum_i8_avx2(xq, _mm256_loadu_si256((const __m256i *)y[i].qs)), acc);
  }
  *s = le_hsum_ps256(acc);
}

#define SEQ_FN(name, RM, RN)                                                               \
  LE_TARGET_VNNI static void name(int64_t n, float *s, size_t bs, const void *x, size_t bx, \
                                  const void *y, size_t by) {                              \
    tile_seq(RM, RN, 0, n, s, bs, x, bx, y, by, NULL, 0, NULL, NULL, 0);                   \
  }
LE_TARGET_VNNI static void q8s_1x1(int64_t n, float *s, size_t bs, const void *x, size_t bx,
                                   const void *y, size_t by) {
  (void)bs, (void)bx, (void)by;
  seq_1x1(n, s, x, y);
}
SEQ_FN(q8s_4x4, 4, 4)
SEQ_FN(q8s_4x1, 4, 1)
SEQ_FN(q8s_1x4, 1, 4)

/* The scaled forms (le_gemm_scaled): at pp512 on a 1.1B shape each 4x4
 * tile spent about a third of its instructions converting and
 * broadcasting the same block scales that every other tile of the row or
 * column converts again. */
#define SEQ_SCALED_FN(name, RM, RN)                                                        \
  LE_TARGET_VNNI static void name(int64_t n, float *s, size_t bs, const void *x, size_t bx, \
                                  const float *xs, size_t xss, const void *y, size_t by,   \
                                  const float *ys, const int32_t *yb, size_t yss) {        \
    tile_seq(RM, RN, 1, n, s, bs, x, bx, y, by, xs, xss, ys, yb, yss);                     \
  }
SEQ_SCALED_FN(q8s_4x8_scaled, 4, 8)
SEQ_SCALED_FN(q8s_4x4_scaled, 4, 4)
SEQ_SCALED_FN(q8s_1x4_scaled, 1, 4)

LE_TARGET_VNNI static void q8_0_row_scales(const void *row, int64_t nb, float *out) {
  const le_block_q8_0 *x = row;
  for (int64_t i = 0; i < nb; i++) out[i] = _cvtsh_ss(x[i].d);
}

/* A column's bias terms, per block the 8 lanes tile_seq starts each
 * vpdpbusd from: -128 times the sum of the lane's 4 codes (exact integers),
 * block i's at out[16 * i] (the other 8 of each 16: the column paired with
 * it, so that a tile loads a pair's as one vector; mul_mat.c).
 * Taken once per column here, where every 4-row tile of a 1.1B prompt's
 * products took them again (two vpdpbusd and a subtraction per column pair
 * and block: ~10% of the tile's time, bench K = M = 2048, N = 512). */
LE_TARGET_VNNI static void q8_0_col_lanes(const void *row, int64_t nb, int32_t *out) {
  const le_block_q8_0 *y = row;
  const __m256i b128 = _mm256_set1_epi8((char)0x80);
  for (int64_t i = 0; i < nb; i++) {
    const __m256i yq = _mm256_loadu_si256((const __m256i *)y[i].qs);
    _mm256_storeu_si256((__m256i *)(void *)(out + i * 16),
                        _mm256_sub_epi32(_mm256_setzero_si256(),
                                         _mm256_dpbusd_epi32(_mm256_setzero_si256(), b128, yq)));
  }
}

/* F32 and F16 weights for N >= 2 in llamafile's tinyBLAS<16, __m512> order:
 * one 16-lane accumulator per output, acc = fma(a[l..l+16], b[l..l+16], acc)
 * for l in steps of 16 (f16 widened exactly), then _mm512_reduce_add_ps.
 * n must be a multiple of 16 (mul_mat checks). */
LE_TARGET_VNNI static inline __m512 ld16(const int F16, const void *p, int64_t l) {
  if (F16) return _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)((const uint16_t *)p + l)));
  return _mm512_loadu_ps((const float *)p + l);
}

LE_TARGET_VNNI static inline __attribute__((always_inline)) void
tile_float(const int F16, const int YF16, const int RM, const int RN, int64_t n, float *s,
           size_t bs, const void *vx, size_t bx, const void *vy, size_t by) {
  __m512 acc[4][4];
#pragma GCC unroll 4
  for (int r = 0; r < RM; r++)
#pragma GCC unroll 4
    for (int c = 0; c < RN; c++) acc[r][c] = _mm512_setzero_ps();
  for (int64_t l = 0; l < n; l += 16) {
    __m512 a[4];
#pragma GCC unroll 4
    for (int r = 0; r < RM; r++) a[r] = ld16(F16, (const char *)vx + r * bx, l);
#pragma GCC unroll 4
    for (int c = 0; c < RN; c++) {
      const __m512 b = ld16(YF16, (const char *)vy + c * by, l);
#pragma GCC unroll 4
      for (int r = 0; r < RM; r++) acc[r][c] = _mm512_fmadd_ps(a[r], b, acc[r][c]);
    }
  }
  if (RM == 4 && RN == 4) { /* the 16 reductions as one (same tree, reduce512.h) */
    __m512 v[16];
    float out[16];
#pragma GCC unroll 4
    for (int c = 0; c < 4; c++)
#pragma GCC unroll 4
      for (int r = 0; r < 4; r++) v[RED_SLOT[c * 4 + r]] = acc[r][c];
    _mm512_storeu_ps(out, reduce16(v));
#pragma GCC unroll 4
    for (int c = 0; c < 4; c++) memcpy(s + c * bs, out + c * 4, 4 * sizeof(float));
    return;
  }
#pragma GCC unroll 4
  for (int r = 0; r < RM; r++)
#pragma GCC unroll 4
    for (int c = 0; c < RN; c++) s[c * bs + r] = _mm512_reduce_add_ps(acc[r][c]);
}

#define FLOAT_FN(name, F16, YF16, RM, RN)                                                  \
  LE_TARGET_VNNI static void name(int64_t n, float *s, size_t bs, const void *x, size_t bx, \
                                  const void *y, size_t by) {                              \
    tile_float(F16, YF16, RM, RN, n, s, bs, x, bx, y, by);                                 \
  }
FLOAT_FN(f16_4x4, 1, 1, 4, 4)
FLOAT_FN(f16_4x1, 1, 1, 4, 1)
FLOAT_FN(f16_1x4, 1, 1, 1, 4)
FLOAT_FN(f16_1x1, 1, 1, 1, 1)
FLOAT_FN(f32_4x4, 0, 0, 4, 4)
FLOAT_FN(f32_4x1, 0, 0, 4, 1)
FLOAT_FN(f32_1x4, 0, 0, 1, 4)
FLOAT_FN(f32_1x1, 0, 0, 1, 1)
/* F16 weights against columns already widened to f32 (the f16 values
 * exactly): the same operands and chains, half the conversions. */
FLOAT_FN(f16w_4x4, 1, 0, 4, 4)
FLOAT_FN(f16w_4x1, 1, 0, 4, 1)
FLOAT_FN(f16w_1x4, 1, 0, 1, 4)
FLOAT_FN(f16w_1x1, 1, 0, 1, 1)
static const le_gemm_tiles sgemm_f16 = {
    .t44 = f16_4x4, .t41 = f16_4x1, .t14 = f16_1x4, .t11 = f16_1x1};
static const le_gemm_tiles sgemm_f16w = {
    .t44 = f16w_4x4, .t41 = f16w_4x1, .t14 = f16w_1x4, .t11 = f16w_1x1};
static const le_gemm_tiles sgemm_f32 = {
    .t44 = f32_4x4, .t41 = f32_4x1, .t14 = f32_1x4, .t11 = f32_1x1};

static const le_gemm_tiles seq_q8_0 = {
    .t44 = q8s_4x4, .t41 = q8s_4x1, .t14 = q8s_1x4, .t11 = q8s_1x1};
static const le_gemm_scaled seq_q8_0_scaled = {
    .t48 = q8s_4x8_scaled,
    .t44 = q8s_4x4_scaled,
    .t14 = q8s_1x4_scaled,
    .scales = q8_0_row_scales,
    .lanes = q8_0_col_lanes};

/* The same for AVX2 hosts, where llama.cpp runs its haswell variant:
 * tinyBLAS<8, __m256> (K % 8 == 0), one 8-lane accumulator per output,
 * acc = fma(a[l..l+8], b[l..l+8], acc), then sgemm.cpp's hsum(__m256):
 * high + low half, + movehl, + movehdup. 4x4 tiles of 8-lane accumulators
 * fit AVX2's 16 registers with 4 left for loads. (They do not: GCC spills
 * five accumulators. mul_mat now runs sgemm_avx2.c's panels on this path,
 * same per-output arithmetic; these tiles are what the panels were first
 * compared against, and stay reachable through le_gemm_x86.) */
LE_TARGET_AVX2 static inline __m256 ld8(const int F16, const void *p, int64_t l) {
  if (F16) return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)((const uint16_t *)p + l)));
  return _mm256_loadu_ps((const float *)p + l);
}

LE_TARGET_AVX2 static inline float hsum8(__m256 v) {
  __m128 x = _mm_add_ps(_mm256_extractf128_ps(v, 1), _mm256_castps256_ps128(v));
  x = _mm_add_ps(x, _mm_movehl_ps(x, x));
  x = _mm_add_ss(x, _mm_movehdup_ps(x));
  return _mm_cvtss_f32(x);
}

LE_TARGET_AVX2 static inline __attribute__((always_inline)) void
tile_float8(const int F16, const int RM, const int RN, int64_t n, float *s, size_t bs,
            const void *vx, size_t bx, const void *vy, size_t by) {
  __m256 acc[4][4];
#pragma GCC unroll 4
  for (int r = 0; r < RM; r++)
#pragma GCC unroll 4
    for (int c = 0; c < RN; c++) acc[r][c] = _mm256_setzero_ps();
  for (int64_t l = 0; l < n; l += 8) {
    __m256 a[4];
#pragma GCC unroll 4
    for (int r = 0; r < RM; r++) a[r] = ld8(F16, (const char *)vx + r * bx, l);
#pragma GCC unroll 4
    for (int c = 0; c < RN; c++) {
      const __m256 b = ld8(F16, (const char *)vy + c * by, l);
#pragma GCC unroll 4
      for (int r = 0; r < RM; r++) acc[r][c] = _mm256_fmadd_ps(a[r], b, acc[r][c]);
    }
  }
#pragma GCC unroll 4
  for (int r = 0; r < RM; r++)
#pragma GCC unroll 4
    for (int c = 0; c < RN; c++) s[c * bs + r] = hsum8(acc[r][c]);
}

#define FLOAT8_FN(name, F16, RM, RN)                                                       \
  LE_TARGET_AVX2 static void name(int64_t n, float *s, size_t bs, const void *x, size_t bx, \
                                  const void *y, size_t by) {                              \
    tile_float8(F16, RM, RN, n, s, bs, x, bx, y, by);                                      \
  }
FLOAT8_FN(f16_4x4_avx2, 1, 4, 4)
FLOAT8_FN(f16_4x1_avx2, 1, 4, 1)
FLOAT8_FN(f16_1x4_avx2, 1, 1, 4)
FLOAT8_FN(f16_1x1_avx2, 1, 1, 1)
FLOAT8_FN(f32_4x4_avx2, 0, 4, 4)
FLOAT8_FN(f32_4x1_avx2, 0, 4, 1)
FLOAT8_FN(f32_1x4_avx2, 0, 1, 4)
FLOAT8_FN(f32_1x1_avx2, 0, 1, 1)
static const le_gemm_tiles sgemm8_f16 = {
    .t44 = f16_4x4_avx2, .t41 = f16_4x1_avx2, .t14 = f16_1x4_avx2, .t11 = f16_1x1_avx2};
static const le_gemm_tiles sgemm8_f32 = {
    .t44 = f32_4x4_avx2, .t41 = f32_4x1_avx2, .t14 = f32_1x4_avx2, .t11 = f32_1x1_avx2};
#endif

const le_gemm_scaled *le_gemm_scaled_for(const le_gemm_tiles *tiles) {
#if defined(LE_X86)
  if (tiles == &seq_q8_0) return &seq_q8_0_scaled;
#else
  (void)tiles;
#endif
  return NULL;
}

int le_tinyblas_kn(void) {
#if defined(LE_X86)
  const int lvl = le_simd();
  if (lvl == LE_SIMD_AVX512) return 16;
  if (lvl == LE_SIMD_AVX2) return 8;
#endif
  return 0;
}

const le_gemm_tiles *le_gemm_x86_f16w(void) {
#if defined(LE_X86)
  if (le_simd() == LE_SIMD_AVX512) return &sgemm_f16w;
#endif
  return NULL;
}

const le_gemm_tiles *le_gemm_x86(int32_t type, int tinyblas) {
#if defined(LE_X86)
  if (le_simd() == LE_SIMD_AVX2) {
    if (tinyblas && type == LE_TYPE_F16) return &sgemm8_f16;
    if (tinyblas && type == LE_TYPE_F32) return &sgemm8_f32;
    return NULL;
  }
  if (le_simd() != LE_SIMD_AVX512) return NULL;
  if (tinyblas && type == LE_TYPE_F16) return &sgemm_f16;
  if (tinyblas && type == LE_TYPE_F32) return &sgemm_f32;
  if (!le_cpu_vnni()) return NULL;
  /* Only when q8_0's AVX-512 dot is ggml's 8-lane AVX2 form (llama.cpp's
   * order, also tinyBLAS_Q0_AVX's for N >= 2) do these tiles give its bits. */
  const le_type_traits *t = le_traits(type);
  const int seq = t && t->vec_dot[LE_SIMD_AVX512] == t->vec_dot[LE_SIMD_AVX2];
  if (type == LE_TYPE_Q8_0 && seq) return &seq_q8_0;
#else
  (void)type;
  (void)tinyblas;
#endif
  return NULL;
}
