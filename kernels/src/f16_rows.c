/* F16 one-column products several rows at a time (mul_mat.c's rows
 * path: attention, short weight rows), each output by ggml_vec_dot_f16's
 * chain at the level: the rows' final reductions as one, the serial double
 * leftovers lane-parallel over the rows (kernels/PARITY.md section 26). */
#include <string.h>

#include "le_internal.h"
#include "reduce512.h"

#if defined(LE_X86)
/* The rows of the next group, where the rows are strided (a K cache viewed
 * per head: 128 B of each 512 B cell): row j of it, `lines` cache lines,
 * prefetched while row j of this group is computed. The hardware prefetcher
 * does not follow such reads, and a decode step at depth waited on memory
 * for each group (bench/attn.c, Zen 4, 1.1B shape at depth 2048); spread
 * one row per row computed, the next group is in cache when it starts. */
typedef struct {
  const char *p; /* the next group's first row, or NULL: nothing to prefetch */
  size_t bx;     /* bytes from row to row */
  int rows;      /* rows of the next group */
  int lines;     /* cache lines per row */
} rows_pf;

static inline __attribute__((always_inline)) void rows_pf_row(const rows_pf *f, int j) {
  if (!f->p || j >= f->rows) return;
  const char *row = f->p + (size_t)j * f->bx;
  for (int l = 0; l < f->lines; l++) _mm_prefetch(row + (size_t)l * 64, _MM_HINT_T0);
}

/* The prefetch of rows [r0 + g, r0 + 2g) of nrows rows of n halves bx
 * apart, where they are strided. */
static inline rows_pf rows_pf_next(const void *vx, size_t bx, int64_t n, int64_t nrows, int64_t r0,
                                   int g) {
  const int64_t next = r0 + g;
  if (bx <= (size_t)n * 2 || next >= nrows) return (rows_pf){0};
  return (rows_pf){.p = (const char *)vx + (size_t)next * bx,
                   .bx = bx,
                   .rows = (int)LE_MIN((int64_t)g, nrows - next),
                   .lines = (int)((n * 2 + 63) / 64)};
}

/* dot_f16_avx512 of 16 rows x (xr[j]) with ny (1 or 4) y each, into
 * s[k][j] for j < nr. Each row's vector part is its own chain (y widened
 * once into yf when given: exact); the 16 rows' final reductions run as
 * one (reduce16); the leftovers, which vec_dot adds one at a time in
 * double (every element of a head of 32, up to 63 of a KQV row), go
 * lane-parallel over the rows: the 16 rows' float products are transposed
 * so that lane j of one double vector adds row j's products in row j's
 * order. Same operations per output, so the same bits, without one
 * latency-bound chain per dot. */
