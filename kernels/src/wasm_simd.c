/* SIMD128 kernels of the wasm32 build that live outside their type's file:
 * the Q4_K and Q6_K vec_dots (at the end) and, first, the mul_mat tiles
 * for Q8_0 and Q4_0 weights
 * against Q8_0 activations, at the scalar level the module runs. Each
 * output is computed exactly as that level's vec_dot computes it
 * (dot_q8_0_scalar: sum += (float)isum * (d_x * d_y); dot_q4_0_scalar:
 * sum += (float)isum * d_x * d_y, block by block in order), so tiles and
 * vec_dot agree bit for bit. What the tiles add: four outputs per float
 * vector (one lane each, the same scalar operations in every lane), the
 * integer block sums of four outputs reduced together, and the activation
 * block loaded once for four weight rows. Empty outside wasm32 + SIMD128. */
#include "q_k_simd.h"
#include "le_wasm_simd.h"

#if defined(LE_WASM_SIMD)

/* A weight block's 32 codes as two vectors of signed bytes (elements 0..15,
 * 16..31), the way its vec_dot reads them. */
static inline void x_codes(int q4, const char *blk, v128_t *a, v128_t *b) {
  if (q4) {
    const v128_t q = wasm_v128_load(((const le_block_q4_0 *)blk)->qs);
    *a = wasm_i8x16_sub(wasm_v128_and(q, wasm_i8x16_splat(0x0f)), wasm_i8x16_splat(8));
    *b = wasm_i8x16_sub(wasm_u8x16_shr(q, 4), wasm_i8x16_splat(8));
  } else {
    *a = wasm_v128_load(((const le_block_q8_0 *)blk)->qs);
    *b = wasm_v128_load(((const le_block_q8_0 *)blk)->qs + 16);
  }
}

static inline uint16_t x_scale(int q4, const char *blk) {
  return q4 ? ((const le_block_q4_0 *)blk)->d : ((const le_block_q8_0 *)blk)->d;
}

/* Lane k = the sum of the four int32 lanes of p_k (exact in any order). */
static inline v128_t hsum4(v128_t p0, v128_t p1, v128_t p2, v128_t p3) {
  const v128_t s01 = wasm_i32x4_add(wasm_i32x4_shuffle(p0, p1, 0, 4, 1, 5),
                                    wasm_i32x4_shuffle(p0, p1, 2, 6, 3, 7));
  const v128_t s23 = wasm_i32x4_add(wasm_i32x4_shuffle(p2, p3, 0, 4, 1, 5),
                                    wasm_i32x4_shuffle(p2, p3, 2, 6, 3, 7));
  return wasm_i32x4_add(wasm_i32x4_shuffle(s01, s23, 0, 1, 4, 5),
                        wasm_i32x4_shuffle(s01, s23, 2, 3, 6, 7));
}

/* Integer dot of one weight block's codes with an activation block's. */
static inline v128_t block_dot(v128_t xa, v128_t xb, const le_block_q8_0 *y) {
  return wasm_i32x4_add(le_wasm_dot_i8x16(xa, wasm_v128_load(y->qs)),
                        le_wasm_dot_i8x16(xb, wasm_v128_load(y->qs + 16)));
}

/* The float step of four outputs: lane k adds (float)isum_k times its
 * scales, in the vec_dot's order. dx and dy hold each lane's d_x and d_y. */
static inline v128_t step(int q4, v128_t acc, v128_t isum, v128_t dx, v128_t dy) {
  const v128_t f = wasm_f32x4_convert_i32x4(isum); /* |isum| < 2^24: exact */
  const v128_t t = q4 ? wasm_f32x4_mul(wasm_f32x4_mul(f, dx), dy)
                      : wasm_f32x4_mul(f, wasm_f32x4_mul(dx, dy));
  return wasm_f32x4_add(acc, t);
}

/* Rows 0..3 of x (bx bytes apart) against one activation column y. */
static inline v128_t rows4(int q4, int64_t nb, const char *x, size_t bx, const le_block_q8_0 *y) {
  const size_t xs = q4 ? sizeof(le_block_q4_0) : sizeof(le_block_q8_0);
  v128_t acc = wasm_f32x4_splat(0.0f);
  for (int64_t i = 0; i < nb; i++) {
    v128_t p[4];
    float dx[4];
    for (int r = 0; r < 4; r++) {
      const char *blk = x + r * bx + i * xs;
      v128_t a, b;
      x_codes(q4, blk, &a, &b);
      p[r] = block_dot(a, b, &y[i]);
      dx[r] = le_wasm_h2f(x_scale(q4, blk));
    }
    acc = step(q4, acc, hsum4(p[0], p[1], p[2], p[3]), wasm_v128_load(dx),
               wasm_f32x4_splat(le_wasm_h2f(y[i].d)));
  }
  return acc;
}

