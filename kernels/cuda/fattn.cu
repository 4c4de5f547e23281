// flash_attn_ext (ggml_flash_attn_ext): per query row and head, the softmax of
// scale * q.k + slope * mask over the KV positions, times V, with an online
// softmax (no KQ matrix in memory). K and V may be F32, F16 or Q8_0, the mask
// F16; masked (-inf) positions are skipped as in ggml, and a row with no
// unmasked position yields zeros (ggml-cpu's S == 0 case).
//
// One thread block of FA_WARPS warps per (query, head, i3): warps take KV
// positions in turn, each keeps its own running max, sum and Dv accumulator
// in shared memory, and the warps are merged at the end. Plain f32 math on
// dequantized K/V: a simple kernel to be checked first, not ggml-cuda's tiled
// tensor-core one.
#include <string.h>

#include "common.cuh"

namespace {

const int FA_WARPS = 4;

struct FaArgs {
  float scale, max_bias, m0, m1;
  uint32_t n_head_log2;
  int has_mask;
};

__global__ void k_flash_attn(DevTensor d, DevTensor q, DevTensor k, DevTensor v, DevTensor m, FaArgs p) {
  LEC_DYN_SHARED(float, sh);
  const int64_t D = q.ne[0], Dv = v.ne[0], nkv = k.ne[1];
  const int64_t iq1 = blockIdx.x, iq2 = blockIdx.y, iq3 = blockIdx.z;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  float *qs = sh;                                // D
  float *acc = sh + D;                           // FA_WARPS * Dv
  float *wm = acc + FA_WARPS * Dv;               // FA_WARPS running maxima
  float *wl = wm + FA_WARPS;                     // FA_WARPS running sums

  const float *qrow = (const float *)(q.data + iq1 * q.nb[1] + iq2 * q.nb[2] + iq3 * q.nb[3]);
  for (int64_t i = threadIdx.x; i < D; i += blockDim.x) qs[i] = qrow[i];
  for (int64_t i = threadIdx.x; i < FA_WARPS * Dv; i += blockDim.x) acc[i] = 0.0f;
  __syncthreads();

  const int64_t ik2 = iq2 / (q.ne[2] / k.ne[2]), ik3 = iq3 / (q.ne[3] / k.ne[3]);
  const int64_t iv2 = iq2 / (q.ne[2] / v.ne[2]), iv3 = iq3 / (q.ne[3] / v.ne[3]);
  const __half *mrow = p.has_mask
      ? (const __half *)(m.data + iq1 * m.nb[1] + (iq2 % m.ne[2]) * m.nb[2] +
                         (iq3 % m.ne[3]) * m.nb[3])
      : nullptr;
  float slope = 1.0f;
  if (p.max_bias > 0.0f) {
    const uint32_t h = (uint32_t)iq2;
    slope = powf(h < p.n_head_log2 ? p.m0 : p.m1,
                 h < p.n_head_log2 ? (float)(h + 1) : (float)(2 * (h - p.n_head_log2) + 1));
  }

  float M = -INFINITY, S = 0.0f;
  float *a = acc + warp * Dv;
  for (int64_t j = warp; j < nkv; j += FA_WARPS) {
    const float mv = mrow ? slope * __half2float(mrow[j]) : 0.0f;
    if (mv == -INFINITY) continue;  // the whole warp reads the same j: uniform branch
    const char *krow = k.data + j * k.nb[1] + ik2 * k.nb[2] + ik3 * k.nb[3];
    float s = 0.0f;
    for (int64_t i = lane; i < D; i += 32) s += qs[i] * load_elem(krow, k.type, i);
    s = warp_sum(s) * p.scale + mv;
    const float Mnew = fmaxf(M, s);
    const float ms = expf(M - Mnew), vs = expf(s - Mnew);  // expf(-inf) = 0 on the first
    const char *vrow = v.data + j * v.nb[1] + iv2 * v.nb[2] + iv3 * v.nb[3];
    for (int64_t i = lane; i < Dv; i += 32) a[i] = a[i] * ms + vs * load_elem(vrow, v.type, i);
    S = S * ms + vs;
    M = Mnew;
  }
  if (lane == 0) {
    wm[warp] = M;
    wl[warp] = S;
  }
  __syncthreads();
  float Mall = -INFINITY;
  for (int w = 0; w < FA_WARPS; w++) Mall = fmaxf(Mall, wm[w]);
  float Sall = 0.0f;
  for (int w = 0; w < FA_WARPS; w++) Sall += wm[w] == -INFINITY ? 0.0f : wl[w] * expf(wm[w] - Mall);
  const float inv = Sall == 0.0f ? 0.0f : 1.0f / Sall;
  float *out = (float *)(d.data + iq2 * d.nb[1] + iq1 * d.nb[2] + iq3 * d.nb[3]);
  for (int64_t i = threadIdx.x; i < Dv; i += blockDim.x) {
    float o = 0.0f;
    for (int w = 0; w < FA_WARPS; w++) {
      if (wm[w] != -INFINITY) o += acc[w * Dv + i] * expf(wm[w] - Mall);
    }
    out[i] = o * inv;
  }
}

bool kv_type(int t) { return t == T_F32 || t == T_F16 || t == T_Q8_0; }

}  // namespace

int32_t lec_op_flash_attn(lec_ctx *ctx, const le_node *n) {
  const le_tensor &q = n->src[0], &k = n->src[1], &v = n->src[2];
  if (q.type != T_F32 || !kv_type(k.type) || !kv_type(v.type) || n->dst.type != T_F32) {
    return LEC_E_UNSUPPORTED;
  }
  const bool has_mask = n->n_src > 3 && n->src[3].data != 0;
  if (has_mask && n->src[3].type != T_F16) return LEC_E_UNSUPPORTED;
  float softcap;
  memcpy(&softcap, &n->params[2], 4);
  if (softcap != 0.0f) return LEC_E_UNSUPPORTED;
  if (q.ne[1] == 0 || q.ne[2] == 0 || q.ne[3] == 0) return 0;
  if (q.ne[1] > 0x7fffffff || q.ne[2] > 65535 || q.ne[3] > 65535) return LEC_E_UNSUPPORTED;
  FaArgs p;
  memcpy(&p.scale, &n->params[0], 4);
  memcpy(&p.max_bias, &n->params[1], 4);
  p.has_mask = has_mask;
  const uint32_t n_head = (uint32_t)q.ne[2];
  p.n_head_log2 = 1u << (uint32_t)floorf(log2f((float)n_head));
  p.m0 = powf(2.0f, -p.max_bias / p.n_head_log2);
  p.m1 = powf(2.0f, -(p.max_bias / 2.0f) / p.n_head_log2);
  const size_t shmem = (size_t)(q.ne[0] + FA_WARPS * v.ne[0] + 2 * FA_WARPS) * sizeof(float);
  if (shmem > 48 * 1024) return LEC_E_UNSUPPORTED;
  const dim3 grid((unsigned)q.ne[1], (unsigned)q.ne[2], (unsigned)q.ne[3]);
  const DevTensor m = has_mask ? dev_tensor(n->src[3]) : dev_tensor(q);
  LEC_LAUNCH(k_flash_attn, grid, FA_WARPS * 32, shmem, ctx->stream)(dev_tensor(n->dst), dev_tensor(q), dev_tensor(k),
                                                            dev_tensor(v), m, p);
  return 0;
}
