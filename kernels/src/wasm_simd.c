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

/* ---- F16 dots (weights and activations both F16): what dot_f16_scalar
 * returns, bit for bit, without its one long double dependency chain.
 * dot_f16_scalar (llama.cpp's x64 ggml_vec_dot_f16) forms each product in
 * float and adds it into a double, element by element. Here the products
 * (the same floats: a product of two halves is exact in float) go into
 * independent f64x2 accumulators, 8 or more partial sums added at the end,
 * and a certificate decides whether that different order can round to a
 * different float:
 *
 * Any summation order of n doubles is within g = (n-1)u / (1-(n-1)u) * S of
 * the exact sum (u = 2^-53, S = sum |p_i|; Higham, Accuracy and Stability,
 * 4.2). So the sequential double and ours are both within g of the exact
 * sum, hence within 2g of each other. If the float that ours rounds to, f,
 * has both rounding boundaries (the midpoints to its neighbours) farther
 * than 2g from ours, the sequential double rounds to f too. S comes from
 * float lanes (relative error below n 2^-24 <= 1/16 for n <= 2^20); the
 * bound used, E = n 2^-51 S_float, covers 2g with a factor above 1.8, and
 * the comparison asks for 2E of room so that its own rounding cannot
 * matter. A dot that fails (a sum within ~1e-12 relative of a float
 * midpoint, an exact zero from cancelling products, inf or NaN inputs,
 * n > 2^20) is recomputed in the sequential order. */

/* 8 halves as two f32x4 (elements 0..3, 4..7) for finite halves: each
 * sign-extended to 32 bits and shifted left by 13 puts the sign in bit 31
 * and the exponent and mantissa in bits 27..13; bits 30..28 (copies of the
 * sign) cleared, that float is the half times 2^-112, scaled back exactly
 * (subnormal halves too). Halves with exponent 31 (inf, NaN) come out
 * finite and wrong; *big collects every lane's magnitude bits (u16 max) so
 * that the caller recomputes such a dot in the sequential order. */
static inline void h2f8(const uint16_t *p, v128_t *lo, v128_t *hi, v128_t *big) {
  const v128_t h = wasm_v128_load(p);
  const v128_t keep = wasm_i32x4_splat((int32_t)0x8fffffff);
  const v128_t scale = wasm_f32x4_splat(0x1p112f);
  *big = wasm_u16x8_max(*big, wasm_v128_and(h, wasm_i16x8_splat(0x7fff)));
  *lo = wasm_f32x4_mul(wasm_v128_and(wasm_i32x4_shl(wasm_i32x4_extend_low_i16x8(h), 13), keep), scale);
  *hi = wasm_f32x4_mul(wasm_v128_and(wasm_i32x4_shl(wasm_i32x4_extend_high_i16x8(h), 13), keep), scale);
}

/* Whether any lane of big (from h2f8) is an inf or NaN half. */
static inline int h_special(v128_t big) {
  return wasm_v128_any_true(wasm_u16x8_ge(big, wasm_i16x8_splat(0x7c00)));
}

/* One output's partial sums: d0 (products 0, 1 of each 4), d1 (2, 3) in
 * double, a (|products|) in float. */
typedef struct {
  v128_t d0, d1, a;
} f16_acc;

static inline f16_acc f16_acc_zero(void) {
  const f16_acc z = {wasm_f64x2_splat(0.0), wasm_f64x2_splat(0.0), wasm_f32x4_splat(0.0f)};
  return z;
}

static inline void f16_acc_sum(f16_acc *c, v128_t p) {
  c->d0 = wasm_f64x2_add(c->d0, wasm_f64x2_promote_low_f32x4(p));
  c->d1 = wasm_f64x2_add(c->d1, wasm_f64x2_promote_low_f32x4(wasm_i32x4_shuffle(p, p, 2, 3, 2, 3)));
}

static inline void f16_acc_add(f16_acc *c, v128_t p) {
  f16_acc_sum(c, p);
  c->a = wasm_f32x4_add(c->a, wasm_f32x4_abs(p));
}

static inline float hsum_f32x4(v128_t v) {
  return (wasm_f32x4_extract_lane(v, 0) + wasm_f32x4_extract_lane(v, 1)) +
         (wasm_f32x4_extract_lane(v, 2) + wasm_f32x4_extract_lane(v, 3));
}

/* The largest magnitude among the halves whose magnitude bits big holds
 * (u16 max lanes from h2f8), as a float. */