/* Row x against columns 0..3 of y (by bytes apart). */
static inline v128_t cols4(int q4, int64_t nb, const char *x, const char *y, size_t by) {
  const size_t xs = q4 ? sizeof(le_block_q4_0) : sizeof(le_block_q8_0);
  v128_t acc = wasm_f32x4_splat(0.0f);
  for (int64_t i = 0; i < nb; i++) {
    const char *blk = x + i * xs;
    v128_t a, b;
    x_codes(q4, blk, &a, &b);
    v128_t p[4];
    float dy[4];
    for (int c = 0; c < 4; c++) {
      const le_block_q8_0 *yb = (const le_block_q8_0 *)(y + c * by) + i;
      p[c] = block_dot(a, b, yb);
      dy[c] = le_wasm_h2f(yb->d);
    }
    acc = step(q4, acc, hsum4(p[0], p[1], p[2], p[3]), wasm_f32x4_splat(le_wasm_h2f(x_scale(q4, blk))),
               wasm_v128_load(dy));
  }
  return acc;
}

/* One output (the vec_dot itself). */
static inline float one(int q4, int64_t nb, const char *x, const le_block_q8_0 *y) {
  const size_t xs = q4 ? sizeof(le_block_q4_0) : sizeof(le_block_q8_0);
  float sum = 0.0f;
  for (int64_t i = 0; i < nb; i++) {
    const char *blk = x + i * xs;
    v128_t a, b;
    x_codes(q4, blk, &a, &b);
    const float f = (float)le_wasm_hsum_i32x4(block_dot(a, b, &y[i]));
    const float dx = le_wasm_h2f(x_scale(q4, blk)), dy = le_wasm_h2f(y[i].d);
    sum += q4 ? f * dx * dy : f * (dx * dy);
  }
  return sum;
}

static inline void store4(float *s, size_t stride, v128_t v) {
  s[0] = wasm_f32x4_extract_lane(v, 0);
  s[stride] = wasm_f32x4_extract_lane(v, 1);
  s[2 * stride] = wasm_f32x4_extract_lane(v, 2);
  s[3 * stride] = wasm_f32x4_extract_lane(v, 3);
}

#define TILES(name, q4)                                                                            \
  static void name##_t41(int64_t n, float *s, size_t bs, const void *x, size_t bx, const void *y,  \
                         size_t by) {                                                              \
    store4(s, 1, rows4(q4, n / LE_QK, x, bx, y));                                                  \
  }                                                                                                \
  static void name##_t11(int64_t n, float *s, size_t bs, const void *x, size_t bx, const void *y,  \
                         size_t by) {                                                              \
    *s = one(q4, n / LE_QK, x, y);                                                                 \
  }                                                                                                \
  static void name##_t44(int64_t n, float *s, size_t bs, const void *x, size_t bx, const void *y,  \
                         size_t by) {                                                              \
    for (int c = 0; c < 4; c++)                                                                    \
      store4(s + c * bs, 1, rows4(q4, n / LE_QK, x, bx, (const le_block_q8_0 *)((const char *)y + c * by))); \
  }                                                                                                \
  static void name##_t14(int64_t n, float *s, size_t bs, const void *x, size_t bx, const void *y,  \
                         size_t by) {                                                              \
    store4(s, bs, cols4(q4, n / LE_QK, x, y, by));                                                 \
  }                                                                                                \
  const le_gemm_tiles le_##name##_tiles_wasm = {name##_t44, name##_t41, name##_t14, name##_t11};

TILES(q8_0, 0)
TILES(q4_0, 1)

/* ---- F16 weights against F16 activations: dot_f16_scalar per output
 * (products in float, summed into a double element by element, in order).
 * Four outputs run as four lanes: the products of 4 elements of 4 outputs
 * are transposed so that each step adds one element to every output, in
 * two f64x2 accumulators: four dependency chains instead of one. */

/* t[j] = lane j of p0..p3 (the 4x4 transpose). */
static inline void transpose4(v128_t p0, v128_t p1, v128_t p2, v128_t p3, v128_t t[4]) {
  const v128_t a = wasm_i32x4_shuffle(p0, p1, 0, 4, 1, 5), b = wasm_i32x4_shuffle(p0, p1, 2, 6, 3, 7);
  const v128_t c = wasm_i32x4_shuffle(p2, p3, 0, 4, 1, 5), d = wasm_i32x4_shuffle(p2, p3, 2, 6, 3, 7);
  t[0] = wasm_i32x4_shuffle(a, c, 0, 1, 4, 5);
  t[1] = wasm_i32x4_shuffle(a, c, 2, 3, 6, 7);
  t[2] = wasm_i32x4_shuffle(b, d, 0, 1, 4, 5);
  t[3] = wasm_i32x4_shuffle(b, d, 2, 3, 6, 7);
}

