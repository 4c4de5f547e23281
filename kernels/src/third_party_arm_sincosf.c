/* sinf and cosf from Arm's optimized-routines (github.com/ARM-software/
 * optimized-routines, math/sinf.c, math/cosf.c, math/sincosf.h and
 * math/sincosf_data.c at commit e17e986), the algorithm glibc ships as its
 * sinf/cosf since 2.28 (sysdeps/ieee754/flt-32/s_sinf.c, s_cosf.c). The
 * wasm32 build links wasi-libc, whose musl sinf/cosf differ from glibc's by
 * an ulp for about 1% of arguments; ROPE's cos/sin cache calls these instead
 * (ops.c, wasm only) so that it equals the x86-64 CPU backend's and
 * llama.cpp's bit for bit. Adapted: one file, le_arm_ names, the
 * TOINT_INTRINSICS = 0 path (x86's), no errno or FP exceptions for
 * inf/NaN (the result is still NaN), and MUL_ADD(a, b, c) = fma(a, b, c)
 * at every c + a * b: x86-64 glibc runs an FMA-compiled copy (__sinf_fma,
 * GCC contracting each of these) on FMA hosts such as this project's. With
 * the fused steps this code equals glibc 2.36's sinf and cosf for every
 * finite float (all 2^32 bit patterns checked on the AVX2 host); with
 * plain multiply-adds 12 sinf and 22 cosf results differ (cancellation in
 * the range reduction near multiples of pi/2, e.g. cosf(0x1.1475b6p+4)).
 * wasm has no FMA instruction: fma() is wasi-libc's (musl's) correctly
 * rounded software fma, so the results are the same.
 *
 * Copyright (c) 2018-2024, Arm Limited.
 * SPDX-License-Identifier: MIT OR Apache-2.0 WITH LLVM-exception
 *
 * MIT License
 *
 * Permission is hereby granted, free of charge, to any person obtaining a
 * copy of this software and associated documentation files (the
 * "Software"), to deal in the Software without restriction, including
 * without limitation the rights to use, copy, modify, merge, publish,
 * distribute, sublicense, and/or sell copies of the Software, and to permit
 * persons to whom the Software is furnished to do so, subject to the
 * following conditions:
 *
 * The above copyright notice and this permission notice shall be included
 * in all copies or substantial portions of the Software.
 *
 * THE SOFTWARE IS PROVIDED "AS IS", WITHOUT WARRANTY OF ANY KIND, EXPRESS
 * OR IMPLIED, INCLUDING BUT NOT LIMITED TO THE WARRANTIES OF
 * MERCHANTABILITY, FITNESS FOR A PARTICULAR PURPOSE AND NONINFRINGEMENT. IN
 * NO EVENT SHALL THE AUTHORS OR COPYRIGHT HOLDERS BE LIABLE FOR ANY CLAIM,
 * DAMAGES OR OTHER LIABILITY, WHETHER IN AN ACTION OF CONTRACT, TORT OR
 * OTHERWISE, ARISING FROM, OUT OF OR IN CONNECTION WITH THE SOFTWARE OR THE
 * USE OR OTHER DEALINGS IN THE SOFTWARE. */
#include "third_party_arm_sincosf.h"

#include <math.h>
#include <stdint.h>
#include <string.h>

#define MUL_ADD(a, b, c) fma(a, b, c)
static inline uint32_t asuint(float f) { uint32_t u; memcpy(&u, &f, 4); return u; }
typedef struct { double sign[4]; double hpi_inv; double hpi; double c0, c1, c2, c3, c4; double s1, s2, s3; } sincos_t;
/* sincosf_data.c: the 2nd entry computes -cos (x) to get the negation free */
static const sincos_t T[2] = {
  {{1.0, -1.0, -1.0, 1.0}, 0x1.45F306DC9C883p+23, 0x1.921FB54442D18p0, 0x1p0, -0x1.ffffffd0c621cp-2,
   0x1.55553e1068f19p-5, -0x1.6c087e89a359dp-10, 0x1.99343027bf8c3p-16, -0x1.555545995a603p-3,
   0x1.1107605230bc4p-7, -0x1.994eb3774cf24p-13},
  {{1.0, -1.0, -1.0, 1.0}, 0x1.45F306DC9C883p+23, 0x1.921FB54442D18p0, -0x1p0, 0x1.ffffffd0c621cp-2,
   -0x1.55553e1068f19p-5, 0x1.6c087e89a359dp-10, -0x1.99343027bf8c3p-16, -0x1.555545995a603p-3,
   0x1.1107605230bc4p-7, -0x1.994eb3774cf24p-13}};
