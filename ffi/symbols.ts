/**
 * The `Deno.dlopen` symbol table of build/libllm_edge.so, one entry per
 * function of kernels/include/llm_edge.h.
 *
 * @module
 */
import { setAddress } from "./pointers.ts";

/** Symbol definitions mirroring kernels/include/llm_edge.h. */
export const SYMBOLS = {
  le_abi_version: { parameters: [], result: "i32" },
  /**
   * A short sleep on a Deno worker thread: the event loop parks and polls
   * I/O before it returns (resolved promises and setImmediate turns do
   * not, and a call that returns at once may beat the park).
   */
  le_pause: { parameters: ["i32"], result: "i32", nonblocking: true },
  le_cpu_features: { parameters: [], result: "i32" },
  le_set_simd_level: { parameters: ["i32"], result: "i32" },
  le_last_error: { parameters: [], result: "pointer" },
  le_alloc: { parameters: ["u64", "u64"], result: "pointer" },
  le_free: { parameters: ["pointer"], result: "void" },
  le_mmap_file: { parameters: ["buffer", "buffer"], result: "pointer" },
  le_munmap: { parameters: ["pointer", "u64"], result: "void" },
  le_mmap_drop: { parameters: ["pointer", "u64"], result: "i32" },
  le_ctx_new: { parameters: ["i32"], result: "pointer" },
  le_ctx_free: { parameters: ["pointer"], result: "void" },
  le_ctx_threads: { parameters: ["pointer"], result: "i32" },
  /** Sets or clears the cancel flag; called from the main thread while a compute runs. */
  le_ctx_cancel: { parameters: ["pointer", "i32"], result: "void" },
  /** Runs on a Deno worker thread so the event loop stays free. */
  le_graph_compute: {
    parameters: ["pointer", "pointer", "i32"],
    result: "i32",
    nonblocking: true,
  },
  le_ctx_error: { parameters: ["pointer"], result: "pointer" },
  /** The same function called synchronously, for tiny graphs and tests. */
  le_graph_compute_sync: {
    name: "le_graph_compute",
    parameters: ["pointer", "pointer", "i32"],
    result: "i32",
  },
  le_dequantize_row: { parameters: ["i32", "buffer", "buffer", "i64"], result: "i32" },
  le_quantize_row: { parameters: ["i32", "buffer", "buffer", "i64"], result: "i32" },
  le_vec_dot: { parameters: ["i32", "i64", "buffer", "buffer", "buffer"], result: "i32" },
  le_expf_mismatches: { parameters: ["u32", "u32", "u32"], result: "i64" },
  le_repack_flag: { parameters: ["i32", "i64", "i64"], result: "i32" },
  le_repack_flag_fast: { parameters: ["i32", "i64", "i64"], result: "i32" },
  le_repack_size: { parameters: ["i32", "i32", "i64", "i64"], result: "i64" },
  le_repack: {
    parameters: ["i32", "i32", "pointer", "pointer", "u64", "i64", "i64"],
    result: "i32",
  },
} as const satisfies Deno.ForeignLibraryInterface;

/** The opened library's callable symbols. */
export type LlmEdgeSymbols = Deno.DynamicLibrary<typeof SYMBOLS>["symbols"];

/** ABI version this TypeScript expects (`LE_ABI_VERSION`). */
export const ABI_VERSION = 6;

/** `LE_MAX_THREADS`: the most threads a native context runs (le_ctx_new refuses more). */
export const MAX_THREADS = 512;

/** `LE_CANCELLED`: le_graph_compute's result after le_ctx_cancel. */
export const LE_CANCELLED = -6;

/** Bytes of one `le_tensor`. */
export const TENSOR_BYTES = 80;
/** Bytes of one `le_node`. */
export const NODE_BYTES = 712;
/** Byte offsets inside `le_node` / `le_tensor`. */
export const NodeLayout = {
  OP: 0,
  N_SRC: 4,
  DST: 8,
  SRC: 88,
  PARAMS: 648,
  T_TYPE: 0,
  T_FLAGS: 4,
  T_NE: 8,
  T_NB: 40,
  T_DATA: 72,
} as const;

/** What an `le_tensor` record holds besides its data address. */
export interface TensorShape {
  /** ggml type id. */
  readonly type: number;
  /** Elements per dimension (4). */
  readonly ne: readonly number[];
  /** Byte strides (4). */
  readonly nb: readonly number[];
}

/** `LE_FLAG_Q4_0_8X8`: a MUL_MAT src0 holding Q4_0 rows repacked 8 at a time (le_repack). */
export const FLAG_Q4_0_8X8 = 1;
/** `LE_FLAG_Q4_K_8X8`: a MUL_MAT src0 holding Q4_K rows repacked 8 at a time. */
export const FLAG_Q4_K_8X8 = 2;

/**
 * Writes one `le_tensor` record at `off`: type, flags (0 unless the data is
 * a repacked layout, see `le_repack`), ne, nb and the data address (every
 * byte zero for an absent tensor). Shared by the CPU and CUDA command
 * encoders, whose node records have the same layout.
 */
export function writeTensorRecord(
  v: DataView,
  off: number,
  t: TensorShape | undefined,
  address: number,
  flags = 0,
): void {
  if (!t) {
    for (let i = 0; i < TENSOR_BYTES; i += 4) v.setUint32(off + i, 0, true);
    return;
  }
  const L = NodeLayout;
  v.setInt32(off + L.T_TYPE, t.type, true);
  v.setInt32(off + L.T_FLAGS, flags, true);
  for (let i = 0; i < 4; i++) {
    setAddress(v, off + L.T_NE + 8 * i, t.ne[i]);
    setAddress(v, off + L.T_NB + 8 * i, t.nb[i]);
  }
  setAddress(v, off + L.T_DATA, address);
}

/** SIMD levels accepted by `le_set_simd_level`. */
export const SimdLevel = { BEST: -1, SCALAR: 0, AVX2: 1, AVX512: 2, NEON: 3 } as const;
