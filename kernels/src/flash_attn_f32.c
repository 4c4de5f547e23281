/* FLASH_ATTN_EXT's decode step at f32 precision: the node's prec param is
 * GGML_PREC_F32 (ggml_flash_attn_ext_set_prec; ContextOptions
 * flashAttnPrecision "f32"). ggml-cpu ignores that param and keeps its one
 * arithmetic (flash_attn.c: an online softmax cell by cell, V accumulated
 * in f16 and rounded at every cell); the default path here follows it bit
 * for bit. With the param set, a decode step (one query row, F16 K and V)
 * over 32 or more cells is split over the threads by cells and takes this
 * kernel, at AVX-512 and AVX2, which is not llama.cpp's order
 * (kernels/PARITY.md section 31). Per thread, over its chunk of cells:
 *
 * - the kq dots with Q in f32: 16 cells (8 at AVX2) of a K head transposed
 *   and widened once, then each query head of the group as one fma chain
 *   over d (fa32_dots), cell blocks outer and K/V heads inner;
 * - an exact softmax over the chunk instead of an online one: the chunk's
 *   maximum first, then the exps (ggml_v_expf) and their sum in vectors;
 * - V times the weights accumulated in f32 registers, each V row widened
 *   once for several query heads of its group: no f16 round trip per cell
 *   (in ggml's order each head's accumulation waits on one per cell).
 *
 * Both passes prefetch ahead in software, a line every few fmas (fa32_pf):
 * the cache is read one head at a time, 128 B of each 512 B cell, which the
 * hardware prefetcher does not follow.
 *
 * Threads split the step by K/V head where those split evenly (each head
 * then over every live cell, one thread's bits at any such thread count:
 * le_fa32_rows), else by cells, the chunks' partials (M, S, VKQ) merged as
 * in the default path. */
#include "flash_attn.h"
#include "reduce512.h"
#include "vexp.h"

#if defined(LE_X86)
/* Cells per block of the V pass: every K/V head's rows of a block (32 KiB
 * at 64 cells of 4 heads of 64) are taken while they are in L1/L2. */
#define FA32_VBLOCK 64
/* How far ahead the V pass prefetches, in cells. */
#define FA32_VAHEAD 32

/* s[c] = dots[c] * scale + slope * mask[c] for c < n, in place; returns
 * the maximum (-inf when every cell is masked). */
LE_TARGET_AVX512 static float fa32_scores(const le_fa_row *r, int64_t ic0, float *s, int64_t n) {
  const __m512 sc = _mm512_set1_ps(r->scale), sl = _mm512_set1_ps(r->slope);
  __m512 mx = _mm512_set1_ps(-INFINITY);
  for (int64_t c = 0; c < n; c += 16) {
    const int m = (int)LE_MIN(16, n - c);
    const __mmask16 k = (__mmask16)((1u << m) - 1);
    __m512 v = _mm512_mul_ps(_mm512_maskz_loadu_ps(k, s + c), sc);
    if (r->mp) {
      const __m512 mv = _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(k, r->mp + ic0 + c));
      v = _mm512_fmadd_ps(mv, sl, v); /* -inf where masked */
    }
    _mm512_mask_storeu_ps(s + c, k, v);
    mx = _mm512_mask_max_ps(mx, k, mx, v);
  }
  return _mm512_reduce_max_ps(mx);
}

/* kq dots s[j][c] = q[j] . K[c] for nh query heads (f32 rows of DK, a
 * multiple of 16 up to 256) and m <= 16 cells (f16 rows kb + c * kst):
 * the block widened and transposed once into Kt (d-major), then per head
 * the 16 cells' dots as one fma chain over d, the query element broadcast:
 * no horizontal sums, and the block is shared by every head of the group. */
