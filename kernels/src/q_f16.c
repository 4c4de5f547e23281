/* F16: IEEE half. mul_mat rounds f32 activations to f16 first (ggml's
 * vec_dot_type for f16 is f16) and accumulates the products in float. */
#include "le_internal.h"
#include "le_wasm_simd.h"
#include "reduce512.h"

static void cvt_to_f32_scalar(const uint16_t *x, float *y, int64_t n) {
  for (int64_t i = 0; i < n; i++) y[i] = le_fp16_to_fp32(x[i]);
}
static void cvt_to_f16_scalar(const float *x, uint16_t *y, int64_t n) {
  for (int64_t i = 0; i < n; i++) y[i] = le_fp32_to_fp16(x[i]);
}

static void dot_f16_scalar(int64_t n, float *s, const void *vx, const void *vy) {
  const uint16_t *x = vx, *y = vy;
  double sum = 0.0;
  for (int64_t i = 0; i < n; i++) sum += (double)(le_fp16_to_fp32(x[i]) * le_fp16_to_fp32(y[i]));
  *s = (float)sum;
}

#if defined(LE_WASM_SIMD)
float le_wasm_f16_table[65536];
__attribute__((constructor)) static void le_wasm_f16_table_init(void) {
  for (uint32_t h = 0; h < 65536; h++) le_wasm_f16_table[h] = le_fp16_to_fp32((uint16_t)h);
}

/* dot_f16_scalar's float, through wasm_simd.c's certified fast order. */
static void dot_f16_wasm(int64_t n, float *s, const void *vx, const void *vy) {
  *s = le_dot_f16_wasm(n, vx, vy);
}
static void cvt_to_f32_wasm(const uint16_t *x, float *y, int64_t n) {
  int64_t i = 0;
  for (; i + 4 <= n; i += 4) wasm_v128_store(y + i, le_wasm_h2f4(x + i));
  for (; i < n; i++) y[i] = le_fp16_to_fp32(x[i]);
}
#endif

#if defined(LE_X86)
LE_TARGET_AVX2 static void cvt_to_f32_avx2(const uint16_t *x, float *y, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    _mm256_storeu_ps(y + i, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(x + i))));
  for (; i < n; i++) y[i] = le_fp16_to_fp32(x[i]);
}
LE_TARGET_AVX2 static void cvt_to_f16_avx2(const float *x, uint16_t *y, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    _mm_storeu_si128((__m128i *)(y + i), _mm256_cvtps_ph(_mm256_loadu_ps(x + i), 0));
  for (; i < n; i++) y[i] = le_fp32_to_fp16(x[i]);
}

/* GGML_F32Cx8_REDUCE = GGML_F32x8_REDUCE: (a0 + a2) + (a1 + a3), low +
 * high half, two hadds ((t0 + t1) + (t2 + t3)); the elements from np on
 * in double, each product rounded in float (ggml's leftover loop). */
LE_TARGET_AVX2 static inline float f16_finish_avx2(__m256 a0, __m256 a1, __m256 a2, __m256 a3,
                                                   const uint16_t *x, const uint16_t *y,
                                                   int64_t np, int64_t n) {
  __m256 t = _mm256_add_ps(_mm256_add_ps(a0, a2), _mm256_add_ps(a1, a3));
  __m128 r = _mm_add_ps(_mm256_castps256_ps128(t), _mm256_extractf128_ps(t, 1));
  r = _mm_hadd_ps(r, r);
  r = _mm_hadd_ps(r, r);
  double sum = _mm_cvtss_f32(r);
  for (int64_t i = np; i < n; i++) sum += (double)(_cvtsh_ss(x[i]) * _cvtsh_ss(y[i]));
  return (float)sum;
}

LE_TARGET_AVX2 static void dot_f16_avx2(int64_t n, float *s, const void *vx, const void *vy) {
  const uint16_t *x = vx, *y = vy;
  __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
  const int64_t np = n & ~(int64_t)31;
#define LD(p) _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(p)))
  for (int64_t i = 0; i < np; i += 32) {
    a0 = _mm256_fmadd_ps(LD(x + i), LD(y + i), a0);
    a1 = _mm256_fmadd_ps(LD(x + i + 8), LD(y + i + 8), a1);
    a2 = _mm256_fmadd_ps(LD(x + i + 16), LD(y + i + 16), a2);
    a3 = _mm256_fmadd_ps(LD(x + i + 24), LD(y + i + 24), a3);
  }
#undef LD
  *s = f16_finish_avx2(a0, a1, a2, a3, x, y, np, n);
}

/* (a0 + a2) + (a1 + a3) reduced to one lane; then the elements from np on
 * (all of them for an attention head of 32): each product rounded in float,
 * added in double in order, as ggml's leftover loop, converted and
 * multiplied 16 at a time (masked loads). */
