/* FLASH_ATTN_EXT's tiled path (flash_attn.c has the op and the other two
 * paths): ggml_compute_forward_flash_attn_ext_tiled, for >= 64 query rows
 * over an F16/F32 cache, with ggml's arithmetic at each SIMD level. */
#include "flash_attn.h"
#include "vexp.h"

static void fa_kq_tile(int64_t DK, const float *Kt, const float *q, float *kq, int fused) {
#if defined(LE_X86)
  if (fa_use_avx2(fused)) {
    le_fa_kq_tile_avx2(DK, Kt, q, kq);
    return;
  }
#endif
  for (int tk = 0; tk < 64; tk++) {
    float acc = 0.0f;
    for (int64_t dk = 0; dk < DK; dk++) acc = fa_fma(Kt[dk * 64 + tk], q[dk], acc, fused);
    kq[tk] = acc;
  }
}
static void fa_vacc_tile(int64_t DV, const float *Vt, const float *w, float *acc, int fused) {
#if defined(LE_X86)
  if (fa_use_avx2(fused) && DV % 8 == 0) {
    le_fa_vacc_tile_avx2(DV, Vt, w, acc);
    return;
  }
#endif
  for (int64_t d = 0; d < DV; d++) {
    float a = acc[d];
    for (int tk = 0; tk < 64; tk++) a = fa_fma(Vt[tk * DV + d], w[tk], a, fused);
    acc[d] = a;
  }
}

/* ggml_compute_forward_flash_attn_ext_tiled for rows [ir, ir + nr) of one
 * head (consecutive query tokens, nr <= 64): K and V tiles are widened once
 * for the block, each row keeps its own online softmax. */
/* K rows up to this many elements are widened through a row buffer. */
#define FA_ROW_MAX 1024