LE_TARGET_AVX512 static void fa32_dots(int64_t DK, const char *kb, size_t kst, int m, int nh,
                                       const float *const *q, float *const *s, fa32_pf *pf) {
  float Kt[256 * 16] __attribute__((aligned(64)));
  for (int64_t d0 = 0; d0 < DK; d0 += 16) {
    __m256i r[16];
#pragma GCC unroll 16
    for (int i = 0; i < 16; i++)
      r[i] = i < m ? _mm256_loadu_si256(
                         (const __m256i *)(const void *)(kb + (size_t)i * kst + d0 * 2))
                   : _mm256_setzero_si256();
    transpose16_epi16(r); /* as halves: half the shuffle work of widening first */
#pragma GCC unroll 16
    for (int i = 0; i < 16; i++) _mm512_store_ps(Kt + (d0 + i) * 16, _mm512_cvtph_ps(r[i]));
  }
  const __mmask16 k = (__mmask16)((1u << m) - 1);
  int j = 0;
  for (; j + 8 <= nh; j += 8) {
    __m512 a[8];
#pragma GCC unroll 8
    for (int t = 0; t < 8; t++) a[t] = _mm512_setzero_ps();
    for (int64_t d = 0; d < DK; d++) {
      if (!(d & 1)) fa32_pf_next(pf); /* DK / 2 steps: 16 rows of DK / 32 lines */
      const __m512 kt = _mm512_load_ps(Kt + d * 16);
#pragma GCC unroll 8
      for (int t = 0; t < 8; t++) a[t] = _mm512_fmadd_ps(_mm512_set1_ps(q[j + t][d]), kt, a[t]);
    }
#pragma GCC unroll 8
    for (int t = 0; t < 8; t++) _mm512_mask_storeu_ps(s[j + t], k, a[t]);
  }
  for (; j < nh; j++) {
    __m512 a = _mm512_setzero_ps();
    for (int64_t d = 0; d < DK; d++) {
      if (!(d & 1)) fa32_pf_next(pf);
      a = _mm512_fmadd_ps(_mm512_set1_ps(q[j][d]), _mm512_load_ps(Kt + d * 16), a);
    }
    _mm512_mask_storeu_ps(s[j], k, a);
  }
}

/* out[j][d] += sum over cells c < n of p[j][c] * V[c][d], for NH heads and
 * DV = 16 * NV, in registers over the n cells; V row c at vb + c * vst
 * (f16, widened once for the NH heads; with WIDE already f32: flash_attn_q8.c's
 * dequantized rows). With CHECK, cells that every head weighs 0 (masked)
 * are skipped: their V may be anything, and 0 times inf would not be 0
 * (without, the caller saw no zero weight). */
LE_TARGET_AVX512 static inline __attribute__((always_inline)) void
fa32_vacc(const int NV, const int NH, const int CHECK, const int WIDE, const char *vb, size_t vst,
          int64_t n, int64_t ahead, const float *const *p, float *const *out) {
  __m512 acc[8][8];
#pragma GCC unroll 8
  for (int j = 0; j < NH; j++)
#pragma GCC unroll 8
    for (int k = 0; k < NV; k++) acc[j][k] = _mm512_loadu_ps(out[j] + 16 * k);
  for (int64_t c = 0; c < n; c++) {
    if (CHECK) {
      int live = 0;
#pragma GCC unroll 8
      for (int j = 0; j < NH; j++) live |= p[j][c] != 0.0f;
      if (!live) continue;
    }
    const uint16_t *x = (const uint16_t *)(const void *)(vb + (size_t)c * vst);
    if (!WIDE && c + FA32_VAHEAD < ahead) /* the row FA32_VAHEAD cells on: NV / 2 lines */
#pragma GCC unroll 4
      for (int k = 0; k < NV; k += 2)
        _mm_prefetch((const char *)(x + 16 * k) + FA32_VAHEAD * vst, _MM_HINT_T0);
    __m512 v[8];
#pragma GCC unroll 8
    for (int k = 0; k < NV; k++)
      v[k] = WIDE ? _mm512_loadu_ps((const float *)(const void *)x + 16 * k)
                  : _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(const void *)x + k));
#pragma GCC unroll 8
    for (int j = 0; j < NH; j++) {
      const __m512 w = _mm512_set1_ps(p[j][c]);
#pragma GCC unroll 8
      for (int k = 0; k < NV; k++) acc[j][k] = _mm512_fmadd_ps(v[k], w, acc[j][k]);
    }
  }
#pragma GCC unroll 8
  for (int j = 0; j < NH; j++)