LE_TARGET_AVX512 static inline float f16_finish_avx512(__m512 a0, __m512 a1, __m512 a2, __m512 a3,
                                                       const uint16_t *x, const uint16_t *y,
                                                       int64_t np, int64_t n) {
  double sum = _mm512_reduce_add_ps(_mm512_add_ps(_mm512_add_ps(a0, a2), _mm512_add_ps(a1, a3)));
  for (int64_t i = np; i < n; i += 16) {
    const int64_t m = LE_MIN(16, n - i);
    const __mmask16 k = (__mmask16)((1u << m) - 1);
    float t[16];
    _mm512_storeu_ps(t, _mm512_mul_ps(_mm512_cvtph_ps(_mm256_maskz_loadu_epi16(k, x + i)),
                                      _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(k, y + i))));
    for (int64_t j = 0; j < m; j++) sum += (double)t[j];
  }
  return (float)sum;
}

LE_TARGET_AVX512 static void dot_f16_avx512(int64_t n, float *s, const void *vx, const void *vy) {
  const uint16_t *x = vx, *y = vy;
  __m512 a0 = _mm512_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
  const int64_t np = n & ~(int64_t)63;
#define LD(p) _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(p)))
  for (int64_t i = 0; i < np; i += 64) {
    a0 = _mm512_fmadd_ps(LD(x + i), LD(y + i), a0);
    a1 = _mm512_fmadd_ps(LD(x + i + 16), LD(y + i + 16), a1);
    a2 = _mm512_fmadd_ps(LD(x + i + 32), LD(y + i + 32), a2);
    a3 = _mm512_fmadd_ps(LD(x + i + 48), LD(y + i + 48), a3);
  }
#undef LD
  *s = f16_finish_avx512(a0, a1, a2, a3, x, y, np, n);
}
#endif


