/* Q4_0 weights repacked 8 rows at a time (llama.cpp's q4_0_8x8 CPU_REPACK
 * buffer, chosen by ggml_repack_get_optimal_repack_type for any AVX2 CPU and
 * 2-D weights with ne1 % 8 == 0), and mul_mat over them.
 *
 * Layout (LE_FLAG_Q4_0_8X8), per group of 8 rows and block b of 32 elements,
 * 144 bytes: d[8] (the rows' f16 scales, in row order), then qs[128] in four
 * 32-byte chunks of 8-byte pieces, each piece bytes [0, 8) or [8, 16) of one
 * row's qs:
 *   chunk 0: bytes 0-7 of rows 0, 1, 4, 5    chunk 1: bytes 0-7 of rows 2, 3, 6, 7
 *   chunk 2: bytes 8-15 of rows 0, 1, 4, 5   chunk 3: bytes 8-15 of rows 2, 3, 6, 7
 * llama.cpp interleaves the same 8-byte pieces (rows 0-3, then 4-7) and XORs
 * the nibbles with 8; ours keeps the nibbles unsigned (offset 8, as in plain
 * Q4_0) and orders the rows so that one vphaddd of the two chunks' partial
 * sums yields the 8 row sums in row order. Groups follow each other, blocks
 * in order inside a group (group g starts at g * nb * 144).
 *
 * Per output the float order is llama.cpp's gemv/gemm_q4_b32_8x8_q8_0:
 * acc = fma((float)block_isum, d_x * d_y, acc), blocks in order, the scale
 * product rounded first — the order q_q4_0.c's tiles already follow, so
 * results equal the un-repacked path's bit for bit (integer sums are exact
 * however they are formed). */
#include "q_common.h"

#ifndef LE_INLINE
#define LE_INLINE static inline __attribute__((always_inline))
#endif

#define Q4X8_BYTES 144
typedef struct { uint16_t d[8]; uint8_t qs[128]; } le_block_q4_0x8;
_Static_assert(sizeof(le_block_q4_0x8) == Q4X8_BYTES, "q4_0x8 block is 144 bytes");

/* chunk rows: pieces of chunks 0/2 come from rows 0,1,4,5, of 1/3 from 2,3,6,7 */
static const int q4x8_rows[2][4] = {{0, 1, 4, 5}, {2, 3, 6, 7}};

int le_repack_q4_0_8x8(const void *src, void *dst, int64_t ne0, int64_t ne1) {
  if (ne0 <= 0 || ne0 % LE_QK || ne1 <= 0 || ne1 % 8) {
    le_set_error("repack q4_0: shape %lld x %lld is not a multiple of 32 x 8", (long long)ne0,
                 (long long)ne1);
    return -1;
  }
  const int64_t nb = ne0 / LE_QK;
  const le_block_q4_0 *x = src;
  le_block_q4_0x8 *out = dst;
  for (int64_t g = 0; g < ne1 / 8; g++) {
    for (int64_t b = 0; b < nb; b++, out++) {
      for (int r = 0; r < 8; r++) out->d[r] = x[(g * 8 + r) * nb + b].d;
      for (int c = 0; c < 4; c++)
        for (int j = 0; j < 4; j++) {
          const le_block_q4_0 *row = &x[(g * 8 + q4x8_rows[c & 1][j]) * nb + b];
          memcpy(out->qs + c * 32 + j * 8, row->qs + (c >> 1) * 8, 8);
        }
    }
  }
  return 0;
}

/* Portable form (any SIMD level; a repacked weight met at another level than
 * the one it was made for): the same chain per output with fmaf. */
