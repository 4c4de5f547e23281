// Everything but mul_mat: get_rows, norms, broadcast add/mul, unary and
// gated units, rope, soft_max, cpy/convert. Semantics are ggml's (the CUDA
// backend's where it differs from the CPU one, e.g. gelu without the f16
// table); the code is written from those semantics, not copied.
#include <math.h>

#include "common.cuh"

namespace {

// A tensor as kernels take it (by value).
struct Ten {
  char *data;
  int64_t ne[4];
  int64_t nb[4];
  int type;
};

Ten ten(const le_tensor &t) {
  Ten r;
  r.data = (char *)(uintptr_t)t.data;
  for (int i = 0; i < 4; i++) {
    r.ne[i] = t.ne[i];
    r.nb[i] = t.nb[i];
  }
  r.type = t.type;
  return r;
}

int64_t nrows(const le_tensor &t) { return t.ne[1] * t.ne[2] * t.ne[3]; }
int64_t nelem(const le_tensor &t) { return t.ne[0] * nrows(t); }

float param_f32(const le_node *n, int i) {
  float f;
  memcpy(&f, &n->params[i], 4);
  return f;
}

// Byte offset of row r (i1 + ne1*(i2 + ne2*i3)) of t.
__device__ __forceinline__ int64_t row_off(const Ten &t, int64_t r) {
  const int64_t i1 = r % t.ne[1];
  const int64_t i2 = (r / t.ne[1]) % t.ne[2];
  const int64_t i3 = r / (t.ne[1] * t.ne[2]);
  return i1 * t.nb[1] + i2 * t.nb[2] + i3 * t.nb[3];
}

// Sum over a block of `blockDim.x` threads (a multiple of 32, at most 1024).
__device__ float block_sum(float v) {
  __shared__ float part[32];
  v = warp_sum(v);
  const int w = threadIdx.x / 32, l = threadIdx.x % 32;
  __syncthreads();  // part[] may still be read by a previous call
  if (l == 0) part[w] = v;
  __syncthreads();
  v = l < (int)(blockDim.x / 32) ? part[l] : 0.0f;
  return warp_sum(v);
}

__device__ float block_max(float v) {
  __shared__ float part[32];
  v = warp_max(v);
  const int w = threadIdx.x / 32, l = threadIdx.x % 32;
  __syncthreads();
  if (l == 0) part[w] = v;
  __syncthreads();
  v = l < (int)(blockDim.x / 32) ? part[l] : -INFINITY;
  return warp_max(v);
}

const int BLOCK = 256;
const int64_t MAX_GRID = 0x7fffffff;

unsigned blocks_for(int64_t n) { return grid_dim((n + BLOCK - 1) / BLOCK, 65535 * 16); }

// ---- get_rows ----------------------------------------------------------
__global__ void k_get_rows(Ten d, Ten a, Ten ids) {
  for (int64_t r = blockIdx.x; r < d.ne[1] * d.ne[2] * d.ne[3]; r += gridDim.x) {
    const int64_t i10 = r % d.ne[1], i11 = (r / d.ne[1]) % d.ne[2], i12 = r / (d.ne[1] * d.ne[2]);
    const int32_t row = *(const int32_t *)(ids.data + i10 * ids.nb[0] + i11 * ids.nb[1] +
                                           i12 * ids.nb[2]);
    const char *src = a.data + row * a.nb[1] + i11 * a.nb[2] + i12 * a.nb[3];
    float *dst = (float *)(d.data + i10 * d.nb[1] + i11 * d.nb[2] + i12 * d.nb[3]);
    for (int64_t k = threadIdx.x; k < d.ne[0]; k += blockDim.x) dst[k] = load_elem(src, a.type, k);
  }
}

// ---- norms -------------------------------------------------------------
__global__ void k_norm(Ten d, Ten a, float eps, int rms) {
  const int64_t r = blockIdx.x;
  const float *x = (const float *)(a.data + row_off(a, r));
  float *y = (float *)(d.data + row_off(d, r));
  const int64_t n = a.ne[0];
  float mean = 0.0f;
  if (!rms) {
    float s = 0.0f;
    for (int64_t k = threadIdx.x; k < n; k += blockDim.x) s += x[k];
    mean = block_sum(s) / (float)n;
  }
  float s2 = 0.0f;
  for (int64_t k = threadIdx.x; k < n; k += blockDim.x) {
    const float v = x[k] - mean;
    s2 += v * v;
  }
  const float scale = rsqrtf(block_sum(s2) / (float)n + eps);
  for (int64_t k = threadIdx.x; k < n; k += blockDim.x) y[k] = (x[k] - mean) * scale;
}

// ---- elementwise ------------------------------------------------------
// Byte offset of linear element e (ggml order) in t, whose rows are packed floats.
__device__ __forceinline__ int64_t elem_off(const Ten &t, int64_t e) {
  const int64_t i0 = e % t.ne[0];
  return row_off(t, e / t.ne[0]) + i0 * 4;
}

__global__ void k_binary(Ten d, Ten a, Ten b, int mul) {
  const int64_t n = d.ne[0] * d.ne[1] * d.ne[2] * d.ne[3];
  for (int64_t e = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; e < n;
       e += (int64_t)gridDim.x * blockDim.x) {
    const int64_t i0 = e % d.ne[0], i1 = (e / d.ne[0]) % d.ne[1];
    const int64_t i2 = (e / (d.ne[0] * d.ne[1])) % d.ne[2], i3 = e / (d.ne[0] * d.ne[1] * d.ne[2]);
    const float x = *(const float *)(a.data + i0 * 4 + i1 * a.nb[1] + i2 * a.nb[2] + i3 * a.nb[3]);
    const float y = *(const float *)(b.data + (i0 % b.ne[0]) * 4 + (i1 % b.ne[1]) * b.nb[1] +
                                     (i2 % b.ne[2]) * b.nb[2] + (i3 % b.ne[3]) * b.nb[3]);
    *(float *)(d.data + i0 * 4 + i1 * d.nb[1] + i2 * d.nb[2] + i3 * d.nb[3]) = mul ? x * y : x + y;
  }
}

__device__ __forceinline__ float silu(float x) { return x / (1.0f + expf(-x)); }
__device__ __forceinline__ float gelu(float x) {
  const float c = 0.79788456080286535587989211986876f;  // sqrt(2/pi)
  return 0.5f * x * (1.0f + tanhf(c * x * (1.0f + 0.044715f * x * x)));
}

enum { U_SILU, U_GELU, U_SCALE };

__global__ void k_unary(Ten d, Ten a, int kind, float s, float bias) {
  const int64_t n = d.ne[0] * d.ne[1] * d.ne[2] * d.ne[3];
  for (int64_t e = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; e < n;
       e += (int64_t)gridDim.x * blockDim.x) {
    const float x = *(const float *)(a.data + elem_off(a, e));
    *(float *)(d.data + elem_off(d, e)) =
        kind == U_SILU ? silu(x) : kind == U_GELU ? gelu(x) : x * s + bias;
  }
}

__global__ void k_glu(Ten d, Ten a, Ten g, int use_gelu) {
  const int64_t n = d.ne[0] * d.ne[1] * d.ne[2] * d.ne[3];
  for (int64_t e = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; e < n;
       e += (int64_t)gridDim.x * blockDim.x) {
    const float x = *(const float *)(a.data + elem_off(a, e));
    const float y = *(const float *)(g.data + elem_off(g, e));
    *(float *)(d.data + elem_off(d, e)) = (use_gelu ? gelu(x) : silu(x)) * y;
  }
}

// ---- hadamard (ggml_compute_forward_fwht) ----------------------------------
// One block per row: scale by 1/sqrt(n), then butterflies of growing span,
// in place in the destination row (block-wide barriers order the passes);
// the same operations per element as the CPU kernel, so the same bits.
__global__ void k_hadamard(Ten d, Ten a, float scale) {
  const int64_t r = blockIdx.x, n = a.ne[0];
  const float *x = (const float *)(a.data + row_off(a, r));
  float *y = (float *)(d.data + row_off(d, r));
  for (int64_t j = threadIdx.x; j < n; j += blockDim.x) y[j] = x[j] * scale;
  __syncthreads();
  for (int64_t len = 1; len < n; len <<= 1) {
    for (int64_t p = threadIdx.x; p < n / 2; p += blockDim.x) {
      const int64_t i = (p / len) * 2 * len + p % len;
      const float u = y[i], v = y[i + len];
      y[i] = u + v;
      y[i + len] = u - v;
    }
    __syncthreads();
  }
}

// ---- rope --------------------------------------------------------------
struct RopeArgs {
  int n_dims, neox;
  float freq_scale, ext_factor, attn_factor, theta_scale, corr0, corr1;
  const float *ff;       // freq factors or null
  const int32_t *pos;    // one per ne[2]
};

__global__ void k_rope(Ten d, Ten a, RopeArgs p) {
  const int64_t half = a.ne[0] / 2, rows = a.ne[1] * a.ne[2] * a.ne[3];
  const int64_t n = half * rows;
  for (int64_t e = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; e < n;
       e += (int64_t)gridDim.x * blockDim.x) {
    const int64_t i0 = 2 * (e % half), r = e / half;
    const int64_t i2 = (r / a.ne[1]) % a.ne[2];
    const int64_t sz = a.type == T_F32 ? 4 : 2;
    char *x = a.data + row_off(a, r);
    char *y = d.data + row_off(d, r);
    if (i0 >= p.n_dims) {
      store_float(y + i0 * sz, d.type, load_float(x + i0 * sz, a.type));
      store_float(y + (i0 + 1) * sz, d.type, load_float(x + (i0 + 1) * sz, a.type));
      continue;
    }
    // The pair rotated: (i0, i0+1) normally, (i0/2, i0/2 + n_dims/2) for NeoX.
    const int64_t j0 = p.neox ? i0 / 2 : i0, j1 = p.neox ? i0 / 2 + p.n_dims / 2 : i0 + 1;
    const float theta_base = (float)p.pos[i2] * powf(p.theta_scale, (float)i0 / 2.0f);
    const float theta_extrap = theta_base / (p.ff ? p.ff[i0 / 2] : 1.0f);
    // YaRN (ggml's rope_yarn): interpolate, ramp towards extrapolation, scale magnitude.
    float theta = p.freq_scale * theta_extrap, mscale = p.attn_factor;
    if (p.ext_factor != 0.0f) {
      const float yv = ((float)(i0 / 2) - p.corr0) / fmaxf(0.001f, p.corr1 - p.corr0);
      const float ramp = (1.0f - fminf(1.0f, fmaxf(0.0f, yv))) * p.ext_factor;
      theta = theta * (1 - ramp) + theta_extrap * ramp;
      mscale *= 1.0f + 0.1f * logf(1.0f / p.freq_scale);
    }
    const float c = cosf(theta) * mscale, s = sinf(theta) * mscale;
    const float x0 = load_float(x + j0 * sz, a.type), x1 = load_float(x + j1 * sz, a.type);
    store_float(y + j0 * sz, d.type, x0 * c - x1 * s);
    store_float(y + j1 * sz, d.type, x0 * s + x1 * c);
  }
}

// ---- soft_max ----------------------------------------------------------
struct SoftMaxArgs {
  float scale, max_bias, m0, m1;
  uint32_t n_head_log2;
  int has_mask;
};

__global__ void k_soft_max(Ten d, Ten a, Ten m, SoftMaxArgs p) {
  const int64_t r = blockIdx.x;
  const int64_t i1 = r % a.ne[1], i2 = (r / a.ne[1]) % a.ne[2], i3 = r / (a.ne[1] * a.ne[2]);
  const float *x = (const float *)(a.data + row_off(a, r));
  float *y = (float *)(d.data + row_off(d, r));
  const char *mrow = p.has_mask
      ? m.data + i1 * m.nb[1] + (i2 % m.ne[2]) * m.nb[2] + (i3 % m.ne[3]) * m.nb[3]
      : nullptr;
  float slope = 1.0f;
  if (p.max_bias > 0.0f) {  // ALiBi: the slope of head i2
    const uint32_t h = (uint32_t)i2;
    slope = powf(h < p.n_head_log2 ? p.m0 : p.m1,
                 h < p.n_head_log2 ? (float)(h + 1) : (float)(2 * (h - p.n_head_log2) + 1));
  }
  const int64_t n = a.ne[0];
  const int msz = m.type == T_F32 ? 4 : 2;
  float mx = -INFINITY;
  for (int64_t k = threadIdx.x; k < n; k += blockDim.x) {
    const float v = x[k] * p.scale + (mrow ? slope * load_float(mrow + k * msz, m.type) : 0.0f);
    mx = fmaxf(mx, v);
  }
  mx = block_max(mx);
  float sum = 0.0f;
  for (int64_t k = threadIdx.x; k < n; k += blockDim.x) {
    const float v = x[k] * p.scale + (mrow ? slope * load_float(mrow + k * msz, m.type) : 0.0f);
    const float e = expf(v - mx);
    y[k] = e;
    sum += e;
  }
  const float inv = 1.0f / block_sum(sum);
  for (int64_t k = threadIdx.x; k < n; k += blockDim.x) y[k] *= inv;
}

// ---- cpy ---------------------------------------------------------------
// Float types, any strides: element e of src (ggml order) to element e of dst.
__global__ void k_cpy_float(Ten d, Ten a) {
  const int64_t n = a.ne[0] * a.ne[1] * a.ne[2] * a.ne[3];
  for (int64_t e = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; e < n;
       e += (int64_t)gridDim.x * blockDim.x) {
    int64_t oa = 0, od = 0, q = e, t = e;
    for (int i = 0; i < 4; i++) {
      oa += (q % a.ne[i]) * a.nb[i];
      q /= a.ne[i];
      od += (t % d.ne[i]) * d.nb[i];
      t /= d.ne[i];
    }
    store_float(d.data + od, d.type, load_float(a.data + oa, a.type));
  }
}

// One Q8_0 / Q4_0 block b of out from QK floats at x (ggml-cuda's block quantizers).
__device__ void quantize_block(const float *x, char *out, int64_t b, int type) {
  if (type == T_Q8_0) {
    block_q8_0 *y = (block_q8_0 *)out + b;
    float amax = 0.0f;
    for (int j = 0; j < QK; j++) amax = fmaxf(amax, fabsf(x[j]));
    const float dd = amax / 127.0f, id = dd ? 1.0f / dd : 0.0f;
    y->d = __float2half_rn(dd);
    for (int j = 0; j < QK; j++) y->qs[j] = (int8_t)roundf(x[j] * id);
  } else {
    block_q4_0 *y = (block_q4_0 *)out + b;
    float amax = 0.0f, vmax = 0.0f;
    for (int j = 0; j < QK; j++) {
      if (amax < fabsf(x[j])) {
        amax = fabsf(x[j]);
        vmax = x[j];
      }
    }
    const float dd = vmax / -8.0f, id = dd ? 1.0f / dd : 0.0f;
    y->d = __float2half_rn(dd);
    for (int j = 0; j < QK / 2; j++) {
      const uint8_t q0 = (uint8_t)min(15, (int)(int8_t)(x[j] * id + 8.5f));
      const uint8_t q1 = (uint8_t)min(15, (int)(int8_t)(x[j + QK / 2] * id + 8.5f));
      y->qs[j] = q0 | (q1 << 4);
    }
  }
}

// F32 rows to Q8_0 / Q4_0 blocks (same shape).
__global__ void k_quantize(Ten d, Ten a) {
  const int64_t per_row = a.ne[0] / QK, n = per_row * a.ne[1] * a.ne[2] * a.ne[3];
  for (int64_t e = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; e < n;
       e += (int64_t)gridDim.x * blockDim.x) {
    const int64_t b = e % per_row, r = e / per_row;
    quantize_block((const float *)(a.data + row_off(a, r)) + b * QK, d.data + row_off(d, r), b,
                   d.type);
  }
}

// ---- set_rows ----------------------------------------------------------
// The dst row of src row (i, i2, i3): ids[i, i2 % ne11, i3 % ne12], or -1
// outside dst (TypeScript builds the ids from checked cells; a bad one is skipped).
__device__ __forceinline__ int64_t set_rows_dst(const Ten &d, const Ten &ids, int64_t i, int64_t i2,
                                                int64_t i3) {
  const int64_t id = *(const int32_t *)(ids.data + i * ids.nb[0] + (i2 % ids.ne[1]) * ids.nb[1] +
                                        (i3 % ids.ne[2]) * ids.nb[2]);
  return id >= 0 && id < d.ne[1] ? id * d.nb[1] + i2 * d.nb[2] + i3 * d.nb[3] : -1;
}

// Float dst: one thread per element of src (F32 rows).
__global__ void k_set_rows_float(Ten d, Ten a, Ten ids) {
  const int64_t n = a.ne[0] * a.ne[1] * a.ne[2] * a.ne[3];
  for (int64_t e = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; e < n;
       e += (int64_t)gridDim.x * blockDim.x) {
    const int64_t k = e % a.ne[0], r = e / a.ne[0];
    const int64_t i = r % a.ne[1], i2 = (r / a.ne[1]) % a.ne[2], i3 = r / (a.ne[1] * a.ne[2]);
    const int64_t o = set_rows_dst(d, ids, i, i2, i3);
    if (o < 0) continue;
    store_float(d.data + o + k * d.nb[0], d.type, *(const float *)(a.data + row_off(a, r) + k * 4));
  }
}

// Q8_0 / Q4_0 dst: one thread per block.
__global__ void k_set_rows_quant(Ten d, Ten a, Ten ids) {
  const int64_t per_row = a.ne[0] / QK, n = per_row * a.ne[1] * a.ne[2] * a.ne[3];
  for (int64_t e = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; e < n;
       e += (int64_t)gridDim.x * blockDim.x) {
    const int64_t b = e % per_row, r = e / per_row;
    const int64_t i = r % a.ne[1], i2 = (r / a.ne[1]) % a.ne[2], i3 = r / (a.ne[1] * a.ne[2]);
    const int64_t o = set_rows_dst(d, ids, i, i2, i3);
    if (o < 0) continue;
    quantize_block((const float *)(a.data + row_off(a, r)) + b * QK, d.data + o, b, d.type);
  }
}

// Q8_0 rows to F32 rows (same shape).
__global__ void k_dequantize(Ten d, Ten a) {
  const int64_t n = a.ne[0] * a.ne[1] * a.ne[2] * a.ne[3];
  for (int64_t e = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; e < n;
       e += (int64_t)gridDim.x * blockDim.x) {
    const int64_t k = e % a.ne[0], r = e / a.ne[0];
    *(float *)(d.data + row_off(d, r) + k * 4) = load_elem(a.data + row_off(a, r), a.type, k);
  }
}

bool float_type(int t) { return t == T_F32 || t == T_F16 || t == T_BF16; }

}  // namespace

