/* Q8_0: blocks of 32 int8 with one f16 scale. Also the vec_dot_type of the
 * 32-element quant types: activations are quantized with ggml's x86 CPU
 * quantizer (scale 127/amax, round half to even), not the reference one. */
#include "q_common.h"
#include "le_wasm_simd.h"

static void q8_0_to_float(const void *vx, float *y, int64_t n) {
  const le_block_q8_0 *x = vx;
  for (int64_t i = 0; i < n / LE_QK; i++) {
    const float d = le_fp16_to_fp32(x[i].d);
    for (int j = 0; j < LE_QK; j++) y[i * LE_QK + j] = x[i].qs[j] * d;
  }
}

/* quantize_row_q8_0_ref: d = amax/127, q = roundf(x / d) (ties away) */
static void q8_0_from_float_ref(const float *x, void *vy, int64_t n) {
  le_block_q8_0 *y = vy;
  for (int64_t i = 0; i < n / LE_QK; i++) {
    const float *xb = x + i * LE_QK;
    float amax = 0.0f;
    for (int j = 0; j < LE_QK; j++) amax = LE_MAX(amax, fabsf(xb[j]));
    const float d = amax / 127.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    y[i].d = le_fp32_to_fp16(d);
    for (int j = 0; j < LE_QK; j++) y[i].qs[j] = (int8_t)roundf(xb[j] * id);
  }
}

#if defined(LE_X86)
/* ggml-cpu's x86 quantize_row_q8_0, instruction for instruction (its AVX2
 * form, which its AVX-512 variants compile too): the block's amax by lane
 * maxima, d = amax/127, x * (127/amax) rounded to nearest even, packed with
 * saturation. In the prompt of a 1.1B Q8_0 model the scalar form, one
 * nearbyintf call per element, was 5% of the time. */