static void q4x8_dot_scalar(int64_t nb, const le_block_q4_0x8 *x, const le_block_q8_0 *y,
                            float *s) {
  float acc[8] = {0};
  for (int64_t b = 0; b < nb; b++) {
    const float dy = le_fp16_to_fp32(y[b].d);
    int32_t isum[8] = {0};
    for (int c = 0; c < 4; c++)
      for (int j = 0; j < 4; j++) {
        const int r = q4x8_rows[c & 1][j], k0 = (c >> 1) * 8; /* bytes k0..k0+7 */
        for (int k = 0; k < 8; k++) {
          const uint8_t q = x[b].qs[c * 32 + j * 8 + k];
          isum[r] += ((q & 0x0f) - 8) * y[b].qs[k0 + k] + ((q >> 4) - 8) * y[b].qs[k0 + k + 16];
        }
      }
    for (int r = 0; r < 8; r++)
      acc[r] = fmaf((float)isum[r], le_fp16_to_fp32(x[b].d[r]) * dy, acc[r]);
  }
  memcpy(s, acc, sizeof acc);
}

#if defined(LE_X86)

/* One column's block: the four 8-byte pieces of y broadcast over the
 * chunks' 4 rows (y[0..7] meets the low nibbles of bytes 0-7, y[16..23]
 * their high nibbles, y[8..15] / y[24..31] those of bytes 8-15), and the
 * offset correction 8 * (y[i] + y[i+1]) in the same int16 pair layout. */
typedef struct { __m256i y0, y1, y2, y3, c; } q4x8_col;

LE_TARGET_AVX2 LE_INLINE q4x8_col q4x8_load_col(const le_block_q8_0 *y) {
  q4x8_col v;
  int64_t p[4];
  memcpy(p, y->qs, 32);
  v.y0 = _mm256_set1_epi64x(p[0]);
  v.y1 = _mm256_set1_epi64x(p[1]);
  v.y2 = _mm256_set1_epi64x(p[2]);
  v.y3 = _mm256_set1_epi64x(p[3]);
  const __m256i e8 = _mm256_set1_epi8(8);
  v.c = _mm256_add_epi16(_mm256_add_epi16(_mm256_maddubs_epi16(e8, v.y0), _mm256_maddubs_epi16(e8, v.y1)),
                         _mm256_add_epi16(_mm256_maddubs_epi16(e8, v.y2), _mm256_maddubs_epi16(e8, v.y3)));
  return v;
}

/* The nibbles of one group-block: lo/hi of chunks 0..3. */
typedef struct { __m256i l0, h0, l1, h1, l2, h2, l3, h3; } q4x8_w;

LE_TARGET_AVX2 LE_INLINE q4x8_w q4x8_load_w(const le_block_q4_0x8 *x) {
  const __m256i m = _mm256_set1_epi8(0x0f);
  const __m256i v0 = _mm256_loadu_si256((const __m256i *)(const void *)(x->qs));
  const __m256i v1 = _mm256_loadu_si256((const __m256i *)(const void *)(x->qs + 32));
  const __m256i v2 = _mm256_loadu_si256((const __m256i *)(const void *)(x->qs + 64));
  const __m256i v3 = _mm256_loadu_si256((const __m256i *)(const void *)(x->qs + 96));
  q4x8_w w;
  w.l0 = _mm256_and_si256(v0, m);
  w.h0 = _mm256_and_si256(_mm256_srli_epi16(v0, 4), m);
  w.l1 = _mm256_and_si256(v1, m);
  w.h1 = _mm256_and_si256(_mm256_srli_epi16(v1, 4), m);
  w.l2 = _mm256_and_si256(v2, m);
  w.h2 = _mm256_and_si256(_mm256_srli_epi16(v2, 4), m);
  w.l3 = _mm256_and_si256(v3, m);
  w.h3 = _mm256_and_si256(_mm256_srli_epi16(v3, 4), m);
  return w;
}

/* The 8 rows' exact block sums, in row order, as floats. Each int16 lane
 * pair stays below 2^15: |sum of 4 maddubs| <= 4 * 2 * 15 * 128 before the
 * correction, <= 4 * 2 * 8 * 128 after. */
