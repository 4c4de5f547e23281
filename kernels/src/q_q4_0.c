/* Q4_0: blocks of 32 4-bit values (offset 8) with one f16 scale; element j
 * is the low nibble of qs[j], element j+16 the high nibble. */
#include "q_k_simd.h"
#include "le_wasm_simd.h"

static void q4_0_to_float(const void *vx, float *y, int64_t n) {
  const le_block_q4_0 *x = vx;
  for (int64_t i = 0; i < n / LE_QK; i++) {
    const float d = le_fp16_to_fp32(x[i].d);
    for (int j = 0; j < LE_QK / 2; j++) {
      y[i * LE_QK + j] = ((x[i].qs[j] & 0x0f) - 8) * d;
      y[i * LE_QK + j + LE_QK / 2] = ((x[i].qs[j] >> 4) - 8) * d;
    }
  }
}

/* quantize_row_q4_0_ref: the signed value of largest magnitude maps to -8 */
static void q4_0_from_float_ref(const float *x, void *vy, int64_t n) {
  le_block_q4_0 *y = vy;
  for (int64_t i = 0; i < n / LE_QK; i++) {
    const float *xb = x + i * LE_QK;
    float amax = 0.0f, max = 0.0f;
    for (int j = 0; j < LE_QK; j++) {
      if (amax < fabsf(xb[j])) {
        amax = fabsf(xb[j]);
        max = xb[j];
      }
    }
    const float d = max / -8.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    y[i].d = le_fp32_to_fp16(d);
    for (int j = 0; j < LE_QK / 2; j++) {
      const float x0 = xb[j] * id, x1 = xb[j + LE_QK / 2] * id;
      const uint8_t q0 = (uint8_t)LE_MIN(15, (int8_t)(x0 + 8.5f));
      const uint8_t q1 = (uint8_t)LE_MIN(15, (int8_t)(x1 + 8.5f));
      y[i].qs[j] = (uint8_t)(q0 | (q1 << 4));
    }
  }
}

/* ggml_vec_dot_q4_0_q8_0's generic C (llama.cpp's x64 build):
 * sumf += sumi * d_x * d_y, multiplied left to right (unlike q8_0, whose
 * generic form rounds d_x * d_y first). */
static void dot_q4_0_scalar(int64_t n, float *s, const void *vx, const void *vy) {
  const le_block_q4_0 *x = vx;
  const le_block_q8_0 *y = vy;
  float sum = 0.0f;
  for (int64_t i = 0; i < n / LE_QK; i++) {
    int32_t si = 0;
    for (int j = 0; j < LE_QK / 2; j++) {
      si += ((x[i].qs[j] & 0x0f) - 8) * y[i].qs[j];
      si += ((x[i].qs[j] >> 4) - 8) * y[i].qs[j + LE_QK / 2];
    }
    sum += (float)si * le_fp16_to_fp32(x[i].d) * le_fp16_to_fp32(y[i].d);
  }
  *s = sum;
}

#if defined(LE_WASM_SIMD)
/* dot_q4_0_scalar with the integer block sums in SIMD128 (exact in any order). */
static void dot_q4_0_wasm(int64_t n, float *s, const void *vx, const void *vy) {
  const le_block_q4_0 *x = vx;
  const le_block_q8_0 *y = vy;
  float sum = 0.0f;
  for (int64_t i = 0; i < n / LE_QK; i++) {
    const v128_t q = wasm_v128_load(x[i].qs);
    const v128_t lo = wasm_i8x16_sub(wasm_v128_and(q, wasm_i8x16_splat(0x0f)), wasm_i8x16_splat(8));
    const v128_t hi = wasm_i8x16_sub(wasm_u8x16_shr(q, 4), wasm_i8x16_splat(8));
    const v128_t p = wasm_i32x4_add(le_wasm_dot_i8x16(lo, wasm_v128_load(y[i].qs)),
                                    le_wasm_dot_i8x16(hi, wasm_v128_load(y[i].qs + 16)));
    sum += (float)le_wasm_hsum_i32x4(p) * le_wasm_h2f(x[i].d) * le_wasm_h2f(y[i].d);
  }
  *s = sum;
}
#endif