#pragma GCC unroll 8
    for (int k = 0; k < NV; k++) _mm512_storeu_ps(out[j] + 16 * k, acc[j][k]);
}

#define FA32_VACC(name, NV, NH)                                                               \
  LE_TARGET_AVX512 static void name(int check, int wide, const char *vb, size_t vst, int64_t n, \
                                    int64_t ahead, const float *const *p, float *const *out) {  \
    if (wide && check) fa32_vacc(NV, NH, 1, 1, vb, vst, n, ahead, p, out);                      \
    else if (wide) fa32_vacc(NV, NH, 0, 1, vb, vst, n, ahead, p, out);                          \
    else if (check) fa32_vacc(NV, NH, 1, 0, vb, vst, n, ahead, p, out);                         \
    else fa32_vacc(NV, NH, 0, 0, vb, vst, n, ahead, p, out);                                    \
  }
FA32_VACC(fa32_vacc_d32x8, 2, 8)
FA32_VACC(fa32_vacc_d32x1, 2, 1)
FA32_VACC(fa32_vacc_d64x4, 4, 4)
FA32_VACC(fa32_vacc_d64x1, 4, 1)
FA32_VACC(fa32_vacc_d128x2, 8, 2)
FA32_VACC(fa32_vacc_d128x1, 8, 1)
#undef FA32_VACC

LE_TARGET_AVX512 int le_fa32_any_zero(const float *const *p, int nh, int64_t m) {
  for (int j = 0; j < nh; j++)
    for (int64_t c = 0; c < m; c += 16) {
      const __mmask16 k = (__mmask16)((1u << LE_MIN(16, m - c)) - 1);
      if (_mm512_mask_cmp_ps_mask(k, _mm512_maskz_loadu_ps(k, p[j] + c), _mm512_setzero_ps(),
                                  _CMP_EQ_OQ))
        return 1;
    }
  return 0;
}

/* ---- AVX2: the same steps 8 lanes wide, within 16 registers ---- */

/* fa32_scores at AVX2. */
LE_TARGET_AVX2 static float fa32_scores_avx2(const le_fa_row *r, int64_t ic0, float *s, int64_t n) {
  const __m256 sc = _mm256_set1_ps(r->scale), sl = _mm256_set1_ps(r->slope);
  __m256 mx = _mm256_set1_ps(-INFINITY);
  int64_t c = 0;
  for (; c + 8 <= n; c += 8) {
    __m256 v = _mm256_mul_ps(_mm256_loadu_ps(s + c), sc);
    if (r->mp)
      v = _mm256_fmadd_ps(
          _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(const void *)(r->mp + ic0 + c))), sl,
          v);
    _mm256_storeu_ps(s + c, v);
    mx = _mm256_max_ps(mx, v);
  }
  float lanes[8], M = -INFINITY;
  _mm256_storeu_ps(lanes, mx);
  for (int i = 0; i < 8; i++) M = fmaxf(M, lanes[i]);
  for (; c < n; c++) {
    float v = s[c] * r->scale;
    if (r->mp) v = fmaf(_cvtsh_ss(r->mp[ic0 + c]), r->slope, v);
    s[c] = v;
    M = fmaxf(M, v);
  }
  return M;
}

