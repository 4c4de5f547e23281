/* Q4_K weights repacked 8 rows at a time (llama.cpp's q4_K_8x8 CPU_REPACK
 * buffer: any AVX2 CPU, 2-D weights with ne1 % 8 == 0), and mul_mat over them.
 *
 * Layout (LE_FLAG_Q4_K_8X8), per group of 8 rows and super-block of 256
 * elements, 1184 bytes (32 more than the 8 plain blocks: the 6-bit scales
 * are stored decoded):
 *   d[8], dmin[8]  the rows' f16 super-block scales, in row order
 *   sc[8][8]       sub-block scales [sub-block][row] (le_scale_min_k4)
 *   m[8][8]        sub-block mins   [sub-block][row]
 *   qs[4][256]     per 64-element chunk p (plain qs[32p, 32p+32): low nibbles
 *                  sub-block 2p, high nibbles 2p+1), 8-byte pieces j = 0..3
 *                  (bytes 8j..8j+7) of rows 0,1,4,5 then 2,3,6,7, 32 bytes each:
 *                  qs[p][(2j + h) * 32 + 8i] = row R[h][i] piece j
 * (the row order of repack.c: one vphaddd yields the 8 row sums in order).
 *
 * Per output the float order is llama.cpp's gemv/gemm_q4_K_8x8_q8_K: two
 * chains, acc = fma(isum, d_x * d_y, acc) and accm = fma(msum, dmin_x * d_y,
 * accm), once per super-block in the gemv (one column, and the ne11 % 4
 * leftovers) and once per 64-element chunk in the gemm (columns in groups of
 * 4), result acc - accm: q_q4_k.c's q4_k_repack_dot, bit for bit. */
#include "q_common.h"

#ifndef LE_INLINE
#define LE_INLINE static inline __attribute__((always_inline))
#endif

#define Q4KX8_BYTES 1184
typedef struct {
  uint16_t d[8], dmin[8];
  uint8_t sc[8][8], m[8][8];
  uint8_t qs[4][256];
} le_block_q4_kx8;
_Static_assert(sizeof(le_block_q4_kx8) == Q4KX8_BYTES, "q4_Kx8 block is 1184 bytes");

static const int q4kx8_rows[2][4] = {{0, 1, 4, 5}, {2, 3, 6, 7}};

int64_t le_repack_q4_k_8x8_size(int64_t ne0, int64_t ne1) {
  return ne0 / LE_QK_K * (ne1 / 8) * Q4KX8_BYTES;
}

int le_repack_q4_k_8x8(const void *src, void *dst, int64_t ne0, int64_t ne1) {
  if (ne0 <= 0 || ne0 % LE_QK_K || ne1 <= 0 || ne1 % 8) {
    le_set_error("repack q4_K: shape %lld x %lld is not a multiple of 256 x 8", (long long)ne0,
                 (long long)ne1);
    return -1;
  }
  const int64_t nb = ne0 / LE_QK_K;
  const le_block_q4_k *x = src;
  le_block_q4_kx8 *out = dst;
  for (int64_t g = 0; g < ne1 / 8; g++) {
    for (int64_t b = 0; b < nb; b++, out++) {
      for (int r = 0; r < 8; r++) {
        const le_block_q4_k *row = &x[(g * 8 + r) * nb + b];
        out->d[r] = row->d;
        out->dmin[r] = row->dmin;
        for (int j = 0; j < 8; j++) le_scale_min_k4(j, row->scales, &out->sc[j][r], &out->m[j][r]);
      }
      for (int p = 0; p < 4; p++)
        for (int j = 0; j < 4; j++)
          for (int h = 0; h < 2; h++)
            for (int i = 0; i < 4; i++)
              memcpy(out->qs[p] + (2 * j + h) * 32 + 8 * i,
                     x[(g * 8 + q4kx8_rows[h][i]) * nb + b].qs + 32 * p + 8 * j, 8);
    }
  }
  return 0;
}

