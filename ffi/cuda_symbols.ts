/**
 * The `Deno.dlopen` symbol table of build/libllm_edge_cuda.so, one entry per
 * function of kernels/cuda/le_cuda.h (tests/cuda_build_test.ts compares the
 * two, and both with the library's exported symbols).
 *
 * @module
 */

/** Symbol definitions mirroring kernels/cuda/le_cuda.h. */
export const CUDA_SYMBOLS = {
  lec_abi_version: { parameters: [], result: "i32" },
  lec_last_error: { parameters: [], result: "pointer" },
  lec_versions: { parameters: ["buffer", "buffer"], result: "i32" },
  lec_built_archs: { parameters: [], result: "i32" },
  lec_device_count: { parameters: ["buffer"], result: "i32" },
  lec_device_info_get: { parameters: ["i32", "buffer"], result: "i32" },
  lec_malloc: { parameters: ["i32", "u64", "buffer"], result: "i32" },
  lec_free: { parameters: ["i32", "u64"], result: "i32" },
  lec_host_alloc: { parameters: ["u64", "buffer"], result: "i32" },
  lec_host_free: { parameters: ["u64"], result: "i32" },
  lec_memset: { parameters: ["i32", "u64", "i32", "u64"], result: "i32" },
  lec_memcpy_h2d: { parameters: ["i32", "u64", "buffer", "u64"], result: "i32" },
  lec_memcpy_d2h: { parameters: ["i32", "buffer", "u64", "u64"], result: "i32" },
  lec_memcpy_d2d: { parameters: ["i32", "u64", "u64", "u64"], result: "i32" },
  lec_ctx_new: { parameters: ["i32", "buffer"], result: "i32" },
  lec_ctx_free: { parameters: ["pointer"], result: "void" },
  lec_ctx_sync: { parameters: ["pointer"], result: "i32" },
  lec_ctx_error: { parameters: ["pointer"], result: "pointer" },
  /** Runs on a Deno worker thread so the event loop stays free while the GPU works. */
  lec_graph_compute: {
    parameters: ["pointer", "pointer", "i32"],
    result: "i32",
    nonblocking: true,
  },
} as const satisfies Deno.ForeignLibraryInterface;

/** The opened CUDA library's callable symbols. */
export type CudaSymbols = Deno.DynamicLibrary<typeof CUDA_SYMBOLS>["symbols"];

/** ABI version this TypeScript expects (`LEC_ABI_VERSION`). */
export const CUDA_ABI_VERSION = 1;

/** `LEC_E_INVALID` and `LEC_E_UNSUPPORTED`: the library's own (negative) result codes. */
export const LecError = { INVALID: -1, UNSUPPORTED: -2 } as const;

/** Bytes of `lec_device_info`, and its field offsets. */
export const DEVICE_INFO_BYTES = 296;
/** Byte offsets inside `lec_device_info`. */
export const DeviceInfoLayout = {
  NAME: 0,
  NAME_BYTES: 256,
  TOTAL_MEM: 256,
  FREE_MEM: 264,
  CC_MAJOR: 272,
  CC_MINOR: 276,
  SM_COUNT: 280,
  WARP_SIZE: 284,
  INTEGRATED: 288,
} as const;