/* fa32_dots at AVX2: the block of up to 16 cells as two of 8. */
LE_TARGET_AVX2 static void fa32_dots_avx2(int64_t DK, const char *kb, size_t kst, int m, int nh,
                                          const float *const *q, float *const *s, fa32_pf *pf) {
  float Kt[256 * 8] __attribute__((aligned(32)));
  for (int c0 = 0; c0 < m; c0 += 8) {
    const int mm = LE_MIN(8, m - c0);
    for (int64_t d0 = 0; d0 < DK; d0 += 8) {
      __m256 r[8];
#pragma GCC unroll 8
      for (int i = 0; i < 8; i++)
        r[i] = i < mm ? _mm256_cvtph_ps(_mm_loadu_si128(
                            (const __m128i *)(const void *)(kb + (size_t)(c0 + i) * kst + d0 * 2)))
                      : _mm256_setzero_ps();
      transpose8(r);
#pragma GCC unroll 8
      for (int i = 0; i < 8; i++) _mm256_store_ps(Kt + (d0 + i) * 8, r[i]);
    }
    float part[8];
    for (int j = 0; j < nh;) {
      const int nt = nh - j >= 8 ? 8 : 1;
      __m256 a[8];
#pragma GCC unroll 8
      for (int t = 0; t < 8; t++) a[t] = _mm256_setzero_ps();
      if (nt == 8) {
        for (int64_t d = 0; d < DK; d++) {
          if (!(d & 3)) fa32_pf_next(pf); /* DK / 4 steps: 8 rows of DK / 32 lines */
          const __m256 kt = _mm256_load_ps(Kt + d * 8);
#pragma GCC unroll 8
          for (int t = 0; t < 8; t++) a[t] = _mm256_fmadd_ps(_mm256_set1_ps(q[j + t][d]), kt, a[t]);
        }
      } else {
        for (int64_t d = 0; d < DK; d++) {
          if (!(d & 3)) fa32_pf_next(pf);
          a[0] = _mm256_fmadd_ps(_mm256_set1_ps(q[j][d]), _mm256_load_ps(Kt + d * 8), a[0]);
        }
      }
      for (int t = 0; t < nt; t++) {
        if (mm == 8) {
          _mm256_storeu_ps(s[j + t] + c0, a[t]);
        } else {
          _mm256_storeu_ps(part, a[t]);
          memcpy(s[j + t] + c0, part, (size_t)mm * 4);
        }
      }
      j += nt;
    }
  }
}

/* out[j][d0 .. d0 + 32) += sum over c < n of p[j][c] * V[c][d0 ..], NH
 * heads (1 or 2) per pass: 8 accumulators and the V slice's 4. */
LE_TARGET_AVX2 static inline __attribute__((always_inline)) void
fa32_vacc_avx2(const int NH, const int CHECK, const char *vb, size_t vst, int64_t n, int64_t d0,
               int64_t ahead, const float *const *p, float *const *out) {
  __m256 acc[2][4];
#pragma GCC unroll 2
  for (int j = 0; j < NH; j++)
#pragma GCC unroll 4
    for (int k = 0; k < 4; k++) acc[j][k] = _mm256_loadu_ps(out[j] + d0 + 8 * k);
  for (int64_t c = 0; c < n; c++) {
    if (CHECK && p[0][c] == 0.0f && (NH == 1 || p[1][c] == 0.0f)) continue;
    const uint16_t *x = (const uint16_t *)(const void *)(vb + (size_t)c * vst) + d0;
    if (c + FA32_VAHEAD < ahead) _mm_prefetch((const char *)x + FA32_VAHEAD * vst, _MM_HINT_T0);
    __m256 v[4];
#pragma GCC unroll 4
    for (int k = 0; k < 4; k++)
      v[k] = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(const void *)(x + 8 * k)));
#pragma GCC unroll 2
    for (int j = 0; j < NH; j++) {
      const __m256 w = _mm256_set1_ps(p[j][c]);
#pragma GCC unroll 4
      for (int k = 0; k < 4; k++) acc[j][k] = _mm256_fmadd_ps(v[k], w, acc[j][k]);
    }
  }
#pragma GCC unroll 2
  for (int j = 0; j < NH; j++)
#pragma GCC unroll 4
    for (int k = 0; k < 4; k++) _mm256_storeu_ps(out[j] + d0 + 8 * k, acc[j][k]);
}

LE_TARGET_AVX2 static void fa32_vacc_avx2_x2(int check, const char *vb, size_t vst, int64_t n,
                                             int64_t d0, int64_t ahead, const float *const *p,
                                             float *const *out) {
  if (check) fa32_vacc_avx2(2, 1, vb, vst, n, d0, ahead, p, out);
  else fa32_vacc_avx2(2, 0, vb, vst, n, d0, ahead, p, out);
}
LE_TARGET_AVX2 static void fa32_vacc_avx2_x1(int check, const char *vb, size_t vst, int64_t n,
                                             int64_t d0, int64_t ahead, const float *const *p,
                                             float *const *out) {
  if (check) fa32_vacc_avx2(1, 1, vb, vst, n, d0, ahead, p, out);
  else fa32_vacc_avx2(1, 0, vb, vst, n, d0, ahead, p, out);
}