static inline float h_max(v128_t big) {
  v128_t m = wasm_u16x8_max(big, wasm_i32x4_shuffle(big, big, 2, 3, 0, 1));
  m = wasm_u16x8_max(m, wasm_i32x4_shuffle(m, m, 1, 0, 3, 2));
  m = wasm_u16x8_max(m, wasm_i16x8_shuffle(m, m, 1, 0, 3, 2, 5, 4, 7, 6));
  return le_wasm_h2f((uint16_t)wasm_u16x8_extract_lane(m, 0));
}

static float f16_dot_seq(int64_t n, const uint16_t *x, const uint16_t *y) {
  double sum = 0.0;
  for (int64_t e = 0; e < n; e++) sum += (double)(le_wasm_h2f(x[e]) * le_wasm_h2f(y[e]));
  return (float)sum;
}

/* The float of c + elements [i, n) (the tail, < 8), certified as above, or
 * the sequential dot when the certificate fails. a: the float bound of
 * sum |p| over elements [0, i). */
static inline float f16_finish(int64_t n, int64_t i, const uint16_t *x, const uint16_t *y,
                               f16_acc c, float a, int special) {
  if (special) return f16_dot_seq(n, x, y);
  const v128_t d = wasm_f64x2_add(c.d0, c.d1);
  double s = wasm_f64x2_extract_lane(d, 0) + wasm_f64x2_extract_lane(d, 1);
  for (; i < n; i++) {
    const float p = le_wasm_h2f(x[i]) * le_wasm_h2f(y[i]);
    s += (double)p;
    a += __builtin_fabsf(p);
  }
  const float f = (float)s;
  const double e2 = 2.0 * ((double)a * (double)n * 0x1p-51);
  if (a == 0.0f) return f; /* every product +-0: s = +0, as the sequential sum from +0 */
  uint32_t u;
  __builtin_memcpy(&u, &f, 4);
  /* f's neighbours by its bits (f finite and nonzero; 0, inf and NaN go
   * the sequential way): s lies between the two midpoints, whichever sign */
  if (n <= (1 << 20) && (u & 0x7fffffffu) != 0 && (u & 0x7f800000u) != 0x7f800000u) {
    const uint32_t ua = u + 1, ub = u - 1;
    float fa, fb;
    __builtin_memcpy(&fa, &ua, 4);
    __builtin_memcpy(&fb, &ub, 4);
    const double ma = ((double)f + (double)fa) * 0.5, mb = ((double)f + (double)fb) * 0.5;
    if (__builtin_fabs(ma - s) > e2 && __builtin_fabs(s - mb) > e2) return f;
  }
  return f16_dot_seq(n, x, y);
}

/* Four outputs: x + r * sx against y + r * sy, r < 4, where one of the
 * strides is 0 (four rows against one column, or one row against four
 * columns): the shared operand is converted once per 8 elements. The
 * accumulators are named variables so that they stay in wasm locals. S is
 * bounded by max |v_r| * sum |s| (the other operand's largest half, from
 * the u16 max h2f8 keeps anyway, times the shared operand's float abs-sum),
 * which saves an abs and an add per four products and per output. */
#define F16_STEP4(c, xv, yv) f16_acc_add(&(c), wasm_f32x4_mul(xv, yv))
#define F16_SUM4(c, xv, yv) f16_acc_sum(&(c), wasm_f32x4_mul(xv, yv))
static inline __attribute__((always_inline)) void f16_dots4(int64_t n, const uint16_t *x,
                                                            size_t sx, const uint16_t *y,
                                                            size_t sy, float *out, size_t so) {
  f16_acc c0 = f16_acc_zero(), c1 = c0, c2 = c0, c3 = c0;
  v128_t bs = wasm_i16x8_splat(0), b0 = bs, b1 = bs, b2 = bs, b3 = bs;
  v128_t sabs = wasm_f32x4_splat(0.0f);
  const int shared_y = sy == 0;
  const uint16_t *s = shared_y ? y : x; /* shared operand */
  const uint16_t *v = shared_y ? x : y; /* one per output */
  const size_t sv = shared_y ? sx : sy;
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    v128_t sl, sh, l0, h0, l1, h1, l2, h2, l3, h3;
    h2f8(s + i, &sl, &sh, &bs);
    h2f8(v + i, &l0, &h0, &b0);
    h2f8(v + sv + i, &l1, &h1, &b1);
    h2f8(v + 2 * sv + i, &l2, &h2, &b2);
    h2f8(v + 3 * sv + i, &l3, &h3, &b3);
    sabs = wasm_f32x4_add(sabs, wasm_f32x4_add(wasm_f32x4_abs(sl), wasm_f32x4_abs(sh)));
    F16_SUM4(c0, l0, sl);
    F16_SUM4(c1, l1, sl);
    F16_SUM4(c2, l2, sl);
    F16_SUM4(c3, l3, sl);
    F16_SUM4(c0, h0, sh);
    F16_SUM4(c1, h1, sh);
    F16_SUM4(c2, h2, sh);
    F16_SUM4(c3, h3, sh);
  }
  const int ss = h_special(bs);
  const float sa = hsum_f32x4(sabs);
  out[0] = f16_finish(n, i, x, y, c0, h_max(b0) * sa, ss || h_special(b0));
  out[so] = f16_finish(n, i, x + sx, y + sy, c1, h_max(b1) * sa, ss || h_special(b1));
  out[2 * so] = f16_finish(n, i, x + 2 * sx, y + 2 * sy, c2, h_max(b2) * sa, ss || h_special(b2));
  out[3 * so] = f16_finish(n, i, x + 3 * sx, y + 3 * sy, c3, h_max(b3) * sa, ss || h_special(b3));
}