LE_TARGET_AVX2 LE_INLINE __m256 q4x8_isum(const q4x8_w *w, const q4x8_col *y) {
  const __m256i one = _mm256_set1_epi16(1);
  __m256i a = _mm256_add_epi16(_mm256_add_epi16(_mm256_maddubs_epi16(w->l0, y->y0),
                                                _mm256_maddubs_epi16(w->h0, y->y2)),
                               _mm256_add_epi16(_mm256_maddubs_epi16(w->l2, y->y1),
                                                _mm256_maddubs_epi16(w->h2, y->y3)));
  __m256i b = _mm256_add_epi16(_mm256_add_epi16(_mm256_maddubs_epi16(w->l1, y->y0),
                                                _mm256_maddubs_epi16(w->h1, y->y2)),
                               _mm256_add_epi16(_mm256_maddubs_epi16(w->l3, y->y1),
                                                _mm256_maddubs_epi16(w->h3, y->y3)));
  a = _mm256_madd_epi16(_mm256_sub_epi16(a, y->c), one); /* rows 0,0,1,1 | 4,4,5,5 */
  b = _mm256_madd_epi16(_mm256_sub_epi16(b, y->c), one); /* rows 2,2,3,3 | 6,6,7,7 */
  return _mm256_cvtepi32_ps(_mm256_hadd_epi32(a, b));   /* rows 0..3 | 4..7 */
}

/* gemv: G groups (1 or 2) of 8 rows, groups gs blocks apart, one column;
 * pf: the G groups' worth of bytes to prefetch meanwhile (NULL: none),
 * G * 144 bytes per block, spread so that few misses are in flight at once. */
LE_TARGET_AVX2 LE_INLINE void q4x8_gemv(const int G, int64_t nb, const le_block_q4_0x8 *x,
                                        int64_t gs, const le_block_q8_0 *y, float *s,
                                        const char *pf) {
  __m256 acc[2] = {_mm256_setzero_ps(), _mm256_setzero_ps()};
  for (int64_t b = 0; b < nb; b++) {
    if (pf) {
      const char *p = pf + b * G * Q4X8_BYTES;
      for (int l = 0; l < G * Q4X8_BYTES; l += 64) _mm_prefetch(p + l, _MM_HINT_T0);
    }
    const q4x8_col col = q4x8_load_col(&y[b]);
    const __m256 dy = _mm256_set1_ps(le_h2f(y[b].d));
#pragma GCC unroll 2
    for (int g = 0; g < G; g++) {
      const le_block_q4_0x8 *xb = &x[g * gs + b];
      const q4x8_w w = q4x8_load_w(xb);
      const __m256 dx = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(const void *)xb->d));
      acc[g] = _mm256_fmadd_ps(q4x8_isum(&w, &col), _mm256_mul_ps(dx, dy), acc[g]);
    }
  }
  for (int g = 0; g < G; g++) _mm256_storeu_ps(s + 8 * g, acc[g]);
}

/* gemm: one group of 8 rows, 4 columns (by bytes apart), outputs bs floats apart. */
LE_TARGET_AVX2 static void q4x8_gemm4(int64_t nb, const le_block_q4_0x8 *x, const char *vy,
                                      size_t by, float *s, size_t bs) {
  __m256 acc[4] = {_mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(),
                   _mm256_setzero_ps()};
  for (int64_t b = 0; b < nb; b++) {
    const q4x8_w w = q4x8_load_w(&x[b]);
    const __m256 dx = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(const void *)x[b].d));
#pragma GCC unroll 4
    for (int c = 0; c < 4; c++) {
      const le_block_q8_0 *y = (const le_block_q8_0 *)(const void *)(vy + c * by) + b;
      const q4x8_col col = q4x8_load_col(y);
      acc[c] = _mm256_fmadd_ps(q4x8_isum(&w, &col), _mm256_mul_ps(dx, _mm256_set1_ps(le_h2f(y->d))),
                               acc[c]);
    }
  }
  for (int c = 0; c < 4; c++) _mm256_storeu_ps(s + c * bs, acc[c]);
}

LE_TARGET_AVX2 static void q4x8_gemv2(int64_t nb, const le_block_q4_0x8 *x, int64_t gs,
                                      const le_block_q8_0 *y, float *s, const char *pf) {
  q4x8_gemv(2, nb, x, gs, y, s, pf);
}
LE_TARGET_AVX2 static void q4x8_gemv1(int64_t nb, const le_block_q4_0x8 *x,
                                      const le_block_q8_0 *y, float *s, const char *pf) {
  q4x8_gemv(1, nb, x, 0, y, s, pf);
}
#endif

