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
  T_Q8_0 = 8,
  T_I32 = 26,
  T_BF16 = 30,
};

#define QK 32  // elements per Q4_0 / Q8_0 / Q8_1 block

// ggml's block layouts (packed: 18 and 34 bytes, so only 2-byte aligned).
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
int32_t lec_op_mul_mat(lec_ctx *ctx, const le_node *n);
int32_t lec_op_flash_attn(lec_ctx *ctx, const le_node *n);

// Small helpers for kernels.
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
static __device__ __forceinline__ float load_float(const char *p, int type) {
  if (type == T_F32) return *(const float *)p;
  if (type == T_F16) return __half2float(*(const __half *)p);
  return __bfloat162float(*(const __nv_bfloat16 *)p);
}
static __device__ __forceinline__ void store_float(char *p, int type, float v) {
  if (type == T_F32) *(float *)p = v;
  else if (type == T_F16) *(__half *)p = __float2half_rn(v);
  else *(__nv_bfloat16 *)p = __float2bfloat16_rn(v);
}

// Element k of a row of `type` (any type the kernels read), dequantized.
static __device__ __forceinline__ float load_elem(const char *row, int type, int64_t k) {
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
  const int size = type == T_F32 ? 4 : 2;
  return load_float(row + k * size, type);
}

// Grid dimension y/z are limited to 65535: kernels loop over what is beyond.
static inline unsigned grid_dim(int64_t n, int64_t cap) {
  return (unsigned)(n < 1 ? 1 : n > cap ? cap : n);
}
