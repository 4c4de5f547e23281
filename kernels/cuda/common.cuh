// Internal declarations shared by the .cu files of libllm_edge_cuda.so
// (nothing here is exported: the library is built with hidden visibility).
#pragma once

#include <cuda_fp16.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <stdint.h>

#include "le_cuda.h"

// ggml type ids the kernels know (lib/ggml/types.ts has the full table).
enum {
  T_F32 = 0,
  T_F16 = 1,
  T_Q4_0 = 2,
  T_Q4_1 = 3,
  T_Q5_0 = 6,
  T_Q5_1 = 7,
  T_Q8_0 = 8,
  T_Q2_K = 10,
  T_Q3_K = 11,
  T_Q4_K = 12,
  T_Q5_K = 13,
  T_Q6_K = 14,
  T_I32 = 26,
  T_BF16 = 30,
};

// Whether load_elem reads rows of this weight type.
static inline bool weight_type(int t) {
  return t == T_F32 || t == T_F16 || t == T_BF16 || t == T_Q4_0 || t == T_Q4_1 ||
         t == T_Q5_0 || t == T_Q5_1 || t == T_Q8_0 || t == T_Q2_K || t == T_Q3_K || t == T_Q4_K ||
         t == T_Q5_K || t == T_Q6_K;
}

#define QK 32  // elements per Q4_0 / Q8_0 / Q8_1 block

// ggml's block layouts (packed: 18 and 34 bytes, so only 2-byte aligned).
/* A tensor as the kernels take it by value: le_tensor with its data as a
 * device pointer (a kernel argument cannot be the host-side record). */
struct DevTensor {
  const char *data;
  int64_t ne[4];
  int64_t nb[4];
  int type;
};

static inline DevTensor dev_tensor(const le_tensor &t) {
  DevTensor r;
  r.data = (const char *)(uintptr_t)t.data;
  for (int i = 0; i < 4; i++) {
    r.ne[i] = t.ne[i];
    r.nb[i] = t.nb[i];
  }
  r.type = t.type;
  return r;
}

struct block_q4_0 {
  __half d;
  uint8_t qs[QK / 2];
};
struct block_q8_0 {
  __half d;
  int8_t qs[QK];
};
// ggml-cuda's activation format for quantized dot products: d and d*sum(x).
struct block_q8_1 {
  __half2 ds;
  int8_t qs[QK];
};
static_assert(sizeof(block_q4_0) == 18, "block_q4_0");
static_assert(sizeof(block_q8_0) == 34, "block_q8_0");
static_assert(sizeof(block_q8_1) == 36, "block_q8_1");

// The per-compute state a kernel launcher needs.
struct lec_ctx {
  int32_t device;
  cudaStream_t stream;
  void *scratch;  // device scratch (Q8_1 activations), grown on demand
  size_t scratch_size;
  char error[512];
};

// Records a failure message for this thread (and ctx, when given); returns code.
int32_t lec_fail(lec_ctx *ctx, int32_t code, const char *fmt, ...);
// Checks a CUDA runtime result: 0, or the code with "what: message (name)" recorded.
int32_t lec_check(lec_ctx *ctx, cudaError_t e, const char *what);
// Scratch memory of at least `size` bytes on the context's device.
int32_t lec_scratch(lec_ctx *ctx, size_t size, void **out);

// Op launchers (ops.cu, mul_mat.cu): enqueue on ctx->stream, return 0 or LEC_E_*.
int32_t lec_op_get_rows(lec_ctx *ctx, const le_node *n);
int32_t lec_op_norm(lec_ctx *ctx, const le_node *n);  // RMS_NORM and NORM
int32_t lec_op_binary(lec_ctx *ctx, const le_node *n);  // ADD, MUL
int32_t lec_op_unary(lec_ctx *ctx, const le_node *n);   // SILU, GELU, SCALE
int32_t lec_op_glu(lec_ctx *ctx, const le_node *n);     // SWIGLU, GEGLU
int32_t lec_op_rope(lec_ctx *ctx, const le_node *n);
int32_t lec_op_soft_max(lec_ctx *ctx, const le_node *n);
int32_t lec_op_cpy(lec_ctx *ctx, const le_node *n);
int32_t lec_op_set_rows(lec_ctx *ctx, const le_node *n);
int32_t lec_op_mul_mat(lec_ctx *ctx, const le_node *n);
int32_t lec_op_flash_attn(lec_ctx *ctx, const le_node *n);
int32_t lec_op_ssm_conv(lec_ctx *ctx, const le_node *n);
int32_t lec_op_ssm_scan(lec_ctx *ctx, const le_node *n);
int32_t lec_op_concat(lec_ctx *ctx, const le_node *n);
int32_t lec_op_hadamard(lec_ctx *ctx, const le_node *n);