#if defined(LE_X86)
/* ggml's AVX2 branch (the only x86 one its zen4/icelake builds have for
 * q4_0, also tinyBLAS_Q0_AVX's order): one 8-lane accumulator, blocks in
 * order, hsum at the end. A two-block 16-lane form was faster but changed
 * the last bit of weights llama.cpp keeps plain (ne1 % 8 != 0). */
#define DOT_Q4_0_BODY                                                                    \
  const le_block_q4_0 *x = vx;                                                           \
  const le_block_q8_0 *y = vy;                                                           \
  __m256 acc = _mm256_setzero_ps();                                                      \
  for (int64_t i = 0; i < n / LE_QK; i++) {                                              \
    const __m256 d = _mm256_set1_ps(le_h2f(x[i].d) * le_h2f(y[i].d));                    \
    const __m256i qy = _mm256_loadu_si256((const __m256i *)y[i].qs);                     \
    acc = _mm256_fmadd_ps(d, le_mul_sum_i8_avx2(le_q4_0_unpack_avx2(x[i].qs), qy), acc); \
  }                                                                                      \
  *s = le_hsum_ps256(acc);

LE_TARGET_AVX2 static void dot_q4_0_avx2(int64_t n, float *s, const void *vx, const void *vy) {
  DOT_Q4_0_BODY
}
/* the AVX2 algorithm compiled for AVX-512VL (EVEX encoding, 32 registers) */
LE_TARGET_AVX512 static void dot_q4_0_avx512(int64_t n, float *s, const void *vx,
                                             const void *vy) {
  DOT_Q4_0_BODY
}
#endif

#if defined(LE_X86)
/* llama.cpp repacks q4_0 weights with ne1 % 8 == 0 (q4_0_8x8, any AVX2 CPU);
 * its gemv and gemm (ggml-cpu/arch/x86/repack.cpp) both keep one float
 * chain per output: acc = fma(block integer dot, d_x * d_y, acc), blocks in
 * order, so which of the two runs for a column does not change its bits. */
LE_TARGET_AVX2 static void q4_0_repack_dot(int64_t n, float *s, const void *vx, const void *vy) {
  const le_block_q4_0 *x = vx;
  const le_block_q8_0 *y = vy;
  float acc = 0.0f;
  for (int64_t i = 0; i < n / LE_QK; i++) {
    const __m256i qy = _mm256_loadu_si256((const __m256i *)y[i].qs);
    /* small integers: the float lane sum is exact */
    const float isum = le_hsum_ps256(le_mul_sum_i8_avx2(le_q4_0_unpack_avx2(x[i].qs), qy));
    acc = fmaf(isum, le_h2f(x[i].d) * le_h2f(y[i].d), acc);
  }
  *s = acc;
}
/* single weight rows (the M % 4 leftovers), one chain per call */
static void q4_0_t14(int64_t n, float *s, size_t bs, const void *x, size_t bx, const void *y,
                     size_t by) {
  for (int c = 0; c < 4; c++) q4_0_repack_dot(n, s + c * bs, x, (const char *)y + c * by);
}
static void q4_0_t11(int64_t n, float *s, size_t bs, const void *x, size_t bx, const void *y,
                     size_t by) {
  q4_0_repack_dot(n, s, x, y);
}

/* AVX2 (and AVX-512 without VNNI/VBMI): one block at a time. Unsigned
 * nibbles times q8 bytes with vpmaddubsw, minus 8*y in the same int16 pairs
 * (|values| < 2^13, no saturation), vpmaddwd to 8 int32 lanes per dot, and
 * a vphaddd tree to 4 sums; then the same float chain, 4 outputs per xmm. */
LE_TARGET_AVX2 LE_INLINE __m128i q4a_fold(__m256i a, __m256i b, __m256i c, __m256i d) {
  const __m256i s = _mm256_hadd_epi32(_mm256_hadd_epi32(a, b), _mm256_hadd_epi32(c, d));
  return _mm_add_epi32(_mm256_castsi256_si128(s), _mm256_extracti128_si256(s, 1));
}