#if defined(LE_X86)
/* In place: r[c] lane j = r[j] lane c, for a 16 x 16 block of floats. */
LE_TARGET_AVX512 static inline __attribute__((always_inline)) void transpose16(__m512 r[16]) {
  __m512 t[16];
#pragma GCC unroll 8
  for (int i = 0; i < 16; i += 2) { /* lane L: pairs of rows at columns 4L, 4L+1 | 4L+2, 4L+3 */
    t[i] = _mm512_unpacklo_ps(r[i], r[i + 1]);
    t[i + 1] = _mm512_unpackhi_ps(r[i], r[i + 1]);
  }
#pragma GCC unroll 4
  for (int i = 0; i < 16; i += 4) { /* r[i + c] lane L: rows i..i+3 at column 4L + c */
    r[i] = _mm512_shuffle_ps(t[i], t[i + 2], 0x44);
    r[i + 1] = _mm512_shuffle_ps(t[i], t[i + 2], 0xEE);
    r[i + 2] = _mm512_shuffle_ps(t[i + 1], t[i + 3], 0x44);
    r[i + 3] = _mm512_shuffle_ps(t[i + 1], t[i + 3], 0xEE);
  }
#pragma GCC unroll 4
  for (int c = 0; c < 4; c++) { /* 128-bit lanes: columns c and 8+c (or 4+c and 12+c) */
    t[c] = _mm512_shuffle_f32x4(r[c], r[4 + c], 0x88);
    t[4 + c] = _mm512_shuffle_f32x4(r[c], r[4 + c], 0xDD);
    t[8 + c] = _mm512_shuffle_f32x4(r[8 + c], r[12 + c], 0x88);
    t[12 + c] = _mm512_shuffle_f32x4(r[8 + c], r[12 + c], 0xDD);
  }
#pragma GCC unroll 4
  for (int c = 0; c < 4; c++) {
    r[c] = _mm512_shuffle_f32x4(t[c], t[8 + c], 0x88);
    r[8 + c] = _mm512_shuffle_f32x4(t[c], t[8 + c], 0xDD);
    r[4 + c] = _mm512_shuffle_f32x4(t[4 + c], t[12 + c], 0x88);
    r[12 + c] = _mm512_shuffle_f32x4(t[4 + c], t[12 + c], 0xDD);
  }
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
                  const uint16_t *const *y, const float *yf, float *const *s) {
  const int64_t np = n & ~(int64_t)63;
  float red[4][16] = {{0}};
  if (np) {
    __m512 acc[4][16];
    for (int j = 0; j < 16; j++) {
      const uint16_t *x = xr[j];
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
    if (ny == 4) rows16_f16_avx512(4, n, nr, xr, y, wide ? yf : NULL, o);
    else rows16_f16_avx512(1, n, nr, xr, y, wide ? yf : NULL, o);
  }
}
#endif

le_f16_rows_fn le_f16_rows(void) {
#if defined(LE_X86)
  if (le_simd() == LE_SIMD_AVX512) return rows_f16_avx512;
#endif
  return NULL;
}

#if defined(LE_X86)
/* dot_f16_avx2 of one x against two y, each output by its chain (four
 * 8-lane accumulators per output fill 8 of AVX2's 16 registers, so four y
 * at once would spill). */
LE_TARGET_AVX2 static void dot2_f16_avx2(int64_t n, float *s0, float *s1, const uint16_t *x,
                                         const uint16_t *y0, const uint16_t *y1) {
  __m256 a[2][4];
  for (int k = 0; k < 2; k++) a[k][0] = a[k][1] = a[k][2] = a[k][3] = _mm256_setzero_ps();
  const int64_t np = n & ~(int64_t)31;
#define LD(p) _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(p)))
  for (int64_t i = 0; i < np; i += 32) {
    const __m256 x0 = LD(x + i), x1 = LD(x + i + 8), x2 = LD(x + i + 16), x3 = LD(x + i + 24);
    a[0][0] = _mm256_fmadd_ps(x0, LD(y0 + i), a[0][0]);
    a[0][1] = _mm256_fmadd_ps(x1, LD(y0 + i + 8), a[0][1]);
    a[0][2] = _mm256_fmadd_ps(x2, LD(y0 + i + 16), a[0][2]);
    a[0][3] = _mm256_fmadd_ps(x3, LD(y0 + i + 24), a[0][3]);
    a[1][0] = _mm256_fmadd_ps(x0, LD(y1 + i), a[1][0]);
    a[1][1] = _mm256_fmadd_ps(x1, LD(y1 + i + 8), a[1][1]);
    a[1][2] = _mm256_fmadd_ps(x2, LD(y1 + i + 16), a[1][2]);
    a[1][3] = _mm256_fmadd_ps(x3, LD(y1 + i + 24), a[1][3]);
  }
#undef LD
  *s0 = f16_finish_avx2(a[0][0], a[0][1], a[0][2], a[0][3], x, y0, np, n);
  *s1 = f16_finish_avx2(a[1][0], a[1][1], a[1][2], a[1][3], x, y1, np, n);
}

LE_TARGET_AVX2 static void dot4_f16_avx2(int64_t n, float *const s[4], const void *vx,
                                         const void *const vy[4]) {
  dot2_f16_avx2(n, s[0], s[1], vx, vy[0], vy[1]);
  dot2_f16_avx2(n, s[2], s[3], vx, vy[2], vy[3]);
}
#endif

le_vec_dot4_fn le_f16_dot4(void) {
#if defined(LE_X86)
  if (le_simd() == LE_SIMD_AVX2) return dot4_f16_avx2;
#endif
  return NULL;
}

#if defined(LE_NEON)
static void dot_f16_neon(int64_t n, float *s, const void *vx, const void *vy) {
  const __fp16 *x = vx, *y = vy;
  float32x4_t a0 = vdupq_n_f32(0), a1 = a0;
  const int64_t np = n & ~(int64_t)7;
  for (int64_t i = 0; i < np; i += 8) {
    float16x8_t hx = vld1q_f16(x + i), hy = vld1q_f16(y + i);
    a0 = vfmaq_f32(a0, vcvt_f32_f16(vget_low_f16(hx)), vcvt_f32_f16(vget_low_f16(hy)));
    a1 = vfmaq_f32(a1, vcvt_high_f32_f16(hx), vcvt_high_f32_f16(hy));
  }
  double sum = vaddvq_f32(vaddq_f32(a0, a1));
  const uint16_t *ux = vx, *uy = vy;
  for (int64_t i = np; i < n; i++) sum += (double)(le_fp16_to_fp32(ux[i]) * le_fp16_to_fp32(uy[i]));
  *s = (float)sum;
}
#endif

void le_fp16_to_fp32_row(const uint16_t *x, float *y, int64_t n) {
#if defined(LE_X86)
  if (le_simd() >= LE_SIMD_AVX2) {
    cvt_to_f32_avx2(x, y, n);
    return;
  }
#endif
#if defined(LE_WASM_SIMD)
  cvt_to_f32_wasm(x, y, n);
  return;
#endif
  cvt_to_f32_scalar(x, y, n);
}

void le_fp32_to_fp16_row(const float *x, uint16_t *y, int64_t n) {
#if defined(LE_X86)
  if (le_simd() >= LE_SIMD_AVX2) {
    cvt_to_f16_avx2(x, y, n);
    return;
  }
#endif
  cvt_to_f16_scalar(x, y, n);
}

static void f16_to_float(const void *x, float *y, int64_t n) { le_fp16_to_fp32_row(x, y, n); }
static void f16_from_float(const float *x, void *y, int64_t n) { le_fp32_to_fp16_row(x, y, n); }

const le_type_traits le_traits_f16 = {
    .type = LE_TYPE_F16,
    .name = "f16",
    .blck = 1,
    .size = 2,
    .to_float = f16_to_float,
    .from_float_ref = f16_from_float,
    .from_float_act = f16_from_float,
    .vec_dot_type = LE_TYPE_F16,
    .vec_dot = {
#if defined(LE_WASM_SIMD)
        [LE_SIMD_SCALAR] = dot_f16_wasm,
#else
        [LE_SIMD_SCALAR] = dot_f16_scalar,
#endif
#if defined(LE_X86)
        [LE_SIMD_AVX2] = dot_f16_avx2,
        [LE_SIMD_AVX512] = dot_f16_avx512,
#endif
#if defined(LE_NEON)
        [LE_SIMD_NEON] = dot_f16_neon,
#endif
    },
#if defined(LE_WASM_SIMD)
    .gemm = {[LE_SIMD_SCALAR] = &le_f16_tiles_wasm},
#endif
};