int32_t lec_op_get_rows(lec_ctx *ctx, const le_node *n) {
  if (!weight_type(n->src[0].type) || n->dst.type != T_F32) return LEC_E_UNSUPPORTED;
  const int64_t rows = nrows(n->dst);
  if (rows == 0) return 0;
  LEC_LAUNCH(k_get_rows, grid_dim(rows, MAX_GRID), BLOCK, 0, ctx->stream)(
      ten(n->dst), ten(n->src[0]), ten(n->src[1]));
  return 0;
}

int32_t lec_op_norm(lec_ctx *ctx, const le_node *n) {
  const int64_t rows = nrows(n->dst);
  if (rows == 0 || n->dst.ne[0] == 0) return 0;
  if (rows > MAX_GRID) return LEC_E_UNSUPPORTED;
  LEC_LAUNCH(k_norm, (unsigned)rows, BLOCK, 0, ctx->stream)(ten(n->dst), ten(n->src[0]),
                                                    param_f32(n, 0), n->op == LE_OP_RMS_NORM);
  return 0;
}

int32_t lec_op_binary(lec_ctx *ctx, const le_node *n) {
  const int64_t e = nelem(n->dst);
  if (e == 0) return 0;
  LEC_LAUNCH(k_binary, blocks_for(e), BLOCK, 0, ctx->stream)(ten(n->dst), ten(n->src[0]), ten(n->src[1]),
                                                    n->op == LE_OP_MUL);
  return 0;
}

