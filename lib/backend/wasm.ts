/**
 * The WebAssembly backend: the CPU backend's C kernels compiled to wasm32 +
 * SIMD128 (ffi/wasm.ts), for runtimes where `Deno.dlopen` is unavailable.
 * Same op table, same `le_node` command records, one exported
 * `le_graph_compute` call per compute, on the caller's thread; one thread
 * by default, more where the runtime shares memory with workers (the
 * threaded build, ffi/wasm_workers.ts): the caller's thread is thread 0 and
 * the others are parked workers, as in the CPU backend. The kernels run
 * their scalar level (the CPU backend's `SimdLevel.SCALAR`, llama.cpp's x64
 * variant), bit for bit: see kernels/PARITY.md.
 *
 * Memory: buffers live in the module's linear memory
 * ({@link LinearMemoryBuffer}). Tensors in host memory are read in place when
 * that memory is the module's (a model file read into it where FFI is
 * unavailable, lib/gguf/wasm_file.ts); a host buffer elsewhere (a file mapped
 * with FFI) is copied into the module once, on first use, and kept; a tensor
 * in another backend's buffer is copied in for the compute that reads it.
 * Destinations must be this backend's buffers.
 *
 * Native code is untrusted here too: every node goes through
 * {@link validateNode} (types, shapes, every tensor's extent inside its
 * buffer) before its addresses are written.
 *
 * @module
 */
import { MAX_PARAMS, MAX_SRC, Op, opSupported } from "../graph/ops.ts";
import { byteExtent, describeBuffer } from "../ggml/memory.ts";
import { LinearMemoryBuffer } from "../ggml/linear_memory.ts";
import { ggmlTypeInfo } from "../ggml/types.ts";
import type { Backend, BackendBuffer, ExecNode, OpQuery, ResolvedTensor } from "./types.ts";
import { checkAllRowIds, validateNode } from "./validate.ts";
import {
  loadWasmKernels,
  WasmKernelError,
  type WasmKernels,
  wasmThreadsAvailable,
} from "../../ffi/wasm.ts";
import { acquireWasmWorkers } from "../../ffi/wasm_workers.ts";
import {
  LE_CANCELLED,
  NODE_BYTES,
  NodeLayout as L,
  TENSOR_BYTES,
  writeTensorRecord,
} from "../../ffi/symbols.ts";
import { type Progress, stderrProgress } from "../../ffi/progress.ts";

/** Options of {@linkcode WasmBackend.create}. */
export interface WasmBackendOptions {
  /** Instantiated kernels (default: the shared instance, loaded on demand). */
  kernels?: WasmKernels;
  /**
   * Threads (default 1). More than one needs the threaded build
   * (`kernels.threaded`, the shared instance wherever
   * {@linkcode wasmThreadsAvailable}); elsewhere it is refused, naming why,
   * rather than silently ignored.
   */
  threads?: number;
  /** Where the progress of copying host weights in goes (default: stderr). */
  progress?: Progress;
}

// Command buffers kept (one per recently computed node array: graph splits alternate).
const MAX_PROGRAMS = 4;
// Runs go on for at most this long (ms of wall time) before the event loop
// gets a turn (see eventTurn): every run is on this thread, and a loop of
// them awaits only resolved promises, which never yield to I/O. The edge
// handler's streams write and its next requests arrive through such turns.
const TURN_SLICE_MS = 4;
const TURN_BYTES = new Uint8Array(1);

/**
 * Resolves after the event loop has turned and polled I/O: a digest, which
 * the runtime computes off this thread (~0.1 ms in Deno; resolved promises,
 * setImmediate and MessageChannel turns do not poll sockets there), or a
 * timer where `crypto.subtle` is missing (an insecure browser origin).
 */
function eventTurn(): Promise<unknown> {
  const subtle = globalThis.crypto?.subtle;
  if (subtle) return subtle.digest("SHA-256", TURN_BYTES);
  return new Promise((resolve) => setTimeout(resolve, 0));
}

interface Program {
  /** The node array this buffer encodes (identity is the cache key). */
  readonly key: readonly ExecNode[];
  /** Module address of the records. */
  readonly addr: number;
  /** Node slots allocated. */
  readonly cap: number;
  /** The node object encoded in each slot (undefined: to be encoded). */
  readonly encoded: (ExecNode | undefined)[];
}