/* rows r0..3 x columns 0..C-1 (C = 1 or 4) over all blocks; acc[c] float r */
LE_TARGET_AVX2 LE_INLINE void q4a_tile(const int C, int64_t n, float *s, size_t bs,
                                       const void *vx, size_t bx, const void *vy, size_t by) {
  const __m256i m = _mm256_set1_epi8(0x0f), e8 = _mm256_set1_epi8(8), one = _mm256_set1_epi16(1);
  __m128 acc[4] = {_mm_setzero_ps(), _mm_setzero_ps(), _mm_setzero_ps(), _mm_setzero_ps()};
  for (int64_t i = 0; i < n / LE_QK; i++) {
    __m256i nib[4];
    uint16_t d[4];
#pragma GCC unroll 4
    for (int r = 0; r < 4; r++) {
      const le_block_q4_0 *x = (const le_block_q4_0 *)((const char *)vx + r * bx) + i;
      const __m128i t = _mm_loadu_si128((const __m128i *)x->qs);
      nib[r] = _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(t, 4), t), m);
      d[r] = x->d;
    }
    const __m128 dx = _mm_cvtph_ps(_mm_setr_epi16((short)d[0], (short)d[1], (short)d[2],
                                                  (short)d[3], 0, 0, 0, 0));
#pragma GCC unroll 4
    for (int c = 0; c < C; c++) {
      const le_block_q8_0 *y = (const le_block_q8_0 *)((const char *)vy + c * by) + i;
      const __m256i yv = _mm256_loadu_si256((const __m256i *)y->qs);
      const __m256i b8 = _mm256_maddubs_epi16(e8, yv);
      __m256i p[4];
#pragma GCC unroll 4
      for (int r = 0; r < 4; r++)
        p[r] = _mm256_madd_epi16(_mm256_sub_epi16(_mm256_maddubs_epi16(nib[r], yv), b8), one);
      const __m128 sum = _mm_cvtepi32_ps(q4a_fold(p[0], p[1], p[2], p[3]));
      acc[c] = _mm_fmadd_ps(sum, _mm_mul_ps(dx, _mm_set1_ps(le_h2f(y->d))), acc[c]);
    }
  }
#pragma GCC unroll 4
  for (int c = 0; c < C; c++) _mm_storeu_ps(s + c * bs, acc[c]);
}

LE_TARGET_AVX2 static void q4_0_t44_avx2(int64_t n, float *s, size_t bs, const void *vx,
                                         size_t bx, const void *vy, size_t by) {
  q4a_tile(4, n, s, bs, vx, bx, vy, by);
}
LE_TARGET_AVX2 static void q4_0_t41_avx2(int64_t n, float *s, size_t bs, const void *vx,
                                         size_t bx, const void *vy, size_t by) {
  q4a_tile(1, n, s, bs, vx, bx, vy, by);
}
static const le_gemm_tiles q4_0_tiles_avx2 = {q4_0_t44_avx2, q4_0_t41_avx2, q4_0_t14, q4_0_t11};

/* The same chains with 16 outputs per vector (AVX-512 VNNI + VBMI). The
 * block integer dots are exact however they are formed, so they are formed
 * cheaply: vpermt2b gathers 4 consecutive blocks of a row (or column) into
 * the four 128-bit lanes, vpdpbusd multiplies the unsigned nibbles by the
 * signed q8 bytes with -8*sum(y) preloaded, and a shuffle/add tree folds
 * each dot's 4 partial lanes into one. Only then do floats appear: the
 * converted sum, d_x*d_y rounded to float, one vfmadd per output and block
 * in block order, lane by lane exactly the scalar fmaf chain. */
#define LE_TARGET_Q4 \
  __attribute__((target("avx512f,avx512bw,avx512vl,avx512vnni,avx512vbmi,avx2,fma,f16c")))

/* vpermt2b indices over 128 bytes starting at block i (18-byte x blocks,
 * 34-byte y blocks; see q4_load_row / q4_load_col for the two sources):
 * byte j of the qs (x), y bytes 0-15 / 16-31, of block i+L go to 16L+j;
 * the f16 scale of block i+L goes to word 4L+k (y: every k; x: k = row,
 * odd rows from the second source). */