/* Portable form (a repacked weight met at another SIMD level). */
static void q4kx8_col_scalar(int per_chunk, int64_t nb, const le_block_q4_kx8 *x,
                             const le_block_q8_k *y, float *s) {
  float acc[8] = {0}, accm[8] = {0};
  for (int64_t b = 0; b < nb; b++) {
    int32_t isb[8] = {0}, msb[8] = {0};
    for (int p = 0; p < 4; p++) {
      int32_t lo[8] = {0}, hi[8] = {0};
      for (int j = 0; j < 4; j++)
        for (int h = 0; h < 2; h++)
          for (int i = 0; i < 4; i++) {
            const int r = q4kx8_rows[h][i];
            const uint8_t *q = x[b].qs[p] + (2 * j + h) * 32 + 8 * i;
            for (int k = 0; k < 8; k++) {
              lo[r] += (q[k] & 0x0f) * y[b].qs[64 * p + 8 * j + k];
              hi[r] += (q[k] >> 4) * y[b].qs[64 * p + 32 + 8 * j + k];
            }
          }
      const int32_t ylo = y[b].bsums[4 * p] + y[b].bsums[4 * p + 1];
      const int32_t yhi = y[b].bsums[4 * p + 2] + y[b].bsums[4 * p + 3];
      for (int r = 0; r < 8; r++) {
        const int32_t ip = lo[r] * x[b].sc[2 * p][r] + hi[r] * x[b].sc[2 * p + 1][r];
        const int32_t mp = x[b].m[2 * p][r] * ylo + x[b].m[2 * p + 1][r] * yhi;
        if (per_chunk) {
          acc[r] = fmaf((float)ip, le_fp16_to_fp32(x[b].d[r]) * y[b].d, acc[r]);
          accm[r] = fmaf((float)mp, le_fp16_to_fp32(x[b].dmin[r]) * y[b].d, accm[r]);
        } else {
          isb[r] += ip;
          msb[r] += mp;
        }
      }
    }
    if (!per_chunk)
      for (int r = 0; r < 8; r++) {
        acc[r] = fmaf((float)isb[r], le_fp16_to_fp32(x[b].d[r]) * y[b].d, acc[r]);
        accm[r] = fmaf((float)msb[r], le_fp16_to_fp32(x[b].dmin[r]) * y[b].d, accm[r]);
      }
  }
  for (int r = 0; r < 8; r++) s[r] = acc[r] - accm[r];
}

#if defined(LE_X86)
/* The chunk's sums: lo/hi (the rows' low- and high-nibble sums, row order)
 * times the sub-block scales, and the mins times y's block sums. */
LE_TARGET_AVX2 LE_INLINE void q4kx8_scale(const le_block_q4_kx8 *x, int p, const int16_t *bsums,
                                          __m256i lo, __m256i hi, __m256i *ip, __m256i *mp) {
  const __m256i s0 = _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)(const void *)x->sc[2 * p]));
  const __m256i s1 = _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)(const void *)x->sc[2 * p + 1]));
  const __m256i m0 = _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)(const void *)x->m[2 * p]));
  const __m256i m1 = _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)(const void *)x->m[2 * p + 1]));
  *ip = _mm256_add_epi32(_mm256_mullo_epi32(lo, s0), _mm256_mullo_epi32(hi, s1));
  *mp = _mm256_add_epi32(
      _mm256_mullo_epi32(m0, _mm256_set1_epi32(bsums[4 * p] + bsums[4 * p + 1])),
      _mm256_mullo_epi32(m1, _mm256_set1_epi32(bsums[4 * p + 2] + bsums[4 * p + 3])));
}

/* One 64-element chunk of 8 rows against one column: the rows' exact
 * integer sums for the scale chain (ip) and the min chain (mp). Each int16
 * lane sums 4 maddubs of unsigned nibbles (<= 4 * 2 * 15 * 128 < 2^15). */
