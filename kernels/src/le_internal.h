/*
 * Internal declarations shared by the kernel sources. Not part of the ABI:
 * TypeScript only sees kernels/include/llm_edge.h.
 */
#ifndef LE_INTERNAL_H
#define LE_INTERNAL_H

#include "../include/llm_edge.h"

#include <math.h>
#include <stdbool.h>
#include <string.h>

/* ggml type ids this library computes on. */
enum {
  LE_TYPE_F32 = 0,
  LE_TYPE_F16 = 1,
  LE_TYPE_Q4_0 = 2,
  LE_TYPE_Q8_0 = 8,
  LE_TYPE_I32 = 26,
  LE_TYPE_BF16 = 30,
  LE_TYPE_MAX_ID = 64,
};

/* SIMD levels, the same numbers le_set_simd_level takes. */
enum { LE_SIMD_SCALAR = 0, LE_SIMD_AVX2 = 1, LE_SIMD_AVX512 = 2, LE_SIMD_NEON = 3, LE_SIMD_COUNT };

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define LE_X86 1
#include <immintrin.h>
#define LE_TARGET_AVX2 __attribute__((target("avx2,fma,f16c")))
#define LE_TARGET_AVX512 __attribute__((target("avx512f,avx512bw,avx512vl,avx2,fma,f16c")))
/* GGML_F32x8_REDUCE's last step (ggml's AVX build, llama.cpp's haswell
 * variant): low + high half, then two hadds: (t0 + t1) + (t2 + t3). */
LE_TARGET_AVX2 static inline float hsum_hadd256(__m256 v) {
  __m128 t = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  t = _mm_hadd_ps(t, t);
  t = _mm_hadd_ps(t, t);
  return _mm_cvtss_f32(t);
}
#endif
#if defined(__aarch64__) && defined(__ARM_NEON)
#define LE_NEON 1
#include <arm_neon.h>
#endif

#define LE_MIN(a, b) ((a) < (b) ? (a) : (b))
#define LE_MAX(a, b) ((a) > (b) ? (a) : (b))

/* dot of n elements of x (this type) with y (the type's vec_dot_type) */
typedef void (*le_vec_dot_fn)(int64_t n, float *s, const void *x, const void *y);
typedef void (*le_to_float_fn)(const void *x, float *y, int64_t n);
typedef void (*le_from_float_fn)(const float *x, void *y, int64_t n);

/* A tile of dot products: s[c * bs + r] = dot(row r of x, column c of y)
 * for r < RM, c < RN (the rows bx bytes apart, the columns by bytes apart,
 * bs counted in floats). Every element must be computed the same way
 * wherever it sits in a tile, so results never depend on how mul_mat splits
 * the output (thread count, tile edges); the operation order should be
 * llama.cpp's for that type and case (gemv for N == 1, gemm for N >= 2). */
typedef void (*le_gemm_fn)(int64_t n, float *s, size_t bs, const void *x, size_t bx,
                           const void *y, size_t by);

/* The tile shapes mul_mat uses. N == 1 (matrix-vector, ggml's gemv): t41
 * for each 4 rows, t11 for leftover rows. N >= 2 (ggml's gemm): t44 for
 * full tiles, t14 for leftover rows, and each leftover column through
 * t44/t14 with by = 0 and bs = 0 (the same column four times, written to
 * the same place), so every N >= 2 output comes from the gemm-form code.
 * All four must be set. */
typedef struct le_gemm_tiles {
  le_gemm_fn t44, t41, t14, t11;
} le_gemm_tiles;

/* N >= 2 tiles of a type whose block scales are converted once per row
 * and column (mul_mat's tile_block) instead of once per tile: t48/t44/t14 with
 * the rows' scales (xs, row r at xs + r * xss) and the columns' (ys,
 * column c at ys + c * yss; yss 0 with by 0), `scales` filling one row's;
 * and the columns' block lane terms, 8 int32 per block, in pairs of
 * columns (yb: the tile's first pair, pair p's block i at yb + (p * yss +
 * i) * 16; with yss 0 the one column's at yb + i * 16), `lanes` filling one
 * column's (every 16th int32 from its start). */