static const uint8_t q4_ix_qs[64] __attribute__((aligned(64))) = {
    2,  3,  4,  5,  6,  7,  8,  9,  10, 11, 12, 13, 14,  15,  16,  17,
    20, 21, 22, 23, 24, 25, 26, 27, 28, 29, 30, 31, 32,  33,  34,  35,
    38, 39, 40, 41, 42, 43, 44, 45, 46, 47, 48, 49, 50,  51,  52,  53,
    56, 57, 58, 59, 60, 61, 62, 63, 120, 121, 122, 123, 124, 125, 126, 127,
};
static const uint8_t q4_iy_lo[64] __attribute__((aligned(64))) = {
    2,   3,   4,   5,   6,   7,   8,   9,   10,  11,  12,  13,  14,  15,  16,  17,
    36,  37,  38,  39,  40,  41,  42,  43,  44,  45,  46,  47,  48,  49,  50,  51,
    70,  71,  72,  73,  74,  75,  76,  77,  78,  79,  80,  81,  82,  83,  84,  85,
    104, 105, 106, 107, 108, 109, 110, 111, 112, 113, 114, 115, 116, 117, 118, 119,
};
static const uint8_t q4_iy_hi[64] __attribute__((aligned(64))) = {
    10,  11,  12,  13,  14,  15,  16,  17,  18,  19,  20,  21,  22,  23,  24,  25,
    44,  45,  46,  47,  48,  49,  50,  51,  52,  53,  54,  55,  56,  57,  58,  59,
    78,  79,  80,  81,  82,  83,  84,  85,  86,  87,  88,  89,  90,  91,  92,  93,
    112, 113, 114, 115, 116, 117, 118, 119, 120, 121, 122, 123, 124, 125, 126, 127,
};
static const uint8_t q4_iy_d[64] __attribute__((aligned(64))) = {
    0,  1,  0,  1,  0,  1,  0,  1,  34,  35,  34,  35,  34,  35,  34,  35,
    68, 69, 68, 69, 68, 69, 68, 69, 102, 103, 102, 103, 102, 103, 102, 103,
};
static const uint8_t q4_ix_d[64] __attribute__((aligned(64))) = {
    0,  1,  64,  65,  0,  1,  64,  65,  18, 19, 82,  83,  18, 19, 82,  83,
    36, 37, 100, 101, 36, 37, 100, 101, 54, 55, 118, 119, 54, 55, 118, 119,
};

static int q4_vnni_state = -1;
static int q4_has_vnni(void) {
  if (q4_vnni_state < 0)
    q4_vnni_state = le_cpu_vnni() && __builtin_cpu_supports("avx512vbmi");
  return q4_vnni_state;
}

/* 64 bytes at p + off; unless full, only those below len (the rest read as
 * zero, never touched: a short last group must not read past the data) */
LE_TARGET_Q4 LE_INLINE __m512i q4_ld(const int full, const uint8_t *p, int off, int64_t len) {
  if (full) return _mm512_loadu_si512(p + off);
  const int64_t k = len - off;
  const __mmask64 m = k <= 0 ? 0 : k >= 64 ? ~(__mmask64)0 : ((__mmask64)1 << k) - 1;
  return _mm512_maskz_loadu_epi8(m, p + off);
}

/* 4 blocks of one weight row: nibbles in lane L = block i+L; a keeps the raw
 * bytes for the scales */
typedef struct { __m512i lo, hi, a; } q4_row;
LE_TARGET_Q4 LE_INLINE q4_row q4_load_row(const int full, const uint8_t *x, int64_t len) {
  q4_row r;
  r.a = q4_ld(full, x, 0, len);
  const __m512i q =
      _mm512_permutex2var_epi8(r.a, _mm512_load_si512(q4_ix_qs), q4_ld(full, x, 8, len));
  const __m512i m = _mm512_set1_epi8(0x0f);
  r.lo = _mm512_and_si512(q, m);
  r.hi = _mm512_and_si512(_mm512_srli_epi16(q, 4), m);
  return r;
}

/* 4 blocks of one q8_0 column: bytes 0-15 / 16-31 in lane L = block i+L,
 * nq = -8 * (partial sums of y in vpdpbusd's lane layout), a/b raw bytes */
