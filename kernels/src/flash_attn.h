/* Internal to flash_attn.c and flash_attn_x86.c. */
#ifndef LE_FLASH_ATTN_H
#define LE_FLASH_ATTN_H
#include "le_internal.h"

/* y = fp16(f32(y) * v) element by element (ggml_vec_scale_f16). */
void le_fa_scale_f16(int64_t n, uint16_t *y, float v);

/* One query row's cells [ic0, ic1) over an F16 V cache: the kq dot against
 * Q_q, mask (mp, times slope), online softmax (*pS, *pM) and VKQ16; K and V
 * rows kst and vst bytes apart from kb and vb. */
typedef void (*le_fa_cells_fn)(int64_t DK, int64_t DV, float scale, le_vec_dot_fn kq_dot,
                               const void *Q_q, const char *kb, size_t kst, const char *vb,
                               size_t vst, const uint16_t *mp, float slope, int64_t ic0,
                               int64_t ic1, uint16_t *VKQ16, float *pS, float *pM);

/* The cell loop for heads of DV values at the current SIMD level, or NULL. */
le_fa_cells_fn le_fa_cells_f16(int64_t DV);

#if defined(LE_X86)
/* y = fp16(fma(x, v, y)), 8 at a time (flash_attn_x86.c). */
void le_fa_mad_f16_avx2(int64_t n, uint16_t *y, const uint16_t *x, float v);
#endif
#endif