// Small helpers for kernels. The element loaders below are also compiled for
// the host, so that kernels/cuda/host_check can test them without a GPU.
static __device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffff, v, o);
  return v;
}
static __device__ __forceinline__ float warp_max(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffff, v, o));
  return v;
}
static __device__ __forceinline__ int warp_sum_int(int v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffff, v, o);
  return v;
}

// One element of a float-type row (F32, F16, BF16) as f32.
static __host__ __device__ __forceinline__ float load_float(const char *p, int type) {
  if (type == T_F32) return *(const float *)p;
  if (type == T_F16) return __half2float(*(const __half *)p);
  return __bfloat162float(*(const __nv_bfloat16 *)p);
}
static __host__ __device__ __forceinline__ void store_float(char *p, int type, float v) {
  if (type == T_F32) *(float *)p = v;
  else if (type == T_F16) *(__half *)p = __float2half_rn(v);
  else *(__nv_bfloat16 *)p = __float2bfloat16_rn(v);
}

// An f16 at a 2-byte aligned address (every block size here is even).
static __host__ __device__ __forceinline__ float h2f(const uint8_t *p) {
  return __half2float(*(const __half *)p);
}
static __host__ __device__ __forceinline__ uint32_t u32_at(const uint8_t *p) {
  return (uint32_t)p[0] | ((uint32_t)p[1] << 8) | ((uint32_t)p[2] << 16) | ((uint32_t)p[3] << 24);
}
// ggml's get_scale_min_k4: the 6-bit scale and min of sub-block j of a Q4_K/Q5_K block.
static __host__ __device__ __forceinline__ void scale_min_k4(int j, const uint8_t *q, int &d, int &m) {
  if (j < 4) {
    d = q[j] & 63;
    m = q[j + 4] & 63;
  } else {
    d = (q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4);
    m = (q[j + 4] >> 4) | ((q[j] >> 6) << 4);
  }
}