typedef void (*le_gemm_scaled_fn)(int64_t n, float *s, size_t bs, const void *x, size_t bx,
                                  const float *xs, size_t xss, const void *y, size_t by,
                                  const float *ys, const int32_t *yb, size_t yss);
typedef struct le_gemm_scaled {
  le_gemm_scaled_fn t48, t44, t14;
  void (*scales)(const void *row, int64_t nb, float *out);
  void (*lanes)(const void *row, int64_t nb, int32_t *out);
} le_gemm_scaled;
/* The scaled form of `tiles`, or NULL (gemm_x86.c). */
const le_gemm_scaled *le_gemm_scaled_for(const le_gemm_tiles *tiles);

/* Everything the generic code needs to know about one tensor type; each
 * q_<type>.c file defines exactly one of these. */
typedef struct le_type_traits {
  int32_t type;
  const char *name;
  int64_t blck;      /* elements per block */
  size_t size;       /* bytes per block */
  le_to_float_fn to_float;
  le_from_float_fn from_float_ref; /* llama.cpp's reference quantizer */
  /* How mul_mat converts f32 activations into this type when it is some
   * weight's vec_dot_type (ggml's CPU from_float, which may differ from the
   * reference quantizer, e.g. round-half-even for q8_0). */
  le_from_float_fn from_float_act;
  int32_t vec_dot_type;
  le_vec_dot_fn vec_dot[LE_SIMD_COUNT]; /* NULL entries fall back to scalar */
  /* Optional tiled dot products per SIMD level (see le_gemm_tiles); NULL =
   * mul_mat calls vec_dot per element. */
  const le_gemm_tiles *gemm[LE_SIMD_COUNT];
} le_type_traits;

extern const le_type_traits le_traits_f32, le_traits_f16, le_traits_bf16, le_traits_q8_0,
    le_traits_q4_0;

const le_type_traits *le_traits(int32_t type);
le_vec_dot_fn le_get_vec_dot(const le_type_traits *t);
#if defined(LE_X86)
/* Whether the CPU has AVX-512 VNNI (core.c). */
int le_cpu_vnni(void);
#endif
/* s[k][r] = F16 vec_dot of row r of x (rows bx bytes apart) with y[k], for
 * r < nrows and k < ny (1, 2 or 4), each by vec_dot's chain. */
typedef void (*le_f16_rows_fn)(int64_t n, int64_t nrows, const void *x, size_t bx, int ny,
                               const void *const *y, float *const *s);
/* The F16 row kernel at the current SIMD level (AVX-512, AVX2) for dots of
 * n elements (attention: src0 has several planes; grouped: four query
 * heads per row), or NULL where one vec_dot per row is as fast (f16_rows.c). */
le_f16_rows_fn le_f16_rows(int64_t n, int attention, int grouped);
/* Built-in x86 tiles (gemm_x86.c), or NULL: at AVX-512, q8_0 in its
 * vec_dot order (needs VNNI); with tinyblas set, F32/F16 in llamafile
 * tinyBLAS order at AVX-512 and AVX2 (for N >= 2, K % le_tinyblas_kn() == 0,
 * M % 4 == 0 only, as llama.cpp). */
const le_gemm_tiles *le_gemm_x86(int32_t type, int tinyblas);
/* The AVX-512 tinyBLAS F16 tiles against f32 columns (NULL at other levels). */
const le_gemm_tiles *le_gemm_x86_f16w(void);
/* tinyBLAS's KN (floats per vector) at the SIMD level in effect: 16 for
 * AVX-512 (icelake-like variants), 8 for AVX2 (haswell), 0 = no tinyBLAS. */
int le_tinyblas_kn(void);
/* AVX2 F32/F16 weights (f16 != 0) in tinyBLAS<8> order (sgemm_avx2.c):
 * s[c * bs + r] = dot(row r of x, column c of y) for r < nr, c < nc; rows
 * bx bytes apart, columns f32 by floats apart (f16-rounded for F16), bs in
 * floats; K % 8 == 0. */