typedef struct { __m512i lo, hi, nq, a, b; } q4_col;
LE_TARGET_Q4 LE_INLINE q4_col q4_load_col(const int full, const uint8_t *y, int64_t len) {
  q4_col c;
  c.a = q4_ld(full, y, 0, len);
  c.b = q4_ld(full, y, 64, len);
  c.lo = _mm512_permutex2var_epi8(c.a, _mm512_load_si512(q4_iy_lo), c.b);
  c.hi = _mm512_permutex2var_epi8(q4_ld(full, y, 8, len), _mm512_load_si512(q4_iy_hi),
                                  q4_ld(full, y, 72, len));
  const __m512i e8 = _mm512_set1_epi8(8);
  const __m512i z = _mm512_setzero_si512();
  c.nq = _mm512_sub_epi32(z, _mm512_dpbusd_epi32(_mm512_dpbusd_epi32(z, e8, c.lo), e8, c.hi));
  return c;
}

/* sum((nibble - 8) * y) of the 4 blocks, as 4 partial int32 per 128-bit lane */
LE_TARGET_Q4 LE_INLINE __m512i q4_dot4(q4_row r, q4_col c) {
  return _mm512_dpbusd_epi32(_mm512_dpbusd_epi32(c.nq, r.lo, c.lo), r.hi, c.hi);
}

LE_TARGET_Q4 LE_INLINE __m512i q4_pair(__m512i a, __m512i b) {
  const __m512 fa = _mm512_castsi512_ps(a), fb = _mm512_castsi512_ps(b);
  return _mm512_add_epi32(_mm512_castps_si512(_mm512_shuffle_ps(fa, fb, 0x88)),
                          _mm512_castps_si512(_mm512_shuffle_ps(fa, fb, 0xdd)));
}
/* int32 k of each 128-bit lane: the sum of that lane's 4 int32 in input k */
LE_TARGET_Q4 LE_INLINE __m512 q4_fold(__m512i a, __m512i b, __m512i c, __m512i d) {
  return _mm512_cvtepi32_ps(q4_pair(q4_pair(a, b), q4_pair(c, d)));
}

/* d_x of 4 rows, float k of lane L = row k's scale of block i+L */
LE_TARGET_Q4 LE_INLINE __m512 q4_row_scales(q4_row r0, q4_row r1, q4_row r2, q4_row r3) {
  const __m512i ix = _mm512_load_si512(q4_ix_d);
  const __m512i h = _mm512_or_si512(_mm512_maskz_permutex2var_epi8(0x0f0f0f0f, r0.a, ix, r1.a),
                                    _mm512_maskz_permutex2var_epi8(0xf0f0f0f0, r2.a, ix, r3.a));
  return _mm512_cvtph_ps(_mm512_castsi512_si256(h));
}

/* gemv, blocks i..i+nl-1 of 4 rows: float r of lane L continues the chain
 * from float r of lane L-1 (of the previous group's lane 3 at L = 0) */
LE_TARGET_Q4 LE_INLINE __m512 q4_group41(const int full, const uint8_t *x, size_t bx,
                                         const uint8_t *y, int64_t i, int nl, __m512 t) {
  const q4_col c = q4_load_col(full, y + 34 * i, 34 * nl);
  const q4_row r0 = q4_load_row(full, x + 18 * i, 18 * nl);
  const q4_row r1 = q4_load_row(full, x + bx + 18 * i, 18 * nl);
  const q4_row r2 = q4_load_row(full, x + 2 * bx + 18 * i, 18 * nl);
  const q4_row r3 = q4_load_row(full, x + 3 * bx + 18 * i, 18 * nl);
  const __m512 sum = q4_fold(q4_dot4(r0, c), q4_dot4(r1, c), q4_dot4(r2, c), q4_dot4(r3, c));
  const __m512 dy = _mm512_cvtph_ps(
      _mm512_castsi512_si256(_mm512_permutex2var_epi8(c.a, _mm512_load_si512(q4_iy_d), c.b)));
  const __m512 sc = _mm512_mul_ps(q4_row_scales(r0, r1, r2, r3), dy);
  t = _mm512_fmadd_ps(sum, sc, _mm512_shuffle_f32x4(t, t, 0xff));
  if (nl > 1) t = _mm512_fmadd_ps(sum, sc, _mm512_shuffle_f32x4(t, t, 0x00));
  if (nl > 2) t = _mm512_fmadd_ps(sum, sc, _mm512_shuffle_f32x4(t, t, 0x55));
  if (nl > 3) t = _mm512_fmadd_ps(sum, sc, _mm512_shuffle_f32x4(t, t, 0xaa));
  return t;
}

