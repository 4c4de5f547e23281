/* expf several lanes at a time, bit for bit as libm computes it.
 *
 * ggml's flash attention calls libm's expf once per cell. glibc's (since
 * 2.28, sysdeps/ieee754/flt-32/e_expf.c) evaluates in double, and on FMA
 * CPUs libm runs the build with contracted multiply-adds (__expf_fma, read
 * from the objdump of Debian 12's libm):
 *   kd = fma(InvLn2N, x, SHIFT) - SHIFT, r = fma(InvLn2N, x, -kd),
 *   s = T[ki % 32] + (ki << 47) as a double,
 *   y = fma(fma(C0, r, C1), r*r, fma(C2, r, 1)) * s, rounded to float.
 * The same steps in double lanes give the same bits; |x| >= 88 and NaN take
 * libm's own path (expf itself). A libm that computes otherwise (another C
 * library, a CPU without FMA) is caught by a self-check against expf at
 * first use (le_vexpf_ok), and callers then call expf as before.
 * le_expf_mismatches compares the two over a sweep of floats (tests). */
#include <stdatomic.h>

#include "expf_libm.h"

#if defined(LE_X86)
static const uint64_t EXPF_T[32] = {
    0x3ff0000000000000, 0x3fefd9b0d3158574, 0x3fefb5586cf9890f, 0x3fef9301d0125b51,
    0x3fef72b83c7d517b, 0x3fef54873168b9aa, 0x3fef387a6e756238, 0x3fef1e9df51fdee1,
    0x3fef06fe0a31b715, 0x3feef1a7373aa9cb, 0x3feedea64c123422, 0x3feece086061892d,
    0x3feebfdad5362a27, 0x3feeb42b569d4f82, 0x3feeab07dd485429, 0x3feea47eb03a5585,
    0x3feea09e667f3bcd, 0x3fee9f75e8ec5f74, 0x3feea11473eb0187, 0x3feea589994cce13,
    0x3feeace5422aa0db, 0x3feeb737b0cdc5e5, 0x3feec49182a3f090, 0x3feed503b23e255d,
    0x3feee89f995ad3ad, 0x3feeff76f2fb5e47, 0x3fef199bdd85529c, 0x3fef3720dcef9069,
    0x3fef5818dcfba487, 0x3fef7c97337b9b5f, 0x3fefa4afa2a490da, 0x3fefd0765b6e4540};
#define EXPF_INVLN2N 0x40471547652b82feull /* 0x1.71547652b82fep+0 * 32 */
#define EXPF_C0 0x3ebc6af84b912394ull      /* 0x1.c6af84b912394p-5 / 32^3 */
#define EXPF_C1 0x3f2ebfce50fac4f3ull      /* 0x1.ebfce50fac4f3p-3 / 32^2 */
#define EXPF_C2 0x3f962e42ff0c52d6ull      /* 0x1.62e42ff0c52d6p-1 / 32 */
#define EXPF_SHIFT 0x4338000000000000ull   /* 0x1.8p+52 */
#define EXPF_BIG 0x42a /* top12(x) & 0x7ff above this: |x| >= 88, inf, NaN */

/* Lanes flagged in `big` (bit l: x[l]) take libm's expf. */
static void vexpf_big(const float *x, float *y, unsigned big) {
  while (big) {
    const int l = __builtin_ctz(big);
    y[l] = expf(x[l]);
    big &= big - 1;
  }
}

/* Eight lanes at a time. */
LE_TARGET_AVX512 void le_vexpf_avx512(const float *x, float *y, int n) {
#define D(bits) _mm512_castsi512_pd(_mm512_set1_epi64((long long)(bits)))
  const __m512d invln2n = D(EXPF_INVLN2N), shift = D(EXPF_SHIFT), c0 = D(EXPF_C0),
                c1 = D(EXPF_C1), c2 = D(EXPF_C2), one = _mm512_set1_pd(1.0);
#undef D
  for (int i = 0; i < n; i += 8) {
    const __mmask8 k = (__mmask8)((1u << LE_MIN(8, n - i)) - 1);
    const __m256 xf = _mm256_maskz_loadu_ps(k, x + i);
    const __m512d xd = _mm512_cvtps_pd(xf);
    const __m512d kds = _mm512_fmadd_pd(invln2n, xd, shift);
    const __m512i ki = _mm512_castpd_si512(kds);
    const __m512d kd = _mm512_sub_pd(kds, shift);
    const __m512d r = _mm512_fmsub_pd(invln2n, xd, kd);
    __m512i t = _mm512_i64gather_epi64(_mm512_and_si512(ki, _mm512_set1_epi64(31)),
                                       (const void *)EXPF_T, 8);
    t = _mm512_add_epi64(t, _mm512_slli_epi64(ki, 47));
    const __m512d z = _mm512_fmadd_pd(r, c0, c1);
    const __m512d r2 = _mm512_mul_pd(r, r);
    __m512d p = _mm512_fmadd_pd(r, c2, one);
    p = _mm512_mul_pd(_mm512_fmadd_pd(z, r2, p), _mm512_castsi512_pd(t));
    _mm256_mask_storeu_ps(y + i, k, _mm512_cvtpd_ps(p));
    const __m256i top = _mm256_and_si256(_mm256_srli_epi32(_mm256_castps_si256(xf), 20),
                                         _mm256_set1_epi32(0x7ff));
    vexpf_big(x + i, y + i, k & _mm256_cmpgt_epi32_mask(top, _mm256_set1_epi32(EXPF_BIG)));
  }
}