/* Whether any of p[j][0..m) (j < nh) is 0, scalar (any level). */
static int fa32_any_zero_scalar(const float *const *p, int nh, int64_t m) {
  for (int j = 0; j < nh; j++)
    for (int64_t c = 0; c < m; c++)
      if (p[j][c] == 0.0f) return 1;
  return 0;
}

int le_fa32_ok(int64_t DK, int64_t DV, int64_t heads) {
  return (le_simd() == LE_SIMD_AVX512 || le_simd() == LE_SIMD_AVX2) && DK % 16 == 0 && DK <= 256 &&
         (DV == 32 || DV == 64 || DV == 128) &&
         heads <= LE_FA32_MAX_HEADS;
}

/* V pass of one K/V head's query heads r[0..nh) over cells [c0, c0 + m)
 * of the chunk (weights p[j] + c0); the first pass over the rows
 * prefetches those up to `ahead` cells from c0 (the chunk's end). */
static void fa32_vblock(const le_fa_row *r, int nh, int64_t ic0, int64_t c0, int64_t m,
                        int64_t ahead, const float *const *p, float *const *out) {
  const int64_t DV = r[0].DV;
  const char *vb = r[0].vb + (ic0 + c0) * r[0].vst;
  const float *pc[LE_FA32_MAX_HEADS];
  for (int j = 0; j < nh; j++) pc[j] = p[j] + c0;
  if (le_simd() == LE_SIMD_AVX2) { /* 32 columns, two heads, at a time */
    const int check = fa32_any_zero_scalar(pc, nh, m);
    for (int64_t d0 = 0; d0 < DV; d0 += 32) {
      int j = 0;
      for (; j + 2 <= nh; j += 2)
        fa32_vacc_avx2_x2(check, vb, r[0].vst, m, d0, j ? 0 : ahead, pc + j, out + j);
      for (; j < nh; j++)
        fa32_vacc_avx2_x1(check, vb, r[0].vst, m, d0, j ? 0 : ahead, pc + j, out + j);
    }
    return;
  }
  le_fa32_vpass(DV, 0, vb, r[0].vst, m, ahead, pc, nh, out);
}

void le_fa32_vpass(int64_t DV, int wide, const char *vb, size_t vst, int64_t m, int64_t ahead,
                   const float *const *pc, int nh, float *const *out) {
  /* heads per pass: 16 accumulators */
  const int g = DV == 32 ? 8 : DV == 64 ? 4 : 2, check = le_fa32_any_zero(pc, nh, m);
  int j = 0;
  for (; j + g <= nh; j += g) {
    const int64_t a = j ? 0 : ahead;
    if (DV == 32) fa32_vacc_d32x8(check, wide, vb, vst, m, a, pc + j, out + j);
    else if (DV == 64) fa32_vacc_d64x4(check, wide, vb, vst, m, a, pc + j, out + j);
    else fa32_vacc_d128x2(check, wide, vb, vst, m, a, pc + j, out + j);
  }
  for (; j < nh; j++) {
    const int64_t a = j ? 0 : ahead;
    if (DV == 32) fa32_vacc_d32x1(check, wide, vb, vst, m, a, pc + j, out + j);
    else if (DV == 64) fa32_vacc_d64x1(check, wide, vb, vst, m, a, pc + j, out + j);
    else fa32_vacc_d128x1(check, wide, vb, vst, m, a, pc + j, out + j);
  }
}

void le_fa32_softmax(const le_fa_row *r, int nh, int64_t ic0, int64_t nc, float *const *s,
                     float *const *pt) {
  const int avx2 = le_simd() == LE_SIMD_AVX2;
  for (int j = 0; j < nh; j++) {
    const float M =
        avx2 ? fa32_scores_avx2(&r[j], ic0, s[j], nc) : fa32_scores(&r[j], ic0, s[j], nc);
    pt[j][0] = M;
    if (M == -INFINITY) { /* every cell masked: a partial that adds nothing */
      pt[j][1] = 0.0f;
      memset(s[j], 0, (size_t)nc * 4);
    } else {
      pt[j][1] = (float)le_vec_soft_max_f32(nc, s[j], s[j], M); /* exps in place, their sum */
    }
    memset(pt[j] + 2, 0, (size_t)r[j].DV * 4);
  }
}