int32_t lec_op_unary(lec_ctx *ctx, const le_node *n) {
  const int64_t e = nelem(n->dst);
  if (e == 0) return 0;
  const int kind = n->op == LE_OP_SILU ? U_SILU : n->op == LE_OP_GELU ? U_GELU : U_SCALE;
  LEC_LAUNCH(k_unary, blocks_for(e), BLOCK, 0, ctx->stream)(ten(n->dst), ten(n->src[0]), kind,
                                                   param_f32(n, 0), param_f32(n, 1));
  return 0;
}

int32_t lec_op_glu(lec_ctx *ctx, const le_node *n) {
  const int64_t e = nelem(n->dst);
  if (e == 0) return 0;
  LEC_LAUNCH(k_glu, blocks_for(e), BLOCK, 0, ctx->stream)(ten(n->dst), ten(n->src[0]), ten(n->src[1]),
                                                 n->op == LE_OP_GEGLU);
  return 0;
}

int32_t lec_op_hadamard(lec_ctx *ctx, const le_node *n) {
  const int64_t rows = nrows(n->dst);
  if (rows == 0 || n->dst.ne[0] == 0) return 0;
  if (rows > MAX_GRID) return LEC_E_UNSUPPORTED;
  const float scale = 1.0f / sqrtf((float)n->dst.ne[0]);
  LEC_LAUNCH(k_hadamard, (unsigned)rows, BLOCK, 0, ctx->stream)(ten(n->dst), ten(n->src[0]), scale);
  return 0;
}

