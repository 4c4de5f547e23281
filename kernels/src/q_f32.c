/* F32: the identity type. Its dot product is ggml_vec_dot_f32's shape:
 * several float vector accumulators, then a horizontal sum. */
#include "le_internal.h"

static void f32_copy(const float *x, void *y, int64_t n) { memcpy(y, x, (size_t)n * 4); }
static void f32_to_float(const void *x, float *y, int64_t n) { memcpy(y, x, (size_t)n * 4); }

static void dot_f32_scalar(int64_t n, float *s, const void *vx, const void *vy) {
  const float *x = vx, *y = vy;
  double sum = 0.0; /* ggml's scalar build accumulates in ggml_float */
  for (int64_t i = 0; i < n; i++) sum += (double)(x[i] * y[i]);
  *s = (float)sum;
}

#if defined(LE_X86)
/* ggml_vec_dot_f32 as the haswell build runs it: GGML_F32_STEP 32 (four
 * 8-lane fma accumulators), GGML_F32x8_REDUCE ((a0 + a2) + (a1 + a3), then
 * hsum_hadd256), leftovers in float. GCC compiled the leftover loop (with
 * fp contraction) into products rounded and added in order for the
 * elements in whole groups of 4, and scalar fmas for the last n % 4
 * (disassembly of libggml-cpu-haswell.so). */
LE_TARGET_AVX2 static void dot_f32_avx2(int64_t n, float *s, const void *vx, const void *vy) {
  const float *x = vx, *y = vy;
  __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
  const int64_t np = n & ~(int64_t)31;
  for (int64_t i = 0; i < np; i += 32) {
    a0 = _mm256_fmadd_ps(_mm256_loadu_ps(x + i), _mm256_loadu_ps(y + i), a0);
    a1 = _mm256_fmadd_ps(_mm256_loadu_ps(x + i + 8), _mm256_loadu_ps(y + i + 8), a1);
    a2 = _mm256_fmadd_ps(_mm256_loadu_ps(x + i + 16), _mm256_loadu_ps(y + i + 16), a2);
    a3 = _mm256_fmadd_ps(_mm256_loadu_ps(x + i + 24), _mm256_loadu_ps(y + i + 24), a3);
  }
  float sum = hsum_hadd256(_mm256_add_ps(_mm256_add_ps(a0, a2), _mm256_add_ps(a1, a3)));
  const int64_t n4 = np + ((n - np) & ~(int64_t)3);
  int64_t i = np;
  for (; i < n4; i++) sum += x[i] * y[i];
  for (; i < n; i++) sum = fmaf(x[i], y[i], sum);
  *s = sum;
}

/* ggml_vec_dot_f32 on the AVX-512 builds: GGML_F32_STEP 64 (four 16-lane
 * accumulators), (a0 + a2) + (a1 + a3), then halves down to one lane. */
LE_TARGET_AVX512 static void dot_f32_avx512(int64_t n, float *s, const void *vx, const void *vy) {
  const float *x = vx, *y = vy;
  __m512 a0 = _mm512_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
  const int64_t np = n & ~(int64_t)63;
  for (int64_t i = 0; i < np; i += 64) {
    a0 = _mm512_fmadd_ps(_mm512_loadu_ps(x + i), _mm512_loadu_ps(y + i), a0);
    a1 = _mm512_fmadd_ps(_mm512_loadu_ps(x + i + 16), _mm512_loadu_ps(y + i + 16), a1);
    a2 = _mm512_fmadd_ps(_mm512_loadu_ps(x + i + 32), _mm512_loadu_ps(y + i + 32), a2);
    a3 = _mm512_fmadd_ps(_mm512_loadu_ps(x + i + 48), _mm512_loadu_ps(y + i + 48), a3);
  }
  float sum = _mm512_reduce_add_ps(_mm512_add_ps(_mm512_add_ps(a0, a2), _mm512_add_ps(a1, a3)));
  /* The zen4 build's leftover loop (disassembly of libggml-cpu-zen4.so):
   * products rounded and added in order in whole groups of 8, scalar fmas
   * for the last n % 8. */
  const int64_t n8 = np + ((n - np) & ~(int64_t)7);
  int64_t i = np;
  for (; i < n8; i++) sum += x[i] * y[i];
  for (; i < n; i++) sum = fmaf(x[i], y[i], sum);
  *s = sum;
}
#endif

#if defined(LE_NEON)
static void dot_f32_neon(int64_t n, float *s, const void *vx, const void *vy) {
  const float *x = vx, *y = vy;
  float32x4_t a0 = vdupq_n_f32(0), a1 = a0, a2 = a0, a3 = a0;
  const int64_t np = n & ~(int64_t)15;
  for (int64_t i = 0; i < np; i += 16) {
    a0 = vfmaq_f32(a0, vld1q_f32(x + i), vld1q_f32(y + i));
    a1 = vfmaq_f32(a1, vld1q_f32(x + i + 4), vld1q_f32(y + i + 4));
    a2 = vfmaq_f32(a2, vld1q_f32(x + i + 8), vld1q_f32(y + i + 8));
    a3 = vfmaq_f32(a3, vld1q_f32(x + i + 12), vld1q_f32(y + i + 12));
  }
  float sum = vaddvq_f32(vaddq_f32(vaddq_f32(a0, a2), vaddq_f32(a1, a3)));
  for (int64_t i = np; i < n; i++) sum += x[i] * y[i];
  *s = sum;
}
#endif

const le_type_traits le_traits_f32 = {
    .type = LE_TYPE_F32,
    .name = "f32",
    .blck = 1,
    .size = 4,
    .to_float = f32_to_float,
    .from_float_ref = f32_copy,
    .from_float_act = f32_copy,
    .vec_dot_type = LE_TYPE_F32,
    .vec_dot = {
        [LE_SIMD_SCALAR] = dot_f32_scalar,
#if defined(LE_X86)
        [LE_SIMD_AVX2] = dot_f32_avx2,
        [LE_SIMD_AVX512] = dot_f32_avx512,
#endif
#if defined(LE_NEON)
        [LE_SIMD_NEON] = dot_f32_neon,
#endif
    },
};