static const uint32_t inv_pio4[24] = {
  0xa2,       0xa2f9,	  0xa2f983,   0xa2f9836e, 0xf9836e4e, 0x836e4e44, 0x6e4e4415, 0x4e441529,
  0x441529fc, 0x1529fc27, 0x29fc2757, 0xfc2757d1, 0x2757d1f5, 0x57d1f534, 0xd1f534dd, 0xf534ddc0,
  0x34ddc0db, 0xddc0db62, 0xc0db6295, 0xdb629599, 0x6295993c, 0x95993c43, 0x993c4390, 0x3c439041};
static const double pi63 = 0x1.921FB54442D18p-62;
static const float pio4f = 0x1.921FB6p-1f;
static inline uint32_t abstop12(float x) { return (asuint(x) >> 20) & 0x7ff; }
static inline float sinf_poly(double x, double x2, const sincos_t *p, int n) {
  if ((n & 1) == 0) {
    double x3 = x * x2;
    double s1 = MUL_ADD(x2, p->s3, p->s2);
    double x7 = x3 * x2;
    double s = MUL_ADD(x3, p->s1, x);
    return MUL_ADD(x7, s1, s);
  } else {
    double x4 = x2 * x2;
    double c2 = MUL_ADD(x2, p->c4, p->c3);
    double c1 = MUL_ADD(x2, p->c1, p->c0);
    double x6 = x4 * x2;
    double c = MUL_ADD(x4, p->c2, c1);
    return MUL_ADD(x6, c2, c);
  }
}
static inline double reduce_fast(double x, const sincos_t *p, int *np) {
  double r = x * p->hpi_inv;
  int n = ((int32_t)r + 0x800000) >> 24;
  *np = n;
  return MUL_ADD(-(double)n, p->hpi, x);
}
static inline double reduce_large(uint32_t xi, int *np) {
  const uint32_t *arr = &inv_pio4[(xi >> 26) & 15];
  int shift = (xi >> 23) & 7;
  uint64_t n, res0, res1, res2;
  xi = (xi & 0xffffff) | 0x800000;
  xi <<= shift;
  res0 = xi * arr[0];
  res1 = (uint64_t)xi * arr[4];
  res2 = (uint64_t)xi * arr[8];
  res0 = (res2 >> 32) | (res0 << 32);
  res0 += res1;
  n = (res0 + (1ULL << 61)) >> 62;
  res0 -= n << 62;
  double x = (int64_t)res0;
  *np = n;
  return x * pi63;
}
float le_arm_sinf(float y) {
  double x = y, s;
  int n;
  const sincos_t *p = &T[0];
  if (abstop12(y) < abstop12(pio4f)) {
    s = x * x;
    if (abstop12(y) < abstop12(0x1p-12f)) return y;
    return sinf_poly(x, s, p, 0);
  } else if (abstop12(y) < abstop12(120.0f)) {
    x = reduce_fast(x, p, &n);
    s = p->sign[n & 3];
    if (n & 2) p = &T[1];
    return sinf_poly(x * s, x * x, p, n);
  } else if (abstop12(y) < abstop12(INFINITY)) {
    uint32_t xi = asuint(y);
    int sign = xi >> 31;
    x = reduce_large(xi, &n);
    s = p->sign[(n + sign) & 3];
    if ((n + sign) & 2) p = &T[1];
    return sinf_poly(x * s, x * x, p, n);
  }
  return (y - y) / (y - y);
}
float le_arm_cosf(float y) {
  double x = y, s;
  int n;
  const sincos_t *p = &T[0];
  if (abstop12(y) < abstop12(pio4f)) {
    double x2 = x * x;
    if (abstop12(y) < abstop12(0x1p-12f)) return 1.0f;
    return sinf_poly(x, x2, p, 1);
  } else if (abstop12(y) < abstop12(120.0f)) {
    x = reduce_fast(x, p, &n);
    s = p->sign[n & 3];
    if (n & 2) p = &T[1];
    return sinf_poly(x * s, x * x, p, n ^ 1);
  } else if (abstop12(y) < abstop12(INFINITY)) {
    uint32_t xi = asuint(y);
    int sign = xi >> 31;
    x = reduce_large(xi, &n);
    s = p->sign[(n + sign) & 3];
    if ((n + sign) & 2) p = &T[1];
    return sinf_poly(x * s, x * x, p, n ^ 1);
  }
  return (y - y) / (y - y);
}