/* Four dots: lane k = dot(a_k, b_k) where a_k = a + k * sa, b_k = b + k * sb (halves). */
static inline void f16_dots4(int64_t n, const uint16_t *a, size_t sa, const uint16_t *b, size_t sb,
                             float *out, size_t so) {
  v128_t s01 = wasm_f64x2_splat(0.0), s23 = s01;
  int64_t i = 0;
  for (; i + 4 <= n; i += 4) {
    v128_t p[4], t[4];
    for (int k = 0; k < 4; k++)
      p[k] = wasm_f32x4_mul(le_wasm_h2f4(a + k * sa + i), le_wasm_h2f4(b + k * sb + i));
    transpose4(p[0], p[1], p[2], p[3], t);
    for (int j = 0; j < 4; j++) {
      s01 = wasm_f64x2_add(s01, wasm_f64x2_promote_low_f32x4(t[j]));
      s23 = wasm_f64x2_add(s23, wasm_f64x2_promote_low_f32x4(wasm_i32x4_shuffle(t[j], t[j], 2, 3, 0, 1)));
    }
  }
  double sum[4] = {wasm_f64x2_extract_lane(s01, 0), wasm_f64x2_extract_lane(s01, 1),
                   wasm_f64x2_extract_lane(s23, 0), wasm_f64x2_extract_lane(s23, 1)};
  for (int k = 0; k < 4; k++) {
    for (int64_t e = i; e < n; e++)
      sum[k] += (double)(le_wasm_h2f(a[k * sa + e]) * le_wasm_h2f(b[k * sb + e]));
    out[k * so] = (float)sum[k];
  }
}

static void f16_t41(int64_t n, float *s, size_t bs, const void *x, size_t bx, const void *y,
                    size_t by) {
  f16_dots4(n, x, bx / 2, y, 0, s, 1);
}
static void f16_t11(int64_t n, float *s, size_t bs, const void *x, size_t bx, const void *y,
                    size_t by) {
  const uint16_t *a = x, *b = y;
  double sum = 0.0;
  for (int64_t e = 0; e < n; e++) sum += (double)(le_wasm_h2f(a[e]) * le_wasm_h2f(b[e]));
  *s = (float)sum;
}
static void f16_t44(int64_t n, float *s, size_t bs, const void *x, size_t bx, const void *y,
                    size_t by) {
  for (int c = 0; c < 4; c++) f16_dots4(n, x, bx / 2, (const uint16_t *)((const char *)y + c * by), 0, s + c * bs, 1);
}
static void f16_t14(int64_t n, float *s, size_t bs, const void *x, size_t bx, const void *y,
                    size_t by) {
  f16_dots4(n, x, 0, y, by / 2, s, bs);
}
const le_gemm_tiles le_f16_tiles_wasm = {f16_t44, f16_t41, f16_t14, f16_t11};

/* ---- K-quants: the generic C vec_dots (llama.cpp's x64 build) with the
 * integer lane sums in SIMD128. Element e adds into lane e % 8; the 16- and
 * 32-element groups start at multiples of 8, so the products of elements
 * 0..7 and 8..15 of a group go to lanes 0..7 in order, L0 holding lanes
 * 0..3 and L1 lanes 4..7. Integer sums are exact in any order; the float
 * steps (le_k_lanes_generic, le_k_reduce_generic) are the scalar ones, per
 * lane. */

/* Lanes += sc * (products of 16 elements: a 16-bit lane sum of elements l and l + 8). */
static inline void lanes_add16(v128_t *l0, v128_t *l1, v128_t lo, v128_t hi, int32_t sc) {
  const v128_t p = wasm_i16x8_add(lo, hi); /* |p| <= 2 * 4096: no overflow */
  const v128_t s = wasm_i32x4_splat(sc);
  *l0 = wasm_i32x4_add(*l0, wasm_i32x4_mul(wasm_i32x4_extend_low_i16x8(p), s));
  *l1 = wasm_i32x4_add(*l1, wasm_i32x4_mul(wasm_i32x4_extend_high_i16x8(p), s));
}