void le_fa_tiled_block(const le_node *n, const fa_shape *s, int64_t ir, int64_t nr,
                           float *work) {
  const le_tensor *q = &n->src[0], *k = &n->src[1], *v = &n->src[2];
  const int64_t DK = s->DK, DV = s->DV, nek1 = s->nek1;
  const int64_t iq3 = ir / (s->neq2 * s->N);
  const int64_t iq2 = (ir - iq3 * s->neq2 * s->N) / s->N;
  const int64_t iq1 = ir - iq3 * s->neq2 * s->N - iq2 * s->N;
  const float slope = fa_slope(s, (uint32_t)iq2);
  const int fused = s->fused;
  const int kv_f16 = k->type == LE_TYPE_F16;

  float *Qf = work;                        /* [64][DK] */
  float *KQ = Qf + FA_TILE_Q * DK;         /* [64][64] */
  float *mask32 = KQ + FA_TILE_Q * FA_TILE_KV;
  float *VKQ = mask32 + FA_TILE_Q * FA_TILE_KV; /* [64][DV] */
  float *M = VKQ + FA_TILE_Q * DV, *S = M + FA_TILE_Q;
  float *Kt = S + FA_TILE_Q;               /* [DK][64] */
  float *Vt = Kt + FA_TILE_KV * DK;        /* [64][DV] */

  const int64_t ik2 = iq2 / s->rk2, ik3 = iq3 / s->rk3;
  const int64_t iv2 = iq2 / s->rv2, iv3 = iq3 / s->rv3;
  float krow[FA_ROW_MAX];
  const uint16_t *mp[FA_TILE_Q];
  for (int64_t t = 0; t < nr; t++) {
    memcpy(Qf + t * DK, fa_at(q, iq1 + t, iq2, iq3), (size_t)DK * 4);
    mp[t] = fa_mask_row(n, iq1 + t, iq2, iq3);
    M[t] = -INFINITY, S[t] = 0.0f;
  }
  memset(VKQ, 0, (size_t)(nr * DV) * 4);
  memset(Kt, 0, (size_t)(FA_TILE_KV * DK) * 4);

  for (int64_t ic = 0; ic < nek1; ic += FA_TILE_KV) {
    const int kv_tile = (int)LE_MIN((int64_t)FA_TILE_KV, nek1 - ic);
    /* per row: its mask over the tile, and whether the tile adds anything
     * to it (ggml skips a tile masked for every row of its Q tile, and zeroes
     * the weights of a row it masks completely: the same sums) */
    uint8_t live[FA_TILE_Q];
    int any = 0;
    for (int64_t t = 0; t < nr; t++) {
      float *m = mask32 + t * FA_TILE_KV;
      live[t] = 1;
      if (mp[t]) {
        int all_masked = 1;
        le_fp16_to_fp32_row(mp[t] + ic, m, kv_tile); /* exact: F16C where there is one */
        for (int tk = 0; tk < kv_tile; tk++) {
          m[tk] = slope * m[tk];
          if (m[tk] != -INFINITY) all_masked = 0;
        }
        for (int tk = kv_tile; tk < FA_TILE_KV; tk++) m[tk] = -INFINITY;
        live[t] = !all_masked;
      }
      any |= live[t];
    }
    if (!any) continue;
    for (int tk = 0; tk < kv_tile; tk++) {
      const char *kr = fa_at(k, ic + tk, ik2, ik3);
      if (kv_f16 && DK <= FA_ROW_MAX) {
        /* widened as a row, then stored down the tile's column */
        le_fp16_to_fp32_row((const uint16_t *)kr, krow, DK);
        for (int64_t dk = 0; dk < DK; dk++) Kt[dk * FA_TILE_KV + tk] = krow[dk];
      } else if (kv_f16) {
        const uint16_t *kh = (const uint16_t *)kr;
        for (int64_t dk = 0; dk < DK; dk++) Kt[dk * FA_TILE_KV + tk] = le_fp16_to_fp32(kh[dk]);
      } else {
        const float *kf = (const float *)kr;
        for (int64_t dk = 0; dk < DK; dk++) Kt[dk * FA_TILE_KV + tk] = kf[dk];
      }
      const char *vr = fa_at(v, ic + tk, iv2, iv3);
      if (kv_f16) le_fp16_to_fp32_row((const uint16_t *)vr, Vt + tk * DV, DV);
      else memcpy(Vt + tk * DV, vr, (size_t)DV * 4);
    }
    /* padded cells: weight 0 below, so any finite value will do */
    for (int tk = kv_tile; tk < FA_TILE_KV; tk++) memset(Vt + tk * DV, 0, (size_t)DV * 4);

    /* Each row's steps as ggml takes them, the two products for several
     * rows at once where a kernel does so (each element's chain the same) */
    int rows[FA_TILE_Q], nl = 0, nv = 0;
    for (int t = 0; t < (int)nr; t++)
      if (live[t]) rows[nl++] = t;
    if (!(fused && le_fa_kq_rows(DK, Kt, Qf, KQ, rows, nl)))
      for (int i = 0; i < nl; i++) /* simd_gemm: fma chains from 0 */
        fa_kq_tile(DK, Kt, Qf + rows[i] * DK, KQ + rows[i] * FA_TILE_KV, fused);
    for (int i = 0; i < nl; i++) {
      const int t = rows[i];
      float *kq = KQ + t * FA_TILE_KV;
      for (int tk = 0; tk < FA_TILE_KV; tk++) kq[tk] *= s->scale;
      for (int tk = kv_tile; tk < FA_TILE_KV; tk++) kq[tk] = -INFINITY;
      if (mp[t]) {
        const float *m = mask32 + t * FA_TILE_KV;
        for (int tk = 0; tk < FA_TILE_KV; tk++) kq[tk] = kq[tk] + m[tk];
      }
      float tile_max = -INFINITY;
      for (int tk = 0; tk < FA_TILE_KV; tk++) tile_max = LE_MAX(tile_max, kq[tk]);
      if (tile_max == -INFINITY) continue;
      const float Mold = M[t];
      const float Mnew = fmaxf(Mold, tile_max);
      if (Mnew > Mold) {
        const float ms = expf(Mold - Mnew);
        fa_scale_f32(DV, VKQ + t * DV, ms);
        S[t] *= ms;
      }
      M[t] = Mnew;
      S[t] += le_vec_soft_max_f32(FA_TILE_KV, kq, kq, Mnew); /* float += double */
      rows[nv++] = t; /* rows[] past nv is read no more */
    }
    if (!(fused && le_fa_vacc_rows(DV, Vt, KQ, VKQ, rows, nv)))
      for (int i = 0; i < nv; i++) /* simd_gemm over the tile */
        fa_vacc_tile(DV, Vt, KQ + rows[i] * FA_TILE_KV, VKQ + rows[i] * DV, fused);
  }
  for (int64_t t = 0; t < nr; t++) {
    const float S_inv = S[t] == 0.0f ? 0.0f : 1.0f / S[t];
    fa_scale_f32(DV, VKQ + t * DV, S_inv);
    memcpy(fa_dst_row(n, iq1 + t, iq2, iq3), VKQ + t * DV, (size_t)DV * 4);
  }
}
