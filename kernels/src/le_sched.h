/*
 * How mul_mat uses the context scratch, shared by mul_mat.c (which does it)
 * and threads.c (which sizes the scratch and decides which nodes may run
 * without a barrier between them). Not part of the ABI.
 */
#ifndef LE_SCHED_H
#define LE_SCHED_H

#include "le_internal.h"

/* src1 of at most this many elements is converted by every thread on its
 * own (a few hundred ns for a decode step's activations) instead of split
 * across threads followed by a barrier. Conversion is per row and
 * deterministic, so who converts a row never changes a value. */
#define LE_MM_PRIVATE_MAX 4096

/* Whether mul_mat widens src1 to f32 (rounded through f16) for the AVX2
 * F16 panel kernel (mul_mat.c). */
int le_mm_widen(const le_node *n);

/* Bytes of scratch src1 converted to the vec_dot type takes (from the
 * scratch start), 0 when mul_mat reads src1 in place. */
static inline size_t le_mm_src1_bytes(const le_node *n) {
  const le_type_traits *t = le_traits(n->src[0].type);
  const le_type_traits *vt = t ? le_traits(t->vec_dot_type) : NULL;
  const le_tensor *b = &n->src[1];
  if (!vt || (vt->type == LE_TYPE_F32 && b->nb[0] == 4)) return 0;
  const size_t row = le_mm_widen(n) ? (size_t)b->ne[0] * 4 : le_row_size(vt, b->ne[0]);
  return row * (size_t)(b->ne[1] * b->ne[2] * b->ne[3]);
}

/* Bytes of scratch (a multiple of 64) each thread takes to convert all of
 * src1 itself, or 0 when mul_mat splits the conversion across threads (or
 * reads src1 in place). */
static inline size_t le_mm_private_bytes(const le_node *n, int nth) {
  const le_tensor *b = &n->src[1];
  if (nth < 2 || b->ne[0] * b->ne[1] * b->ne[2] * b->ne[3] > LE_MM_PRIVATE_MAX) return 0;
  return (le_mm_src1_bytes(n) + 63) & ~(size_t)63;
}

#endif
