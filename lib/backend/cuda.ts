/**
 * The CUDA backend: kernels in build/libllm_edge_cuda.so (kernels/cuda),
 * device memory owned by the backend, one FFI call per compute (a whole
 * graph split runs as one `lec_graph_compute`).
 *
 * Memory: {@link CudaBuffer}s live on the device; bytes move in and out only
 * through their {@link BufferIO} (host↔device and device↔device copies), so
 * the scheduler and the KV cache use them like any other buffer. Tensors a
 * compute reads from host memory (weights in a mapped GGUF file, backend
 * "host") are uploaded once, on first use, and kept on the device until the
 * backend is disposed; tensors in other foreign buffers are uploaded for the
 * compute that reads them. Destinations must be this backend's buffers.
 *
 * Native code is untrusted: every node goes through {@link validateNode}
 * (types, shapes, each tensor's extent inside its buffer) and the CUDA op
 * table below before it is encoded; every size and offset handed to a copy
 * is range-checked here first.
 *
 * STATUS: correct on an H200 (every op case within its bound, greedy output
 * equal to the CPU's; 2026-11-27), not yet fast; see kernels/cuda/README.md.
 *
 * @module
 */
import { COMPUTE_TYPES, MAX_PARAMS, MAX_SRC, Op, opSupported } from "../graph/ops.ts";
import { GGMLType, ggmlTypeInfo, ggmlTypeName } from "../ggml/types.ts";
import { bufferIO, byteExtent, checkRange, describeBuffer } from "../ggml/memory.ts";
import type {
  Backend,
  BackendBuffer,
  BufferIO,
  BufferRef,
  ExecNode,
  OpQuery,
  ResolvedTensor,
} from "./types.ts";
import { validateNode } from "./validate.ts";
import { type CudaLibrary, loadCudaLibrary } from "../../ffi/cuda_library.ts";
import { DEVICE_INFO_BYTES, DeviceInfoLayout as DI } from "../../ffi/cuda_symbols.ts";
import { NODE_BYTES, NodeLayout as L, TENSOR_BYTES, writeTensorRecord } from "../../ffi/symbols.ts";
import { cString, detachNative, nativeBytes, pointerAt } from "../../ffi/pointers.ts";

const { F32, F16, BF16, Q8_0, Q4_0 } = GGMLType;
const FLOAT: readonly number[] = [F32, F16, BF16];
/** Weight types the CUDA get_rows and mul_mat kernels read: every one the CPU reads. */
export const CUDA_WEIGHT_TYPES: readonly number[] = COMPUTE_TYPES;

/**
 * Whether kernels/cuda implements `q`: the op table's rule (lib/graph/ops.ts)
 * narrowed to the ops and types written so far: copies into Q4_1/Q5_x/
 * BF16-from-quantized have no CUDA kernel yet; the
 * scheduler runs them on the next backend in the list.
 */
export function cudaOpSupported(q: OpQuery): boolean {
  if (!opSupported(q)) return false;
  const [s0] = q.srcTypes;
  switch (q.op) {
    case Op.NONE:
    case Op.RMS_NORM:
    case Op.NORM:
    case Op.ADD:
    case Op.MUL:
    case Op.SILU:
    case Op.GELU:
    case Op.SCALE:
    case Op.SWIGLU:
    case Op.GEGLU:
    case Op.ROPE:
    case Op.SOFT_MAX:
    case Op.FLASH_ATTN_EXT:
    case Op.SSM_CONV:
    case Op.SSM_SCAN:
    case Op.CONCAT:
    case Op.HADAMARD:
      return true;
    case Op.GET_ROWS:
    case Op.MUL_MAT:
      return CUDA_WEIGHT_TYPES.includes(s0);
    case Op.SET_ROWS:
      return s0 === F32 && (FLOAT.includes(q.dstType) || q.dstType === Q8_0 || q.dstType === Q4_0);
    case Op.CPY:
      return (FLOAT.includes(s0) && FLOAT.includes(q.dstType)) ||
        (s0 === F32 && (q.dstType === Q8_0 || q.dstType === Q4_0)) ||
        (s0 === Q8_0 && q.dstType === F32);
    default:
      return false;
  }
}

/** A failed CUDA call: `call` is the C entry point, `code` its result (a cudaError_t or LEC_E_*). */
export class CudaError extends Error {
  /** The C function that failed. */
  readonly call: string;
  /** Its result code. */
  readonly code: number;
  /** Creates the error. */
  constructor(call: string, code: number, message: string) {
    super(message);
    this.name = "CudaError";
    this.call = call;
    this.code = code;
  }
}

