// A stand-in for libllm_edge_cuda.so that emulates one device in host
// memory: "device" allocations are CPU-library allocations, copies are
// memcpys, and lec_graph_compute hands the very same le_node records to the
// CPU library's le_graph_compute. Everything above the C ABI (lib/backend/
// cuda.ts, the scheduler's splits and copies, the KV cache in device
// buffers, nGpuLayers) then runs for real on a machine without a GPU, and
// must give exactly the CPU backend's results. It says nothing about the
// CUDA kernels themselves.
import type { CudaLibrary } from "../ffi/cuda_library.ts";
import type { CudaSymbols } from "../ffi/cuda_symbols.ts";
import { DeviceInfoLayout as DI } from "../ffi/cuda_symbols.ts";
import type { NativeLibrary } from "../ffi/library.ts";
import { address, nativeBytes, pointerAt, toCString } from "../ffi/pointers.ts";

/** Calls the double saw, by function name. */
export type CallCounts = Map<string, number>;

/** The emulating library and its call counters; dispose frees what it allocated. */
export interface HostDouble extends Disposable {
  /** The library to hand to setCudaLibrary or CudaBackend.create. */
  readonly lib: CudaLibrary;
  /** How often each lec_ function was called. */
  readonly calls: CallCounts;
  /** Bytes currently allocated as "device" memory. */
  readonly liveBytes: () => number;
}

/** A one-device host emulation over the opened CPU library `cpu`. */
export function hostDouble(cpu: NativeLibrary): HostDouble {
  const c = cpu.symbols;
  const calls: CallCounts = new Map();
  const live = new Map<number, number>();
  const ctxs = new Map<number, Deno.PointerObject>();
  const empty = toCString("");
  const emptyPtr = Deno.UnsafePointer.of(empty);
  const count = (name: string) => calls.set(name, (calls.get(name) ?? 0) + 1);
  const bytes = (addr: number, n: number) =>
    nativeBytes(pointerAt(addr) as Deno.PointerObject, Number(n));
  const alloc = (size: bigint, out: BigUint64Array) => {
    const p = c.le_alloc(size > 0n ? size : 1n, 256n);
    if (p === null) return 2; // cudaErrorMemoryAllocation
    out[0] = BigInt(address(p));
    live.set(address(p), Number(size));
    return 0;
  };
  const free = (addr: bigint) => {
    live.delete(Number(addr));
    c.le_free(pointerAt(Number(addr)));
    return 0;
  };
  const symbols = {
    lec_abi_version: () => (count("lec_abi_version"), 1),
    lec_last_error: () => emptyPtr,
    lec_versions: (r: Int32Array, d: Int32Array) => (r[0] = 13000, d[0] = 13000, 0),
    lec_built_archs: () => 24,
    lec_device_count: (n: Int32Array) => (count("lec_device_count"), n[0] = 1, 0),
    lec_device_info_get: (_i: number, raw: Uint8Array) => {
      raw.set(new TextEncoder().encode("host emulation"), DI.NAME);
      const v = new DataView(raw.buffer, raw.byteOffset, raw.byteLength);
      v.setBigUint64(DI.TOTAL_MEM, 1n << 30n, true);
      v.setInt32(DI.CC_MAJOR, 9, true);
      return 0;
    },
    lec_malloc: (
      _d: number,
      size: bigint,
      out: BigUint64Array,
    ) => (count("lec_malloc"), alloc(size, out)),
    lec_free: (_d: number, addr: bigint) => (count("lec_free"), free(addr)),
    lec_host_alloc: (size: bigint, out: BigUint64Array) => alloc(size, out),
    lec_host_free: (addr: bigint) => free(addr),
    lec_memset: (_d: number, dst: bigint, value: number, n: bigint) => {
      count("lec_memset");
      bytes(Number(dst), Number(n)).fill(value);
      return 0;
    },
    lec_memcpy_h2d: (_d: number, dst: bigint, src: Uint8Array, n: bigint) => {
      count("lec_memcpy_h2d");
      bytes(Number(dst), Number(n)).set(src.subarray(0, Number(n)));
      return 0;
    },
    lec_memcpy_d2h: (_d: number, dst: Uint8Array, src: bigint, n: bigint) => {
      count("lec_memcpy_d2h");
      dst.set(bytes(Number(src), Number(n)));
      return 0;
    },
    lec_memcpy_d2d: (_d: number, dst: bigint, src: bigint, n: bigint) => {
      count("lec_memcpy_d2d");
      bytes(Number(dst), Number(n)).set(bytes(Number(src), Number(n)));
      return 0;
    },
    lec_ctx_new: (_d: number, out: BigUint64Array) => {
      const ctx = c.le_ctx_new(1);
      if (ctx === null) return 2;
      ctxs.set(address(ctx), ctx);
      out[0] = BigInt(address(ctx));
      return 0;
    },
    lec_ctx_free: (p: Deno.PointerValue) => {
      const ctx = ctxs.get(address(p));
      if (ctx) c.le_ctx_free(ctx);
      ctxs.delete(address(p));
    },
    lec_ctx_sync: () => 0,
    lec_ctx_error: (p: Deno.PointerValue) => c.le_ctx_error(ctxs.get(address(p)) ?? null),
    lec_graph_compute: (p: Deno.PointerValue, nodes: Deno.PointerValue, n: number) => {
      count("lec_graph_compute");
      return c.le_graph_compute(ctxs.get(address(p))!, nodes, n);
    },
  };
  return {
    lib: {
      path: "host-double",
      symbols: symbols as unknown as CudaSymbols,
      lastError: () => "",
    },
    calls,
    liveBytes: () => [...live.values()].reduce((a, b) => a + b, 0),
    [Symbol.dispose]() {
      for (const a of [...live.keys()]) free(BigInt(a));
      for (const ctx of ctxs.values()) c.le_ctx_free(ctx);
      ctxs.clear();
    },
  };
}