LE_TARGET_AVX2 LE_INLINE void q4kx8_chunk(const le_block_q4_kx8 *x, int p, const int8_t *yq,
                                          const int16_t *bsums, __m256i *ip, __m256i *mp) {
  const __m256i m4 = _mm256_set1_epi8(0x0f), one = _mm256_set1_epi16(1);
  __m256i la = _mm256_setzero_si256(), lb = la, ha = la, hb = la;
#pragma GCC unroll 4
  for (int j = 0; j < 4; j++) {
    int64_t yl, yh;
    memcpy(&yl, yq + 64 * p + 8 * j, 8);
    memcpy(&yh, yq + 64 * p + 32 + 8 * j, 8);
    const __m256i vl = _mm256_set1_epi64x(yl), vh = _mm256_set1_epi64x(yh);
    const __m256i a = _mm256_loadu_si256((const __m256i *)(const void *)(x->qs[p] + 64 * j));
    const __m256i b = _mm256_loadu_si256((const __m256i *)(const void *)(x->qs[p] + 64 * j + 32));
    la = _mm256_add_epi16(la, _mm256_maddubs_epi16(_mm256_and_si256(a, m4), vl));
    lb = _mm256_add_epi16(lb, _mm256_maddubs_epi16(_mm256_and_si256(b, m4), vl));
    ha = _mm256_add_epi16(ha, _mm256_maddubs_epi16(_mm256_and_si256(_mm256_srli_epi16(a, 4), m4), vh));
    hb = _mm256_add_epi16(hb, _mm256_maddubs_epi16(_mm256_and_si256(_mm256_srli_epi16(b, 4), m4), vh));
  }
  const __m256i lo = _mm256_hadd_epi32(_mm256_madd_epi16(la, one), _mm256_madd_epi16(lb, one));
  const __m256i hi = _mm256_hadd_epi32(_mm256_madd_epi16(ha, one), _mm256_madd_epi16(hb, one));
  q4kx8_scale(x, p, bsums, lo, hi, ip, mp);
}


/* 8 rows (one group), one column: gemv form (per_chunk 0) or gemm form;
 * pf: a group's worth of bytes to prefetch meanwhile (NULL: none), a few
 * lines per chunk, into the cache level HINT (see repack.c). */
#define Q4KX8_COL_BODY(CHUNK, HINT)                                                                \
  __m256 acc = _mm256_setzero_ps(), accm = _mm256_setzero_ps();                                    \
  for (int64_t b = 0; b < nb; b++) {                                                               \
    const __m256 dy = _mm256_set1_ps(y[b].d);                                                      \
    const __m256 d = _mm256_mul_ps(_mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(const void *)x[b].d)), dy);\
    const __m256 dm = _mm256_mul_ps(_mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(const void *)x[b].dmin)), dy);\
    __m256i isb = _mm256_setzero_si256(), msb = isb;                                               \
_Pragma("GCC unroll 4")                                                                               \
    for (int p = 0; p < 4; p++) {                                                                  \
      if (pf)                                                                                      \
        for (int l = 0; l < Q4KX8_BYTES / 4; l += 64)                                              \
          _mm_prefetch(pf + b * Q4KX8_BYTES + p * (Q4KX8_BYTES / 4) + l, HINT);                    \
      __m256i ip, mp;                                                                              \
      CHUNK(&x[b], p, y[b].qs, y[b].bsums, &ip, &mp);                                              \
      if (per_chunk) {                                                                             \
        acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(ip), d, acc);                                     \
        accm = _mm256_fmadd_ps(_mm256_cvtepi32_ps(mp), dm, accm);                                  \
      } else {                                                                                     \
        isb = _mm256_add_epi32(isb, ip);                                                           \
        msb = _mm256_add_epi32(msb, mp);                                                           \
      }                                                                                            \
    }                                                                                              \
    if (!per_chunk) {                                                                              \
      acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isb), d, acc);                                      \
      accm = _mm256_fmadd_ps(_mm256_cvtepi32_ps(msb), dm, accm);                                   \
    }                                                                                              \
  }                                                                                                \
  _mm256_storeu_ps(s, _mm256_sub_ps(acc, accm));                                                   