void le_fa32_heads(const le_fa_row *r, int nh, int g, int64_t ic0, int64_t ic1,
                   const float *const *q, float *scores, float *const *pt) {
  const int64_t nc = ic1 - ic0;
  const int avx2 = le_simd() == LE_SIMD_AVX2;
  float *s[LE_FA32_MAX_HEADS], *out[LE_FA32_MAX_HEADS];
  for (int j = 0; j < nh; j++) s[j] = scores + j * nc, out[j] = pt[j] + 2;
  /* Cell blocks outer, K/V heads inner: a block's rows of every head are
   * contiguous in the cache, so memory is read in order; each head's dots
   * prefetch its rows of the next block (fa32_pf). */
  for (int64_t c0 = 0; c0 < nc; c0 += 16) {
    const int m = (int)LE_MIN(16, nc - c0);
    float *sc[LE_FA32_MAX_HEADS];
    for (int j = 0; j < nh; j++) sc[j] = s[j] + c0;
    for (int h = 0; h < nh; h += g) {
      const char *kb = r[h].kb + (ic0 + c0) * r[h].kst;
      fa32_pf pf =
          fa32_pf_rows(kb + 16 * r[h].kst, r[h].kst, r[h].DK * 2, LE_MIN(16, nc - c0 - 16));
      if (avx2) fa32_dots_avx2(r[h].DK, kb, r[h].kst, m, g, q + h, sc + h, &pf);
      else fa32_dots(r[h].DK, kb, r[h].kst, m, g, q + h, sc + h, &pf);
    }
  }
  le_fa32_softmax(r, nh, ic0, nc, s, pt);
  for (int64_t c0 = 0; c0 < nc; c0 += FA32_VBLOCK) {
    const int64_t m = LE_MIN((int64_t)FA32_VBLOCK, nc - c0);
    for (int h = 0; h < nh; h += g)
      fa32_vblock(r + h, g, ic0, c0, m, nc - c0, (const float *const *)(s + h), out + h);
  }
}
#else
int le_fa32_ok(int64_t DK, int64_t DV, int64_t heads) {
  (void)DK, (void)DV, (void)heads;
  return 0;
}
void le_fa32_heads(const le_fa_row *r, int nh, int g, int64_t ic0, int64_t ic1,
                   const float *const *q, float *scores, float *const *pt) {
  (void)r, (void)nh, (void)g, (void)ic0, (void)ic1, (void)q, (void)scores, (void)pt;
}
#endif

/* ---- the node's rows and threads (any level: le_fa32_heads runs only
 * where le_fa32_ok held, flash_attn.c fa32_takes) ---- */

/* The partials of query heads [h0, h0 + nh) (whole groups) of query row
 * iq1 of stream iq3 over cells [ic0, ic1), by le_fa32_heads
 * (le_fa32_q8_heads over a Q8_0 cache), into the stream's partials;
 * scores: this thread's scratch (room for neq2 * chunk scores, chunk the
 * cells / nth, which holds nh * (ic1 - ic0) for either split), the
 * quantized Q after them. */
static void fa32_heads(const le_node *n, const fa_shape *s, int64_t iq1, int64_t iq3, int64_t h0,
                       int64_t nh, int64_t ic0, int64_t ic1, float *scores, float *partials,
                       int64_t nth, int64_t ith) {
  le_fa_row r[LE_FA32_MAX_HEADS];
  float *pt[LE_FA32_MAX_HEADS];
  const float *q[LE_FA32_MAX_HEADS];
  for (int64_t j = 0; j < nh; j++) {
    r[j] = le_fa_row_of(n, s, iq1, h0 + j, iq3, NULL, NULL, ic0);
    pt[j] = partials + ((h0 + j) * nth + ith) * (2 + s->DV);
    q[j] = (const float *)fa_at(&n->src[0], iq1, h0 + j, iq3);
  }
  if (n->src[1].type == LE_TYPE_Q8_0) {
    const int64_t chunk = (s->nek1 + nth - 1) / nth; /* the scratch's */
    le_fa32_q8_heads(r, (int)nh, (int)s->rk2, ic0, ic1, q, scores, scores + s->neq2 * chunk, pt);
    return;
  }
  le_fa32_heads(r, (int)nh, (int)s->rk2, ic0, ic1, q, scores, pt);
}