/** No usable CUDA device: the message names the library, the driver call and its error. */
export class CudaUnavailableError extends CudaError {
  /** Creates the error. */
  constructor(call: string, code: number, message: string) {
    super(call, code, message);
    this.name = "CudaUnavailableError";
  }
}

/** One device as `lec_device_info_get` describes it. */
export interface CudaDeviceInfo {
  /** Device index. */
  readonly index: number;
  /** Marketing name ("NVIDIA H100 80GB HBM3"). */
  readonly name: string;
  /** Memory in bytes. */
  readonly totalMemory: number;
  /** Free memory in bytes at the time of the call. */
  readonly freeMemory: number;
  /** Compute capability, e.g. [9, 0]. */
  readonly computeCapability: readonly [number, number];
  /** Streaming multiprocessors. */
  readonly smCount: number;
}

function check(lib: CudaLibrary, call: string, rc: number, detail = ""): void {
  if (rc !== 0) {
    throw new CudaError(call, rc, `${call}${detail} failed (${rc}): ${lib.lastError()}`);
  }
}

function u64(a: BigUint64Array, what: string): number {
  const n = Number(a[0]);
  if (!Number.isSafeInteger(n)) throw new RangeError(`${what}: address ${a[0]} exceeds 2^53`);
  return n;
}

/**
 * The devices the CUDA runtime sees, or throws {@link CudaUnavailableError}
 * naming the library and the failing call (no driver, no device).
 */
export function cudaDevices(lib: CudaLibrary): CudaDeviceInfo[] {
  const count = new Int32Array(1);
  const rc = lib.symbols.lec_device_count(count);
  if (rc !== 0) {
    throw new CudaUnavailableError(
      "cudaGetDeviceCount",
      rc,
      `no usable CUDA device: ${lib.path}: ${lib.lastError()} [code ${rc}]`,
    );
  }
  if (count[0] === 0) {
    throw new CudaUnavailableError(
      "cudaGetDeviceCount",
      0,
      `no usable CUDA device: ${lib.path}: cudaGetDeviceCount found 0 devices`,
    );
  }
  const out: CudaDeviceInfo[] = [];
  for (let i = 0; i < count[0]; i++) {
    const raw = new Uint8Array(DEVICE_INFO_BYTES);
    check(lib, "lec_device_info_get", lib.symbols.lec_device_info_get(i, raw), `(${i})`);
    const v = new DataView(raw.buffer);
    const nameBytes = raw.subarray(DI.NAME, DI.NAME + DI.NAME_BYTES);
    const end = nameBytes.indexOf(0);
    out.push({
      index: i,
      name: new TextDecoder().decode(nameBytes.subarray(0, end < 0 ? undefined : end)),
      totalMemory: Number(v.getBigUint64(DI.TOTAL_MEM, true)),
      freeMemory: Number(v.getBigUint64(DI.FREE_MEM, true)),
      computeCapability: [v.getInt32(DI.CC_MAJOR, true), v.getInt32(DI.CC_MINOR, true)],
      smCount: v.getInt32(DI.SM_COUNT, true),
    });
  }
  return out;
}

/**
 * Whether a CUDA device is usable here, without throwing: the library is
 * loaded (built if needed) and asked. `reason` says why not (for test
 * `ignore` messages and logs).
 */
export async function probeCuda(): Promise<
  { ok: true; devices: CudaDeviceInfo[] } | { ok: false; reason: string }
> {
  try {
    return { ok: true, devices: cudaDevices(await loadCudaLibrary()) };
  } catch (e) {
    return { ok: false, reason: (e as Error).message };
  }
}

// What a buffer needs of its backend (kept apart so buffers do not hold the backend).
interface DeviceState {
  readonly lib: CudaLibrary;
  readonly device: number;
  readonly buffers: Set<CudaBuffer>;
}

/**
 * Device memory of a {@link CudaBackend}: no host view (`bytes` throws),
 * every transfer a checked CUDA copy.
 */
export class CudaBuffer implements BackendBuffer, BufferIO {
  /** Always "cuda". */
  readonly backend = "cuda";
  /** Size in bytes. */
  readonly size: number;
  /** Device memory has no host address. */
  readonly ptr = null;
  /** How errors name the buffer. */
  readonly label: string;
  /** The device address of byte 0 (for the owning backend's node encoding). */
  readonly address: number;
  readonly #s: DeviceState;
  #freed = false;

