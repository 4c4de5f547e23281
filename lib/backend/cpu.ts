/**
 * The CPU backend: native SIMD kernels in build/libllm_edge.so driven through
 * one FFI call per compute(). Nodes are validated in TypeScript (types,
 * shapes, every tensor's extent inside its buffer) and encoded into a reused
 * native command buffer of `le_node` records (see kernels/include/llm_edge.h).
 *
 * @module
 */
import { MAX_PARAMS } from "../graph/ops.ts";
import type { Backend, BackendBuffer, ExecNode, OpQuery, ResolvedTensor } from "./types.ts";
import { opSupported, validateNode } from "./validate.ts";
import { loadLibrary, loadLibrarySync, type NativeLibrary } from "../../ffi/library.ts";
import { NODE_BYTES, NodeLayout as L, TENSOR_BYTES } from "../../ffi/symbols.ts";
import { address, cString, nativeBytes, setAddress } from "../../ffi/pointers.ts";

/** Options of {@linkcode CpuBackend}. */
export interface CpuBackendOptions {
  /** Worker threads including the caller (default: physical cores). */
  threads?: number;
  /** An opened library (default: loaded on demand). */
  library?: NativeLibrary;
}

/** A buffer allocated natively by the CPU backend. */
export interface CpuBuffer extends BackendBuffer {
  /** Always "cpu". */
  readonly backend: "cpu";
  /** Address returned by le_alloc. */
  readonly ptr: Deno.PointerObject;
}

/** Raised when a native compute fails. */
export class NativeComputeError extends Error {
  /** Creates the error. */
  constructor(message: string) {
    super(message);
    this.name = "NativeComputeError";
  }
}

/** Physical core count from /proc/cpuinfo, else navigator.hardwareConcurrency, else 4. */
export function physicalCores(): number {
  try {
    const text = Deno.readTextFileSync("/proc/cpuinfo");
    const cores = new Set<string>();
    let phys = "0";
    for (const line of text.split("\n")) {
      const [k, v] = line.split(":").map((s) => s?.trim());
      if (k === "physical id") phys = v;
      else if (k === "core id") cores.add(`${phys}/${v}`);
    }
    if (cores.size > 0) return cores.size;
  } catch {
    // not Linux, or no read permission
  }
  const hc = globalThis.navigator?.hardwareConcurrency;
  return hc && hc > 0 ? hc : 4;
}

/** Native-kernel backend with a persistent thread pool. */
export class CpuBackend implements Backend {
  /** Backend name. */
  readonly name = "cpu";
  /** Threads the native pool runs with. */
  readonly threads: number;
  readonly #lib: NativeLibrary;
  #ctx: Deno.PointerObject | null;
  #cmd: Deno.PointerObject | null = null;
  #cmdCap = 0;
  #cmdView: DataView | null = null;
  #queue: Promise<void> = Promise.resolve();
  readonly #buffers = new Set<CpuBuffer>();
  readonly #addr = new WeakMap<BackendBuffer, number>();

  /** Opens (and if needed builds) the library, then creates the backend. */
  static async create(options: CpuBackendOptions = {}): Promise<CpuBackend> {
    const library = options.library ?? await loadLibrary();
    return new CpuBackend({ ...options, library });
  }

  /** Creates the backend; without `library`, the library must already be built. */
  constructor(options: CpuBackendOptions = {}) {
    this.#lib = options.library ?? loadLibrarySync();
    const t = options.threads ?? physicalCores();
    if (!Number.isInteger(t) || t < 1 || t > 512) {
      throw new RangeError(`threads ${t} outside 1..512`);
    }
    this.threads = t;
    const ctx = this.#lib.symbols.le_ctx_new(t);
    if (ctx === null) throw new NativeComputeError(`le_ctx_new: ${this.#lib.lastError()}`);
    this.#ctx = ctx;
  }

  /** The opened native library. */
  get library(): NativeLibrary {
    return this.#lib;
  }

  /** Whether the kernels implement `q`. */
  supportsOp(q: OpQuery): boolean {
    return opSupported(q);
  }

  /** A zero-filled native buffer (64-byte aligned) with a zero-copy `bytes` view. */
  alloc(size: number): CpuBuffer {
    if (!Number.isSafeInteger(size) || size < 0) throw new RangeError(`alloc: bad size ${size}`);
    const ptr = this.#lib.symbols.le_alloc(BigInt(Math.max(size, 1)), 64n);
    if (ptr === null) throw new RangeError(`alloc(${size}): ${this.#lib.lastError()}`);
    const buf: CpuBuffer = { backend: "cpu", size, bytes: nativeBytes(ptr, size), ptr };
    this.#buffers.add(buf);
    return buf;
  }