#if defined(LE_X86)
/* AVX-512 VNNI gemv over two groups (16 rows), the same sums: vpdpbusd
 * multiplies the unsigned nibbles by y's signed bytes and adds each 4
 * products into an int32 lane exactly, so one 64-byte load covers two
 * chunks and no int16 stage or hadd is needed. Lanes of a group's sum:
 * [r0 r0 r1 r1 r4 r4 r5 r5 | r2 r2 r3 r3 r6 r6 r7 r7] (two lanes per
 * 8-byte piece); the -8 offset enters as the accumulator's start, -8 times
 * the y bytes each lane meets. Integer sums are exact, and the float chain
 * per output is q4x8_gemv's: acc = fma(isum, d_x * d_y, acc). */
#define LE_TARGET_Q4X8_VNNI \
  __attribute__((target("avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")))

/* One column's block for the VNNI kernels: y's four 8-byte pieces broadcast,
 * and the accumulators' start, -8 times the y bytes each lane meets. */
typedef struct { __m512i y0, y1, y2, y3, start; } q4x8_vcol;

LE_TARGET_Q4X8_VNNI LE_INLINE q4x8_vcol q4x8_vnni_col(const le_block_q8_0 *y) {
  const __m512i e8 = _mm512_set1_epi8(8);
  q4x8_vcol v;
  int64_t p[4];
  memcpy(p, y->qs, 32);
  v.y0 = _mm512_set1_epi64(p[0]);
  v.y1 = _mm512_set1_epi64(p[1]);
  v.y2 = _mm512_set1_epi64(p[2]);
  v.y3 = _mm512_set1_epi64(p[3]);
  __m512i c = _mm512_dpbusd_epi32(_mm512_setzero_si512(), e8, v.y0);
  c = _mm512_dpbusd_epi32(c, e8, v.y1);
  c = _mm512_dpbusd_epi32(c, e8, v.y2);
  c = _mm512_dpbusd_epi32(c, e8, v.y3);
  v.start = _mm512_sub_epi32(_mm512_setzero_si512(), c);
  return v;
}

/* One group-block's nibbles, unpacked once: chunks 0|1 and 2|3, low and high. */
typedef struct { __m512i l01, h01, l23, h23; } q4x8_vw;

LE_TARGET_Q4X8_VNNI LE_INLINE q4x8_vw q4x8_vnni_load(const le_block_q4_0x8 *x) {
  const __m512i m = _mm512_set1_epi8(0x0f);
  const __m512i v01 = _mm512_loadu_si512((const void *)x->qs);
  const __m512i v23 = _mm512_loadu_si512((const void *)(x->qs + 64));
  q4x8_vw w;
  w.l01 = _mm512_and_si512(v01, m);
  w.h01 = _mm512_and_si512(_mm512_srli_epi16(v01, 4), m);
  w.l23 = _mm512_and_si512(v23, m);
  w.h23 = _mm512_and_si512(_mm512_srli_epi16(v23, 4), m);
  return w;
}

/* A group's block sums against one column, two lanes per row (see above). */
LE_TARGET_Q4X8_VNNI LE_INLINE __m512i q4x8_vnni_sum(const q4x8_vw *w, const q4x8_vcol *c) {
  __m512i a = _mm512_dpbusd_epi32(c->start, w->l01, c->y0);
  __m512i b = _mm512_dpbusd_epi32(_mm512_setzero_si512(), w->l23, c->y1);
  a = _mm512_dpbusd_epi32(a, w->h01, c->y2);
  b = _mm512_dpbusd_epi32(b, w->h23, c->y3);
  return _mm512_add_epi32(a, b);
}

/* Two groups' lane pairs (A: rows 0-7, B: rows 8-15) added into the 16
 * row sums in row order, as floats (exact: small integers). */
