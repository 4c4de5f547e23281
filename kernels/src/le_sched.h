/*
 * How mul_mat uses the context scratch, shared by mul_mat.c (which does it),
 * threads.c (which sizes the scratch) and sched_plan.c (which decides which
 * nodes may run without a barrier between them). Not part of the ABI.
 */
#ifndef LE_SCHED_H
#define LE_SCHED_H

#include "le_internal.h"

/* src1 of at most this many elements is converted by every thread on its
 * own (a few hundred ns for a decode step's activations) instead of split
 * across threads followed by a barrier. Conversion is per row and
 * deterministic, so who converts a row never changes a value. */
#define LE_MM_PRIVATE_MAX 4096

/* Which AVX2 panel kernel mul_mat runs (mul_mat.c le_mm_panel), if any. */
enum { LE_MM_TILES = 0, LE_MM_PANEL_F32, LE_MM_PANEL_F16, LE_MM_PANEL_Q8_0 };
int le_mm_panel(const le_node *n);
/* Whether the AVX-512 F16 tiles read src1 widened to f32 (mul_mat.c). */
int le_mm_wide_f16(const le_node *n);

/* Bytes per converted src1 row: the vec_dot type's; f32 for the F16
 * panel (src1 widened through f16); the codes alone (K bytes, 32-byte
 * aligned) for the Q8_0 panel. */
static inline size_t le_mm_src1_row(const le_node *n, const le_type_traits *vt) {
  const int64_t K = n->src[1].ne[0];
  const int panel = le_mm_panel(n);
  if (panel == LE_MM_PANEL_F16 || le_mm_wide_f16(n)) return (size_t)K * 4;
  if (panel == LE_MM_PANEL_Q8_0) return (size_t)K;
  return le_row_size(vt, K);
}

/* The Q8_0 panel's float block scales follow the codes (64-byte aligned):
 * per src1 matrix and group of 8 columns, [block][8]. */
static inline size_t le_mm_scales_offset(const le_node *n) {
  const le_tensor *b = &n->src[1];
  return ((size_t)(b->ne[0] * b->ne[1] * b->ne[2] * b->ne[3]) + 63) & ~(size_t)63;
}

/* Whether the converted src1 rows are followed by their block scales as
 * floats, per row [block] (the AVX-512 q8_0 tiles' scaled form, mul_mat.c). */
int le_mm_col_scales(const le_node *n);

/* Where those scales start: after the rows, 64-byte aligned. */
static inline size_t le_mm_col_scales_offset(const le_node *n, const le_type_traits *vt) {
  const le_tensor *b = &n->src[1];
  return (le_mm_src1_row(n, vt) * (size_t)(b->ne[1] * b->ne[2] * b->ne[3]) + 63) & ~(size_t)63;
}

/* Whether the scales are followed by each column's block lane terms, 8
 * int32 per block (the scaled tiles' bias, le_gemm_scaled.lanes). */
int le_mm_col_lanes(const le_node *n);

/* Where those lane terms start: after the scales, 64-byte aligned. */
static inline size_t le_mm_col_lanes_offset(const le_node *n, const le_type_traits *vt) {
  const le_tensor *b = &n->src[1];
  return (le_mm_col_scales_offset(n, vt) +
          (size_t)(b->ne[1] * b->ne[2] * b->ne[3]) * (size_t)(b->ne[0] / vt->blck) * sizeof(float) +
          63) & ~(size_t)63;
}

/* Bytes of scratch src1 converted to the vec_dot type takes (from the
 * scratch start), 0 when mul_mat reads src1 in place. */
static inline size_t le_mm_src1_bytes(const le_node *n) {
  const le_type_traits *t = le_traits(n->src[0].type);
  const le_type_traits *vt = t ? le_traits(t->vec_dot_type) : NULL;
  const le_tensor *b = &n->src[1];
  if (!vt || (vt->type == LE_TYPE_F32 && b->nb[0] == 4)) return 0;
  if (le_mm_col_lanes(n)) /* columns in pairs: an even count per matrix */
    return le_mm_col_lanes_offset(n, vt) + (size_t)((b->ne[1] + 1) / 2 * 2 * b->ne[2] * b->ne[3]) *
                                               (size_t)(b->ne[0] / vt->blck) * 8 * sizeof(int32_t);
  if (le_mm_col_scales(n))
    return le_mm_col_scales_offset(n, vt) +
           (size_t)(b->ne[1] * b->ne[2] * b->ne[3]) * (size_t)(b->ne[0] / vt->blck) * sizeof(float);
  if (le_mm_panel(n) == LE_MM_PANEL_Q8_0) {
    const size_t groups = (size_t)((b->ne[1] + 7) / 8 * b->ne[2] * b->ne[3]);
    return le_mm_scales_offset(n) + groups * 8 * (size_t)(b->ne[0] / vt->blck) * sizeof(float);
  }
  return le_mm_src1_row(n, vt) * (size_t)(b->ne[1] * b->ne[2] * b->ne[3]);
}

/* Bytes of scratch (a multiple of 64) each thread takes to convert all of
 * src1 itself, or 0 when mul_mat splits the conversion across threads (or
 * reads src1 in place). */
static inline size_t le_mm_private_bytes(const le_node *n, int nth) {
  const le_tensor *b = &n->src[1];
  if (nth < 2 || b->ne[0] * b->ne[1] * b->ne[2] * b->ne[3] > LE_MM_PRIVATE_MAX) return 0;
  return (le_mm_src1_bytes(n) + 63) & ~(size_t)63;
}

/* Per node of a compute (threads.c's sync array): a barrier before it, and
 * whether thread 0 computes it alone (nth = 1) while the others skip it. */
enum { LE_SYNC_BEFORE = 1, LE_SYNC_SOLO = 2 };

/* Fill sync[0..n_nodes) for a compute on nth threads (sched_plan.c). */
void le_plan_barriers(uint8_t *sync, const le_node *nodes, int32_t n_nodes, int nth);

#endif