  /** Wraps `size` bytes at device `address` (allocated by the backend). */
  constructor(s: DeviceState, address: number, size: number) {
    this.#s = s;
    this.address = address;
    this.size = size;
    this.label = `cuda:${s.device} buffer`;
  }

  /** Device memory: reading it from JavaScript goes through {@link CudaBuffer.get}. */
  get bytes(): Uint8Array {
    throw new TypeError(`${describeBuffer(this)} is device memory: use bufferGet, not bytes`);
  }

  /** Whether it was freed. */
  get freed(): boolean {
    return this.#freed;
  }

  /** Marks the buffer freed (the backend released its memory). */
  markFreed(): void {
    this.#freed = true;
  }

  #live(what: string, offset: number, n: number): void {
    checkRange(this, what, offset, n);
    if (this.#freed) throw new RangeError(`${what}: ${describeBuffer(this)} was freed`);
  }

  /** Host → device. */
  set(offset: number, src: Uint8Array): void {
    if (!(src instanceof Uint8Array)) throw new TypeError("set: src is not a Uint8Array");
    this.#live("set", offset, src.byteLength);
    if (src.byteLength === 0) return;
    const s = this.#s;
    const rc = s.lib.symbols.lec_memcpy_h2d(
      s.device,
      BigInt(this.address + offset),
      src,
      BigInt(src.byteLength),
    );
    check(s.lib, "lec_memcpy_h2d", rc);
  }

  /** Device → host. */
  get(offset: number, dst: Uint8Array): void {
    if (!(dst instanceof Uint8Array)) throw new TypeError("get: dst is not a Uint8Array");
    this.#live("get", offset, dst.byteLength);
    if (dst.byteLength === 0) return;
    const s = this.#s;
    const rc = s.lib.symbols.lec_memcpy_d2h(
      s.device,
      dst,
      BigInt(this.address + offset),
      BigInt(dst.byteLength),
    );
    check(s.lib, "lec_memcpy_d2h", rc);
  }

  /**
   * Any buffer → this one: device to device from a buffer of the same
   * device, else through the source's own `get` into host memory, then up.
   */
  copy(src: BackendBuffer, srcOffset: number, dstOffset: number, n: number): void {
    this.#live("copy (destination)", dstOffset, n);
    checkRange(src, "copy (source)", srcOffset, n);
    if (n === 0) return;
    const s = this.#s;
    if (src instanceof CudaBuffer && s.buffers.has(src)) {
      if (src.freed) throw new RangeError(`copy: ${describeBuffer(src)} was freed`);
      const rc = s.lib.symbols.lec_memcpy_d2d(
        s.device,
        BigInt(this.address + dstOffset),
        BigInt(src.address + srcOffset),
        BigInt(n),
      );
      check(s.lib, "lec_memcpy_d2d", rc);
      return;
    }
    const staged = new Uint8Array(n);
    bufferIO(src).get(srcOffset, staged);
    this.set(dstOffset, staged);
  }

  /** Sets every byte to `value`. */
  clear(value: number): void {
    if (!Number.isInteger(value) || value < 0 || value > 255) {
      throw new RangeError(`clear: value ${value} is not a byte (0..255)`);
    }
    this.#live("clear", 0, this.size);
    const s = this.#s;
    check(
      s.lib,
      "lec_memset",
      s.lib.symbols.lec_memset(s.device, BigInt(this.address), value, BigInt(this.size)),
    );
  }
}

/** Options of {@linkcode CudaBackend.create}. */
export interface CudaBackendOptions {
  /** Device index (default 0). */
  device?: number;
  /** An opened library (default: loaded, and built if needed, on demand). */
  library?: CudaLibrary;
}

/** Raised when a disposed CUDA backend is used. */
export class CudaBackendDisposedError extends Error {
  /** Creates the error. */
  constructor(message = "CudaBackend used after dispose") {
    super(message);
    this.name = "CudaBackendDisposedError";
  }
}

/**
 * A CUDA device as a backend: one stream, device buffers, weights uploaded
 * on first use. Computes on one backend are queued (they share the stream
 * and the command buffer). An abort signal is honoured before a compute
 * starts; a running graph is not interrupted (it is one GPU submission).
 */
