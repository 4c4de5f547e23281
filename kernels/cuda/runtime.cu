// Library, device, memory and context entry points of libllm_edge_cuda.so,
// and lec_graph_compute's dispatch. Every CUDA runtime result is checked and
// turned into a code plus message; nothing here aborts the process.
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common.cuh"

#include <stddef.h>

// The layouts TypeScript encodes and decodes (ffi/symbols.ts, ffi/cuda_symbols.ts).
static_assert(sizeof(le_tensor) == 80, "le_tensor is 80 bytes");
static_assert(sizeof(le_node) == 712, "le_node is 712 bytes");
static_assert(sizeof(lec_device_info) == LEC_DEVICE_INFO_BYTES, "lec_device_info size");
static_assert(offsetof(lec_device_info, total_mem) == 256 && offsetof(lec_device_info, free_mem) == 264 &&
                  offsetof(lec_device_info, cc_major) == 272 && offsetof(lec_device_info, sm_count) == 280 &&
                  offsetof(lec_device_info, integrated) == 288,
              "lec_device_info offsets");

static thread_local char g_error[512];

int32_t lec_fail(lec_ctx *ctx, int32_t code, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(g_error, sizeof g_error, fmt, ap);
  va_end(ap);
  if (ctx) snprintf(ctx->error, sizeof ctx->error, "%s", g_error);
  return code;
}

int32_t lec_check(lec_ctx *ctx, cudaError_t e, const char *what) {
  if (e == cudaSuccess) return 0;
  // Clears the sticky "last error" of non-fatal failures so the next call starts clean.
  (void)cudaGetLastError();
  return lec_fail(ctx, (int32_t)e, "%s: %s (%s)", what, cudaGetErrorString(e), cudaGetErrorName(e));
}

extern "C" int32_t lec_abi_version(void) { return LEC_ABI_VERSION; }

extern "C" const char *lec_last_error(void) { return g_error; }

extern "C" int32_t lec_versions(int32_t *runtime, int32_t *driver) {
  if (!runtime || !driver) return lec_fail(NULL, LEC_E_INVALID, "lec_versions: null argument");
  int r = 0, d = 0;
  int32_t rc = lec_check(NULL, cudaRuntimeGetVersion(&r), "cudaRuntimeGetVersion");
  if (rc) return rc;
  rc = lec_check(NULL, cudaDriverGetVersion(&d), "cudaDriverGetVersion");
  *runtime = r;
  *driver = d;
  return rc;
}

extern "C" int32_t lec_built_archs(void) {
  int32_t bits = 0;
#ifdef LEC_ARCHS
  bits = LEC_ARCHS;
#endif
  return bits;
}

extern "C" int32_t lec_device_count(int32_t *count) {
  if (!count) return lec_fail(NULL, LEC_E_INVALID, "lec_device_count: null argument");
  int n = 0;
  *count = 0;
  int32_t rc = lec_check(NULL, cudaGetDeviceCount(&n), "cudaGetDeviceCount");
  if (rc == 0) *count = n;
  return rc;
}

static int32_t use_device(lec_ctx *ctx, int32_t device) {
  char what[64];
  snprintf(what, sizeof what, "cudaSetDevice(%d)", device);
  return lec_check(ctx, cudaSetDevice(device), what);
}

extern "C" int32_t lec_device_info_get(int32_t device, lec_device_info *out) {
  if (!out) return lec_fail(NULL, LEC_E_INVALID, "lec_device_info_get: null argument");
  memset(out, 0, sizeof *out);
  cudaDeviceProp p;
  char what[64];
  snprintf(what, sizeof what, "cudaGetDeviceProperties(%d)", device);
  int32_t rc = lec_check(NULL, cudaGetDeviceProperties(&p, device), what);
  if (rc) return rc;
  snprintf(out->name, sizeof out->name, "%s", p.name);
  out->total_mem = p.totalGlobalMem;
  out->cc_major = p.major;
  out->cc_minor = p.minor;
  out->sm_count = p.multiProcessorCount;
  out->warp_size = p.warpSize;
  out->integrated = p.integrated;
  if ((rc = use_device(NULL, device))) return rc;
  size_t free_b = 0, total_b = 0;
  rc = lec_check(NULL, cudaMemGetInfo(&free_b, &total_b), "cudaMemGetInfo");
  out->free_mem = free_b;
  return rc;
}

