// Host emulation of the CUDA execution model, for testing kernels/cuda/*.cu
// on machines without a GPU: the same sources are compiled as C++ with
// -DLEC_EMU -include emu/emu.h and linked with emu/emu.cpp (which also stands
// in for the few CUDA runtime calls runtime.cu makes). Every thread of a
// block is a fiber (ucontext) on one OS thread; __syncthreads and warp
// shuffles are barriers the scheduler releases when every live thread of
// the block (or warp) has reached them; blocks run one after another.
// Floating-point results follow the host's arithmetic, not the GPU's (no
// fused multiply-add, libm's expf): the emulation checks indexing, strides,
// broadcasting, block decoding and control flow, not device rounding.
#pragma once
#ifdef LEC_EMU

#include <cuda_runtime.h>
#include <cuda_fp16.h>
#include <cuda_bf16.h>

#include <math.h>
#include <stdint.h>
#include <string.h>

#include <algorithm>
#include <functional>

#undef __global__
#define __global__
#undef __device__
#define __device__
#undef __host__
#define __host__
#undef __forceinline__
#define __forceinline__ inline
#undef __shared__
#define __shared__ static

namespace emu {
extern dim3 g_block, g_bdim, g_gdim;
const uint3 &tid();
void sync_block();
void *dyn_shared();
void shfl_exchange(uint64_t v, int o, uint64_t *out);
void run_grid(dim3 grid, dim3 block, size_t shmem, const std::function<void()> &body);

template <class K>
auto launcher(dim3 g, dim3 b, size_t shmem, K k) {
  return [=](auto... args) { run_grid(g, b, shmem, [&] { k(args...); }); };
}
}  // namespace emu

#define threadIdx (emu::tid())
#define blockIdx (emu::g_block)
#define blockDim (emu::g_bdim)
#define gridDim (emu::g_gdim)
#define __syncthreads() emu::sync_block()

template <class T>
static inline T __shfl_xor_sync(unsigned, T v, int o) {
  static_assert(sizeof(T) <= 8, "shuffle of at most 8 bytes");
  uint64_t in = 0, out = 0;
  memcpy(&in, &v, sizeof(T));
  emu::shfl_exchange(in, o, &out);
  T r;
  memcpy(&r, &out, sizeof(T));
  return r;
}

static inline int __dp4a(int a, int b, int c) {
  for (int i = 0; i < 4; i++) c += (int)(int8_t)(a >> (8 * i)) * (int)(int8_t)(b >> (8 * i));
  return c;
}
static inline float rsqrtf(float x) { return 1.0f / sqrtf(x); }
using std::max;
using std::min;

#define LEC_LAUNCH(k, g, b, s, st) emu::launcher(dim3(g), dim3(b), (size_t)(s), k)
#define LEC_DYN_SHARED(T, name) T *name = (T *)emu::dyn_shared()

#endif