LE_TARGET_AVX2 LE_INLINE void q4kx8_col(const int per_chunk, int64_t nb, const le_block_q4_kx8 *x,
                                        const le_block_q8_k *y, float *s, const char *pf) {
  Q4KX8_COL_BODY(q4kx8_chunk, _MM_HINT_T0)
}

/* AVX-512 VNNI: the same sums (exact integers) with vpdpbusd straight into
 * int32 lanes, the two 32-byte halves of a piece pair in one register:
 * [rows 0,0,1,1,4,4,5,5 | 2,2,3,3,6,6,7,7], halves added pairwise as the
 * AVX2 form's hadd does. */
#define LE_TARGET_Q4KX8_VNNI \
  __attribute__((target("avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")))

LE_TARGET_Q4KX8_VNNI LE_INLINE __m256i q4kx8_pairs(__m512i v) {
  return _mm256_hadd_epi32(_mm512_castsi512_si256(v), _mm512_extracti64x4_epi64(v, 1));
}

LE_TARGET_Q4KX8_VNNI LE_INLINE void q4kx8_chunk_vnni(const le_block_q4_kx8 *x, int p,
                                                     const int8_t *yq, const int16_t *bsums,
                                                     __m256i *ip, __m256i *mp) {
  const __m512i m4 = _mm512_set1_epi8(0x0f);
  __m512i lo = _mm512_setzero_si512(), hi = lo;
#pragma GCC unroll 4
  for (int j = 0; j < 4; j++) {
    int64_t yl, yh;
    memcpy(&yl, yq + 64 * p + 8 * j, 8);
    memcpy(&yh, yq + 64 * p + 32 + 8 * j, 8);
    const __m512i v = _mm512_loadu_si512((const void *)(x->qs[p] + 64 * j));
    lo = _mm512_dpbusd_epi32(lo, _mm512_and_si512(v, m4), _mm512_set1_epi64(yl));
    hi = _mm512_dpbusd_epi32(hi, _mm512_and_si512(_mm512_srli_epi16(v, 4), m4), _mm512_set1_epi64(yh));
  }
  q4kx8_scale(x, p, bsums, q4kx8_pairs(lo), q4kx8_pairs(hi), ip, mp);
}

LE_TARGET_Q4KX8_VNNI static void q4kx8_gemv_vnni(int64_t nb, const le_block_q4_kx8 *x,
                                                 const le_block_q8_k *y, float *s, const char *pf) {
  const int per_chunk = 0;
  Q4KX8_COL_BODY(q4kx8_chunk_vnni, _MM_HINT_T1) /* L2: 32 rows ahead is past L1 (repack.c) */
}

/* gemm form, one group against 4 columns (by bytes apart, outputs bs floats
 * apart): each piece's nibbles unpacked once for the 4 columns; per column
 * the chain of q4kx8_col(1, ...). */
LE_TARGET_Q4KX8_VNNI static void q4kx8_gemm4_vnni(int64_t nb, const le_block_q4_kx8 *x,
                                                  const char *vy, size_t by, float *s, size_t bs) {
  const __m512i m4 = _mm512_set1_epi8(0x0f);
  __m256 acc[4], accm[4];
  for (int c = 0; c < 4; c++) acc[c] = accm[c] = _mm256_setzero_ps();
  for (int64_t b = 0; b < nb; b++) {
    const le_block_q8_k *y[4];
    __m256 d[4], dm[4];
    const __m256 dx = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(const void *)x[b].d));
    const __m256 dmx = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(const void *)x[b].dmin));