void le_sgemm8_panel(int f16, int64_t K, const void *x, size_t bx, int64_t nr, const float *y,
                     size_t by, int64_t nc, float *s, size_t bs);
/* AVX2 Q8_0 weights in ggml's AVX2 q8_0 dot order (sgemm_avx2.c) against
 * nc q8_0 columns laid out by mul_mat: yq the columns' codes (K bytes per
 * column, 32-byte aligned), dyt their block scales as floats, per group of
 * 8 columns [block][8] (K / 32 * 8 floats per group). */
void le_q8_0_panel(int64_t K, const void *x, size_t bx, int64_t nr, const int8_t *yq,
                   const float *dyt, int64_t nc, float *s, size_t bs);
static inline size_t le_row_size(const le_type_traits *t, int64_t n) {
  return (size_t)(n / t->blck) * t->size;
}

/* ---- simd level ---- */
int le_simd(void); /* level in effect */

/* ---- errors ---- */
void le_set_error(const char *fmt, ...);

/* ---- fp16 / bf16 (bit-exact with ggml: round to nearest even) ---- */
static inline uint32_t le_f32_bits(float f) { uint32_t u; memcpy(&u, &f, 4); return u; }
static inline float le_bits_f32(uint32_t u) { float f; memcpy(&f, &u, 4); return f; }

static inline float le_fp16_to_fp32(uint16_t h) {
  const uint32_t sign = (uint32_t)(h & 0x8000) << 16;
  uint32_t exp = (h >> 10) & 0x1f;
  uint32_t man = h & 0x3ff;
  if (exp == 0x1f) return le_bits_f32(sign | 0x7f800000 | (man << 13));
  if (exp == 0) {
    if (man == 0) return le_bits_f32(sign);
    /* subnormal: value = man * 2^-24 is exact in f32 */
    float v = (float)man * 0x1p-24f;
    return sign ? -v : v;
  }
  return le_bits_f32(sign | ((exp + 112) << 23) | (man << 13));
}

static inline uint16_t le_fp32_to_fp16(float f) {
  const uint32_t w = le_f32_bits(f);
  const uint16_t sign = (uint16_t)((w >> 16) & 0x8000);
  const uint32_t a = w & 0x7fffffff;
  if (a > 0x7f800000) return sign | 0x7e00;          /* NaN */
  if (a >= 0x477ff000) return sign | 0x7c00;         /* rounds to >= 65520 → inf */
  if (a < 0x38800000) {                              /* below 2^-14: subnormal half */
    /* the half ulp here is 2^-24; f32 arithmetic with a magic add rounds RNE */
    float v = le_bits_f32(a) + 0.5f;                 /* 0.5 = 2^-1, ulp 2^-24 */
    return sign | (uint16_t)(le_f32_bits(v) - le_f32_bits(0.5f));
  }
  uint32_t r = a + 0x0fff + ((a >> 13) & 1);         /* round mantissa to 10 bits, RNE */
  return sign | (uint16_t)((r - 0x38000000) >> 13);
}

static inline float le_bf16_to_fp32(uint16_t h) { return le_bits_f32((uint32_t)h << 16); }
static inline uint16_t le_fp32_to_bf16(float f) {
  uint32_t u = le_f32_bits(f);
  if ((u & 0x7fffffff) > 0x7f800000) return (uint16_t)((u >> 16) | 64);
  return (uint16_t)((u + (0x7fff + ((u >> 16) & 1))) >> 16);
}

/* row conversions dispatched on SIMD level */
void le_fp16_to_fp32_row(const uint16_t *x, float *y, int64_t n);
void le_fp32_to_fp16_row(const float *x, uint16_t *y, int64_t n);

/* ---- compute ---- */
typedef struct le_compute_params {
  int ith, nth;
  le_ctx *ctx;
  void *wdata;      /* shared scratch (size from le_node_wsize) */
  size_t wsize;
} le_compute_params;