LE_TARGET_AVX512 static inline __attribute__((always_inline)) void
rows16_f16_avx512(const int ny, int64_t n, int nr, const uint16_t *const xr[16],
                  const uint16_t *const *y, const float *yf, float *const *s, const rows_pf *pf) {
  const int64_t np = n & ~(int64_t)63;
  float red[4][16] = {{0}};
  if (np) {
    __m512 acc[4][16];
    for (int j = 0; j < 16; j++) {
      const uint16_t *x = xr[j];
      rows_pf_row(pf, j);
      __m512 a[4][4];
#pragma GCC unroll 4
      for (int k = 0; k < ny; k++) a[k][0] = a[k][1] = a[k][2] = a[k][3] = _mm512_setzero_ps();
#define LD(p) _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(p)))
#define LY(k, i) (yf ? _mm512_loadu_ps(yf + (k) * n + (i)) : LD(y[k] + (i)))
      for (int64_t i = 0; i < np; i += 64) {
        const __m512 x0 = LD(x + i), x1 = LD(x + i + 16), x2 = LD(x + i + 32), x3 = LD(x + i + 48);
#pragma GCC unroll 4
        for (int k = 0; k < ny; k++) {
          a[k][0] = _mm512_fmadd_ps(x0, LY(k, i), a[k][0]);
          a[k][1] = _mm512_fmadd_ps(x1, LY(k, i + 16), a[k][1]);
          a[k][2] = _mm512_fmadd_ps(x2, LY(k, i + 32), a[k][2]);
          a[k][3] = _mm512_fmadd_ps(x3, LY(k, i + 48), a[k][3]);
        }
      }
#undef LY
#undef LD
#pragma GCC unroll 4
      for (int k = 0; k < ny; k++)
        acc[k][RED_SLOT[j]] =
            _mm512_add_ps(_mm512_add_ps(a[k][0], a[k][2]), _mm512_add_ps(a[k][1], a[k][3]));
    }
    for (int k = 0; k < ny; k++) _mm512_storeu_ps(red[k], reduce16(acc[k]));
  }
  for (int k = 0; k < ny; k++) {
    if (np == n) {
      for (int j = 0; j < nr; j++) s[k][j] = red[k][j];
      continue;
    }
    __m512d lo = _mm512_cvtps_pd(_mm256_loadu_ps(red[k]));
    __m512d hi = _mm512_cvtps_pd(_mm256_loadu_ps(red[k] + 8));
    if (!np && k == 0)
      for (int j = 0; j < 16; j++) rows_pf_row(pf, j);
    for (int64_t i = np; i < n; i += 16) {
      const int m = (int)LE_MIN(16, n - i);
      const __mmask16 mk = (__mmask16)((1u << m) - 1);
      const __m512 yv = _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(mk, y[k] + i));
      __m512 p[16];
#pragma GCC unroll 16
      for (int j = 0; j < 16; j++)
        p[j] = _mm512_mul_ps(_mm512_cvtph_ps(_mm256_maskz_loadu_epi16(mk, xr[j] + i)), yv);
      transpose16(p);
      for (int c = 0; c < m; c++) {
        lo = _mm512_add_pd(lo, _mm512_cvtps_pd(_mm512_castps512_ps256(p[c])));
        hi = _mm512_add_pd(hi, _mm512_cvtps_pd(
                                   _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(p[c]), 1))));
      }
    }
    float out[16];
    _mm256_storeu_ps(out, _mm512_cvtpd_ps(lo));
    _mm256_storeu_ps(out + 8, _mm512_cvtpd_ps(hi));
    for (int j = 0; j < nr; j++) s[k][j] = out[j];
  }
}

/* rows16_f16_avx512(4, 64, ...) with y widened and held in registers: a
 * decode step's KQ over heads of 64, each K row against four query heads
 * (one step of 64 per row, nothing left over). The same operations per
 * output; the general loop's per-row setup and y loads made it ~17% slower
 * (bench/attn.c, Zen 4, one thread). */
LE_TARGET_AVX512 static inline __attribute__((always_inline)) void
rows16_f16_d64x4_avx512(int nr, const uint16_t *const xr[16], const float *yf, float *const *s,
                        const rows_pf *pf) {
  __m512 y[4][4], acc[4][16];
  for (int k = 0; k < 4; k++)
    for (int q = 0; q < 4; q++) y[k][q] = _mm512_loadu_ps(yf + 64 * k + 16 * q);
  const __m512 z = _mm512_setzero_ps();
#pragma GCC unroll 16
  for (int j = 0; j < 16; j++) {
    rows_pf_row(pf, j);
#define LD(p) _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(p)))
    const __m512 x0 = LD(xr[j]), x1 = LD(xr[j] + 16), x2 = LD(xr[j] + 32), x3 = LD(xr[j] + 48);
#undef LD
#pragma GCC unroll 4
    for (int k = 0; k < 4; k++)
      acc[k][RED_SLOT[j]] = _mm512_add_ps(
          _mm512_add_ps(_mm512_fmadd_ps(x0, y[k][0], z), _mm512_fmadd_ps(x2, y[k][2], z)),
          _mm512_add_ps(_mm512_fmadd_ps(x1, y[k][1], z), _mm512_fmadd_ps(x3, y[k][3], z)));
  }
  for (int k = 0; k < 4; k++) {
    float red[16];
    _mm512_storeu_ps(red, reduce16(acc[k]));
    for (int j = 0; j < nr; j++) s[k][j] = red[j];
  }
}

/* le_f16_rows_fn at AVX-512: groups of 16 rows (a short last group repeats
 * its last row, whose extra results are dropped). */