/** A buffer of a {@link WasmBackend}: module memory. */
export type WasmBuffer = LinearMemoryBuffer<"wasm">;

/** Raised when a compute in the WebAssembly kernels fails. */
export class WasmComputeError extends Error {
  /** Creates the error. */
  constructor(message: string) {
    super(message);
    this.name = "WasmComputeError";
  }
}

/** Raised when a disposed WebAssembly backend is used. */
export class WasmBackendDisposedError extends Error {
  /** Creates the error. */
  constructor(message = "WasmBackend used after dispose") {
    super(message);
    this.name = "WasmBackendDisposedError";
  }
}

/** The kernels' op table is the CPU backend's (lib/graph/ops.ts). */
export function wasmOpSupported(q: OpQuery): boolean {
  return opSupported(q);
}

/** A backend running the kernels in a WebAssembly instance (see the module comment). */
export class WasmBackend implements Backend {
  /** Backend name. */
  readonly name = "wasm";
  /** As the CPU backend's (the same kernels): SOFT_MAX writes over its scores. */
  readonly inPlaceOps: ReadonlySet<Op> = new Set([Op.SOFT_MAX]);
  /** As the CPU backend's (the same kernels). */
  readonly kvWindowPad = 64;
  /** Threads each compute runs on. */
  readonly threads: number;
  /** The instance the kernels run in. */
  readonly kernels: WasmKernels;
  readonly #progress: Progress;
  #ctx: number;
  readonly #buffers = new Set<WasmBuffer>();
  // Module copies of host buffers (mapped weights), whole, made on first use.
  readonly #mirrors = new WeakMap<BackendBuffer, WasmBuffer>();
  // Encoded command buffers (module memory), most recently used first.
  readonly #programs: Program[] = [];
  #closed = false;
  #turnedAt = -Infinity; // when the event loop last turned under compute()
  #workers?: Disposable; // the parked workers this context's threads run on

  /**
   * Loads the kernels (the shared instance unless given), starts the
   * workers more than one thread needs, and creates the backend.
   */
  static async create(options: WasmBackendOptions = {}): Promise<WasmBackend> {
    const threads = checkThreads(options.threads);
    const kernels = options.kernels ?? await loadWasmKernels();
    if (threads === 1) return new WasmBackend(kernels, options);
    if (!kernels.threaded) {
      throw new RangeError(
        `threads ${threads}: ${kernels.path} is the single-threaded WebAssembly build` +
          (wasmThreadsAvailable()
            ? ""
            : " (this runtime cannot share memory with workers: no SharedArrayBuffer or " +
              "Worker, or a page that is not cross-origin isolated)") +
          "; use threads: 1",
      );
    }
    const workers = await acquireWasmWorkers(kernels, threads - 1);
    try {
      return new WasmBackend(kernels, options, workers);
    } catch (e) {
      workers[Symbol.dispose]();
      throw e;
    }
  }

  /**
   * Creates the backend over instantiated kernels: one thread, or more with
   * `workers` from {@linkcode acquireWasmWorkers} for `threads - 1` (what
   * {@linkcode WasmBackend.create} does).
   */
  constructor(
    kernels: WasmKernels,
    options: Omit<WasmBackendOptions, "kernels"> = {},
    workers?: Disposable,
  ) {
    const t = checkThreads(options.threads);
    if (t > 1 && !workers) {
      throw new RangeError(`threads ${t}: use WasmBackend.create, which starts the workers`);
    }
    this.kernels = kernels;
    this.threads = t;
    this.#progress = options.progress ?? stderrProgress();
    const ctx = kernels.exports.le_ctx_new(t) >>> 0;
    if (ctx === 0) throw new WasmComputeError(`le_ctx_new: ${kernels.lastError()}`);
    this.#ctx = ctx;
    this.#workers = workers;
  }

  /** Whether {@link WasmBackend[Symbol.dispose]} was called. */
  get disposed(): boolean {
    return this.#closed;
  }

  /** Whether the kernels implement `q`. */
  supportsOp(q: OpQuery): boolean {
    return wasmOpSupported(q);
  }