/* sums[l] += d * (float)lane[l], as le_k_lanes_generic, four lanes at once. */
static inline void lanes_float(v128_t *s0, v128_t *s1, v128_t l0, v128_t l1, float d) {
  const v128_t dv = wasm_f32x4_splat(d);
  *s0 = wasm_f32x4_add(*s0, wasm_f32x4_mul(dv, wasm_f32x4_convert_i32x4(l0)));
  *s1 = wasm_f32x4_add(*s1, wasm_f32x4_mul(dv, wasm_f32x4_convert_i32x4(l1)));
}

static inline float reduce8(float sumf, v128_t s0, v128_t s1) {
  float s[8];
  wasm_v128_store(s, s0);
  wasm_v128_store(s + 4, s1);
  return le_k_reduce_generic(sumf, s);
}

/* products of 16 unsigned/signed codes (as i8) with 16 activations: low 8, high 8 */
#define PROD16(codes, ys, lo, hi)                                        \
  do {                                                                   \
    lo = wasm_i16x8_extmul_low_i8x16(codes, ys);                         \
    hi = wasm_i16x8_extmul_high_i8x16(codes, ys);                        \
  } while (0)

/* dot_q6_k_scalar */
void le_dot_q6_k_wasm(int64_t n, float *s, const void *vx, const void *vy) {
  const le_block_q6_k *x = vx;
  const le_block_q8_k *y = vy;
  v128_t s0 = wasm_f32x4_splat(0.0f), s1 = s0;
  const v128_t m4 = wasm_i8x16_splat(0x0f), m3 = wasm_i8x16_splat(3), c32 = wasm_i8x16_splat(32);
  for (int64_t i = 0; i < n / LE_QK_K; i++) {
    const int8_t *sc = x[i].scales;
    v128_t l0 = wasm_i32x4_splat(0), l1 = l0;
    for (int c = 0; c < 8; c++) { /* 32 elements: e = 32 c + l */
      const int h = c / 4, k = c % 4;
      for (int half = 0; half < 2; half++) { /* l = 16 half .. 16 half + 15 */
        const int l = 16 * half;
        const v128_t q = wasm_v128_load(x[i].ql + 64 * h + l + 32 * (k & 1));
        const v128_t qh = wasm_v128_load(x[i].qh + 32 * h + l);
        const v128_t lo4 = k >= 2 ? wasm_u8x16_shr(q, 4) : wasm_v128_and(q, m4);
        const v128_t hi2 = wasm_i8x16_shl(wasm_v128_and(wasm_u8x16_shr(qh, 2 * k), m3), 4);
        const v128_t code = wasm_i8x16_sub(wasm_v128_or(lo4, hi2), c32);
        v128_t plo, phi;
        PROD16(code, wasm_v128_load(y[i].qs + 32 * c + l), plo, phi);
        lanes_add16(&l0, &l1, plo, phi, sc[2 * c + half]);
      }
    }
    lanes_float(&s0, &s1, l0, l1, le_wasm_h2f(x[i].d) * y[i].d);
  }
  *s = reduce8(0.0f, s0, s1);
}

/* dot_q4_k_scalar */
void le_dot_q4_k_wasm(int64_t n, float *s, const void *vx, const void *vy) {
  const le_block_q4_k *x = vx;
  const le_block_q8_k *y = vy;
  v128_t s0 = wasm_f32x4_splat(0.0f), s1 = s0;
  float sumf = 0.0f;
  uint8_t sc[8], m[8];
  const v128_t m4 = wasm_i8x16_splat(0x0f);
  for (int64_t i = 0; i < n / LE_QK_K; i++) {
    for (int g = 0; g < 8; g++) le_scale_min_k4(g, x[i].scales, &sc[g], &m[g]);
    v128_t l0 = wasm_i32x4_splat(0), l1 = l0;
    for (int g = 0; g < 8; g++) {
      for (int half = 0; half < 2; half++) {
        const v128_t b = wasm_v128_load(x[i].qs + 32 * (g / 2) + 16 * half);
        const v128_t code = (g & 1) ? wasm_u8x16_shr(b, 4) : wasm_v128_and(b, m4);
        v128_t plo, phi;
        PROD16(code, wasm_v128_load(y[i].qs + 32 * g + 16 * half), plo, phi);
        lanes_add16(&l0, &l1, plo, phi, sc[g]);
      }
    }
    lanes_float(&s0, &s1, l0, l1, le_wasm_h2f(x[i].d) * y[i].d);
    sumf -= (le_wasm_h2f(x[i].dmin) * y[i].d) * (float)le_summs_k4(m, &y[i]);
  }
  *s = reduce8(sumf, s0, s1);
}

#else
typedef int le_wasm_tiles_unused; /* a translation unit must declare something */
#endif