extern "C" int32_t lec_malloc(int32_t device, uint64_t size, uint64_t *out) {
  if (!out) return lec_fail(NULL, LEC_E_INVALID, "lec_malloc: null argument");
  *out = 0;
  int32_t rc = use_device(NULL, device);
  if (rc) return rc;
  void *p = NULL;
  char what[64];
  snprintf(what, sizeof what, "cudaMalloc(%llu)", (unsigned long long)size);
  if ((rc = lec_check(NULL, cudaMalloc(&p, size ? size : 1), what))) return rc;
  if ((rc = lec_check(NULL, cudaMemset(p, 0, size ? size : 1), "cudaMemset"))) {
    cudaFree(p);
    return rc;
  }
  *out = (uint64_t)(uintptr_t)p;
  return 0;
}

extern "C" int32_t lec_free(int32_t device, uint64_t ptr) {
  int32_t rc = use_device(NULL, device);
  if (rc) return rc;
  return lec_check(NULL, cudaFree((void *)(uintptr_t)ptr), "cudaFree");
}

extern "C" int32_t lec_host_alloc(uint64_t size, uint64_t *out) {
  if (!out) return lec_fail(NULL, LEC_E_INVALID, "lec_host_alloc: null argument");
  *out = 0;
  void *p = NULL;
  char what[64];
  snprintf(what, sizeof what, "cudaMallocHost(%llu)", (unsigned long long)size);
  int32_t rc = lec_check(NULL, cudaMallocHost(&p, size ? size : 1), what);
  if (rc == 0) {
    memset(p, 0, size);
    *out = (uint64_t)(uintptr_t)p;
  }
  return rc;
}

extern "C" int32_t lec_host_free(uint64_t ptr) {
  return lec_check(NULL, cudaFreeHost((void *)(uintptr_t)ptr), "cudaFreeHost");
}

extern "C" int32_t lec_memset(int32_t device, uint64_t dst, int32_t value, uint64_t n) {
  int32_t rc = use_device(NULL, device);
  if (rc) return rc;
  return lec_check(NULL, cudaMemset((void *)(uintptr_t)dst, value, n), "cudaMemset");
}

static int32_t copy(int32_t device, void *dst, const void *src, uint64_t n, cudaMemcpyKind k,
                    const char *what) {
  int32_t rc = use_device(NULL, device);
  if (rc) return rc;
  if (n == 0) return 0;
  return lec_check(NULL, cudaMemcpy(dst, src, n, k), what);
}

extern "C" int32_t lec_memcpy_h2d(int32_t device, uint64_t dst, const void *src, uint64_t n) {
  return copy(device, (void *)(uintptr_t)dst, src, n, cudaMemcpyHostToDevice,
              "cudaMemcpy(host to device)");
}

extern "C" int32_t lec_memcpy_d2h(int32_t device, void *dst, uint64_t src, uint64_t n) {
  return copy(device, dst, (const void *)(uintptr_t)src, n, cudaMemcpyDeviceToHost,
              "cudaMemcpy(device to host)");
}

extern "C" int32_t lec_memcpy_d2d(int32_t device, uint64_t dst, uint64_t src, uint64_t n) {
  return copy(device, (void *)(uintptr_t)dst, (const void *)(uintptr_t)src, n,
              cudaMemcpyDeviceToDevice, "cudaMemcpy(device to device)");
}

extern "C" int32_t lec_ctx_new(int32_t device, lec_ctx **out) {
  if (!out) return lec_fail(NULL, LEC_E_INVALID, "lec_ctx_new: null argument");
  *out = NULL;
  int32_t rc = use_device(NULL, device);
  if (rc) return rc;
  lec_ctx *ctx = (lec_ctx *)calloc(1, sizeof *ctx);
  if (!ctx) return lec_fail(NULL, LEC_E_INVALID, "lec_ctx_new: out of host memory");
  ctx->device = device;
  // A blocking stream: its kernels wait for the copies and memsets that the
  // lec_memcpy_* / lec_memset calls queue on the legacy default stream
  // (pageable host-to-device copies may return before their DMA is done).
  rc = lec_check(NULL, cudaStreamCreateWithFlags(&ctx->stream, cudaStreamDefault),
                 "cudaStreamCreateWithFlags");
  if (rc) {
    free(ctx);
    return rc;
  }
  *out = ctx;
  return 0;
}