// ggml_rope_yarn_corr_dim / _dims: the dimensions where YaRN's ramp starts and ends.
static float corr_dim(int n_dims, int n_ctx_orig, float n_rot, float base) {
  return n_dims * logf(n_ctx_orig / (n_rot * 2 * (float)M_PI)) / (2 * logf(base));
}

int32_t lec_op_rope(lec_ctx *ctx, const le_node *n) {
  const int t = n->src[0].type;
  if ((t != T_F32 && t != T_F16) || n->dst.type != t) return LEC_E_UNSUPPORTED;
  const int64_t e = nelem(n->dst) / 2;
  if (e == 0) return 0;
  RopeArgs p;
  p.n_dims = n->params[0];
  p.neox = n->params[1] == 2;
  const int n_ctx_orig = n->params[2];
  const float freq_base = param_f32(n, 3), beta_fast = param_f32(n, 7), beta_slow = param_f32(n, 8);
  p.freq_scale = param_f32(n, 4);
  p.ext_factor = param_f32(n, 5);
  p.attn_factor = param_f32(n, 6);
  p.theta_scale = powf(freq_base, -2.0f / p.n_dims);
  const float start = floorf(corr_dim(p.n_dims, n_ctx_orig, beta_fast, freq_base));
  const float end = ceilf(corr_dim(p.n_dims, n_ctx_orig, beta_slow, freq_base));
  p.corr0 = fmaxf(0.0f, start);
  p.corr1 = fminf((float)(p.n_dims - 1), end);
  p.pos = (const int32_t *)(uintptr_t)n->src[1].data;
  p.ff = n->n_src > 2 && n->src[2].data ? (const float *)(uintptr_t)n->src[2].data : nullptr;
  LEC_LAUNCH(k_rope, blocks_for(e), BLOCK, 0, ctx->stream)(ten(n->dst), ten(n->src[0]), p);
  return 0;
}

