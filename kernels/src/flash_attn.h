/* Internal to flash_attn.c and flash_attn_x86.c. */
#ifndef LE_FLASH_ATTN_H
#define LE_FLASH_ATTN_H
#include "le_internal.h"

/* y = fp16(f32(y) * v) element by element (ggml_vec_scale_f16). */
void le_fa_scale_f16(int64_t n, uint16_t *y, float v);

/* What the cell loop of one query row reads: the kq dot of DK elements
 * against Q_q, K and V rows kst and vst bytes apart from kb and vb (V: DV
 * f16 values), the mask row mp (NULL: none) times slope, the KQ scale.
 * Where dots is given, dots[ic - dots0] is cell ic's kq dot, computed
 * beforehand (the same chain; le_flash_attn's split path). */
typedef struct {
  int64_t DK, DV;
  float scale, slope;
  le_vec_dot_fn kq_dot;
  const void *Q_q;
  const char *kb, *vb;
  size_t kst, vst;
  const uint16_t *mp;
  const float *dots;
  int64_t dots0;
} le_fa_row;

/* Cell ic's kq dot: precomputed, or by kq_dot. */
static inline float le_fa_dot(const le_fa_row *r, int64_t ic) {
  if (r->dots) return r->dots[ic - r->dots0];
  float sc;
  r->kq_dot(r->DK, &sc, r->kb + ic * r->kst, r->Q_q);
  return sc;
}

/* Cells [ic0, ic1) of a row over an F16 V cache: online softmax (*pS, *pM)
 * and the f16 accumulator VKQ16. */
typedef void (*le_fa_cells_fn)(const le_fa_row *r, int64_t ic0, int64_t ic1, uint16_t *VKQ16,
                               float *pS, float *pM);

/* The cell loop for heads of DV values at the current SIMD level, or NULL. */
le_fa_cells_fn le_fa_cells_f16(int64_t DV);

/* The same for *nh query heads at once (r[h], VKQ16[h], pS[h], pM[h]) that
 * share one V head, their dots precomputed; NULL where there is none. */
typedef void (*le_fa_heads_fn)(const le_fa_row *r, int64_t ic0, int64_t ic1,
                               uint16_t *const *VKQ16, float *pS, float *pM);
le_fa_heads_fn le_fa_cells_f16_heads(int64_t DV, int *nh);

/* The tiled path's products for query rows rows[0..n) of a tile of 64
 * cells, four rows at a time (flash_attn_x86.c; 0: not done, take them
 * one by one): KQ[t][tk] = fma chain over dk of Kt[dk][tk] * Q[t][dk] from
 * 0, and VKQ[t][d] = fma chain over tk of Vt[tk][d] * W[t][tk] from
 * VKQ[t][d] (rows of KQ and W 64 apart, of Q DK, of VKQ DV). */
int le_fa_kq_rows(int64_t DK, const float *Kt, const float *Q, float *KQ, const int *rows, int n);
int le_fa_vacc_rows(int64_t DV, const float *Vt, const float *W, float *VKQ, const int *rows,
                    int n);

/* GGML_PREC_F32 in FLASH_ATTN_EXT's params[3] (ggml_flash_attn_ext_set_prec):
 * the decode step may take flash_attn_f32.c's kernel. */
#define LE_FA_PREC_F32 10
#define LE_FA32_MAX_HEADS 128

/* Whether flash_attn_f32.c has a kernel for heads of DK (K) and DV (V)
 * values and `heads` query heads at the current SIMD level. */
int le_fa32_ok(int64_t DK, int64_t DV, int64_t heads);

/* flash_attn_f32.c: the partials pt[j] (M, S, unnormalized VKQ in f32) of
 * query heads r[0..nh) (f32 query rows q[j]; each g consecutive heads share
 * one K/V head) over cells [ic0, ic1); scores: room for nh * (ic1 - ic0)
 * floats. */
void le_fa32_heads(const le_fa_row *r, int nh, int g, int64_t ic0, int64_t ic1,
                   const float *const *q, float *scores, float *const *pt);

#if defined(LE_X86)
/* The tiled path's products of one query row, 8 lanes wide (flash_attn_x86.c). */
void le_fa_kq_tile_avx2(int64_t DK, const float *Kt, const float *q, float *kq);
void le_fa_vacc_tile_avx2(int64_t DV, const float *Vt, const float *w, float *acc);
/* y = fp16(fma(x, v, y)), 8 at a time (flash_attn_x86.c). */
void le_fa_mad_f16_avx2(int64_t n, uint16_t *y, const uint16_t *x, float v);
#endif
#endif