extern "C" void lec_ctx_free(lec_ctx *ctx) {
  if (!ctx) return;
  cudaSetDevice(ctx->device);
  cudaStreamSynchronize(ctx->stream);
  if (ctx->scratch) cudaFree(ctx->scratch);
  cudaStreamDestroy(ctx->stream);
  free(ctx);
}

extern "C" int32_t lec_ctx_sync(lec_ctx *ctx) {
  if (!ctx) return lec_fail(NULL, LEC_E_INVALID, "lec_ctx_sync: null context");
  return lec_check(ctx, cudaStreamSynchronize(ctx->stream), "cudaStreamSynchronize");
}

extern "C" const char *lec_ctx_error(const lec_ctx *ctx) { return ctx ? ctx->error : ""; }

int32_t lec_scratch(lec_ctx *ctx, size_t size, void **out) {
  if (ctx->scratch_size < size) {
    // cudaFree waits for the kernels that may still read the old scratch.
    if (ctx->scratch) cudaFree(ctx->scratch);
    ctx->scratch = NULL;
    ctx->scratch_size = 0;
    size_t want = size + size / 4;
    int32_t rc = lec_check(ctx, cudaMalloc(&ctx->scratch, want), "cudaMalloc(scratch)");
    if (rc) return rc;
    ctx->scratch_size = want;
  }
  *out = ctx->scratch;
  return 0;
}

static int32_t run_node(lec_ctx *ctx, const le_node *n) {
  switch (n->op) {
    case LE_OP_NONE: return 0;
    case LE_OP_GET_ROWS: return lec_op_get_rows(ctx, n);
    case LE_OP_RMS_NORM:
    case LE_OP_NORM: return lec_op_norm(ctx, n);
    case LE_OP_ADD:
    case LE_OP_MUL: return lec_op_binary(ctx, n);
    case LE_OP_SILU:
    case LE_OP_GELU:
    case LE_OP_SCALE: return lec_op_unary(ctx, n);
    case LE_OP_SWIGLU:
    case LE_OP_GEGLU: return lec_op_glu(ctx, n);
    case LE_OP_ROPE: return lec_op_rope(ctx, n);
    case LE_OP_SOFT_MAX: return lec_op_soft_max(ctx, n);
    case LE_OP_CPY: return lec_op_cpy(ctx, n);
    case LE_OP_MUL_MAT: return lec_op_mul_mat(ctx, n);
    case LE_OP_FLASH_ATTN_EXT: return lec_op_flash_attn(ctx, n);
    case LE_OP_SSM_CONV: return lec_op_ssm_conv(ctx, n);
    case LE_OP_SSM_SCAN: return lec_op_ssm_scan(ctx, n);
    case LE_OP_CONCAT: return lec_op_concat(ctx, n);
    case LE_OP_HADAMARD: return lec_op_hadamard(ctx, n);
    case LE_OP_SET_ROWS: return lec_op_set_rows(ctx, n);
    default: return LEC_E_UNSUPPORTED;
  }
}

extern "C" int32_t lec_graph_compute(lec_ctx *ctx, const le_node *nodes, int32_t n_nodes) {
  if (!ctx) return lec_fail(NULL, LEC_E_INVALID, "lec_graph_compute: null context");
  ctx->error[0] = 0;
  if (n_nodes < 0 || (n_nodes > 0 && !nodes)) {
    return lec_fail(ctx, LEC_E_INVALID, "lec_graph_compute: bad node list");
  }
  int32_t rc = use_device(ctx, ctx->device);
  if (rc) return rc;
  for (int32_t i = 0; i < n_nodes; i++) {
    rc = run_node(ctx, &nodes[i]);
    if (rc == LEC_E_UNSUPPORTED) {
      return lec_fail(ctx, rc, "node %d: op %d with dst type %d, src0 type %d has no CUDA kernel",
                      i, nodes[i].op, nodes[i].dst.type, nodes[i].src[0].type);
    }
    if (rc) {
      char what[sizeof ctx->error];
      snprintf(what, sizeof what, "%s", ctx->error);
      return lec_fail(ctx, rc, "node %d (op %d): %.480s", i, nodes[i].op, what);
    }
    char what[64];
    snprintf(what, sizeof what, "node %d (op %d) launch", i, nodes[i].op);
    if ((rc = lec_check(ctx, cudaGetLastError(), what))) return rc;
  }
  return lec_check(ctx, cudaStreamSynchronize(ctx->stream), "cudaStreamSynchronize");
}