  /** A zero-filled buffer of module memory (64-byte aligned). */
  alloc(size: number): WasmBuffer {
    if (this.#closed) throw new WasmBackendDisposedError();
    const addr = this.kernels.alloc(size, `wasm alloc(${size})`);
    const buf = new LinearMemoryBuffer("wasm", this.kernels.memory, addr, size, {
      label: "wasm buffer",
    });
    this.#buffers.add(buf);
    return buf;
  }

  /** Frees a buffer from alloc(); after dispose it does nothing. */
  free(buf: BackendBuffer): void {
    if (this.#closed) return;
    const b = buf as WasmBuffer;
    if (!this.#buffers.has(b)) throw new Error("free: buffer was not allocated by this backend");
    // encoded addresses may point into it: forget them all
    while (this.#programs.length) this.#dropProgram(0);
    this.#release(b);
  }

  #release(b: WasmBuffer): void {
    this.#buffers.delete(b);
    b.markFreed();
    this.kernels.free(b.address);
  }

  // Whether `buf` lies in this instance's memory and is still allocated.
  #inModule(buf: BackendBuffer): buf is LinearMemoryBuffer {
    return buf instanceof LinearMemoryBuffer && buf.memory === this.kernels.memory;
  }

  // The module address of a tensor (see the module comment for the cases).
  #addressOf(t: ResolvedTensor, temps: WasmBuffer[], where: string): number {
    const buf = t.data.buffer;
    if (this.#inModule(buf)) {
      if (buf.freed) throw new RangeError(`${where}: ${describeBuffer(buf)} was freed`);
      return buf.address + t.data.offset;
    }
    if (buf.backend === "host") {
      let m = this.#mirrors.get(buf);
      if (!m) {
        m = this.alloc(Math.max(buf.size, 1));
        this.#copyIn(m, buf);
        this.#mirrors.set(buf, m);
      }
      return m.address + t.data.offset;
    }
    const extent = byteExtent(ggmlTypeInfo(t.type)!, t.ne, t.nb);
    const d = this.alloc(Math.max(extent, 1));
    temps.push(d);
    d.copy(buf, t.data.offset, 0, extent);
    return d.address;
  }

  // Copies a whole host buffer in, in chunks, with progress.
  #copyIn(dst: WasmBuffer, src: BackendBuffer): void {
    const chunk = 16 << 20, label = `copying ${describeBuffer(src)} into WebAssembly memory`;
    for (let o = 0; o < src.size; o += chunk) {
      const n = Math.min(chunk, src.size - o);
      dst.copy(src, o, o, n);
      this.#progress.bytes(label, o + n, src.size);
    }
  }