LE_TARGET_AVX512 static void rows_f16_avx512(int64_t n, int64_t nrows, const void *vx, size_t bx,
                                             int ny, const void *const *vy, float *const *s) {
  const uint16_t *const *y = (const uint16_t *const *)vy;
  /* y widened once (exact), so that each row converts only its own
   * elements. Up to 16 KiB of it: a longer y (a KQV row over a deep
   * window, four query heads) would push the streamed rows out of L1, and
   * is read from f16 instead (same values). */
  float yf[4096];
  const int wide = ny * n <= 4096 && nrows > 16;
  if (wide)
    for (int k = 0; k < ny; k++) le_fp16_to_fp32_row(y[k], yf + k * n, n);
  for (int64_t r0 = 0; r0 < nrows; r0 += 16) {
    const int nr = (int)LE_MIN(16, nrows - r0);
    const uint16_t *xr[16];
    for (int j = 0; j < 16; j++)
      xr[j] = (const uint16_t *)((const char *)vx + (size_t)(r0 + LE_MIN(j, nr - 1)) * bx);
    float *o[4];
    for (int k = 0; k < ny; k++) o[k] = s[k] + r0;
    const rows_pf pf = rows_pf_next(vx, bx, n, nrows, r0, 16);
    if (ny == 4 && n == 64 && wide) rows16_f16_d64x4_avx512(nr, xr, yf, o, &pf);
    else if (ny == 4) rows16_f16_avx512(4, n, nr, xr, y, wide ? yf : NULL, o, &pf);
    else if (ny == 2) rows16_f16_avx512(2, n, nr, xr, y, wide ? yf : NULL, o, &pf);
    else rows16_f16_avx512(1, n, nr, xr, y, wide ? yf : NULL, o, &pf);
  }
}

/* AVX2 (llama.cpp's haswell order, vec_dot_f16 with steps of 32): the same
 * idea 8 rows at a time. */

/* GGML_F32x8_REDUCE's last steps (low + high half, then two hadds) of 8
 * vectors at once, the same tree per lane. Output lane l is the reduction
 * of a[RED8_SLOT[l]]; storing row j's vector at a[RED8_SLOT[j]] gives the
 * rows in order. */
static const int RED8_SLOT[8] = {0, 2, 4, 6, 1, 3, 5, 7};

LE_TARGET_AVX2 static inline __attribute__((always_inline)) __m256 reduce8(const __m256 a[8]) {
  __m256 s[4];
#pragma GCC unroll 4
  for (int p = 0; p < 4; p++) /* halves: low + high of two vectors */
    s[p] = _mm256_add_ps(_mm256_permute2f128_ps(a[2 * p], a[2 * p + 1], 0x20),
                         _mm256_permute2f128_ps(a[2 * p], a[2 * p + 1], 0x31));
  const __m256 h0 = _mm256_hadd_ps(s[0], s[1]), h1 = _mm256_hadd_ps(s[2], s[3]);
  return _mm256_hadd_ps(h0, h1);
}

/* dot_f16_avx2 of 8 rows x (xr[j]) with ny (1 or 2) y each, into s[k][j]
 * for j < nr: each row's chain over steps of 32 (y widened once into yf
 * when given), the 8 reductions as one (reduce8), the leftovers
 * lane-parallel in double (rows 0-3 and 4-7 in two vectors). */
LE_TARGET_AVX2 static inline __attribute__((always_inline)) void
rows8_f16_avx2(const int ny, int64_t n, int nr, const uint16_t *const xr[8],
               const uint16_t *const *y, const float *yf, float *const *s, const rows_pf *pf) {
  const int64_t np = n & ~(int64_t)31;
  float red[2][8] = {{0}};
  if (np) {
    __m256 acc[2][8];
    for (int j = 0; j < 8; j++) {
      const uint16_t *x = xr[j];
      rows_pf_row(pf, j);
      __m256 a[2][4];
#pragma GCC unroll 2
      for (int k = 0; k < ny; k++) a[k][0] = a[k][1] = a[k][2] = a[k][3] = _mm256_setzero_ps();
#define LD(p) _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(p)))
#define LY(k, i) (yf ? _mm256_loadu_ps(yf + (k) * n + (i)) : LD(y[k] + (i)))
      for (int64_t i = 0; i < np; i += 32) {
        const __m256 x0 = LD(x + i), x1 = LD(x + i + 8), x2 = LD(x + i + 16), x3 = LD(x + i + 24);
#pragma GCC unroll 2
        for (int k = 0; k < ny; k++) {
          a[k][0] = _mm256_fmadd_ps(x0, LY(k, i), a[k][0]);
          a[k][1] = _mm256_fmadd_ps(x1, LY(k, i + 8), a[k][1]);
          a[k][2] = _mm256_fmadd_ps(x2, LY(k, i + 16), a[k][2]);
          a[k][3] = _mm256_fmadd_ps(x3, LY(k, i + 24), a[k][3]);
        }
      }
#undef LY
#undef LD
#pragma GCC unroll 2
      for (int k = 0; k < ny; k++)
        acc[k][RED8_SLOT[j]] =
            _mm256_add_ps(_mm256_add_ps(a[k][0], a[k][2]), _mm256_add_ps(a[k][1], a[k][3]));
    }
    for (int k = 0; k < ny; k++) _mm256_storeu_ps(red[k], reduce8(acc[k]));
  }
  for (int k = 0; k < ny; k++) {
    if (np == n) {
      for (int j = 0; j < nr; j++) s[k][j] = red[k][j];
      continue;
    }
    __m256d lo = _mm256_cvtps_pd(_mm_loadu_ps(red[k])), hi = _mm256_cvtps_pd(_mm_loadu_ps(red[k] + 4));
    int64_t i = np;
    for (; i + 8 <= n; i += 8) { /* whole chunks of 8, lane-parallel */
      const __m256 yv = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(y[k] + i)));
      __m256 p[8];
#pragma GCC unroll 8
      for (int j = 0; j < 8; j++)
        p[j] = _mm256_mul_ps(_mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(xr[j] + i))), yv);
      transpose8(p);
