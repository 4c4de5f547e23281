/* exp-based row kernels matching ggml-cpu's vec.cpp arithmetic (vexp.c). */
#ifndef LE_VEXP_H
#define LE_VEXP_H
#include <stdint.h>

/* y = exp(x - max) for n elements; returns their sum in double, summed in ggml's order. */
double le_vec_soft_max_f32(int64_t n, float *y, const float *x, float max);
/* y = silu(x) * g, or silu(x) when g is NULL. */
void le_vec_swiglu_f32(int64_t n, float *y, const float *x, const float *g);
#endif
