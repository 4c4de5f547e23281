/*
 * le_cuda.h — the whole ABI between the TypeScript engine and the CUDA
 * kernels (build/libllm_edge_cuda.so). Everything TypeScript may call is
 * declared here; ffi/cuda_symbols.ts mirrors it one to one and
 * tests/cuda_build_test.ts compares the library's exported symbols with the
 * declarations below.
 *
 * Nodes are the CPU library's `le_node` records (kernels/include/llm_edge.h,
 * same ops, same params) whose `data` fields hold device addresses. As on the
 * CPU side, TypeScript validates every pointer, size and shape before a call
 * (lib/backend/cuda.ts); the C side only refuses what would crash its own
 * dispatch.
 *
 * Errors: every function returns 0 on success, a positive cudaError_t when a
 * CUDA runtime call failed, or a negative LEC_E_* code; nothing aborts the
 * process. The message ("cudaMalloc(4096): out of memory
 * (cudaErrorMemoryAllocation)") is kept per thread (lec_last_error) and, for
 * lec_graph_compute, also in the context (lec_ctx_error), since a
 * nonblocking FFI call runs on another thread than the one reading it.
 *
 * The CUDA runtime is linked statically: the library loads on a machine with
 * no driver, and the first call that needs the driver fails with its error.
 */
#ifndef LE_CUDA_H
#define LE_CUDA_H

#include <stddef.h>
#include <stdint.h>

#include "llm_edge.h"

#ifdef __cplusplus
extern "C" {
#endif

#if defined(__GNUC__) || defined(__clang__)
#pragma GCC visibility push(default)
#endif

#define LEC_ABI_VERSION 1

/* Negative codes of the library itself (positive codes are cudaError_t). */
#define LEC_E_INVALID (-1)     /* a bad argument that TypeScript should have refused */
#define LEC_E_UNSUPPORTED (-2) /* an op or type combination with no kernel */

/* Bytes of lec_device_info. */
#define LEC_DEVICE_INFO_BYTES 296

/* What TypeScript learns about one device: 296 bytes, little-endian. */
typedef struct lec_device_info {
  char name[256];
  uint64_t total_mem;  /* bytes */
  uint64_t free_mem;   /* bytes, at the time of the call */
  int32_t cc_major;    /* compute capability */
  int32_t cc_minor;
  int32_t sm_count;
  int32_t warp_size;
  int32_t integrated;  /* 1 when the device shares host memory */
  int32_t reserved;
} lec_device_info;

/* ---- library ---------------------------------------------------------- */
int32_t lec_abi_version(void);
/* Message of the last failure on this thread (static storage, "" if none). */
const char *lec_last_error(void);
/* The CUDA runtime version this library was built with (e.g. 13000) and the
 * driver's (0 when there is no driver); returns cudaDriverGetVersion's code. */
int32_t lec_versions(int32_t *runtime, int32_t *driver);
/* The sm_XY architectures compiled in, as a bit set of XY/10 - 5 (sm_80 -> 3,
 * sm_90 -> 4); the kernels run only on these. */
int32_t lec_built_archs(void);

/* ---- devices ----------------------------------------------------------- */
/* Number of usable devices; the first call initialises the runtime, so this
 * is where "no driver" / "no device" surface. */
int32_t lec_device_count(int32_t *count);
int32_t lec_device_info_get(int32_t device, lec_device_info *out);

/* ---- memory (synchronous; addresses are device addresses as u64) ------- */
/* Zero-filled device memory on `device`; *out receives the address. */
int32_t lec_malloc(int32_t device, uint64_t size, uint64_t *out);
int32_t lec_free(int32_t device, uint64_t ptr);
/* Page-locked host memory (for staging copies); *out receives the address. */
int32_t lec_host_alloc(uint64_t size, uint64_t *out);
int32_t lec_host_free(uint64_t ptr);
int32_t lec_memset(int32_t device, uint64_t dst, int32_t value, uint64_t n);
int32_t lec_memcpy_h2d(int32_t device, uint64_t dst, const void *src, uint64_t n);
int32_t lec_memcpy_d2h(int32_t device, void *dst, uint64_t src, uint64_t n);
int32_t lec_memcpy_d2d(int32_t device, uint64_t dst, uint64_t src, uint64_t n);

/* ---- compute ----------------------------------------------------------- */
/* A context: one device, one stream, the scratch memory kernels need
 * (activations quantized to Q8_1), and the message of its last failure. */
typedef struct lec_ctx lec_ctx;
int32_t lec_ctx_new(int32_t device, lec_ctx **out);
void lec_ctx_free(lec_ctx *ctx);
/* Waits for everything queued on the context's stream. */
int32_t lec_ctx_sync(lec_ctx *ctx);
/* Message of the last failed call on ctx ("" after a success). */
const char *lec_ctx_error(const lec_ctx *ctx);
/* Runs n_nodes le_node records (host memory; tensor data on this device) in
 * order on the context's stream, then waits for them: one call per graph
 * split. Returns 0, a cudaError_t, or LEC_E_*; lec_ctx_error says which node. */
int32_t lec_graph_compute(lec_ctx *ctx, const le_node *nodes, int32_t n_nodes);

#if defined(__GNUC__) || defined(__clang__)
#pragma GCC visibility pop
#endif

#ifdef __cplusplus
}
#endif
#endif
