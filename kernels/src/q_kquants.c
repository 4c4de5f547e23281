/* The scale searches shared by the K-quant reference quantizers. They follow
 * ggml-quants.c's non-imatrix path operation for operation (f32 arithmetic in
 * the same order, no contraction) so the chosen integers and scales match
 * llama.cpp's files bit for bit. */
#include "q_common.h"

/* Symmetric quantization of n values to [-nmax, nmax-1]; rmse_type 1 weights
 * the least-squares refit by x^2 and tries 18 nearby scales. */
float le_make_qx_quants(int n, int nmax, const float *x, int8_t *L, int rmse_type) {
  float max = 0, amax = 0;
  for (int i = 0; i < n; i++) {
    const float ax = fabsf(x[i]);
    if (ax > amax) {
      amax = ax;
      max = x[i];
    }
  }
  if (amax < LE_GROUP_MAX_EPS) {
    for (int i = 0; i < n; i++) L[i] = 0;
    return 0.f;
  }
  float iscale = -nmax / max;
  if (rmse_type == 0) {
    for (int i = 0; i < n; i++) {
      const int l = le_nearest_int(iscale * x[i]);
      L[i] = (int8_t)(nmax + LE_MAX(-nmax, LE_MIN(nmax - 1, l)));
    }
    return 1 / iscale;
  }
  /* only rmse_type 1 (weights x^2) is used by the reference quantizers */
  float sumlx = 0, suml2 = 0;
  for (int i = 0; i < n; i++) {
    int l = le_nearest_int(iscale * x[i]);
    l = LE_MAX(-nmax, LE_MIN(nmax - 1, l));
    L[i] = (int8_t)(l + nmax);
    const float w = x[i] * x[i];
    sumlx += w * x[i] * l;
    suml2 += w * l * l;
  }
  float scale = suml2 ? sumlx / suml2 : 0.0f;
  float best = scale * sumlx;
  for (int is = -9; is <= 9; is++) {
    if (is == 0) continue;
    iscale = -(nmax + 0.1f * is) / max;
    sumlx = suml2 = 0;
    for (int i = 0; i < n; i++) {
      int l = le_nearest_int(iscale * x[i]);
      l = LE_MAX(-nmax, LE_MIN(nmax - 1, l));
      const float w = x[i] * x[i];
      sumlx += w * x[i] * l;
      suml2 += w * l * l;
    }
    if (suml2 > 0 && sumlx * sumlx > best * suml2) {
      for (int i = 0; i < n; i++) {
        const int l = le_nearest_int(iscale * x[i]);
        L[i] = (int8_t)(nmax + LE_MAX(-nmax, LE_MIN(nmax - 1, l)));
      }
      scale = sumlx / suml2;
      best = scale * sumlx;
    }
  }
  return scale;
}

/* q3_K's per-16 search: start from the max-based scale, then move single
 * values while the x^2-weighted fit improves (at most 5 sweeps). */
float le_make_q3_quants(int n, int nmax, const float *x, int8_t *L, bool do_rmse) {
  float max = 0, amax = 0;
  for (int i = 0; i < n; i++) {
    const float ax = fabsf(x[i]);
    if (ax > amax) {
      amax = ax;
      max = x[i];
    }
  }
  if (amax < LE_GROUP_MAX_EPS) {
    for (int i = 0; i < n; i++) L[i] = 0;
    return 0.f;
  }
  const float iscale = -nmax / max;
  if (do_rmse) {
    float sumlx = 0, suml2 = 0;
    for (int i = 0; i < n; i++) {
      int l = le_nearest_int(iscale * x[i]);
      l = LE_MAX(-nmax, LE_MIN(nmax - 1, l));
      L[i] = (int8_t)l;
      const float w = x[i] * x[i];
      sumlx += w * x[i] * l;
      suml2 += w * l * l;
    }
    for (int itry = 0; itry < 5; itry++) {
      int changed = 0;
      for (int i = 0; i < n; i++) {
        const float w = x[i] * x[i];
        float slx = sumlx - w * x[i] * L[i];
        if (slx > 0) {
          float sl2 = suml2 - w * L[i] * L[i];
          int nl = le_nearest_int(x[i] * sl2 / slx);
          nl = LE_MAX(-nmax, LE_MIN(nmax - 1, nl));
          if (nl != L[i]) {
            slx += w * x[i] * nl;
            sl2 += w * nl * nl;
            if (sl2 > 0 && slx * slx * suml2 > sumlx * sumlx * sl2) {
              L[i] = (int8_t)nl;
              sumlx = slx;
              suml2 = sl2;
              changed++;
            }
          }
        }
      }
      if (!changed) break;
    }
    for (int i = 0; i < n; i++) L[i] = (int8_t)(L[i] + nmax);
    return suml2 > 0.0f ? sumlx / suml2 : 0.0f;
  }
  for (int i = 0; i < n; i++) {
    int l = le_nearest_int(iscale * x[i]);
    l = LE_MAX(-nmax, LE_MIN(nmax - 1, l));
    L[i] = (int8_t)(l + nmax);
  }
  return 1 / iscale;
}