void le_barrier(le_ctx *ctx);
/* Work sharing inside one node: returns 0, 1, 2, ... across all threads
 * (each value once); the count is one counter per node, zeroed at the start of each compute. Which thread
 * gets which unit must never change a result. */
int64_t le_next_chunk(le_ctx *ctx);
/* Record a data-dependent failure seen by any thread (first one wins). */
void le_ctx_fail(le_ctx *ctx, const char *msg);

/* per-op entry points (ops.c / mul_mat.c) */
size_t le_node_wsize(const le_node *node, int n_threads);
int le_node_check(const le_node *node); /* 0 or -1 with error set */
void le_node_compute(const le_node *node, const le_compute_params *p);
void le_mul_mat(const le_node *node, const le_compute_params *p);
int le_mul_mat_check(const le_node *node);
size_t le_mul_mat_wsize(const le_node *node);
void le_flash_attn(const le_node *node, const le_compute_params *p);
size_t le_flash_attn_wsize(const le_node *node, int n_threads);
/* Whether FLASH_ATTN_EXT takes ggml's split-KV path (needs every thread). */
int le_flash_attn_split(const le_node *node);
/* Whether a FLASH_ATTN_EXT node's values depend on the thread count
 * (n_threads against one): ggml's split KV, unless the f32 kernel splits
 * it by K/V head (flash_attn.c fa32_rows_by_head). */
int le_flash_attn_nth_bound(const le_node *node, int n_threads);
/* mmap_drop.c: the live le_mmap_file mappings (le_mmap_drop acts only inside them) */
void le_maps_add(const void *base, uint64_t size);
void le_maps_forget(const void *base, uint64_t size);
/* repack.c: mul_mat over a repacked src0 (le_tensor.flags, llm_edge.h) */
int le_repacked_check(const le_node *node); /* 0 or -1 with error set */
int le_repack_q4_0_8x8(const void *src, void *dst, int64_t ne0, int64_t ne1);
int le_repack_q4_k_8x8(const void *src, void *dst, int64_t ne0, int64_t ne1);
int64_t le_repack_q4_k_8x8_size(int64_t ne0, int64_t ne1);
/* Rows [ir0, ir1) (multiples of 8; of 16 for Q8_0 16x4) of a weight in
 * layout `flag` with K columns against ne11 rows of its vec_dot type (by
 * bytes apart): dst[c * bs + r]. col: the columns' per-block extras where
 * the layout needs them (Q8_0 16x4: le_q8_0x16_col_start, nb per column). */
void le_repacked_rows(int32_t flag, int64_t K, const void *x, int64_t ir0, int64_t ir1,
                      int64_t M, const char *y, size_t by, int64_t ne11, const int32_t *col,
                      float *dst, size_t bs);
/* repack_q8_0.c: LE_FLAG_Q8_0_16X4 (ContextOptions.matmulOrder "fast") */
int le_repack_q8_0_16x4(const void *src, void *dst, int64_t ne0, int64_t ne1);
int64_t le_repack_q8_0_16x4_size(int64_t ne0, int64_t ne1);
int le_q8_0x16_wanted(void);
int le_q8_0x16_uses_start(void);
void le_q8_0x16_col_start(const void *y, int64_t nb, int32_t *start);
void le_q8_0x16_rows(int64_t K, const void *x, int64_t ir0, int64_t ir1, const char *y,
                     size_t by, int64_t ne11, const int32_t *start, float *dst, size_t bs);
void le_q4_0x8_rows(int64_t K, const void *x, int64_t ir0, int64_t ir1, int64_t M, const char *y,
                    size_t by, int64_t ne11, float *dst, size_t bs);
void le_q4_kx8_rows(int64_t K, const void *x, int64_t ir0, int64_t ir1, int64_t M, const char *y,
                    size_t by, int64_t ne11, float *dst, size_t bs);
/* ssm.c */
void le_ssm_conv(const le_node *node, const le_compute_params *p);
void le_ssm_scan(const le_node *node, const le_compute_params *p);

#endif
