// ssm_conv, ssm_scan (Mamba's depthwise causal convolution and selective
// scan, ggml's semantics as kernels/src/ssm.c implements them) and concat.
// One thread per output channel or state row; the scan walks the tokens of
// its row in order, as the recurrence requires.
#include <math.h>

#include "common.cuh"

namespace {

struct St {
  char *data;
  int64_t ne[4];
  int64_t nb[4];
};

St st(const le_tensor &t) {
  St r;
  r.data = (char *)(uintptr_t)t.data;
  for (int i = 0; i < 4; i++) {
    r.ne[i] = t.ne[i];
    r.nb[i] = t.nb[i];
  }
  return r;
}

const int BLOCK = 128;

// x[i1, i2, i3] = sum over k < d_conv of sx[i2 + k, i1, i3] * c[k, i1].
__global__ void k_ssm_conv(St d, St sx, St c) {
  const int64_t n = d.ne[0] * d.ne[1] * d.ne[2];
  for (int64_t e = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; e < n;
       e += (int64_t)gridDim.x * blockDim.x) {
    const int64_t i1 = e % d.ne[0], i2 = (e / d.ne[0]) % d.ne[1], i3 = e / (d.ne[0] * d.ne[1]);
    const float *s = (const float *)(sx.data + i1 * sx.nb[1] + i3 * sx.nb[2]) + i2;
    const float *w = (const float *)(c.data + i1 * c.nb[1]);
    float sum = 0.0f;
    for (int64_t k = 0; k < c.ne[0]; k++) sum += s[k] * w[k];
    *(float *)(d.data + i1 * 4 + i2 * d.nb[1] + i3 * d.nb[2]) = sum;
  }
}

__device__ __forceinline__ float softplus(float v) { return v > 20.0f ? v : logf(1 + expf(v)); }

// One thread per state row (i1 of head h of sequence i3), all tokens in order.
__global__ void k_ssm_scan(char *dst, St s0t, St x, St dt, St a, St b, St c, const int32_t *ids,
                           int64_t K) {
  const int64_t nc = s0t.ne[0], nr = s0t.ne[1], nh = x.ne[1], ng = b.ne[1], nt = x.ne[2],
                ns = x.ne[3];
  const int64_t rows = nr * nh * ns;
  const int64_t s_off = x.ne[0] * x.ne[1] * x.ne[2] * x.ne[3] * 4;
  const bool mamba2 = a.ne[0] == 1;
  for (int64_t e = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; e < rows;
       e += (int64_t)gridDim.x * blockDim.x) {
    const int64_t i1 = e % nr, h = (e / nr) % nh, i3 = e / (nr * nh);
    const int64_t ii = i1 + h * nr;
    const int32_t id = ids[i3];
    if (id < 0 || id >= s0t.ne[3]) continue;  // the CPU kernel refuses such ids; TS cannot see them
    const float *r0 = (const float *)(s0t.data + id * s0t.nb[3]) + ii * nc;
    float *r = (float *)(dst + s_off + i3 * s0t.nb[3]) + ii * nc;
    const int64_t g = h / (nh / ng);
    const float *A = (const float *)a.data;
    for (int64_t i2 = 0; i2 < nt; i2++) {
      const float xv = ((const float *)(x.data + i2 * x.nb[2] + i3 * x.nb[3]))[ii];
      const float dt_sp = softplus(((const float *)(dt.data + i2 * dt.nb[1] + i3 * dt.nb[2]))[h]);
      const float *B = (const float *)(b.data + i2 * b.nb[2] + i3 * b.nb[3]) + g * nc;
      const float *C = (const float *)(c.data + i2 * c.nb[2] + i3 * c.nb[3]) + g * nc;
      const float x_dt = xv * dt_sp;
      const float dA = mamba2 ? expf(dt_sp * A[h]) : 0.0f;
      float sum = 0.0f;
      for (int64_t i = 0; i < nc; i++) {
        const float e_a = mamba2 ? dA : expf(dt_sp * A[h * nc + i]);
        const float state = r0[i] * e_a + B[i] * x_dt;
        sum += state * C[i];
        r[i] = state;
      }
      ((float *)dst)[(i2 * nh * nr + i3 * nt * nh * nr) + ii] = sum;
      // Rollback snapshots (K > 1): the state after token nt-1-slot goes to slot `slot`.
      const int64_t slot = nt - 1 - i2;
      if (K > 1 && slot > 0 && slot < K) {
        float *snap = (float *)(dst + s_off + (slot * ns + i3) * s0t.nb[3]) + ii * nc;
        for (int64_t i = 0; i < nc; i++) snap[i] = r[i];
      }
      r0 = r;  // later tokens read the state just written
    }
  }
}

// dst element from src0 below src0's extent along dim, else from src1 shifted back.
__global__ void k_concat(St d, St a, St b, int dim) {
  const int64_t n = d.ne[0] * d.ne[1] * d.ne[2] * d.ne[3];
  for (int64_t e = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; e < n;
       e += (int64_t)gridDim.x * blockDim.x) {
    int64_t o[4], q = e;
    for (int i = 0; i < 4; i++) {
      o[i] = q % d.ne[i];
      q /= d.ne[i];
    }
    const bool from_a = o[dim] < a.ne[dim];
    const St &s = from_a ? a : b;
    if (!from_a) o[dim] -= a.ne[dim];
    const float v = *(const float *)(s.data + o[0] * s.nb[0] + o[1] * s.nb[1] + o[2] * s.nb[2] +
                                     o[3] * s.nb[3]);
    if (!from_a) o[dim] += a.ne[dim];
    *(float *)(d.data + o[0] * 4 + o[1] * d.nb[1] + o[2] * d.nb[2] + o[3] * d.nb[3]) = v;
  }
}

unsigned blocks(int64_t n) { return grid_dim((n + BLOCK - 1) / BLOCK, 65535 * 16); }

}  // namespace

int32_t lec_op_ssm_conv(lec_ctx *ctx, const le_node *n) {
  const int64_t e = n->dst.ne[0] * n->dst.ne[1] * n->dst.ne[2];
  if (e == 0) return 0;
  LEC_LAUNCH(k_ssm_conv, blocks(e), BLOCK, 0, ctx->stream)(st(n->dst), st(n->src[0]),
                                                           st(n->src[1]));
  return 0;
}

int32_t lec_op_ssm_scan(lec_ctx *ctx, const le_node *n) {
  const le_tensor &s = n->src[0], &x = n->src[1];
  const int64_t rows = s.ne[1] * x.ne[1] * x.ne[3];
  if (rows == 0) return 0;
  LEC_LAUNCH(k_ssm_scan, blocks(rows), BLOCK, 0, ctx->stream)(
      (char *)(uintptr_t)n->dst.data, st(s), st(x), st(n->src[2]), st(n->src[3]), st(n->src[4]),
      st(n->src[5]), (const int32_t *)(uintptr_t)n->src[6].data, (int64_t)n->params[0]);
  return 0;
}

int32_t lec_op_concat(lec_ctx *ctx, const le_node *n) {
  const int dim = n->params[0];
  if (dim < 0 || dim > 3) return LEC_E_INVALID;
  const int64_t e = n->dst.ne[0] * n->dst.ne[1] * n->dst.ne[2] * n->dst.ne[3];
  if (e == 0) return 0;
  LEC_LAUNCH(k_concat, blocks(e), BLOCK, 0, ctx->stream)(st(n->dst), st(n->src[0]), st(n->src[1]),
                                                         dim);
  return 0;
}