export class CudaBackend implements Backend {
  /** Backend name. */
  readonly name = "cuda";
  /** The device this backend runs on. */
  readonly device: CudaDeviceInfo;
  readonly #s: DeviceState;
  #ctx: Deno.PointerObject | null;
  // Pinned host memory holding the encoded nodes (stable while a nonblocking call reads it).
  #cmd: { addr: number; cap: number; view: DataView } | null = null;
  // Device copies of host-memory tensors (mapped weights), by buffer and byte range.
  readonly #mirrors = new Map<BackendBuffer, Map<string, CudaBuffer>>();
  #queue: Promise<void> = Promise.resolve();
  #running = 0;
  #closed = false;

  /**
   * Loads the library and opens `device`; throws {@link CudaUnavailableError}
   * (library path, failing call, CUDA error) when no device is usable.
   */
  static async create(options: CudaBackendOptions = {}): Promise<CudaBackend> {
    const lib = options.library ?? await loadCudaLibrary();
    return new CudaBackend(lib, options.device ?? 0);
  }

  /** Opens `device` of an already loaded library (see {@link CudaBackend.create}). */
  constructor(lib: CudaLibrary, device = 0) {
    const devices = cudaDevices(lib);
    if (!Number.isInteger(device) || device < 0 || device >= devices.length) {
      throw new RangeError(`CUDA device ${device} outside 0..${devices.length - 1}`);
    }
    this.device = devices[device];
    const out = new BigUint64Array(1);
    check(lib, "lec_ctx_new", lib.symbols.lec_ctx_new(device, out), `(${device})`);
    this.#ctx = pointerAt(u64(out, "lec_ctx_new")) as Deno.PointerObject;
    this.#s = { lib, device, buffers: new Set() };
  }

  /** Whether {@link CudaBackend[Symbol.dispose]} was called. */
  get disposed(): boolean {
    return this.#closed;
  }

  /** Whether the kernels implement `q`. */
  supportsOp(q: OpQuery): boolean {
    return cudaOpSupported(q);
  }