  /** Frees a buffer from alloc(); its `bytes` must not be touched afterwards. */
  free(buf: BackendBuffer): void {
    const b = buf as CpuBuffer;
    if (!this.#buffers.delete(b)) throw new Error("free: buffer was not allocated by this backend");
    this.#lib.symbols.le_free(b.ptr);
  }

  #bufAddress(b: BackendBuffer, where: string): number {
    let a = this.#addr.get(b);
    if (a === undefined) {
      if (b.ptr === null) {
        throw new RangeError(`${where}: ${b.backend} buffer has no native address`);
      }
      a = address(b.ptr);
      this.#addr.set(b, a);
    }
    return a;
  }

  #ensureCapacity(n: number): DataView {
    if (n > this.#cmdCap || !this.#cmdView) {
      const cap = Math.max(n, this.#cmdCap * 2, 64);
      const p = this.#lib.symbols.le_alloc(BigInt(cap * NODE_BYTES), 64n);
      if (p === null) throw new RangeError(`command buffer: ${this.#lib.lastError()}`);
      if (this.#cmd) this.#lib.symbols.le_free(this.#cmd);
      this.#cmd = p;
      this.#cmdCap = cap;
      const bytes = nativeBytes(p, cap * NODE_BYTES);
      this.#cmdView = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
    }
    return this.#cmdView;
  }

  #encodeTensor(v: DataView, off: number, t: ResolvedTensor | undefined, where: string): void {
    if (!t) {
      for (let i = 0; i < TENSOR_BYTES; i += 4) v.setUint32(off + i, 0, true);
      return;
    }
    v.setInt32(off + L.T_TYPE, t.type, true);
    v.setInt32(off + L.T_FLAGS, 0, true);
    for (let i = 0; i < 4; i++) {
      setAddress(v, off + L.T_NE + 8 * i, t.ne[i]);
      setAddress(v, off + L.T_NB + 8 * i, t.nb[i]);
    }
    setAddress(v, off + L.T_DATA, this.#bufAddress(t.data.buffer, where) + t.data.offset);
  }

  /** Validates and encodes `nodes` into the command buffer; returns its pointer. */
  #encode(nodes: readonly ExecNode[]): Deno.PointerObject {
    if (!this.#ctx) throw new Error("CpuBackend used after dispose");
    nodes.forEach(validateNode);
    const v = this.#ensureCapacity(nodes.length);
    nodes.forEach((n, i) => {
      const base = i * NODE_BYTES, where = `node ${i}`;
      v.setInt32(base + L.OP, n.op, true);
      v.setInt32(base + L.N_SRC, n.src.length, true);
      this.#encodeTensor(v, base + L.DST, n.dst, where);
      for (let s = 0; s < 3; s++) {
        this.#encodeTensor(v, base + L.SRC + s * TENSOR_BYTES, n.src[s], where);
      }
      for (let p = 0; p < MAX_PARAMS; p++) {
        v.setInt32(base + L.PARAMS + 4 * p, n.params[p] ?? 0, true);
      }
    });
    return this.#cmd!;
  }

  #check(rc: number): void {
    if (rc !== 0) {
      throw new NativeComputeError(
        `le_graph_compute failed (${rc}): ${cString(this.#lib.symbols.le_ctx_error(this.#ctx))}`,
      );
    }
  }

  /**
   * Runs the nodes with one nonblocking FFI call (the event loop stays free).
   * Calls on one backend are queued, as they share the command buffer.
   */
  compute(nodes: readonly ExecNode[], signal?: AbortSignal): Promise<void> {
    const run = async () => {
      signal?.throwIfAborted();
      if (nodes.length === 0) return;
      const cmd = this.#encode(nodes);
      this.#check(await this.#lib.symbols.le_graph_compute(this.#ctx, cmd, nodes.length));
    };
    const p = this.#queue.then(run, run);
    this.#queue = p.then(() => {}, () => {});
    return p;
  }

  /** Runs the nodes synchronously on this thread's caller (small graphs, tests). */
  computeSync(nodes: readonly ExecNode[]): void {
    if (nodes.length === 0) return;
    const cmd = this.#encode(nodes);
    this.#check(this.#lib.symbols.le_graph_compute_sync(this.#ctx, cmd, nodes.length));
  }

  /** Frees the thread pool, the command buffer and every buffer still allocated. */
  [Symbol.dispose](): void {
    if (!this.#ctx) return;
    this.#lib.symbols.le_ctx_free(this.#ctx);
    this.#ctx = null;
    if (this.#cmd) this.#lib.symbols.le_free(this.#cmd);
    this.#cmd = null;
    this.#cmdView = null;
    for (const b of this.#buffers) this.#lib.symbols.le_free(b.ptr);
    this.#buffers.clear();
  }
}
