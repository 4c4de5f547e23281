// mul_mat: dst[M, N, ..] = src0[K, M, ..]^T * src1[K, N, ..], src0 batch dims
// broadcast over src1's (ggml's r2 = ne12/ne02, r3 = ne13/ne03).
//
// - Few columns (N <= MMV_MAX_COLS, the decode case): one warp per output.
//   Q8_0 and Q4_0 weights take ggml-cuda's route: src1 quantized to Q8_1
//   blocks in scratch, integer dot products with __dp4a. Other weights (F32,
//   F16, BF16, Q4_1, Q5_0, Q5_1, Q4_K, Q5_K, Q6_K) are dequantized element by
//   element and multiplied in f32 (slow for the K-quants: a first version).
// - More columns: a 16x16 shared-memory tiled kernel dequantizing src0 to
//   f32 on the fly (correct, not fast: tensor-core MMQ is future work).
#include "common.cuh"

namespace {

const int MMV_MAX_COLS = 8;

// Column c of src1 (c = i11 + ne11*(i12 + ne12*i13)) and the src0 matrix it meets.
struct Col {
  int64_t i11, i12, i13;
};
__device__ __forceinline__ Col col_of(const DevTensor &b, int64_t c) {
  Col r;
  r.i11 = c % b.ne[1];
  r.i12 = (c / b.ne[1]) % b.ne[2];
  r.i13 = c / (b.ne[1] * b.ne[2]);
  return r;
}
__device__ __forceinline__ const char *a_row(const DevTensor &a, const DevTensor &b, int64_t m, Col c) {
  const int64_t i02 = c.i12 / (b.ne[2] / a.ne[2]), i03 = c.i13 / (b.ne[3] / a.ne[3]);
  return a.data + m * a.nb[1] + i02 * a.nb[2] + i03 * a.nb[3];
}
__device__ __forceinline__ float *d_at(const DevTensor &d, int64_t m, Col c) {
  return (float *)(d.data + m * 4 + c.i11 * d.nb[1] + c.i12 * d.nb[2] + c.i13 * d.nb[3]);
}
__device__ __forceinline__ const float *b_col(const DevTensor &b, Col c) {
  return (const float *)(b.data + c.i11 * b.nb[1] + c.i12 * b.nb[2] + c.i13 * b.nb[3]);
}

// ---- activations to Q8_1 (one warp per block of 32) --------------------
__global__ void k_quantize_q8_1(DevTensor b, block_q8_1 *out, int64_t nblk_col, int64_t ncols) {
  const int64_t blk = blockIdx.x * (int64_t)(blockDim.x / 32) + threadIdx.x / 32;
  if (blk >= nblk_col * ncols) return;
  const int lane = threadIdx.x % 32;
  const int64_t c = blk / nblk_col, k = (blk % nblk_col) * QK + lane;
  const float x = b_col(b, col_of(b, c))[k];
  const float amax = warp_max(fabsf(x));
  const float sum = warp_sum(x);
  const float d = amax / 127.0f;
  const int8_t q = amax == 0.0f ? 0 : (int8_t)roundf(x / d);
  block_q8_1 *y = out + blk;
  y->qs[lane] = q;
  if (lane == 0) y->ds = __floats2half2_rn(d, sum);
}

// 4 bytes at a 2-byte aligned address (ggml's blocks are 18 and 34 bytes long).
__device__ __forceinline__ int load_i32_a2(const void *p) {
  const uint16_t *h = (const uint16_t *)p;
  return (int)((uint32_t)h[0] | ((uint32_t)h[1] << 16));
}

template <int TYPE>
__global__ void k_mmvq(DevTensor d, DevTensor a, DevTensor b, const block_q8_1 *yq, int64_t nblk) {
  const int64_t m = blockIdx.x;
  const int lane = threadIdx.x;
  const int64_t ncols = b.ne[1] * b.ne[2] * b.ne[3];
  for (int64_t c = blockIdx.y; c < ncols; c += gridDim.y) {
    const Col cc = col_of(b, c);
    const char *row = a_row(a, b, m, cc);
    const block_q8_1 *y = yq + c * nblk;
    float acc = 0.0f;
    for (int64_t i = lane; i < nblk; i += 32) {
      const float2 ds = __half22float2(y[i].ds);
      const int *u = (const int *)y[i].qs;
      int sumi = 0;
      if (TYPE == T_Q8_0) {
        const block_q8_0 *x = (const block_q8_0 *)row + i;
#pragma unroll
        for (int j = 0; j < 8; j++) sumi = __dp4a(load_i32_a2(x->qs + 4 * j), u[j], sumi);
        acc += __half2float(x->d) * ds.x * (float)sumi;
      } else {
        const block_q4_0 *x = (const block_q4_0 *)row + i;
#pragma unroll
        for (int j = 0; j < 4; j++) {
          const int v = load_i32_a2(x->qs + 4 * j);
          sumi = __dp4a(v & 0x0F0F0F0F, u[j], sumi);
          sumi = __dp4a((v >> 4) & 0x0F0F0F0F, u[j + 4], sumi);
        }
        // q4 values carry an offset of 8: subtract 8 * sum(y), which ds.y holds.
        acc += __half2float(x->d) * ((float)sumi * ds.x - 8.0f * ds.y);
      }
    }
    acc = warp_sum(acc);
    if (lane == 0) *d_at(d, m, cc) = acc;
  }
}

// Other weights, few columns: one warp per output, f32 arithmetic on dequantized weights.
__global__ void k_mmv_float(DevTensor d, DevTensor a, DevTensor b) {
  const int64_t m = blockIdx.x;
  const int lane = threadIdx.x;
  const int64_t ncols = b.ne[1] * b.ne[2] * b.ne[3], K = a.ne[0];
  for (int64_t c = blockIdx.y; c < ncols; c += gridDim.y) {
    const Col cc = col_of(b, c);
    const char *row = a_row(a, b, m, cc);
    const float *y = b_col(b, cc);
    float acc = 0.0f;
    for (int64_t k = lane; k < K; k += 32) acc += load_elem(row, a.type, k) * y[k];
    acc = warp_sum(acc);
    if (lane == 0) *d_at(d, m, cc) = acc;
  }
}

// Any weight type, many columns: 16x16 output tiles, K in steps of 16.
const int TS = 16;
__global__ void k_mm_tiled(DevTensor d, DevTensor a, DevTensor b) {
  __shared__ float as[TS][TS + 1], bs[TS][TS + 1];
  const int tx = threadIdx.x, ty = threadIdx.y;
  const int64_t M = a.ne[1], N = b.ne[1], K = a.ne[0];
  const int64_t m0 = blockIdx.x * (int64_t)TS, n0 = blockIdx.y * (int64_t)TS;
  for (int64_t z = blockIdx.z; z < b.ne[2] * b.ne[3]; z += gridDim.z) {
    Col base;
    base.i11 = 0;
    base.i12 = z % b.ne[2];
    base.i13 = z / b.ne[2];
    float acc = 0.0f;
    for (int64_t k0 = 0; k0 < K; k0 += TS) {
      // Thread (tx, ty) loads row m0+ty of A and column n0+ty of B at k0+tx.
      const int64_t k = k0 + tx;
      as[ty][tx] = (m0 + ty < M && k < K) ? load_elem(a_row(a, b, m0 + ty, base), a.type, k) : 0.0f;
      Col cb = base;
      cb.i11 = n0 + ty;
      bs[ty][tx] = (n0 + ty < N && k < K) ? b_col(b, cb)[k] : 0.0f;
      __syncthreads();
#pragma unroll
      for (int kk = 0; kk < TS; kk++) acc += as[tx][kk] * bs[ty][kk];
      __syncthreads();
    }
    if (m0 + tx < M && n0 + ty < N) {
      Col cd = base;
      cd.i11 = n0 + ty;
      *d_at(d, m0 + tx, cd) = acc;
    }
  }
}

}  // namespace