LE_TARGET_Q4 static void q4_0_t41(int64_t n, float *s, size_t bs, const void *vx, size_t bx,
                                  const void *vy, size_t by) {
  if (!q4_has_vnni()) {
    q4_0_t41_avx2(n, s, bs, vx, bx, vy, by);
    return;
  }
  const int64_t nb = n / LE_QK;
  __m512 t = _mm512_setzero_ps();
  int64_t i = 0;
  for (; i + 4 <= nb; i += 4) t = q4_group41(1, vx, bx, vy, i, 4, t);
  const int last = i < nb ? (int)(nb - i) : 4;
  if (i < nb) t = q4_group41(0, vx, bx, vy, i, last, t);
  float out[16];
  _mm512_storeu_ps(out, t);
  memcpy(s, out + 4 * (last - 1), 4 * sizeof(float));
}

/* gemm, blocks i..i+nl-1 of 4 rows x 4 columns: acc float 4c+r is output
 * (row r, column c) */
LE_TARGET_Q4 LE_INLINE __m512 q4_group44(const int full, const uint8_t *x, size_t bx,
                                         const uint8_t *y, size_t by, int64_t i, int nl,
                                         __m512 acc) {
  const q4_row r0 = q4_load_row(full, x + 18 * i, 18 * nl);
  const q4_row r1 = q4_load_row(full, x + bx + 18 * i, 18 * nl);
  const q4_row r2 = q4_load_row(full, x + 2 * bx + 18 * i, 18 * nl);
  const q4_row r3 = q4_load_row(full, x + 3 * bx + 18 * i, 18 * nl);
  const __m512i iyd = _mm512_load_si512(q4_iy_d);
  __m512 s[4];
  __m512i dyh = _mm512_setzero_si512();
#pragma GCC unroll 4
  for (int c = 0; c < 4; c++) {
    const q4_col col = q4_load_col(full, y + c * by + 34 * i, 34 * nl);
    s[c] = q4_fold(q4_dot4(r0, col), q4_dot4(r1, col), q4_dot4(r2, col), q4_dot4(r3, col));
    dyh = _mm512_or_si512(
        dyh, _mm512_maskz_permutex2var_epi8(0x03030303ULL << (2 * c), col.a, iyd, col.b));
  }
  const __m512 dx = q4_row_scales(r0, r1, r2, r3);       /* float 4L+r */
  const __m512 dy = _mm512_cvtph_ps(_mm512_castsi512_si256(dyh)); /* float 4L+c */
  /* lane L of every column into one vector per block: float 4c+r */
  const __m512 t0 = _mm512_shuffle_f32x4(s[0], s[1], 0x44);
  const __m512 t1 = _mm512_shuffle_f32x4(s[0], s[1], 0xee);
  const __m512 t2 = _mm512_shuffle_f32x4(s[2], s[3], 0x44);
  const __m512 t3 = _mm512_shuffle_f32x4(s[2], s[3], 0xee);
  const __m512 v[4] = {_mm512_shuffle_f32x4(t0, t2, 0x88), _mm512_shuffle_f32x4(t0, t2, 0xdd),
                       _mm512_shuffle_f32x4(t1, t3, 0x88), _mm512_shuffle_f32x4(t1, t3, 0xdd)};
  const __m512i lane = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
  const __m512i ir = _mm512_and_si512(lane, _mm512_set1_epi32(3));
  const __m512i ic = _mm512_srli_epi32(lane, 2);
#pragma GCC unroll 4
  for (int l = 0; l < 4; l++) {
    if (l >= nl) break;
    const __m512i base = _mm512_set1_epi32(4 * l);
    const __m512 sc = _mm512_mul_ps(_mm512_permutexvar_ps(_mm512_add_epi32(base, ir), dx),
                                    _mm512_permutexvar_ps(_mm512_add_epi32(base, ic), dy));
    acc = _mm512_fmadd_ps(v[l], sc, acc);
  }
  return acc;
}