// Element k of a row of one of the less common weight types (ggml's dequantize_row_*).
static __host__ __device__ float load_elem_slow(const char *row, int type, int64_t k) {
  const uint8_t *r = (const uint8_t *)row;
  if (type == T_Q4_1 || type == T_Q5_0 || type == T_Q5_1) {
    const int size = type == T_Q4_1 ? 20 : type == T_Q5_0 ? 22 : 24;
    const uint8_t *b = r + (k / QK) * size;
    const int j = (int)(k % QK), jj = j % 16;
    const float d = h2f(b);
    if (type == T_Q4_1) {
      const int q = j < 16 ? (b[4 + jj] & 0xF) : (b[4 + jj] >> 4);
      return d * (float)q + h2f(b + 2);
    }
    const uint8_t *qhp = b + (type == T_Q5_0 ? 2 : 4), *qs = qhp + 4;
    const uint32_t qh = u32_at(qhp);
    const int q = j < 16 ? ((qs[jj] & 0xF) | (((qh >> jj) << 4) & 0x10))
                         : ((qs[jj] >> 4) | ((qh >> (jj + 12)) & 0x10));
    return type == T_Q5_0 ? (float)(q - 16) * d : d * (float)q + h2f(b + 2);
  }
  const int64_t w = k % 256;
  if (type == T_Q2_K || type == T_Q3_K) {
    // 16 sub-blocks of 16: element w is bit pair j of byte l (+16 in the second half) of the
    // 32 quant bytes of its 128-element half n.
    const int n = (int)(w / 128), within = (int)(w % 128), j = within / 32;
    const int half = (within % 32) / 16, l = within % 16, is = n * 8 + j * 2 + half;
    if (type == T_Q2_K) {
      const uint8_t *b = r + (k / 256) * 84;
      const int sc = b[is], q = (b[16 + 32 * n + l + 16 * half] >> (2 * j)) & 3;
      return h2f(b + 80) * (float)(sc & 0xF) * (float)q - h2f(b + 82) * (float)(sc >> 4);
    }
    const uint8_t *b = r + (k / 256) * 110;  // hmask[32], qs[64], scales[12], d
    // ggml's unpacking of sixteen 6-bit scales from 12 bytes.
    const uint32_t a0 = u32_at(b + 96), a1 = u32_at(b + 100), t = u32_at(b + 104);
    const uint32_t m1 = 0x03030303, m2 = 0x0f0f0f0f;
    const uint32_t aux[4] = {(a0 & m2) | (((t >> 0) & m1) << 4), (a1 & m2) | (((t >> 2) & m1) << 4),
                             ((a0 >> 4) & m2) | (((t >> 4) & m1) << 4),
                             ((a1 >> 4) & m2) | (((t >> 6) & m1) << 4)};
    const int sc = (int8_t)(aux[is / 4] >> (8 * (is % 4)));
    const int q = (b[32 + 32 * n + l + 16 * half] >> (2 * j)) & 3;
    const int hb = b[l + 16 * half] & (1 << (4 * n + j)) ? 0 : 4;
    return h2f(b + 108) * (float)(sc - 32) * (float)(q - hb);
  }
  if (type == T_Q6_K) {
    const uint8_t *b = r + (k / 256) * 210;
    const int n = (int)(w / 128), rr = (int)(w % 128), quarter = rr / 32, l = rr % 32;
    const uint8_t *ql = b + 64 * n, *qh = b + 128 + 32 * n;
    const int8_t *sc = (const int8_t *)(b + 192) + 8 * n;
    const int lo = quarter & 1 ? ql[l + 32] : ql[l];
    const int q = (quarter < 2 ? (lo & 0xF) : (lo >> 4)) | (((qh[l] >> (2 * quarter)) & 3) << 4);
    return h2f(b + 208) * (float)sc[l / 16 + 2 * quarter] * (float)(q - 32);
  }
  // Q4_K and Q5_K: d, dmin, 12 bytes of scales, then (Q5_K) 32 bytes of high bits, then quants.
  const bool k5 = type == T_Q5_K;
  const uint8_t *b = r + (k / 256) * (k5 ? 176 : 144);
  const int j64 = (int)(w / 64), within = (int)(w % 64), hi = within >= 32, l = within % 32;
  int sc, m;
  scale_min_k4(2 * j64 + hi, b + 4, sc, m);
  const uint8_t *qs = b + (k5 ? 48 : 16);
  int q = hi ? (qs[32 * j64 + l] >> 4) : (qs[32 * j64 + l] & 0xF);
  if (k5 && (b[16 + l] & (1 << (2 * j64 + hi)))) q += 16;
  return h2f(b) * (float)sc * (float)q - h2f(b + 2) * (float)m;
}

// Element k of a row of `type` (any type the kernels read), dequantized.
static __host__ __device__ __forceinline__ float load_elem(const char *row, int type, int64_t k) {
  if (type == T_Q8_0) {
    const block_q8_0 *b = (const block_q8_0 *)row + k / QK;
    return __half2float(b->d) * (float)b->qs[k % QK];
  }
  if (type == T_Q4_0) {
    const block_q4_0 *b = (const block_q4_0 *)row + k / QK;
    const int j = (int)(k % QK);
    const int q = j < QK / 2 ? (b->qs[j] & 0x0F) : (b->qs[j - QK / 2] >> 4);
    return __half2float(b->d) * (float)(q - 8);
  }
  if (type == T_F32 || type == T_F16 || type == T_BF16) {
    return load_float(row + k * (type == T_F32 ? 4 : 2), type);
  }
  return load_elem_slow(row, type, k);
}

// Kernel launches and dynamic shared memory go through macros so that the
// same sources also build for the host emulation (emu/emu.h).
#ifndef LEC_EMU
#define LEC_LAUNCH(k, g, b, s, st) k<<<g, b, s, st>>>
#define LEC_DYN_SHARED(T, name) extern __shared__ T name[]
#endif

// Grid dimension y/z are limited to 65535: kernels loop over what is beyond.
static inline unsigned grid_dim(int64_t n, int64_t cap) {
  return (unsigned)(n < 1 ? 1 : n > cap ? cap : n);
}
