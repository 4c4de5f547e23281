/* FLASH_ATTN_EXT at f32 precision (GGML_PREC_F32) over a Q8_0 cache, at
 * AVX-512 with VNNI: flash_attn_f32.c's kernel with int8 dot products, for
 * a decode step and (ggml having no tiled path over Q8_0) a prompt's rows,
 * one at a time over the cells each one's mask leaves (flash_attn.c's
 * fa32_rows). ggml quantizes the query to Q8_0 for a Q8_0 K (its
 * vec_dot type) and so does this kernel, with ggml's own quantizer; the
 * rest is flash_attn_f32.c's order (kernels/PARITY.md section 32):
 *
 * - the kq dots: 16 cells of a K head transposed once at 4-byte grain, so
 *   that one vpdpbusd takes 4 elements of 16 cells against 4 of a query
 *   head, shared by every head of the group; per block, the integer sum
 *   times the two scales, added in f32 (ggml: the same products, its own
 *   order of adding them);
 * - the softmax of the chunk exactly (le_fa32_softmax);
 * - V widened exactly (d times an int8 fits a float's mantissa) once per
 *   row for several query heads, and accumulated in f32 registers.
 *
 * Elsewhere (no VNNI, AVX2, other head sizes) the node keeps the default
 * path (flash_attn.c), whose Q8_0 V accumulates in f32 already. */
#include "flash_attn.h"
#include "reduce512.h"

#define QK LE_QK                       /* values per Q8_0 block */
#define QB ((int)sizeof(le_block_q8_0)) /* its bytes: an f16 scale, then 32 int8 */

#if defined(LE_X86)
#define LE_TARGET_VNNI \
  __attribute__((target("avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")))

int le_fa32_q8_ok(int64_t DK, int64_t DV, int64_t heads) {
  return le_simd() == LE_SIMD_AVX512 && le_cpu_vnni() && DK % QK == 0 && DK <= 256 &&
         (DV == 32 || DV == 64 || DV == 128) && heads <= LE_FA32_MAX_HEADS;
}

/* A query head as the dots take it: its int8 values (4-byte aligned, read
 * as int32 words), per block its scale and 128 times the sum of its values
 * (the K bytes are biased to unsigned by 128 for vpdpbusd). */
typedef struct {
  int32_t w[64]; /* the int8 values, 4 to a word (broadcast as words) */
  float d[8];
  int32_t bias[8];
} q8_head;
_Static_assert(sizeof(q8_head) == LE_FA32_Q8_HEAD_BYTES, "the scratch flash_attn.c sizes");

/* ggml's quantize_row_q8_0 of one query row (le_quantize_q8_0_act: the
 * bytes ggml's vec_dot sees), unpacked. */
static void q8_query(const float *x, int64_t DK, q8_head *h) {
  le_block_q8_0 blocks[8];
  le_quantize_q8_0_act(x, blocks, DK);
  for (int64_t b = 0; b < DK / QK; b++) {
    h->d[b] = le_fp16_to_fp32(blocks[b].d);
    memcpy(h->w + b * QK / 4, blocks[b].qs, QK);
    int32_t sum = 0;
    for (int i = 0; i < QK; i++) sum += blocks[b].qs[i];
    h->bias[b] = 128 * sum;
  }
}

/* The 16 cells' K of one head as the dots take it (q8_kt): Kt[8 b + t]
 * lane c = cell c's int8 values 4t..4t+3 of block b, biased to unsigned;
 * dk[b] lane c = its scale. */
typedef struct {
  __m512i kt[64];
  __m512 dk[8];
} q8_block;

/* m <= 16 cells of Q8_0 rows kb + c * kst (cells past m repeat the last):
 * per pair of blocks the cells' 64 bytes as 16 int32 lanes, transposed,
 * biased by 128 (vpdpbusd takes one side unsigned); the scales gathered
 * (each f16 read as the low half of a word). */
