/* F16 and F32 weights times several f32 columns on AVX2 hosts, in
 * llamafile's tinyBLAS<8, __m256> order (what llama.cpp's haswell variant
 * runs for N >= 2): per output one 8-lane accumulator,
 * acc = fma(a[l..l+8], b[l..l+8], acc) for l in steps of 8, then sgemm.cpp's
 * hsum (high + low half, + movehl, + movehdup). Same arithmetic as
 * gemm_x86.c's tile_float8; only the schedule differs, which no output can
 * see (every output is one chain, computed wherever it sits).
 *
 * What the schedule is for: a decode step of several sequences (N = 2..16)
 * must stream each weight row from memory once, keep the memory busy the
 * whole time, and spend as little as possible besides the FMAs. mul_mat
 * gives the columns already widened to f32 (f16-rounded for F16 weights, so
 * widening is exact), so only the weights need converting. The tile is three
 * rows against up to 4 columns (12 accumulators; each column vector loaded
 * serves three rows and each converted weight vector four columns, so the
 * tile is bound by its FMAs: ~90% of the FMA peak on Zen 3, where one row
 * against 8 columns reached ~75%, bound by its 9 loads per 8 FMAs).
 * - fewer than 16 columns: three rows at a time against every column, in
 *   ceil(N / 4) groups of 3 or 4 (never a lone column); the three rows stay
 *   in L1 from one group to the next, so the weights stream at an even pace.
 *   Each group prefetches its share of the next three rows' lines: issuing
 *   them all in the first group stalls it on full miss buffers and leaves
 *   the memory idle during the others (measured: 2 threads, N = 8, K = 768,
 *   -10% time per layer against all prefetches in the first group);
 * - 16 or more columns: column groups of 4 over all rows of the block in
 *   turn, so a block's rows come from memory once (the first group) and from
 *   L2 after, and the columns, too many for L1, are reused 3 rows at a time.
 * The prefetches run a fixed distance ahead: this VM's hardware prefetcher
 * stops at 4 KiB pages. */
#include "q_common.h"

#if defined(LE_X86)

/* Bytes of weights fetched ahead of a lone row being read. */
#define SG_PF_AHEAD 4096
/* From this many columns on, column groups run over whole blocks (the
 * columns no longer fit L1 beside the rows). */
#define SG_WIDE_N 16

LE_TARGET_AVX2 static inline float sg_hsum8(__m256 v) {
  __m128 x = _mm_add_ps(_mm256_extractf128_ps(v, 1), _mm256_castps256_ps128(v));
  x = _mm_add_ps(x, _mm_movehl_ps(x, x));
  x = _mm_add_ss(x, _mm_movehdup_ps(x));
  return _mm_cvtss_f32(x);
}

LE_TARGET_AVX2 static inline __m256 sg_load_x(const int F16, const char *p, int64_t l) {
  if (F16) return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)((const uint16_t *)p + l)));
  return _mm256_loadu_ps((const float *)p + l);
}

/* RM rows (bx bytes apart) x RN columns (by floats apart) into
 * s[c * bs + r]. Prefetch (ahead != 0): the rows' lines ahead bytes on, for
 * the lines j with j % png == pg only (one share of png). */
LE_TARGET_AVX2 static inline __attribute__((always_inline)) void
sg_tile(const int F16, const int RM, const int RN, int64_t n, float *s, size_t bs, const char *x,
        size_t bx, const float *y, size_t by, size_t ahead, int pg, int png) {
  __m256 acc[3][4];
#pragma GCC unroll 3
  for (int r = 0; r < RM; r++)
#pragma GCC unroll 4
    for (int c = 0; c < RN; c++) acc[r][c] = _mm256_setzero_ps();
  const int64_t step_line = F16 ? 32 : 16; /* elements per 64-byte line */
/* one step of 8 elements: RM weight vectors (converted once) times RN
 * column vectors */
#define SG_STEP(L)                                                                   \
  do {                                                                               \
    __m256 a[3];                                                                     \
    _Pragma("GCC unroll 3") for (int r = 0; r < RM; r++) a[r] =                      \
        sg_load_x(F16, x + r * bx, (L));                                             \
    _Pragma("GCC unroll 4") for (int c = 0; c < RN; c++) {                           \
      const __m256 b = _mm256_loadu_ps(y + c * by + (L));                            \
      _Pragma("GCC unroll 3") for (int r = 0; r < RM; r++) acc[r][c] =               \
          _mm256_fmadd_ps(a[r], b, acc[r][c]);                                       \
    }                                                                                \
  } while (0)
  /* Whole 64-byte lines of weights per trip, with the line's prefetch
   * outside the steps: a test and branch per step cost up to ~10%. */
  int64_t l = 0;
  if (ahead) {
    for (int k = pg; l + step_line <= n; l += step_line, k--) {
      if (k == 0) {
        k = png;
#pragma GCC unroll 3
        for (int r = 0; r < RM; r++)
          _mm_prefetch(x + r * bx + l * (F16 ? 2 : 4) + ahead, _MM_HINT_T0);
      }
#pragma GCC unroll 4
      for (int64_t j = 0; j < step_line; j += 8) SG_STEP(l + j);
    }
  } else {
    for (; l + 16 <= n; l += 16) {
      SG_STEP(l);
      SG_STEP(l + 8);
    }
  }
  for (; l < n; l += 8) { /* the part line left (K % 8 == 0) */
    if (ahead && pg == 0 && (l & (step_line - 1)) == 0) {
#pragma GCC unroll 3
      for (int r = 0; r < RM; r++)
        _mm_prefetch(x + r * bx + l * (F16 ? 2 : 4) + ahead, _MM_HINT_T0);
    }
    SG_STEP(l);
  }
#undef SG_STEP
#pragma GCC unroll 3
  for (int r = 0; r < RM; r++)
#pragma GCC unroll 4
    for (int c = 0; c < RN; c++) s[c * bs + r] = sg_hsum8(acc[r][c]);
}