LE_TARGET_Q4X8_VNNI LE_INLINE __m512 q4x8_vnni_rows(__m512i A, __m512i B) {
  const __m512i even = _mm512_setr_epi32(0, 2, 8, 10, 4, 6, 12, 14, 16, 18, 24, 26, 20, 22, 28, 30);
  const __m512i odd = _mm512_add_epi32(even, _mm512_set1_epi32(1));
  return _mm512_cvtepi32_ps(_mm512_add_epi32(_mm512_permutex2var_epi32(A, even, B),
                                             _mm512_permutex2var_epi32(A, odd, B)));
}

/* The two groups' 16 row scales d_x, as floats. */
LE_TARGET_Q4X8_VNNI LE_INLINE __m512 q4x8_vnni_dx(const le_block_q4_0x8 *x0,
                                                 const le_block_q4_0x8 *x1) {
  return _mm512_cvtph_ps(_mm256_set_m128i(_mm_loadu_si128((const __m128i *)(const void *)x1->d),
                                          _mm_loadu_si128((const __m128i *)(const void *)x0->d)));
}

LE_TARGET_Q4X8_VNNI static void q4x8_gemv2_vnni(int64_t nb, const le_block_q4_0x8 *x, int64_t gs,
                                                const le_block_q8_0 *y, float *s,
                                                const char *pf) {
  __m512 acc = _mm512_setzero_ps();
  for (int64_t b = 0; b < nb; b++) {
    /* Into L2, not L1: 32 rows ahead is 36 KiB for K = 2048 (more for
     * ffn_down), past L1, so T0 evicted the lines in use (Zen 4, 22 x 7
     * 1.1B matrices from memory: 1 thread 18.8 -> 24.0 GB/s, 2 threads
     * ~25 -> ~27). */
    if (pf) {
      const char *p = pf + b * 2 * Q4X8_BYTES;
      for (int l = 0; l < 2 * Q4X8_BYTES; l += 64) _mm_prefetch(p + l, _MM_HINT_T1);
    }
    const q4x8_vcol col = q4x8_vnni_col(&y[b]);
    const q4x8_vw w0 = q4x8_vnni_load(&x[b]), w1 = q4x8_vnni_load(&x[gs + b]);
    const __m512 dxy = _mm512_mul_ps(q4x8_vnni_dx(&x[b], &x[gs + b]), _mm512_set1_ps(le_h2f(y[b].d)));
    acc = _mm512_fmadd_ps(q4x8_vnni_rows(q4x8_vnni_sum(&w0, &col), q4x8_vnni_sum(&w1, &col)), dxy,
                          acc);
  }
  _mm512_storeu_ps(s, acc);
}

/* gemm: two groups (16 rows, gs blocks apart) against 4 columns (by bytes
 * apart), outputs bs floats apart; per column the gemv's sums and chain,
 * the weights unpacked once for the 4. */
LE_TARGET_Q4X8_VNNI static void q4x8_gemm4x2_vnni(int64_t nb, const le_block_q4_0x8 *x,
                                                  int64_t gs, const char *vy, size_t by,
                                                  float *s, size_t bs) {
  __m512 acc[4] = {_mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps(),
                   _mm512_setzero_ps()};
  for (int64_t b = 0; b < nb; b++) {
    const q4x8_vw w0 = q4x8_vnni_load(&x[b]), w1 = q4x8_vnni_load(&x[gs + b]);
    const __m512 dx = q4x8_vnni_dx(&x[b], &x[gs + b]);
#pragma GCC unroll 4
    for (int c = 0; c < 4; c++) {
      const le_block_q8_0 *y = (const le_block_q8_0 *)(const void *)(vy + c * by) + b;
      const q4x8_vcol col = q4x8_vnni_col(y);
      acc[c] = _mm512_fmadd_ps(q4x8_vnni_rows(q4x8_vnni_sum(&w0, &col), q4x8_vnni_sum(&w1, &col)),
                               _mm512_mul_ps(dx, _mm512_set1_ps(le_h2f(y->d))), acc[c]);
    }
  }
  for (int c = 0; c < 4; c++) _mm512_storeu_ps(s + c * bs, acc[c]);
}
#endif

/* Distance of the matrix-vector prefetch, in rows (mul_mat.c's PF_ROWS). */
#define LE_REPACK_PF_ROWS 32