LE_TARGET_VNNI static void q8_kt(int64_t DK, const char *kb, size_t kst, int m, q8_block *k) {
  const int nb = (int)(DK / QK);
  const __m512i flip = _mm512_set1_epi8((char)0x80);
  __m512i off = _mm512_setzero_si512();
  int32_t o[16];
  for (int i = 0; i < 16; i++) o[i] = (int32_t)((size_t)LE_MIN(i, m - 1) * kst);
  off = _mm512_loadu_si512(o);
  for (int bp = 0; bp < nb; bp += 2) {
    __m512 r[16];
#pragma GCC unroll 16
    for (int i = 0; i < 16; i++) {
      const char *p = kb + o[i] + (size_t)bp * QB + 2;
      const __m256i lo = _mm256_loadu_si256((const __m256i *)(const void *)p);
      const __m256i hi = bp + 1 < nb ? _mm256_loadu_si256((const __m256i *)(const void *)(p + QB))
                                     : _mm256_setzero_si256();
      r[i] = _mm512_castsi512_ps(_mm512_inserti64x4(_mm512_castsi256_si512(lo), hi, 1));
    }
    transpose16(r);
#pragma GCC unroll 16
    for (int t = 0; t < 16; t++)
      k->kt[bp * 8 + t] = _mm512_xor_si512(_mm512_castps_si512(r[t]), flip);
  }
  for (int b = 0; b < nb; b++) {
    const __m512i w = _mm512_i32gather_epi32(off, (const void *)(kb + (size_t)b * QB), 1);
    k->dk[b] = _mm512_cvtph_ps(_mm512_cvtepi32_epi16(w));
  }
}

/* kq dots s[j][c] = q[j] . K[c] of NJ query heads over the block's cells:
 * per block 8 vpdpbusd against the head's words broadcast, the bias off,
 * then the two scales in f32; mask k: the cells that are. */
LE_TARGET_VNNI static inline __attribute__((always_inline)) void
q8_dots(const int NJ, int nb, const q8_block *k, const q8_head *const *q, float *const *s,
        __mmask16 mk, fa32_pf *pf, int pfs) {
  __m512 sf[8];
#pragma GCC unroll 8
  for (int j = 0; j < NJ; j++) sf[j] = _mm512_setzero_ps();
  for (int b = 0; b < nb; b++) {
    __m512i acc[8];
#pragma GCC unroll 8
    for (int j = 0; j < NJ; j++) acc[j] = _mm512_setzero_si512();
#pragma GCC unroll 8
    for (int t = 0; t < 8; t++) {
      for (int u = 0; u < pfs; u++) fa32_pf_next(pf);
      const __m512i kt = k->kt[b * 8 + t];
#pragma GCC unroll 8
      for (int j = 0; j < NJ; j++)
        acc[j] = _mm512_dpbusd_epi32(acc[j], kt, _mm512_set1_epi32(q[j]->w[b * 8 + t]));
    }
#pragma GCC unroll 8
    for (int j = 0; j < NJ; j++) {
      const __m512i unbiased = _mm512_sub_epi32(acc[j], _mm512_set1_epi32(q[j]->bias[b]));
      const __m512 isum = _mm512_cvtepi32_ps(unbiased);
      sf[j] = _mm512_fmadd_ps(isum, _mm512_mul_ps(k->dk[b], _mm512_set1_ps(q[j]->d[b])), sf[j]);
    }
  }
#pragma GCC unroll 8
  for (int j = 0; j < NJ; j++) _mm512_mask_storeu_ps(s[j], mk, sf[j]);
}

LE_TARGET_VNNI static void q8_dots8(int nb, const q8_block *k, const q8_head *const *q,
                                    float *const *s, __mmask16 mk, fa32_pf *pf, int pfs) {
  q8_dots(8, nb, k, q, s, mk, pf, pfs);
}
LE_TARGET_VNNI static void q8_dots2(int nb, const q8_block *k, const q8_head *const *q,
                                    float *const *s, __mmask16 mk, fa32_pf *pf, int pfs) {
  q8_dots(2, nb, k, q, s, mk, pf, pfs);
}
LE_TARGET_VNNI static void q8_dots1(int nb, const q8_block *k, const q8_head *const *q,
                                    float *const *s, __mmask16 mk, fa32_pf *pf, int pfs) {
  q8_dots(1, nb, k, q, s, mk, pf, pfs);
}

/* The dots of a K/V head's nh query heads over m <= 16 cells. */
static void q8_dots_heads(int64_t DK, const char *kb, size_t kst, int m, int nh,
                          const q8_head *const *q, float *const *s, fa32_pf *pf) {
  q8_block k __attribute__((aligned(64)));
  q8_kt(DK, kb, kst, m, &k);
  const int nb = (int)(DK / QK);
  const __mmask16 mk = (__mmask16)((1u << m) - 1);
  /* the next block's lines over the first call's 8 nb steps */
  const int pfs = (pf->left + 8 * nb - 1) / (8 * nb);
  int j = 0;
  for (; j + 8 <= nh; j += 8) q8_dots8(nb, &k, q + j, s + j, mk, pf, pfs);
  for (; j + 2 <= nh; j += 2) q8_dots2(nb, &k, q + j, s + j, mk, pf, pfs);
  for (; j < nh; j++) q8_dots1(nb, &k, q + j, s + j, mk, pf, pfs);
}