#pragma GCC unroll 8
      for (int c = 0; c < 8; c++) {
        lo = _mm256_add_pd(lo, _mm256_cvtps_pd(_mm256_castps256_ps128(p[c])));
        hi = _mm256_add_pd(hi, _mm256_cvtps_pd(_mm256_extractf128_ps(p[c], 1)));
      }
    }
    double sum[8]; /* the last few elements row by row (AVX2 has no masked 16-bit loads) */
    _mm256_storeu_pd(sum, lo);
    _mm256_storeu_pd(sum + 4, hi);
    for (int j = 0; j < nr; j++) {
      for (int64_t e = i; e < n; e++) sum[j] += (double)(_cvtsh_ss(xr[j][e]) * _cvtsh_ss(y[k][e]));
      s[k][j] = (float)sum[j];
    }
  }
}

/* le_f16_rows_fn at AVX2: groups of 8 rows (a short last group repeats its
 * last row), two y at a time (four would spill AVX2's 16 registers). */
LE_TARGET_AVX2 static void rows_f16_avx2(int64_t n, int64_t nrows, const void *vx, size_t bx,
                                         int ny, const void *const *vy, float *const *s) {
  const uint16_t *const *y = (const uint16_t *const *)vy;
  float yf[4096]; /* y widened once, as at AVX-512 */
  const int wide = ny * n <= 4096 && nrows > 8;
  if (wide)
    for (int k = 0; k < ny; k++) le_fp16_to_fp32_row(y[k], yf + k * n, n);
  for (int64_t r0 = 0; r0 < nrows; r0 += 8) {
    const int nr = (int)LE_MIN(8, nrows - r0);
    const uint16_t *xr[8];
    for (int j = 0; j < 8; j++)
      xr[j] = (const uint16_t *)((const char *)vx + (size_t)(r0 + LE_MIN(j, nr - 1)) * bx);
    for (int k0 = 0; k0 < ny; k0 += 2) {
      const int nk = LE_MIN(2, ny - k0);
      float *o[2] = {s[k0] + r0, nk > 1 ? s[k0 + 1] + r0 : NULL};
      const float *yk = wide ? yf + k0 * n : NULL;
      /* the next group's rows once, with the first pair of y */
      const rows_pf pf = k0 ? (rows_pf){0} : rows_pf_next(vx, bx, n, nrows, r0, 8);
      if (nk == 2) rows8_f16_avx2(2, n, nr, xr, y + k0, yk, o, &pf);
      else rows8_f16_avx2(1, n, nr, xr, y + k0, yk, o, &pf);
    }
  }
}
#endif

/* Where the row kernel pays, measured on Zen 4. At AVX-512: attention,
 * and weights with short rows (a small model's, cache-resident: 1.5x);
 * long weight rows streamed from memory keep one vec_dot per row, which
 * read them ~10% faster (1.1B F16 from DRAM: 33 vs 29-31 GB/s). At AVX2:
 * grouped-KV decode (four query heads per row: 1.4x) and rows with
 * leftovers (n % 32); one head per row is no faster there. */
le_f16_rows_fn le_f16_rows(int64_t n, int attention, int grouped) {
#if defined(LE_X86)
  if (le_simd() == LE_SIMD_AVX512 && (attention || n < 1024 || n % 64)) return rows_f16_avx512;
  if (le_simd() == LE_SIMD_AVX2 && ((attention && grouped) || n % 32)) return rows_f16_avx2;
#endif
  (void)n, (void)attention, (void)grouped;
  return NULL;
}