int32_t lec_op_soft_max(lec_ctx *ctx, const le_node *n) {
  const int64_t rows = nrows(n->dst);
  if (rows == 0 || n->dst.ne[0] == 0) return 0;
  if (rows > MAX_GRID) return LEC_E_UNSUPPORTED;
  SoftMaxArgs p;
  p.scale = param_f32(n, 0);
  p.max_bias = param_f32(n, 1);
  p.has_mask = n->n_src > 1 && n->src[1].data != 0;
  const uint32_t n_head = (uint32_t)n->src[0].ne[2];
  p.n_head_log2 = 1u << (uint32_t)floorf(log2f((float)n_head));
  p.m0 = powf(2.0f, -p.max_bias / p.n_head_log2);
  p.m1 = powf(2.0f, -(p.max_bias / 2.0f) / p.n_head_log2);
  Ten m = p.has_mask ? ten(n->src[1]) : ten(n->src[0]);
  LEC_LAUNCH(k_soft_max, (unsigned)rows, BLOCK, 0, ctx->stream)(ten(n->dst), ten(n->src[0]), m, p);
  return 0;
}

int32_t lec_op_set_rows(lec_ctx *ctx, const le_node *n) {
  const int d = n->dst.type;
  const int64_t e = nelem(n->src[0]);
  if (n->src[0].type != T_F32 || n->src[1].type != T_I32) return LEC_E_UNSUPPORTED;
  if (e == 0) return 0;
  if (float_type(d)) {
    LEC_LAUNCH(k_set_rows_float, blocks_for(e), BLOCK, 0, ctx->stream)(ten(n->dst), ten(n->src[0]),
                                                                      ten(n->src[1]));
  } else if (d == T_Q8_0 || d == T_Q4_0) {
    LEC_LAUNCH(k_set_rows_quant, blocks_for(e / QK), BLOCK, 0, ctx->stream)(
        ten(n->dst), ten(n->src[0]), ten(n->src[1]));
  } else {
    return LEC_E_UNSUPPORTED;
  }
  return 0;
}

int32_t lec_op_cpy(lec_ctx *ctx, const le_node *n) {
  const int s = n->src[0].type, d = n->dst.type;
  const int64_t e = nelem(n->src[0]);
  if (e == 0) return 0;
  if (float_type(s) && float_type(d)) {
    LEC_LAUNCH(k_cpy_float, blocks_for(e), BLOCK, 0, ctx->stream)(ten(n->dst), ten(n->src[0]));
  } else if (s == T_F32 && (d == T_Q8_0 || d == T_Q4_0)) {
    LEC_LAUNCH(k_quantize, blocks_for(e / QK), BLOCK, 0, ctx->stream)(ten(n->dst), ten(n->src[0]));
  } else if (s == T_Q8_0 && d == T_F32) {
    LEC_LAUNCH(k_dequantize, blocks_for(e), BLOCK, 0, ctx->stream)(ten(n->dst), ten(n->src[0]));
  } else {
    return LEC_E_UNSUPPORTED;
  }
  return 0;
}