  /** A zero-filled device buffer of `size` bytes (cudaMalloc is 256-byte aligned). */
  alloc(size: number): CudaBuffer {
    if (this.#closed) throw new CudaBackendDisposedError();
    if (!Number.isSafeInteger(size) || size < 0) throw new RangeError(`alloc: bad size ${size}`);
    const s = this.#s, out = new BigUint64Array(1);
    check(s.lib, "lec_malloc", s.lib.symbols.lec_malloc(s.device, BigInt(size), out), `(${size})`);
    const buf = new CudaBuffer(s, u64(out, "lec_malloc"), size);
    s.buffers.add(buf);
    return buf;
  }

  /** Frees a buffer from alloc(); after dispose it does nothing. */
  free(buf: BackendBuffer): void {
    if (this.#closed) return;
    const b = buf as CudaBuffer;
    if (!this.#s.buffers.has(b)) throw new Error("free: buffer was not allocated by this backend");
    if (this.#running) throw new Error("CudaBackend: buffer freed while a compute is running");
    this.#release(b);
  }

  #release(b: CudaBuffer): void {
    const s = this.#s;
    s.buffers.delete(b);
    b.markFreed();
    check(s.lib, "lec_free", s.lib.symbols.lec_free(s.device, BigInt(b.address)));
  }

  // The device address of a tensor: ours directly, a mapped weight through its
  // mirror, anything else uploaded into a temporary for this compute.
  #addressOf(t: ResolvedTensor, temps: CudaBuffer[], where: string): number {
    const ref: BufferRef = t.data, buf = ref.buffer;
    if (buf instanceof CudaBuffer) {
      if (!this.#s.buffers.has(buf)) throw new Error(`${where}: buffer of another CUDA backend`);
      if (buf.freed) throw new RangeError(`${where}: ${describeBuffer(buf)} was freed`);
      return buf.address + ref.offset;
    }
    const extent = byteExtent(ggmlTypeInfo(t.type)!, t.ne, t.nb);
    if (buf.backend === "host") {
      let m = this.#mirrors.get(buf);
      if (!m) this.#mirrors.set(buf, m = new Map());
      const key = `${ref.offset}:${extent}`;
      let d = m.get(key);
      if (!d) {
        d = this.alloc(Math.max(extent, 1));
        d.copy(buf, ref.offset, 0, extent);
        m.set(key, d);
      }
      return d.address;
    }
    const d = this.alloc(Math.max(extent, 1));
    temps.push(d);
    d.copy(buf, ref.offset, 0, extent);
    return d.address;
  }

  #commandBuffer(n: number): { addr: number; view: DataView } {
    const s = this.#s;
    if (!this.#cmd || this.#cmd.cap < n) {
      if (this.#cmd) {
        detachNative(this.#cmd.view);
        check(s.lib, "lec_host_free", s.lib.symbols.lec_host_free(BigInt(this.#cmd.addr)));
        this.#cmd = null;
      }
      const cap = Math.max(n, 64), out = new BigUint64Array(1);
      const rc = s.lib.symbols.lec_host_alloc(BigInt(cap * NODE_BYTES), out);
      check(s.lib, "lec_host_alloc", rc, `(${cap * NODE_BYTES})`);
      const addr = u64(out, "lec_host_alloc");
      const bytes = nativeBytes(pointerAt(addr) as Deno.PointerObject, cap * NODE_BYTES);
      this.#cmd = { addr, cap, view: new DataView(bytes.buffer, bytes.byteOffset, bytes.length) };
    }
    return this.#cmd;
  }

  #encode(nodes: readonly ExecNode[], temps: CudaBuffer[]): number {
    const { addr, view: v } = this.#commandBuffer(nodes.length);
    nodes.forEach((n, i) => {
      validateNode(n, i);
      const where = `node ${i}${n.name ? ` (${n.name})` : ""}`;
      const q = { op: n.op, dstType: n.dst.type, srcTypes: n.src.map((s) => s.type) };
      if (!cudaOpSupported(q)) {
        throw new CudaError(
          "lec_graph_compute",
          -2,
          `${where}: op ${n.op} with dst ${ggmlTypeName(n.dst.type)}, src ` +
            `${q.srcTypes.map(ggmlTypeName).join(",")} has no CUDA kernel`,
        );
      }
      if (!(n.dst.data.buffer instanceof CudaBuffer)) {
        throw new Error(`${where}: dst lies in a ${n.dst.data.buffer.backend} buffer, not cuda`);
      }
      const base = i * NODE_BYTES;
      v.setInt32(base + L.OP, n.op, true);
      v.setInt32(base + L.N_SRC, n.src.length, true);
      writeTensorRecord(v, base + L.DST, n.dst, this.#addressOf(n.dst, temps, where));
      for (let k = 0; k < MAX_SRC; k++) {
        const t = n.src[k];
        const a = t ? this.#addressOf(t, temps, `${where} src${k}`) : 0;
        writeTensorRecord(v, base + L.SRC + k * TENSOR_BYTES, t, a);
      }
      for (let p = 0; p < MAX_PARAMS; p++) {
        v.setInt32(base + L.PARAMS + 4 * p, n.params[p] ?? 0, true);
      }
    });
    return addr;
  }

  /**
   * Runs the nodes as one `lec_graph_compute` (a nonblocking FFI call: the
   * event loop stays free while the device works).
   */
  compute(nodes: readonly ExecNode[], signal?: AbortSignal): Promise<void> {
    const run = async () => {
      if (this.#closed) throw new CudaBackendDisposedError();
      signal?.throwIfAborted();
      if (nodes.length === 0) return;
      const temps: CudaBuffer[] = [];
      this.#running++;
      try {
        const cmd = this.#encode(nodes, temps);
        const sym = this.#s.lib.symbols;
        const rc = await sym.lec_graph_compute(this.#ctx, pointerAt(cmd), nodes.length);
        if (rc !== 0) {
          throw new CudaError(
            "lec_graph_compute",
            rc,
            `lec_graph_compute failed (${rc}): ${cString(sym.lec_ctx_error(this.#ctx))}`,
          );
        }
      } finally {
        this.#running--;
        for (const t of temps) if (!t.freed) this.#release(t);
        if (this.#closed && this.#running === 0) this.#releaseAll();
      }
    };
    const p = this.#queue.then(run, run);
    this.#queue = p.then(() => {}, () => {});
    return p;
  }

  #releaseAll(): void {
    const s = this.#s;
    for (const b of [...s.buffers]) {
      try {
        this.#release(b);
      } catch {
        // keep freeing the rest; the context going away releases the memory anyway
      }
    }
    this.#mirrors.clear();
    if (this.#cmd) {
      detachNative(this.#cmd.view);
      s.lib.symbols.lec_host_free(BigInt(this.#cmd.addr));
      this.#cmd = null;
    }
    if (this.#ctx) s.lib.symbols.lec_ctx_free(this.#ctx);
    this.#ctx = null;
  }

  /** Frees every buffer, the mirrors, the stream; deferred to the end of a running compute. */
  [Symbol.dispose](): void {
    if (this.#closed) return;
    this.#closed = true;
    if (this.#running === 0) this.#releaseAll();
  }
}