typedef void (*sg_fn)(int64_t n, float *s, size_t bs, const char *x, size_t bx, const float *y,
                      size_t by, size_t ahead, int pg, int png);

#define SG_FN(F16, RM, RN)                                                                    \
  LE_TARGET_AVX2 static void sg_##F16##_##RM##x##RN(int64_t n, float *s, size_t bs,            \
                                                    const char *x, size_t bx, const float *y, \
                                                    size_t by, size_t ahead, int pg,          \
                                                    int png) {                                \
    sg_tile(F16, RM, RN, n, s, bs, x, bx, y, by, ahead, pg, png);                             \
  }
#define SG_SET(F16)                                                                          \
  SG_FN(F16, 1, 1) SG_FN(F16, 1, 2) SG_FN(F16, 1, 3) SG_FN(F16, 1, 4) SG_FN(F16, 3, 1)       \
  SG_FN(F16, 3, 2) SG_FN(F16, 3, 3) SG_FN(F16, 3, 4)                                         \
  static const sg_fn sg_one_##F16[5] = {NULL, sg_##F16##_1x1, sg_##F16##_1x2, sg_##F16##_1x3, \
                                        sg_##F16##_1x4};                                     \
  static const sg_fn sg_three_##F16[5] = {NULL, sg_##F16##_3x1, sg_##F16##_3x2,              \
                                          sg_##F16##_3x3, sg_##F16##_3x4};
SG_SET(0)
SG_SET(1)

void le_sgemm8_panel(int f16, int64_t K, const void *vx, size_t bx, int64_t nr, const float *y,
                     size_t by, int64_t nc, float *s, size_t bs) {
  const char *x = vx;
  const sg_fn *one = f16 ? sg_one_1 : sg_one_0, *three = f16 ? sg_three_1 : sg_three_0;
  if (nc < SG_WIDE_N) {
    /* rows outer (see the top of this file): groups as even as possible,
     * each prefetching its share of the next three rows */
    const int ng = (int)(nc + 3) / 4;
    for (int64_t r = 0; r < nr; r += 3) {
      const int rm = (int)LE_MIN(3, nr - r);
      int64_t c = 0;
      for (int g = 0; g < ng; g++) {
        const int rn = (int)((nc - c + (ng - g) - 1) / (ng - g));
        if (rm == 3) {
          three[rn](K, s + c * bs + r, bs, x + r * bx, bx, y + c * by, by, 3 * bx, g, ng);
        } else {
          for (int i = 0; i < rm; i++)
            one[rn](K, s + c * bs + r + i, bs, x + (r + i) * bx, bx, y + c * by, by, 3 * bx, g,
                    ng);
        }
        c += rn;
      }
    }
    return;
  }
  for (int64_t c = 0; c < nc;) {
    /* three rows against up to 4 columns over the whole block, the rows left
     * over one by one; the first group streams the block in */
    const int rn = (int)LE_MIN(4, nc - c);
    int64_t r = 0;
    for (; r + 3 <= nr; r += 3)
      three[rn](K, s + c * bs + r, bs, x + r * bx, bx, y + c * by, by, c == 0 ? 3 * bx : 0, 0, 1);
    for (; r < nr; r++)
      one[rn](K, s + c * bs + r, bs, x + r * bx, bx, y + c * by, by, c == 0 ? SG_PF_AHEAD : 0, 0,
              1);
    c += rn;
  }
}