/* Asymmetric (scale, min) fit to [0, nmax]: weighted least squares over
 * nstep+1 candidate scales around nmax/(max-min); returns the scale and
 * writes -min (a non-negative offset) to *the_min. */
float le_make_qkx2_quants(int n, int nmax, const float *x, const float *w, uint8_t *L,
                          float *the_min, uint8_t *Laux, float rmin, float rdelta, int nstep,
                          bool use_mad) {
  float min = x[0], max = x[0];
  float sum_w = w[0];
  float sum_x = sum_w * x[0];
  for (int i = 1; i < n; i++) {
    if (x[i] < min) min = x[i];
    if (x[i] > max) max = x[i];
    sum_w += w[i];
    sum_x += w[i] * x[i];
  }
  if (min > 0) min = 0;
  if (max == min) {
    for (int i = 0; i < n; i++) L[i] = 0;
    *the_min = -min;
    return 0.f;
  }
  float iscale = nmax / (max - min);
  float scale = 1 / iscale;
  float best_error = 0;
  for (int i = 0; i < n; i++) {
    const int l = le_nearest_int(iscale * (x[i] - min));
    L[i] = (uint8_t)LE_MAX(0, LE_MIN(nmax, l));
    float diff = scale * L[i] + min - x[i];
    diff = use_mad ? fabsf(diff) : diff * diff;
    best_error += w[i] * diff;
  }
  if (nstep < 1) {
    *the_min = -min;
    return scale;
  }
  for (int is = 0; is <= nstep; is++) {
    iscale = (rmin + rdelta * is + nmax) / (max - min);
    float sum_l = 0, sum_l2 = 0, sum_xl = 0;
    for (int i = 0; i < n; i++) {
      int l = le_nearest_int(iscale * (x[i] - min));
      l = LE_MAX(0, LE_MIN(nmax, l));
      Laux[i] = (uint8_t)l;
      sum_l += w[i] * l;
      sum_l2 += w[i] * l * l;
      sum_xl += w[i] * l * x[i];
    }
    const float D = sum_w * sum_l2 - sum_l * sum_l;
    if (D > 0) {
      float this_scale = (sum_w * sum_xl - sum_x * sum_l) / D;
      float this_min = (sum_l2 * sum_x - sum_l * sum_xl) / D;
      if (this_min > 0) {
        this_min = 0;
        this_scale = sum_xl / sum_l2;
      }
      float cur_error = 0;
      for (int i = 0; i < n; i++) {
        float diff = this_scale * Laux[i] + this_min - x[i];
        diff = use_mad ? fabsf(diff) : diff * diff;
        cur_error += w[i] * diff;
      }
      if (cur_error < best_error) {
        for (int i = 0; i < n; i++) L[i] = Laux[i];
        best_error = cur_error;
        scale = this_scale;
        min = this_min;
      }
    }
  }
  *the_min = -min;
  return scale;
}

/* Q8_K: the K-quants' activation type (f32 scale, per-16 sums). ggml's CPU
 * path uses the reference quantizer for it, so there is only one. */
#if defined(LE_X86)
/* quantize_row_q8_K_ref (ggml's x86 quantizer) eight lanes at a time: the
 * same max (the first element of largest magnitude, NaNs skipped), the same
 * nearest_int by the 1.5 * 2^23 trick and the same bytes (a NaN's too), all
 * exact; the scalar form was 2.4%
 * of a 1.1B Q4_K_M decode. Returns 0 for an all-zero block (the caller
 * clears it). */