/* Rows [ir0, ir1) (multiples of 8) of a repacked weight against ne11 q8_0
 * columns (by bytes apart), outputs dst[c * bs + r]. Columns in full groups
 * of 4 take the gemm kernel, the rest the gemv one, as llama.cpp splits
 * them; the chain per output is the same in both. */
void le_q4_0x8_rows(int64_t K, const void *vx, int64_t ir0, int64_t ir1, int64_t M,
                    const char *vy, size_t by, int64_t ne11, float *dst, size_t bs) {
  const int64_t nb = K / LE_QK;
  const le_block_q4_0x8 *x = vx;
#if defined(LE_X86)
  if (le_simd() == LE_SIMD_AVX2 || le_simd() == LE_SIMD_AVX512) {
    const int64_t n4 = ne11 >= 4 ? ne11 - ne11 % 4 : 0;
    const int vnni = le_simd() == LE_SIMD_AVX512 && le_cpu_vnni();
    int64_t ig = ir0;
    if (vnni)
      for (; n4 && ig + 16 <= ir1; ig += 16)
        for (int64_t c = 0; c < n4; c += 4)
          q4x8_gemm4x2_vnni(nb, x + (ig / 8) * nb, nb, vy + c * by, by, dst + c * bs + ig, bs);
    for (int64_t ir = ig; ir < ir1; ir += 8) {
      const le_block_q4_0x8 *xg = x + (ir / 8) * nb;
      for (int64_t c = 0; c < n4; c += 4) q4x8_gemm4(nb, xg, vy + c * by, by, dst + c * bs + ir, bs);
    }
    for (int64_t c = n4; c < ne11; c++) {
      const le_block_q8_0 *y = (const le_block_q8_0 *)(const void *)(vy + c * by);
      int64_t ir = ir0;
      /* Matrix-vector products stream the weights once: prefetch the rows
       * LE_REPACK_PF_ROWS ahead (one linear range: groups are contiguous)
       * while these are computed, a few lines per block. A group is only
       * 3.4 KiB for K = 768, too short for the hardware prefetcher, and a
       * burst of prefetches per call measured slower than none. */
      for (; ir + 16 <= ir1; ir += 16) {
        const char *pf = ne11 == 1 && ir + LE_REPACK_PF_ROWS + 16 <= M
                             ? (const char *)(x + ((ir + LE_REPACK_PF_ROWS) / 8) * nb) : NULL;
        if (vnni) q4x8_gemv2_vnni(nb, x + (ir / 8) * nb, nb, y, dst + c * bs + ir, pf);
        else q4x8_gemv2(nb, x + (ir / 8) * nb, nb, y, dst + c * bs + ir, pf);
      }
      for (; ir < ir1; ir += 8) {
        const char *pf = ne11 == 1 && ir + LE_REPACK_PF_ROWS + 8 <= M
                             ? (const char *)(x + ((ir + LE_REPACK_PF_ROWS) / 8) * nb) : NULL;
        q4x8_gemv1(nb, x + (ir / 8) * nb, y, dst + c * bs + ir, pf);
      }
    }
    return;
  }
#endif
  for (int64_t c = 0; c < ne11; c++)
    for (int64_t ir = ir0; ir < ir1; ir += 8)
      q4x8_dot_scalar(nb, x + (ir / 8) * nb,
                      (const le_block_q8_0 *)(const void *)(vy + c * by), dst + c * bs + ir);
}

/* ---- ABI (llm_edge.h) ---- */

int32_t le_repack_flag(int32_t type, int64_t ne0, int64_t ne1) {
  /* llama.cpp repacks Q4_0 and Q4_K on every AVX2 CPU, the AVX-512 builds
   * included (ggml_cpu_has_avx2); the scalar level (x64) repacks nothing. */
  if ((le_simd() != LE_SIMD_AVX2 && le_simd() != LE_SIMD_AVX512) || ne0 <= 0 || ne1 <= 0 ||
      ne1 % 8)
    return 0;
  if (type == LE_TYPE_Q4_0 && ne0 % LE_QK == 0) return LE_FLAG_Q4_0_8X8;
  if (type == LE_TYPE_Q4_K && ne0 % LE_QK_K == 0) return LE_FLAG_Q4_K_8X8;
  return 0;
}