int32_t lec_op_mul_mat(lec_ctx *ctx, const le_node *n) {
  const DevTensor d = dev_tensor(n->dst), a = dev_tensor(n->src[0]), b = dev_tensor(n->src[1]);
  const int t = a.type;
  const bool quant = t == T_Q8_0 || t == T_Q4_0;
  if (!weight_type(t) || b.type != T_F32 || d.type != T_F32) {
    return LEC_E_UNSUPPORTED;
  }
  const int64_t M = a.ne[1], N = b.ne[1], K = a.ne[0];
  const int64_t ncols = N * b.ne[2] * b.ne[3];
  if (M == 0 || ncols == 0) return 0;
  if (M > 0x7fffffff) return LEC_E_UNSUPPORTED;
  if (K == 0) return LEC_E_UNSUPPORTED;
  if (N <= MMV_MAX_COLS) {
    const dim3 grid((unsigned)M, grid_dim(ncols, 65535));
    if (!quant) {
      LEC_LAUNCH(k_mmv_float, grid, 32, 0, ctx->stream)(d, a, b);
      return 0;
    }
    const int64_t nblk = K / QK;
    void *scratch = nullptr;
    int32_t rc = lec_scratch(ctx, (size_t)(nblk * ncols) * sizeof(block_q8_1), &scratch);
    if (rc) return rc;
    const int64_t total = nblk * ncols;  // one warp per block, 8 warps per thread block
    LEC_LAUNCH(k_quantize_q8_1, grid_dim((total + 7) / 8, 0x7fffffff), 256, 0, ctx->stream)(
        b, (block_q8_1 *)scratch, nblk, ncols);
    if (t == T_Q8_0) {
      LEC_LAUNCH(k_mmvq<T_Q8_0>, grid, 32, 0, ctx->stream)(d, a, b, (const block_q8_1 *)scratch, nblk);
    } else {
      LEC_LAUNCH(k_mmvq<T_Q4_0>, grid, 32, 0, ctx->stream)(d, a, b, (const block_q8_1 *)scratch, nblk);
    }
    return 0;
  }
  if ((M + TS - 1) / TS > 0x7fffffff || (N + TS - 1) / TS > 65535) return LEC_E_UNSUPPORTED;
  const dim3 grid((unsigned)((M + TS - 1) / TS), (unsigned)((N + TS - 1) / TS),
                  grid_dim(b.ne[2] * b.ne[3], 65535));
  LEC_LAUNCH(k_mm_tiled, grid, dim3(TS, TS), 0, ctx->stream)(d, a, b);
  return 0;
}