/* The same four lanes at a time (AVX2 + FMA). */
LE_TARGET_AVX2 void le_vexpf_avx2(const float *x, float *y, int n) {
#define D(bits) _mm256_castsi256_pd(_mm256_set1_epi64x((long long)(bits)))
  const __m256d invln2n = D(EXPF_INVLN2N), shift = D(EXPF_SHIFT), c0 = D(EXPF_C0),
                c1 = D(EXPF_C1), c2 = D(EXPF_C2), one = _mm256_set1_pd(1.0);
#undef D
  for (int i = 0; i < n; i += 4) {
    const int m = LE_MIN(4, n - i);
    float xs[4] = {0}, ys[4];
    memcpy(xs, x + i, (size_t)m * 4);
    const __m128 xf = _mm_loadu_ps(xs);
    const __m256d xd = _mm256_cvtps_pd(xf);
    const __m256d kds = _mm256_fmadd_pd(invln2n, xd, shift);
    const __m256i ki = _mm256_castpd_si256(kds);
    const __m256d kd = _mm256_sub_pd(kds, shift);
    const __m256d r = _mm256_fmsub_pd(invln2n, xd, kd);
    __m256i t = _mm256_i64gather_epi64((const long long *)(const void *)EXPF_T,
                                       _mm256_and_si256(ki, _mm256_set1_epi64x(31)), 8);
    t = _mm256_add_epi64(t, _mm256_slli_epi64(ki, 47));
    const __m256d z = _mm256_fmadd_pd(r, c0, c1);
    const __m256d r2 = _mm256_mul_pd(r, r);
    __m256d p = _mm256_fmadd_pd(r, c2, one);
    p = _mm256_mul_pd(_mm256_fmadd_pd(z, r2, p), _mm256_castsi256_pd(t));
    _mm_storeu_ps(ys, _mm256_cvtpd_ps(p));
    const __m128i top =
        _mm_and_si128(_mm_srli_epi32(_mm_castps_si128(xf), 20), _mm_set1_epi32(0x7ff));
    const unsigned big = (unsigned)_mm_movemask_ps(
                             _mm_castsi128_ps(_mm_cmpgt_epi32(top, _mm_set1_epi32(EXPF_BIG)))) &
                         ((1u << m) - 1);
    vexpf_big(xs, ys, big);
    memcpy(y + i, ys, (size_t)m * 4);
  }
}


typedef void (*vexpf_fn)(const float *x, float *y, int n);

/* Whether fn gives libm's expf bits here, over a spread of bit patterns
 * in [-110, 90] of both signs. */
static int vexpf_check(vexpf_fn fn) {
  float x[32], y[32];
  for (uint32_t i = 0; i < 4096; i++) {
    for (int l = 0; l < 32; l++) {
      const uint32_t bits = (i * 32 + (uint32_t)l) * 8209u % 0x42b40000u | (l & 1 ? 0x80000000u : 0);
      memcpy(&x[l], &bits, 4);
    }
    fn(x, y, 32);
    for (int l = 0; l < 32; l++) {
      const float e = expf(x[l]);
      if (memcmp(&e, &y[l], 4)) return 0;
    }
  }
  return 1;
}

/* The current level's kernel, or NULL below AVX2. */
static vexpf_fn vexpf_level(void) {
  const int l = le_simd();
  return l == LE_SIMD_AVX512 ? le_vexpf_avx512 : l == LE_SIMD_AVX2 ? le_vexpf_avx2 : NULL;
}

int le_vexpf_ok(void) {
  static _Atomic int ok512 = -1, ok2 = -1; /* unchecked, failed, passed */
  const vexpf_fn fn = vexpf_level();
  if (!fn) return 0;
  _Atomic int *ok = fn == le_vexpf_avx512 ? &ok512 : &ok2;
  int v = atomic_load_explicit(ok, memory_order_relaxed);
  if (v < 0) { /* racing first checks compute the same answer */
    v = vexpf_check(fn);
    atomic_store_explicit(ok, v, memory_order_relaxed);
  }
  return v;
}
#else
int le_vexpf_ok(void) { return 0; }
#endif

int64_t le_expf_mismatches(uint32_t lo, uint32_t hi, uint32_t step) {
#if defined(LE_X86)
  const vexpf_fn fn = vexpf_level();
  if (!fn || !step || !le_vexpf_ok()) return -1;
  int64_t bad = 0;
  float x[32], y[32];
  for (uint64_t b = lo; b <= hi;) {
    int n = 0;
    for (; n < 32 && b <= hi; n++, b += step) {
      const uint32_t bits = (uint32_t)b;
      memcpy(&x[n], &bits, 4);
    }
    fn(x, y, n);
    for (int l = 0; l < n; l++) {
      const float e = expf(x[l]);
      bad += memcmp(&e, &y[l], 4) != 0;
    }
  }
  return bad;
#else
  (void)lo, (void)hi, (void)step;
  return -1;
#endif
}
