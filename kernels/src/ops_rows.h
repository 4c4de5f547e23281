/* Helpers shared by the row-wise op files (ops.c, ops_rope.c): each thread
 * takes a contiguous range of dst rows, as ggml-cpu/ops.cpp does. */
#ifndef LE_OPS_ROWS_H
#define LE_OPS_ROWS_H
#include "le_internal.h"

#include <string.h>

#define ROW(t, i1, i2, i3) \
  ((char *)(uintptr_t)(t)->data + (i1) * (t)->nb[1] + (i2) * (t)->nb[2] + (i3) * (t)->nb[3])

static inline float node_f32(const le_node *n, int slot) {
  float f;
  memcpy(&f, &n->params[slot], 4);
  return f;
}

static inline int64_t nrows(const le_tensor *t) { return t->ne[1] * t->ne[2] * t->ne[3]; }

/* Rows [*r0, *r1) of nr for thread ith of nth. */
static inline void split_rows(int64_t nr, const le_compute_params *p, int64_t *r0, int64_t *r1) {
  const int64_t dr = (nr + p->nth - 1) / p->nth;
  *r0 = LE_MIN(dr * p->ith, nr);
  *r1 = LE_MIN(*r0 + dr, nr);
}

static inline void row_index(const le_tensor *t, int64_t ir, int64_t *i1, int64_t *i2, int64_t *i3) {
  *i3 = ir / (t->ne[2] * t->ne[1]);
  ir -= *i3 * t->ne[2] * t->ne[1];
  *i2 = ir / t->ne[1];
  *i1 = ir - *i2 * t->ne[1];
}

#define FOR_MY_ROWS(t, p)                                 \
  int64_t r0_, r1_;                                       \
  split_rows(nrows(t), p, &r0_, &r1_);                    \
  for (int64_t ir_ = r0_; ir_ < r1_; ir_++) {             \
    int64_t i1, i2, i3;                                   \
    row_index(t, ir_, &i1, &i2, &i3);

#define END_ROWS }

/* ROPE (ops_rope.c). */
void le_op_rope(const le_node *n, const le_compute_params *p);

#endif
