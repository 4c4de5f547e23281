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
 * first use, and le_vexpf then gives NULL: callers call expf as before.
 * le_expf_mismatches compares the two over a sweep of floats (tests). */
#include <stdatomic.h>

#include "expf_libm.h"

#if defined(LE_X86)
/* Out-of-line copies for the check and the sweep. */
LE_TARGET_AVX512 static void vexpf_avx512(const float *x, float *y, int n) {
  le_vexpf_avx512(x, y, n);
}
LE_TARGET_AVX2 static void vexpf_avx2(const float *x, float *y, int n) { le_vexpf_avx2(x, y, n); }

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
  return l == LE_SIMD_AVX512 ? vexpf_avx512 : l == LE_SIMD_AVX2 ? vexpf_avx2 : NULL;
}

int le_vexpf_ok(void) {
  static _Atomic int ok512 = -1, ok2 = -1; /* unchecked, failed, passed */
  const vexpf_fn fn = vexpf_level();
  if (!fn) return 0;
  _Atomic int *ok = fn == vexpf_avx512 ? &ok512 : &ok2;
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
