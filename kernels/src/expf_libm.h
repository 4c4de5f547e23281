/* expf several lanes at a time, bit for bit as libm computes it
 * (expf_libm.c has the derivation). Out of line on purpose: inlined into
 * flash_attn_x86.c's cell loops, its constants took registers from their
 * accumulators. */
#ifndef LE_EXPF_LIBM_H
#define LE_EXPF_LIBM_H
#include "le_internal.h"

/* Whether the kernel of the current SIMD level (le_vexpf_avx512 at
 * AVX-512, le_vexpf_avx2 at AVX2) gives libm's expf bits here: checked
 * once per level against expf; 0 below AVX2. */
int le_vexpf_ok(void);

#if defined(LE_X86)
/* y[i] = expf(x[i]) for i < n: eight lanes at a time (AVX-512), four (AVX2). */
void le_vexpf_avx512(const float *x, float *y, int n);
void le_vexpf_avx2(const float *x, float *y, int n);
#endif
#endif