/* Cells per V block: their rows widened to f32 once (32 KiB at most). */
#define Q8_VBLOCK 64
/* How far ahead the widening prefetches V rows, in cells. */
#define Q8_VAHEAD 32

/* V rows c < m (Q8_0 at vb + c * vst, DV values) widened into vf (DV
 * floats a row): d times each int8, exact in f32 (11 + 8 bits), as ggml's
 * dequantization; the rows Q8_VAHEAD cells on prefetched while they are
 * within `ahead`. */
LE_TARGET_AVX512 static void q8_widen(const char *vb, size_t vst, int64_t m, int64_t DV,
                                      int64_t ahead, float *vf) {
  const int nb = (int)(DV / QK), lines = (int)(DV / QK * QB + 63) / 64 + 1;
  for (int64_t c = 0; c < m; c++) {
    const char *x = vb + (size_t)c * vst;
    if (c + Q8_VAHEAD < ahead)
      for (int l = 0; l < lines; l++) _mm_prefetch(x + Q8_VAHEAD * vst + 64 * l, _MM_HINT_T0);
    for (int b = 0; b < nb; b++) {
      __m512 v[2];
      fa_q8_widen16((const le_block_q8_0 *)(const void *)x + b, v);
      _mm512_store_ps(vf + c * DV + b * QK, v[0]);
      _mm512_store_ps(vf + c * DV + b * QK + 16, v[1]);
    }
  }
}

/* The V pass of one K/V head's query heads over cells [c0, c0 + m) of the
 * chunk (flash_attn_f32.c's fa32_vblock for Q8_0 rows, widened once). */
static void q8_vblock(const le_fa_row *r, int nh, int64_t ic0, int64_t c0, int64_t m,
                      int64_t ahead, const float *const *p, float *const *out) {
  float vf[Q8_VBLOCK * 128] __attribute__((aligned(64)));
  const int64_t DV = r[0].DV;
  q8_widen(r[0].vb + (ic0 + c0) * r[0].vst, r[0].vst, m, DV, ahead, vf);
  const float *pc[LE_FA32_MAX_HEADS];
  for (int j = 0; j < nh; j++) pc[j] = p[j] + c0;
  le_fa32_vpass(DV, 1, (const char *)vf, (size_t)DV * 4, m, 0, pc, nh, out);
}

void le_fa32_q8_heads(const le_fa_row *r, int nh, int g, int64_t ic0, int64_t ic1,
                      const float *const *q, float *scores, void *qq, float *const *pt) {
  const int64_t nc = ic1 - ic0, DK = r[0].DK;
  float *s[LE_FA32_MAX_HEADS], *out[LE_FA32_MAX_HEADS];
  const q8_head *qh[LE_FA32_MAX_HEADS];
  q8_head *heads = (q8_head *)qq;
  for (int j = 0; j < nh; j++) {
    s[j] = scores + j * nc, out[j] = pt[j] + 2;
    q8_query(q[j], DK, &heads[j]);
    qh[j] = &heads[j];
  }
  for (int64_t c0 = 0; c0 < nc; c0 += 16) { /* as le_fa32_heads: blocks outer, heads inner */
    const int m = (int)LE_MIN(16, nc - c0);
    float *sc[LE_FA32_MAX_HEADS];
    for (int j = 0; j < nh; j++) sc[j] = s[j] + c0;
    for (int h = 0; h < nh; h += g) {
      const char *kb = r[h].kb + (ic0 + c0) * r[h].kst;
      fa32_pf pf = fa32_pf_rows(kb + 16 * r[h].kst, r[h].kst, DK / QK * QB,
                                LE_MIN(16, nc - c0 - 16));
      q8_dots_heads(DK, kb, r[h].kst, m, g, qh + h, sc + h, &pf);
    }
  }
  le_fa32_softmax(r, nh, ic0, nc, s, pt);
  for (int64_t c0 = 0; c0 < nc; c0 += Q8_VBLOCK) {
    const int64_t m = LE_MIN((int64_t)Q8_VBLOCK, nc - c0);
    for (int h = 0; h < nh; h += g)
      q8_vblock(r + h, g, ic0, c0, m, nc - c0, (const float *const *)(s + h), out + h);
  }
}
#else
int le_fa32_q8_ok(int64_t DK, int64_t DV, int64_t heads) {
  (void)DK, (void)DV, (void)heads;
  return 0;
}
void le_fa32_q8_heads(const le_fa_row *r, int nh, int g, int64_t ic0, int64_t ic1,
                      const float *const *q, float *scores, void *qq, float *const *pt) {
  (void)r, (void)nh, (void)g, (void)ic0, (void)ic1, (void)q, (void)scores, (void)qq, (void)pt;
}
#endif