#pragma GCC unroll 4
    for (int c = 0; c < 4; c++) {
      y[c] = (const le_block_q8_k *)(const void *)(vy + c * by) + b;
      d[c] = _mm256_mul_ps(dx, _mm256_set1_ps(y[c]->d));
      dm[c] = _mm256_mul_ps(dmx, _mm256_set1_ps(y[c]->d));
    }
    for (int p = 0; p < 4; p++) {
      __m512i lo[4], hi[4];
#pragma GCC unroll 4
      for (int c = 0; c < 4; c++) lo[c] = hi[c] = _mm512_setzero_si512();
#pragma GCC unroll 4
      for (int j = 0; j < 4; j++) {
        const __m512i v = _mm512_loadu_si512((const void *)(x[b].qs[p] + 64 * j));
        const __m512i vl = _mm512_and_si512(v, m4), vh = _mm512_and_si512(_mm512_srli_epi16(v, 4), m4);
#pragma GCC unroll 4
        for (int c = 0; c < 4; c++) {
          int64_t yl, yh;
          memcpy(&yl, y[c]->qs + 64 * p + 8 * j, 8);
          memcpy(&yh, y[c]->qs + 64 * p + 32 + 8 * j, 8);
          lo[c] = _mm512_dpbusd_epi32(lo[c], vl, _mm512_set1_epi64(yl));
          hi[c] = _mm512_dpbusd_epi32(hi[c], vh, _mm512_set1_epi64(yh));
        }
      }
#pragma GCC unroll 4
      for (int c = 0; c < 4; c++) {
        __m256i ip, mp;
        q4kx8_scale(&x[b], p, y[c]->bsums, q4kx8_pairs(lo[c]), q4kx8_pairs(hi[c]), &ip, &mp);
        acc[c] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(ip), d[c], acc[c]);
        accm[c] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(mp), dm[c], accm[c]);
      }
    }
  }
  for (int c = 0; c < 4; c++) _mm256_storeu_ps(s + c * bs, _mm256_sub_ps(acc[c], accm[c]));
}

LE_TARGET_AVX2 static void q4kx8_gemv(int64_t nb, const le_block_q4_kx8 *x,
                                      const le_block_q8_k *y, float *s, const char *pf) {
  q4kx8_col(0, nb, x, y, s, pf);
}
LE_TARGET_AVX2 static void q4kx8_gemm(int64_t nb, const le_block_q4_kx8 *x,
                                      const le_block_q8_k *y, float *s) {
  q4kx8_col(1, nb, x, y, s, NULL);
}
#endif

/* Rows [ir0, ir1) (multiples of 8) of a repacked Q4_K weight against ne11
 * q8_K columns (by bytes apart), outputs dst[c * bs + r]: full groups of 4
 * columns in the gemm form, the rest in the gemv form, as llama.cpp. */
void le_q4_kx8_rows(int64_t K, const void *vx, int64_t ir0, int64_t ir1, int64_t M,
                    const char *vy, size_t by, int64_t ne11, float *dst, size_t bs) {
  const int64_t nb = K / LE_QK_K;
  const le_block_q4_kx8 *x = vx;
  const int64_t n4 = ne11 >= 4 ? ne11 - ne11 % 4 : 0;
#if defined(LE_X86)
  const int vnni = le_simd() == LE_SIMD_AVX512 && le_cpu_vnni();
#endif
  for (int64_t ir = ir0; ir < ir1; ir += 8) {
    const le_block_q4_kx8 *xg = x + (ir / 8) * nb;
    /* matrix-vector: the group 32 rows ahead, while this one is computed */
    const char *pf = ne11 == 1 && ir + 40 <= M ? (const char *)(x + ((ir + 32) / 8) * nb) : NULL;
    (void)pf; /* x86 only */
    for (int64_t c = 0; c < ne11; c++) {
      const le_block_q8_k *y = (const le_block_q8_k *)(const void *)(vy + c * by);
      float *o = dst + c * bs + ir;
#if defined(LE_X86)
      if (vnni) {
        if (c < n4) {
          if (c % 4 == 0) q4kx8_gemm4_vnni(nb, xg, vy + c * by, by, o, bs);
        } else {
          q4kx8_gemv_vnni(nb, xg, y, o, pf);
        }
        continue;
      }
      if (le_simd() == LE_SIMD_AVX2 || le_simd() == LE_SIMD_AVX512) {
        if (c < n4) q4kx8_gemm(nb, xg, y, o);
        else q4kx8_gemv(nb, xg, y, o, pf);
        continue;
      }
#endif
      q4kx8_col_scalar(c < n4, nb, xg, y, o);
    }
  }
}
