/* WebAssembly SIMD128 helpers for the wasm32 build (kernels/Makefile `wasm`),
 * which runs the scalar level: its vec_dots use these where the result is
 * bit-identical to the scalar C (integer sums in any order, element-wise
 * float ops, and the float/double accumulation left in the scalar order).
 * Not part of the ABI. */
#ifndef LE_WASM_SIMD_H
#define LE_WASM_SIMD_H

#if defined(__wasm_simd128__)
#define LE_WASM_SIMD 1
#include <wasm_simd128.h>

/* Every half as f32 (le_fp16_to_fp32 of each), filled when the module
 * starts (q_f16.c): a block scale costs one load instead of a branchy
 * conversion, as ggml's GGML_FP16_TO_FP32 table on x86. */
extern float le_wasm_f16_table[65536];
static inline float le_wasm_h2f(uint16_t h) { return le_wasm_f16_table[h]; }

/* Four halves at p to f32, exactly as le_fp16_to_fp32: the magnitude bits
 * shifted into an f32 and scaled by 2^112 (exact for normals and
 * subnormals alike), exponent 31 mapped to inf/NaN, then the sign. */
static inline v128_t le_wasm_h2f4(const uint16_t *p) {
  const v128_t h = wasm_u32x4_load16x4(p);
  const v128_t sign = wasm_i32x4_shl(wasm_v128_and(h, wasm_i32x4_splat(0x8000)), 16);
  const v128_t em = wasm_v128_and(h, wasm_i32x4_splat(0x7fff));
  const v128_t sh = wasm_i32x4_shl(em, 13);
  const v128_t f = wasm_f32x4_mul(sh, wasm_f32x4_splat(0x1p112f));
  const v128_t special = wasm_v128_or(sh, wasm_i32x4_splat(0x7f800000));
  const v128_t infnan = wasm_i32x4_ge(em, wasm_i32x4_splat(0x7c00));
  return wasm_v128_or(wasm_v128_bitselect(special, f, infnan), sign);
}

/* Sum of the 16 products of signed bytes a[i] * b[i], as 4 int32 partials. */
static inline v128_t le_wasm_dot_i8x16(v128_t a, v128_t b) {
  const v128_t lo = wasm_i32x4_dot_i16x8(wasm_i16x8_extend_low_i8x16(a), wasm_i16x8_extend_low_i8x16(b));
  const v128_t hi = wasm_i32x4_dot_i16x8(wasm_i16x8_extend_high_i8x16(a), wasm_i16x8_extend_high_i8x16(b));
  return wasm_i32x4_add(lo, hi);
}

/* Q8_0 and Q4_0 mul_mat tiles in their scalar vec_dot's order (wasm_tiles.c). */
extern const le_gemm_tiles le_q8_0_tiles_wasm, le_q4_0_tiles_wasm;
/* F16 mul_mat tiles in dot_f16_scalar's order (wasm_simd.c). */
extern const le_gemm_tiles le_f16_tiles_wasm;
/* dot_f16_scalar's result (the same float, certified; wasm_simd.c). */
float le_dot_f16_wasm(int64_t n, const uint16_t *x, const uint16_t *y);
/* Q4_K and Q6_K vec_dots in their scalar (generic C) order (wasm_simd.c). */
void le_dot_q4_k_wasm(int64_t n, float *s, const void *vx, const void *vy);
void le_dot_q6_k_wasm(int64_t n, float *s, const void *vx, const void *vy);

static inline int32_t le_wasm_hsum_i32x4(v128_t v) {
  return wasm_i32x4_extract_lane(v, 0) + wasm_i32x4_extract_lane(v, 1) +
         wasm_i32x4_extract_lane(v, 2) + wasm_i32x4_extract_lane(v, 3);
}
#endif
#endif