int32_t le_repack_flag_fast(int32_t type, int64_t ne0, int64_t ne1) {
  if (type == LE_TYPE_Q8_0 && le_q8_0x16_wanted() && le_repack_q8_0_16x4_size(ne0, ne1) >= 0)
    return LE_FLAG_Q8_0_16X4;
  return le_repack_flag(type, ne0, ne1);
}

int64_t le_repack_size(int32_t flag, int32_t type, int64_t ne0, int64_t ne1) {
  if (flag == LE_FLAG_Q8_0_16X4 && type == LE_TYPE_Q8_0) return le_repack_q8_0_16x4_size(ne0, ne1);
  if (ne0 <= 0 || ne1 <= 0 || ne1 % 8) return -1;
  if (flag == LE_FLAG_Q4_0_8X8 && type == LE_TYPE_Q4_0 && ne0 % LE_QK == 0)
    return ne0 / LE_QK * ne1 * (int64_t)sizeof(le_block_q4_0);
  if (flag == LE_FLAG_Q4_K_8X8 && type == LE_TYPE_Q4_K && ne0 % LE_QK_K == 0)
    return le_repack_q4_k_8x8_size(ne0, ne1);
  return -1;
}

int32_t le_repack(int32_t flag, int32_t type, const void *src, void *dst, uint64_t dst_size,
                  int64_t ne0, int64_t ne1) {
  const int64_t need = le_repack_size(flag, type, ne0, ne1);
  if (need >= 0 && dst_size < (uint64_t)need) {
    le_set_error("repack: %llu bytes for a layout of %lld", (unsigned long long)dst_size,
                 (long long)need);
    return -1;
  }
  if (flag == LE_FLAG_Q4_0_8X8 && type == LE_TYPE_Q4_0) return le_repack_q4_0_8x8(src, dst, ne0, ne1);
  if (flag == LE_FLAG_Q4_K_8X8 && type == LE_TYPE_Q4_K) return le_repack_q4_k_8x8(src, dst, ne0, ne1);
  if (flag == LE_FLAG_Q8_0_16X4 && type == LE_TYPE_Q8_0) return le_repack_q8_0_16x4(src, dst, ne0, ne1);
  le_set_error("repack: no layout %d for type %d", flag, type);
  return -1;
}

void le_repacked_rows(int32_t flag, int64_t K, const void *x, int64_t ir0, int64_t ir1,
                      int64_t M, const char *y, size_t by, int64_t ne11, const int32_t *col,
                      float *dst, size_t bs) {
  if (flag == LE_FLAG_Q8_0_16X4) le_q8_0x16_rows(K, x, ir0, ir1, y, by, ne11, col, dst, bs);
  else if (flag == LE_FLAG_Q4_K_8X8) le_q4_kx8_rows(K, x, ir0, ir1, M, y, by, ne11, dst, bs);
  else le_q4_0x8_rows(K, x, ir0, ir1, M, y, by, ne11, dst, bs);
}

/* What mul_mat needs of a flagged src0 (TypeScript checks the same before it
 * sets the flag): a 2-D weight of whole row groups whose strides are those
 * of the plain contiguous rows, and contiguous f32 output rows. */
int le_repacked_check(const le_node *n) {
  const le_tensor *a = &n->src[0], *d = &n->dst;
  const le_type_traits *t = le_traits(a->type);
  if (!t || le_repack_size(a->flags, a->type, a->ne[0], a->ne[1]) < 0 || a->ne[2] != 1 ||
      a->ne[3] != 1 || a->nb[0] != (int64_t)t->size ||
      a->nb[1] != a->ne[0] / t->blck * (int64_t)t->size || d->type != LE_TYPE_F32 ||
      d->nb[0] != 4 || d->nb[1] % 4 || n->src[1].ne[2] != 1 || n->src[1].ne[3] != 1) {
    le_set_error("mul_mat: repacked src0 (flags %d) with an unsupported shape or layout", a->flags);
    return -1;
  }
  return 0;
}