LE_TARGET_AVX2 static void q8_0_act_avx2(const float *x, void *vy, int64_t n) {
  le_block_q8_0 *y = vy;
  const __m256 sign = _mm256_set1_ps(-0.0f);
  const __m256i perm = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
  for (int64_t i = 0; i < n / LE_QK; i++, x += LE_QK) {
    __m256 v0 = _mm256_loadu_ps(x), v1 = _mm256_loadu_ps(x + 8);
    __m256 v2 = _mm256_loadu_ps(x + 16), v3 = _mm256_loadu_ps(x + 24);
    __m256 amax = _mm256_andnot_ps(sign, v0);
    amax = _mm256_max_ps(amax, _mm256_andnot_ps(sign, v1));
    amax = _mm256_max_ps(amax, _mm256_andnot_ps(sign, v2));
    amax = _mm256_max_ps(amax, _mm256_andnot_ps(sign, v3));
    const float m = le_hmax_ps256(amax);
    y[i].d = le_fp32_to_fp16(m / 127.0f);
    const __m256 id = _mm256_set1_ps(m != 0.0f ? 127.0f / m : 0.0f);
    v0 = _mm256_round_ps(_mm256_mul_ps(v0, id), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    v1 = _mm256_round_ps(_mm256_mul_ps(v1, id), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    v2 = _mm256_round_ps(_mm256_mul_ps(v2, id), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    v3 = _mm256_round_ps(_mm256_mul_ps(v3, id), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    const __m256i i01 = _mm256_packs_epi32(_mm256_cvtps_epi32(v0), _mm256_cvtps_epi32(v1));
    const __m256i i23 = _mm256_packs_epi32(_mm256_cvtps_epi32(v2), _mm256_cvtps_epi32(v3));
    /* the packs work per 128-bit half: the permute puts the bytes back in order */
    const __m256i q = _mm256_permutevar8x32_epi32(_mm256_packs_epi16(i01, i23), perm);
    _mm256_storeu_si256((__m256i *)y[i].qs, q);
  }
}
#endif

/* The vector form's arithmetic one element at a time (every step is an
 * exact IEEE operation: the same bytes for finite input), for builds
 * without x86; x86 builds without AVX (llama.cpp's x64 and sse42 variants,
 * which our scalar level follows) use quantize_row_q8_0_ref. */
void le_quantize_q8_0_act(const float *x, void *vy, int64_t n) {
  if (le_simd() == LE_SIMD_SCALAR) {
    q8_0_from_float_ref(x, vy, n);
    return;
  }
#if defined(LE_X86)
  q8_0_act_avx2(x, vy, n);
#else
  le_block_q8_0 *y = vy;
  for (int64_t i = 0; i < n / LE_QK; i++) {
    const float *xb = x + i * LE_QK;
    float amax = 0.0f;
    for (int j = 0; j < LE_QK; j++) amax = LE_MAX(amax, fabsf(xb[j]));
    y[i].d = le_fp32_to_fp16(amax / 127.0f);
    const float id = amax != 0.0f ? 127.0f / amax : 0.0f;
    for (int j = 0; j < LE_QK; j++) y[i].qs[j] = (int8_t)nearbyintf(xb[j] * id);
  }
#endif
}

static void dot_q8_0_scalar(int64_t n, float *s, const void *vx, const void *vy) {
  const le_block_q8_0 *x = vx, *y = vy;
  float sum = 0.0f;
  for (int64_t i = 0; i < n / LE_QK; i++) {
    int32_t si = 0;
    for (int j = 0; j < LE_QK; j++) si += (int32_t)x[i].qs[j] * y[i].qs[j];
    sum += (float)si * (le_fp16_to_fp32(x[i].d) * le_fp16_to_fp32(y[i].d));
  }
  *s = sum;
}

#if defined(LE_WASM_SIMD)
/* dot_q8_0_scalar with the integer block sums in SIMD128 (exact in any order). */
static void dot_q8_0_wasm(int64_t n, float *s, const void *vx, const void *vy) {
  const le_block_q8_0 *x = vx, *y = vy;
  float sum = 0.0f;
  for (int64_t i = 0; i < n / LE_QK; i++) {
    const v128_t p = wasm_i32x4_add(
        le_wasm_dot_i8x16(wasm_v128_load(x[i].qs), wasm_v128_load(y[i].qs)),
        le_wasm_dot_i8x16(wasm_v128_load(x[i].qs + 16), wasm_v128_load(y[i].qs + 16)));
    const int32_t si = le_wasm_hsum_i32x4(p);
    sum += (float)si * (le_wasm_h2f(x[i].d) * le_wasm_h2f(y[i].d));
  }
  *s = sum;
}
#endif

#if defined(LE_X86)
LE_TARGET_AVX2 static void dot_q8_0_avx2(int64_t n, float *s, const void *vx, const void *vy) {
  const le_block_q8_0 *x = vx, *y = vy;
  __m256 acc = _mm256_setzero_ps();
  for (int64_t i = 0; i < n / LE_QK; i++) {
    const __m256 d = _mm256_set1_ps(le_h2f(x[i].d) * le_h2f(y[i].d));
    const __m256i qx = _mm256_loadu_si256((const __m256i *)x[i].qs);
    const __m256i qy = _mm256_loadu_si256((const __m256i *)y[i].qs);
    acc = _mm256_fmadd_ps(d, le_mul_sum_i8_avx2(qx, qy), acc);
  }
  *s = le_hsum_ps256(acc);
}

#endif

#if defined(LE_NEON)
static void dot_q8_0_neon(int64_t n, float *s, const void *vx, const void *vy) {
  const le_block_q8_0 *x = vx, *y = vy;
  float32x4_t acc = vdupq_n_f32(0);
  for (int64_t i = 0; i < n / LE_QK; i++) {
    int32x4_t p = vdupq_n_s32(0);
    for (int h = 0; h < 2; h++) {
      const int8x16_t a = vld1q_s8(x[i].qs + 16 * h), b = vld1q_s8(y[i].qs + 16 * h);
      p = vpadalq_s16(p, vmull_s8(vget_low_s8(a), vget_low_s8(b)));
      p = vpadalq_s16(p, vmull_s8(vget_high_s8(a), vget_high_s8(b)));
    }
    acc = vmlaq_n_f32(acc, vcvtq_f32_s32(p), le_fp16_to_fp32(x[i].d) * le_fp16_to_fp32(y[i].d));
  }
  *s = vaddvq_f32(acc);
}
#endif

const le_type_traits le_traits_q8_0 = {
    .type = LE_TYPE_Q8_0,
    .name = "q8_0",
    .blck = LE_QK,
    .size = sizeof(le_block_q8_0),
    .to_float = q8_0_to_float,
    .from_float_ref = q8_0_from_float_ref,
    .from_float_act = le_quantize_q8_0_act,
    .vec_dot_type = LE_TYPE_Q8_0,
    .vec_dot = {
#if defined(LE_WASM_SIMD)
        [LE_SIMD_SCALAR] = dot_q8_0_wasm,
#else
        [LE_SIMD_SCALAR] = dot_q8_0_scalar,
#endif
#if defined(LE_X86)
        [LE_SIMD_AVX2] = dot_q8_0_avx2,
        /* llama.cpp's x86 q8_0 dot has only the 8-lane AVX2 form, also in its
         * AVX-512 builds; a 16-lane sum would round differently, and those
         * last bits flip activation quantization downstream. */
        [LE_SIMD_AVX512] = dot_q8_0_avx2,
#endif
#if defined(LE_NEON)
        [LE_SIMD_NEON] = dot_q8_0_neon,
#endif
    },
#if defined(LE_WASM_SIMD)
    .gemm = {[LE_SIMD_SCALAR] = &le_q8_0_tiles_wasm},
#endif
};