LE_TARGET_AVX2 static int q8_k_block_avx2(const float *x, le_block_q8_k *y) {
  const __m256 sign = _mm256_set1_ps(-0.0f);
  __m256 m = _mm256_setzero_ps();
  for (int j = 0; j < LE_QK_K; j += 8) /* max(|x|, m): m where x is NaN, as ax > amax */
    m = _mm256_max_ps(_mm256_andnot_ps(sign, _mm256_loadu_ps(x + j)), m);
  const float amax = le_hmax_ps256(m);
  if (!amax) return 0;
  const __m256 va = _mm256_set1_ps(amax);
  float max = amax;
  for (int j = 0; j < LE_QK_K; j += 8) {
    const __m256 ax = _mm256_andnot_ps(sign, _mm256_loadu_ps(x + j));
    const int hit = _mm256_movemask_ps(_mm256_cmp_ps(ax, va, _CMP_EQ_OQ));
    if (hit) {
      max = x[j + __builtin_ctz((unsigned)hit)];
      break;
    }
  }
  const float iscale = -127.f / max;
  const __m256 vs = _mm256_set1_ps(iscale), magic = _mm256_set1_ps(12582912.f);
  const __m256i mant = _mm256_set1_epi32(0x007fffff), half = _mm256_set1_epi32(0x00400000);
  const __m256i top = _mm256_set1_epi32(127), low = _mm256_set1_epi32(0xff);
  const __m256i perm = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
  for (int j = 0; j < LE_QK_K; j += 32) {
    __m256i q[4];
    for (int k = 0; k < 4; k++) {
      const __m256 t = _mm256_add_ps(_mm256_mul_ps(vs, _mm256_loadu_ps(x + j + 8 * k)), magic);
      const __m256i v = _mm256_sub_epi32(_mm256_and_si256(_mm256_castps_si256(t), mant), half);
      q[k] = _mm256_and_si256(_mm256_min_epi32(v, top), low); /* (int8_t)'s wrap, not saturation */
    }
    const __m256i b =
        _mm256_packus_epi16(_mm256_packs_epi32(q[0], q[1]), _mm256_packs_epi32(q[2], q[3]));
    _mm256_storeu_si256((__m256i *)(y->qs + j), _mm256_permutevar8x32_epi32(b, perm));
  }
  for (int g = 0; g < 16; g++) {
    int s = 0;
    for (int j = 0; j < 16; j++) s += y->qs[16 * g + j];
    y->bsums[g] = (int16_t)s;
  }
  y->d = 1 / iscale;
  return 1;
}
#endif

void le_quantize_q8_k(const float *x, void *vy, int64_t n) {
  le_block_q8_k *y = vy;
#if defined(LE_X86)
  if (le_simd() != LE_SIMD_SCALAR) {
    for (int64_t i = 0; i < n / LE_QK_K; i++, x += LE_QK_K)
      if (!q8_k_block_avx2(x, &y[i])) memset(&y[i], 0, sizeof y[i]);
    return;
  }
#endif
  for (int64_t i = 0; i < n / LE_QK_K; i++, x += LE_QK_K) {
    float max = 0, amax = 0;
    for (int j = 0; j < LE_QK_K; j++) {
      const float ax = fabsf(x[j]);
      if (ax > amax) {
        amax = ax;
        max = x[j];
      }
    }
    if (!amax) {
      memset(&y[i], 0, sizeof y[i]);
      continue;
    }
    const float iscale = -127.f / max;
    for (int j = 0; j < LE_QK_K; j++) {
      const int v = le_nearest_int(iscale * x[j]);
      y[i].qs[j] = (int8_t)LE_MIN(127, v);
    }
    for (int g = 0; g < 16; g++) {
      int s = 0;
      for (int j = 0; j < 16; j++) s += y[i].qs[16 * g + j];
      y[i].bsums[g] = (int16_t)s;
    }
    y[i].d = 1 / iscale;
  }
}

static void q8_k_to_float(const void *vx, float *y, int64_t n) {
  const le_block_q8_k *x = vx;
  for (int64_t i = 0; i < n / LE_QK_K; i++)
    for (int j = 0; j < LE_QK_K; j++) y[i * LE_QK_K + j] = x[i].d * x[i].qs[j];
}

const le_type_traits le_traits_q8_k = {
    .type = LE_TYPE_Q8_K,
    .name = "q8_K",
    .blck = LE_QK_K,
    .size = sizeof(le_block_q8_k),
    .to_float = q8_k_to_float,
    .from_float_ref = le_quantize_q8_k,
    .from_float_act = le_quantize_q8_k,
    .vec_dot_type = LE_TYPE_Q8_K,
    .vec_dot = {NULL},
};