/* Q8_0 weights times several q8_0 columns: ggml's AVX2 q8_0 dot per
 * output (also tinyBLAS_Q0_AVX's order, llama.cpp's N >= 2 path): per
 * block the 8 int32 lane sums of the byte products (lane l: bytes
 * 4l..4l+3), scale d_x * d_y rounded to float, one fma into an 8-lane
 * accumulator; hsum at the end. One weight row against up to 8 columns: the
 * row's block is loaded and made positive once for all columns, and 8
 * chains hide the fma latency that bounds a single dot. mul_mat lays the
 * columns out for this (le_sched.h): their codes 32-byte aligned (no
 * cache-line-split loads), their scales as floats transposed per group of
 * 8 columns ([block][column]), so the 8 scale products of a block are one
 * multiply, stored and then broadcast from L1. */
#define Q8_CHUNK 64 /* blocks per scale-product pass */

LE_TARGET_AVX2 static inline __attribute__((always_inline)) void
q8_tile(const int RN, int64_t nb, float *s, size_t bs, const le_block_q8_0 *x,
        const int8_t *yq, size_t byq, const float *dyt, int pf) {
  __m256 acc[8];
#pragma GCC unroll 8
  for (int c = 0; c < RN; c++) acc[c] = _mm256_setzero_ps();
  const __m256i ones = _mm256_set1_epi16(1);
  float dd[Q8_CHUNK * 8] __attribute__((aligned(32)));
  for (int64_t i0 = 0; i0 < nb; i0 += Q8_CHUNK) {
    const int64_t i1 = LE_MIN(nb, i0 + Q8_CHUNK);
    for (int64_t i = i0; i < i1; i++) /* lanes past RN: products never read */
      _mm256_store_ps(dd + 8 * (i - i0),
                      _mm256_mul_ps(_mm256_set1_ps(le_h2f(x[i].d)), _mm256_load_ps(dyt + 8 * i)));
    for (int64_t i = i0; i < i1; i++) {
      if (pf && (i & 1) == 0) _mm_prefetch((const char *)(x + i) + SG_PF_AHEAD, _MM_HINT_T0);
      const __m256i xq = _mm256_loadu_si256((const __m256i *)x[i].qs);
      const __m256i ax = _mm256_sign_epi8(xq, xq);
      const float *d = dd + 8 * (i - i0);
#pragma GCC unroll 8
      for (int c = 0; c < RN; c++) {
        const __m256i y = _mm256_load_si256((const __m256i *)(yq + c * byq + i * LE_QK));
        const __m256 sum = _mm256_cvtepi32_ps(
            _mm256_madd_epi16(_mm256_maddubs_epi16(ax, _mm256_sign_epi8(y, xq)), ones));
        acc[c] = _mm256_fmadd_ps(_mm256_broadcast_ss(d + c), sum, acc[c]);
      }
    }
  }
#pragma GCC unroll 8
  for (int c = 0; c < RN; c++) s[c * bs] = sg_hsum8(acc[c]);
}

typedef void (*q8_fn)(int64_t nb, float *s, size_t bs, const le_block_q8_0 *x, const int8_t *yq,
                      size_t byq, const float *dyt, int pf);
#define Q8_FN(RN)                                                                              \
  LE_TARGET_AVX2 static void q8_1x##RN(int64_t nb, float *s, size_t bs, const le_block_q8_0 *x, \
                                       const int8_t *yq, size_t byq, const float *dyt, int pf) { \
    q8_tile(RN, nb, s, bs, x, yq, byq, dyt, pf);                                                \
  }
Q8_FN(1) Q8_FN(2) Q8_FN(3) Q8_FN(4) Q8_FN(5) Q8_FN(6) Q8_FN(7) Q8_FN(8)
static const q8_fn q8_one[9] = {NULL,    q8_1x1, q8_1x2, q8_1x3, q8_1x4,
                                q8_1x5, q8_1x6, q8_1x7, q8_1x8};

void le_q8_0_panel(int64_t K, const void *vx, size_t bx, int64_t nr, const int8_t *yq,
                   const float *dyt, int64_t nc, float *s, size_t bs) {
  const char *x = vx;
  const int64_t nb = K / LE_QK;
  for (int64_t c = 0; c < nc; c += 8) {
    const int rn = (int)LE_MIN(8, nc - c);
    for (int64_t r = 0; r < nr; r++)
      q8_one[rn](nb, s + c * bs + r, bs, (const le_block_q8_0 *)(x + r * bx), yq + c * K,
                 (size_t)K, dyt + c * nb, c == 0);
  }
}

#else

void le_sgemm8_panel(int f16, int64_t K, const void *vx, size_t bx, int64_t nr, const float *y,
                     size_t by, int64_t nc, float *s, size_t bs) {
  (void)f16, (void)K, (void)vx, (void)bx, (void)nr, (void)y, (void)by, (void)nc, (void)s, (void)bs;
}

void le_q8_0_panel(int64_t K, const void *vx, size_t bx, int64_t nr, const int8_t *yq,
                   const float *dyt, int64_t nc, float *s, size_t bs) {
  (void)K, (void)vx, (void)bx, (void)nr, (void)yq, (void)dyt, (void)nc, (void)s, (void)bs;
}

#endif