float le_dot_f16_wasm(int64_t n, const uint16_t *x, const uint16_t *y) {
  f16_acc c0 = f16_acc_zero(), c1 = c0;
  v128_t big = wasm_i16x8_splat(0);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    v128_t xl, xh, yl, yh;
    h2f8(x + i, &xl, &xh, &big);
    h2f8(y + i, &yl, &yh, &big);
    F16_STEP4(c0, xl, yl);
    F16_STEP4(c1, xh, yh);
  }
  c0.d0 = wasm_f64x2_add(c0.d0, c1.d0);
  c0.d1 = wasm_f64x2_add(c0.d1, c1.d1);
  c0.a = wasm_f32x4_add(c0.a, c1.a);
  return f16_finish(n, i, x, y, c0, hsum_f32x4(c0.a), h_special(big));
}

static void f16_t41(int64_t n, float *s, size_t bs, const void *x, size_t bx, const void *y,
                    size_t by) {
  f16_dots4(n, x, bx / 2, y, 0, s, 1);
}
static void f16_t11(int64_t n, float *s, size_t bs, const void *x, size_t bx, const void *y,
                    size_t by) {
  *s = le_dot_f16_wasm(n, x, y);
}
static void f16_t44(int64_t n, float *s, size_t bs, const void *x, size_t bx, const void *y,
                    size_t by) {
  for (int c = 0; c < 4; c++)
    f16_dots4(n, x, bx / 2, (const uint16_t *)((const char *)y + c * by), 0, s + c * bs, 1);
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

/* Lanes += sc * p, p eight 16-bit lane sums (|sc| < 128, so sc * p fits 32 bits). */
static inline void lanes_scale(v128_t *l0, v128_t *l1, v128_t p, int32_t sc) {
  const v128_t s = wasm_i16x8_splat((int16_t)sc);
  *l0 = wasm_i32x4_add(*l0, wasm_i32x4_extmul_low_i16x8(p, s));
  *l1 = wasm_i32x4_add(*l1, wasm_i32x4_extmul_high_i16x8(p, s));
}

/* Lanes += sc * (products of 16 elements: a 16-bit lane sum of elements l and l + 8). */
static inline void lanes_add16(v128_t *l0, v128_t *l1, v128_t lo, v128_t hi, int32_t sc) {
  lanes_scale(l0, l1, wasm_i16x8_add(lo, hi), sc); /* |lo + hi| <= 2 * 4096: no overflow */
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

/* dot_q6_k_scalar. The 16 elements at l of groups 4h + k (k = 0..3) share
 * one load of qh (bits 2k..2k+1) and of ql at l and l + 32 (low nibbles for
 * k < 2, high for k >= 2): loaded once, shifted by constants. */
void le_dot_q6_k_wasm(int64_t n, float *s, const void *vx, const void *vy) {
  const le_block_q6_k *x = vx;
  const le_block_q8_k *y = vy;
  v128_t s0 = wasm_f32x4_splat(0.0f), s1 = s0;
  const v128_t m4 = wasm_i8x16_splat(0x0f), m30 = wasm_i8x16_splat(0x30), c32 = wasm_i8x16_splat(32);
  for (int64_t i = 0; i < n / LE_QK_K; i++) {
    const int8_t *sc = x[i].scales;
    v128_t l0 = wasm_i32x4_splat(0), l1 = l0;
    for (int h = 0; h < 2; h++) {
      for (int half = 0; half < 2; half++) { /* elements l .. l + 15 of each group */
        const int l = 16 * half;
        const v128_t qa = wasm_v128_load(x[i].ql + 64 * h + l);
        const v128_t qb = wasm_v128_load(x[i].ql + 64 * h + l + 32);
        const v128_t qh = wasm_v128_load(x[i].qh + 32 * h + l);
        const v128_t lo[4] = {wasm_v128_and(qa, m4), wasm_v128_and(qb, m4), wasm_u8x16_shr(qa, 4),
                              wasm_u8x16_shr(qb, 4)};
        const v128_t hi[4] = {wasm_v128_and(wasm_i8x16_shl(qh, 4), m30),
                              wasm_v128_and(wasm_i8x16_shl(qh, 2), m30), wasm_v128_and(qh, m30),
                              wasm_v128_and(wasm_u8x16_shr(qh, 2), m30)};
        for (int k = 0; k < 4; k++) {
          const int c = 4 * h + k;
          const v128_t code = wasm_i8x16_sub(wasm_v128_or(lo[k], hi[k]), c32);
          v128_t plo, phi;
          PROD16(code, wasm_v128_load(y[i].qs + 32 * c + l), plo, phi);
          lanes_add16(&l0, &l1, plo, phi, sc[2 * c + half]);
        }
      }
    }
    lanes_float(&s0, &s1, l0, l1, le_wasm_h2f(x[i].d) * y[i].d);
  }
  *s = reduce8(0.0f, s0, s1);
}

/* le_summs_k4 (an exact integer sum): sum over g of mins[g] * (bsums[2g] + bsums[2g + 1]). */
static inline int32_t summs_k4(const uint8_t *mins, const le_block_q8_k *y) {
  const v128_t b0 = wasm_i32x4_extadd_pairwise_i16x8(wasm_v128_load(y->bsums));
  const v128_t b1 = wasm_i32x4_extadd_pairwise_i16x8(wasm_v128_load(y->bsums + 8));
  const v128_t m = wasm_u16x8_extend_low_u8x16(wasm_v128_load64_zero(mins));
  const v128_t p = wasm_i32x4_add(wasm_i32x4_mul(b0, wasm_u32x4_extend_low_u16x8(m)),
                                  wasm_i32x4_mul(b1, wasm_u32x4_extend_high_u16x8(m)));
  return wasm_i32x4_extract_lane(p, 0) + wasm_i32x4_extract_lane(p, 1) +
         wasm_i32x4_extract_lane(p, 2) + wasm_i32x4_extract_lane(p, 3);
}

/* The 16-bit lane sums of 32 products of a q4_K group (one scale): codes c0
 * against y[0..15] and c1 against y[16..31]; lane l holds elements l, l + 8,
 * l + 16 and l + 24 (|sum| <= 4 * 15 * 128: no overflow). */
static inline v128_t q4k_group(v128_t c0, v128_t c1, const int8_t *y) {
  const v128_t y0 = wasm_v128_load(y), y1 = wasm_v128_load(y + 16);
  const v128_t a = wasm_i16x8_add(wasm_i16x8_extmul_low_i8x16(c0, y0),
                                  wasm_i16x8_extmul_high_i8x16(c0, y0));
  const v128_t b = wasm_i16x8_add(wasm_i16x8_extmul_low_i8x16(c1, y1),
                                  wasm_i16x8_extmul_high_i8x16(c1, y1));
  return wasm_i16x8_add(a, b);
}

/* dot_q4_k_scalar: a group's 32 products are summed per lane before its
 * scale multiplies them (integers: the same lane values in any order). */
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
    for (int j = 0; j < 4; j++) { /* groups 2j (low nibbles) and 2j + 1 (high) */
      const v128_t b0 = wasm_v128_load(x[i].qs + 32 * j), b1 = wasm_v128_load(x[i].qs + 32 * j + 16);
      const int8_t *yq = y[i].qs + 64 * j;
      lanes_scale(&l0, &l1, q4k_group(wasm_v128_and(b0, m4), wasm_v128_and(b1, m4), yq), sc[2 * j]);
      lanes_scale(&l0, &l1, q4k_group(wasm_u8x16_shr(b0, 4), wasm_u8x16_shr(b1, 4), yq + 32),
                  sc[2 * j + 1]);
    }
    lanes_float(&s0, &s1, l0, l1, le_wasm_h2f(x[i].d) * y[i].d);
    sumf -= (le_wasm_h2f(x[i].dmin) * y[i].d) * (float)summs_k4(m, &y[i]);
  }
  *s = reduce8(sumf, s0, s1);
}

#else
typedef int le_wasm_tiles_unused; /* a translation unit must declare something */
#endif