/* The f32 kernel's decode step with the threads split by K/V head (their
 * count a multiple of the threads'): each thread takes whole groups of
 * query heads over every live cell of the row, and merges its one partial
 * per head as a single thread would (fa_merge of one). No barrier and no
 * merge across threads, and the same bits at every such thread count as
 * at one: a head's work is the same calls on the same cells wherever it
 * runs. (A prompt's rows over a Q8_0 cache keep the cells split: one
 * chunk per row is as accurate as ggml's f32 order there, not better.)
 * Zen 4, 2 threads, bench/attn.c at depth 2048 with TinyLlama's heads
 * (32 over 4, 22 layers): 4.65-4.88 -> 4.23-4.34 ms per token out of
 * cache; over Q8_0 in cache 3.39 -> 2.45 ms. */
static void fa32_rows_by_head(const le_node *n, const fa_shape *s, const le_compute_params *p,
                              float *dots, float *partials, float *work) {
  const int64_t nth = p->nth, psize = 2 + s->DV, stream = s->neq2 * nth * psize;
  const int64_t per = s->neq2 / nth, h0 = p->ith * per; /* whole groups: rk2 divides per */
  for (int64_t iq1 = 0; iq1 < s->N; iq1++)
    for (int64_t iq3 = 0; iq3 < s->neq3; iq3++) {
      const int64_t len = le_fa_live_cells(n, s, iq1, iq3);
      float *pts = partials + iq3 * stream;
      if (len > 0) fa32_heads(n, s, iq1, iq3, h0, per, 0, len, dots, pts, nth, p->ith);
      for (int64_t h = h0; h < h0 + per; h++) {
        float *pt = pts + (h * nth + p->ith) * psize;
        if (len == 0) pt[0] = -INFINITY, pt[1] = 0.0f;
        le_fa_merge(n, s, pt, 1, iq1, h, iq3, work);
      }
    }
}

/* The f32 kernel over query rows one at a time: each row's cells split
 * over the threads, its partials merged before the next row takes them.
 * Streams (one per sequence of a batch) go side by side: every stream's
 * row iq1, then one barrier, then their merges. A stream's chunks are
 * those of a node of that stream alone, so a sequence gets the same bits
 * in a batch as alone. */
void le_fa32_rows(const le_node *n, const fa_shape *s, const le_compute_params *p, float *dots,
                  float *partials, float *work) {
  const int64_t nth = p->nth, psize = 2 + s->DV, stream = s->neq2 * nth * psize;
  if (le_fa32_by_head(n, nth)) {
    fa32_rows_by_head(n, s, p, dots, partials, work);
    return;
  }
  for (int64_t iq1 = 0; iq1 < s->N; iq1++) {
    for (int64_t iq3 = 0; iq3 < s->neq3; iq3++) {
      const int64_t len = le_fa_live_cells(n, s, iq1, iq3), chunk = (len + nth - 1) / nth;
      const int64_t ic0 = p->ith * chunk, ic1 = LE_MIN(ic0 + chunk, len);
      if (ic0 < len) {
        fa32_heads(n, s, iq1, iq3, 0, s->neq2, ic0, ic1, dots, partials + iq3 * stream, nth,
                   p->ith);
        continue;
      }
      for (int64_t h = 0; h < s->neq2; h++) { /* a thread past the cells: partials that add nothing */
        float *pt = partials + iq3 * stream + (h * nth + p->ith) * psize;
        pt[0] = -INFINITY;
        pt[1] = 0.0f;
      }
    }
    if (nth > 1) le_barrier(p->ctx);
    for (int64_t iq3 = 0; iq3 < s->neq3; iq3++)
      le_fa_reduce(n, s, p, partials + iq3 * stream, iq1, iq3, work);
    if (nth > 1 && iq1 + 1 < s->N) le_barrier(p->ctx); /* the partials are taken again */
  }
}