  #dropProgram(k: number): void {
    const [p] = this.#programs.splice(k, 1);
    this.kernels.free(p.addr);
  }

  // The program for `nodes`, most recent first (a new one when unseen or too small).
  #program(nodes: readonly ExecNode[]): Program {
    const k = this.#programs.findIndex((p) => p.key === nodes);
    if (k < 0 || this.#programs[k].cap < nodes.length) {
      if (k >= 0) this.#dropProgram(k);
      const cap = Math.max(nodes.length, 64);
      const addr = this.kernels.alloc(cap * NODE_BYTES, "command buffer");
      this.#programs.unshift({ key: nodes, addr, cap, encoded: [] });
      while (this.#programs.length > MAX_PROGRAMS) this.#dropProgram(this.#programs.length - 1);
    } else if (k > 0) {
      this.#programs.unshift(...this.#programs.splice(k, 1));
    }
    return this.#programs[0];
  }

  /**
   * The command buffer for `nodes`, validated and encoded. As in the CPU
   * backend, a node array seen before keeps its buffer, and only nodes whose
   * object changed since (or that read a temporary copy) are validated and
   * encoded again; what the kernels read is what was validated. Returns the
   * address and the slots to forget after the compute (their temporaries
   * are freed).
   */
  #encode(nodes: readonly ExecNode[], temps: WasmBuffer[]): { addr: number; forget: number[] } {
    // Row ids are data that change with every step: checked every time.
    checkAllRowIds(nodes);
    const prog = this.#program(nodes);
    const stale: number[] = [], forget: number[] = [];
    for (let i = 0; i < nodes.length; i++) if (prog.encoded[i] !== nodes[i]) stale.push(i);
    // Addresses first: mirrors and temporaries allocate, which may grow the
    // memory and detach any view made before.
    const addrs = stale.map((i) => {
      const n = nodes[i];
      prog.encoded[i] = undefined; // a failure below leaves it to be checked again
      validateNode(n, i);
      const where = `node ${i}${n.name ? ` (${n.name})` : ""}`;
      const dst = n.dst.data.buffer;
      if (!this.#inModule(dst) || dst.backend !== "wasm") {
        throw new Error(`${where}: dst lies in a ${dst.backend} buffer, not wasm`);
      }
      const before = temps.length;
      const a = [this.#addressOf(n.dst, temps, where)];
      for (let k = 0; k < n.src.length; k++) {
        a.push(this.#addressOf(n.src[k], temps, `${where} src${k}`));
      }
      if (temps.length > before) forget.push(i);
      return a;
    });
    const v = new DataView(this.kernels.memory.buffer, prog.addr, nodes.length * NODE_BYTES);
    stale.forEach((i, j) => {
      const n = nodes[i], base = i * NODE_BYTES;
      v.setInt32(base + L.OP, n.op, true);
      v.setInt32(base + L.N_SRC, n.src.length, true);
      writeTensorRecord(v, base + L.DST, n.dst, addrs[j][0]);
      for (let k = 0; k < MAX_SRC; k++) {
        const t = n.src[k];
        writeTensorRecord(v, base + L.SRC + k * TENSOR_BYTES, t, t ? addrs[j][k + 1] : 0);
      }
      for (let p = 0; p < MAX_PARAMS; p++) {
        v.setInt32(base + L.PARAMS + 4 * p, n.params[p] ?? 0, true);
      }
      prog.encoded[i] = n;
    });
    prog.encoded.length = nodes.length;
    return { addr: prog.addr, forget };
  }

  /**
   * Runs the nodes with one call into the module, on this thread (as thread
   * 0 of the context's threads): the event loop waits for it. An aborted `signal`
   * is honoured before the call starts. Once `TURN_SLICE_MS` have passed
   * since the event loop's last turn under these calls, the promise
   * resolves only after a turn, so a generation loop never starves a
   * server's sockets.
   */
  compute(nodes: readonly ExecNode[], signal?: AbortSignal): Promise<void> {
    try {
      this.computeSync(nodes, signal);
    } catch (e) {
      return Promise.reject(e);
    }
    if (performance.now() - this.#turnedAt < TURN_SLICE_MS) return Promise.resolve();
    return this.#turn();
  }

  async #turn(): Promise<void> {
    await eventTurn();
    this.#turnedAt = performance.now();
  }

  /** {@link WasmBackend.compute}, synchronously. */
  computeSync(nodes: readonly ExecNode[], signal?: AbortSignal): void {
    if (this.#closed) throw new WasmBackendDisposedError();
    signal?.throwIfAborted();
    if (nodes.length === 0) return;
    const temps: WasmBuffer[] = [];
    let forget: number[] = [];
    try {
      const { addr: cmd, forget: f } = this.#encode(nodes, temps);
      forget = f;
      const ex = this.kernels.exports;
      ex.le_ctx_cancel(this.#ctx, 0);
      const rc = ex.le_graph_compute(this.#ctx, cmd, nodes.length);
      if (rc === LE_CANCELLED) throw new WasmBackendDisposedError("WasmBackend: compute cancelled");
      if (rc !== 0) {
        throw new WasmComputeError(
          `le_graph_compute failed (${rc}): ${this.kernels.cString(ex.le_ctx_error(this.#ctx))}`,
        );
      }
    } finally {
      const prog = this.#programs[0];
      if (prog?.key === nodes) { for (const i of forget) prog.encoded[i] = undefined; }
      for (const t of temps) this.#release(t);
    }
  }

  /** Frees the context, the command buffer, the mirrors and every buffer still allocated. */
  [Symbol.dispose](): void {
    if (this.#closed) return;
    this.#closed = true;
    for (const b of [...this.#buffers]) this.#release(b); // the mirrors too
    while (this.#programs.length) this.#dropProgram(0);
    this.kernels.exports.le_ctx_free(this.#ctx); // joins the workers' threads
    this.#ctx = 0;
    this.#workers?.[Symbol.dispose]();
  }
}

function checkThreads(threads: number | undefined): number {
  const t = threads ?? 1;
  if (!Number.isSafeInteger(t) || t < 1 || t > 64) {
    throw new RangeError(`threads ${threads}: the WebAssembly backend runs 1..64 threads`);
  }
  return t;
}

export { WasmKernelError };