LE_TARGET_Q4 static void q4_0_t44(int64_t n, float *s, size_t bs, const void *vx, size_t bx,
                                  const void *vy, size_t by) {
  if (!q4_has_vnni()) {
    q4_0_t44_avx2(n, s, bs, vx, bx, vy, by);
    return;
  }
  const int64_t nb = n / LE_QK;
  __m512 acc = _mm512_setzero_ps();
  int64_t i = 0;
  for (; i + 4 <= nb; i += 4) acc = q4_group44(1, vx, bx, vy, by, i, 4, acc);
  if (i < nb) acc = q4_group44(0, vx, bx, vy, by, i, (int)(nb - i), acc);
  /* bs = 0 (a leftover column repeated): four equal stores to one place */
  _mm_storeu_ps(s, _mm512_castps512_ps128(acc));
  _mm_storeu_ps(s + bs, _mm512_extractf32x4_ps(acc, 1));
  _mm_storeu_ps(s + 2 * bs, _mm512_extractf32x4_ps(acc, 2));
  _mm_storeu_ps(s + 3 * bs, _mm512_extractf32x4_ps(acc, 3));
}

static const le_gemm_tiles q4_0_tiles_avx512 = {q4_0_t44, q4_0_t41, q4_0_t14, q4_0_t11};
#endif

#if defined(LE_NEON)
static void dot_q4_0_neon(int64_t n, float *s, const void *vx, const void *vy) {
  const le_block_q4_0 *x = vx;
  const le_block_q8_0 *y = vy;
  float32x4_t acc = vdupq_n_f32(0);
  for (int64_t i = 0; i < n / LE_QK; i++) {
    const uint8x16_t q = vld1q_u8(x[i].qs);
    const int8x16_t lo = vsubq_s8(vreinterpretq_s8_u8(vandq_u8(q, vdupq_n_u8(0x0f))), vdupq_n_s8(8));
    const int8x16_t hi = vsubq_s8(vreinterpretq_s8_u8(vshrq_n_u8(q, 4)), vdupq_n_s8(8));
    const int8x16_t y0 = vld1q_s8(y[i].qs), y1 = vld1q_s8(y[i].qs + 16);
    int32x4_t p = vdupq_n_s32(0);
    p = vpadalq_s16(p, vmull_s8(vget_low_s8(lo), vget_low_s8(y0)));
    p = vpadalq_s16(p, vmull_s8(vget_high_s8(lo), vget_high_s8(y0)));
    p = vpadalq_s16(p, vmull_s8(vget_low_s8(hi), vget_low_s8(y1)));
    p = vpadalq_s16(p, vmull_s8(vget_high_s8(hi), vget_high_s8(y1)));
    acc = vmlaq_n_f32(acc, vcvtq_f32_s32(p), le_fp16_to_fp32(x[i].d) * le_fp16_to_fp32(y[i].d));
  }
  *s = vaddvq_f32(acc);
}
#endif

const le_type_traits le_traits_q4_0 = {
    .type = LE_TYPE_Q4_0,
    .name = "q4_0",
    .blck = LE_QK,
    .size = sizeof(le_block_q4_0),
    .to_float = q4_0_to_float,
    .from_float_ref = q4_0_from_float_ref,
    .from_float_act = NULL,
    .vec_dot_type = LE_TYPE_Q8_0,
    .vec_dot = {
#if defined(LE_WASM_SIMD)
        [LE_SIMD_SCALAR] = dot_q4_0_wasm,
#else
        [LE_SIMD_SCALAR] = dot_q4_0_scalar,
#endif
#if defined(LE_X86)
        [LE_SIMD_AVX2] = dot_q4_0_avx2,
        [LE_SIMD_AVX512] = dot_q4_0_avx512,
#endif
#if defined(LE_NEON)
        [LE_SIMD_NEON] = dot_q4_0_neon,
#endif
    },
#if defined(LE_X86)
    .gemm = {[LE_SIMD_AVX2] = &q4_0_tiles_avx2, [LE_SIMD_AVX512] = &q4_0_tiles_avx512},
#elif defined(LE_WASM_SIMD)
    .gemm = {[LE_SIMD_SCALAR] = &le_q4_0_tiles_wasm},
#endif
};
