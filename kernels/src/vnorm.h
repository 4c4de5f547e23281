/* LayerNorm's variance sum in ggml-cpu's vec.cpp order (vnorm.c). */
#ifndef LE_VNORM_H
#define LE_VNORM_H
#include <stdint.h>

/* y = x - mean for n elements; returns the sum of the squares (each squared
 * in float) in double, grouped as ggml_vec_cvar_f32 groups them. */
double le_vec_cvar_f32(int64_t n, float *y, const float *x, float mean);
#endif
