/**
 * The CPU backend: native SIMD kernels in build/libllm_edge.so driven through
 * one FFI call per compute(). Nodes are validated in TypeScript (types,
 * shapes, every tensor's extent inside its buffer) and encoded into a reused
 * native command buffer of `le_node` records (see kernels/include/llm_edge.h).
 *
 * @module
 */
import { MAX_PARAMS, MAX_SRC, Op, opSupported } from "../graph/ops.ts";
import type { Backend, BackendBuffer, ExecNode, OpQuery, ResolvedTensor } from "./types.ts";
import { byteExtent, HostBuffer, type OwnedBuffer } from "../ggml/memory.ts";
import { ggmlTypeInfo } from "../ggml/types.ts";
import { checkAllRowIds, validateNode } from "./validate.ts";
import { releaseCopies, type SharedCopy, WeightRepacker } from "./cpu_repack.ts";
import { loadLibrary, loadLibrarySync, type NativeLibrary } from "../../ffi/library.ts";
import {
  LE_CANCELLED,
  MAX_THREADS,
  NODE_BYTES,
  NodeLayout as L,
  TENSOR_BYTES,
  writeTensorRecord,
} from "../../ffi/symbols.ts";
import { address, cString, detachNative, nativeBytes, setAddress } from "../../ffi/pointers.ts";

/** Options of {@linkcode CpuBackend}. */
export interface CpuBackendOptions {
  /** Worker threads including the caller (default: physical cores). */
  threads?: number;
  /** An opened library (default: loaded on demand). */
  library?: NativeLibrary;
  /**
   * A node array whose last run took at most this many milliseconds runs
   * synchronously on the caller's thread (default 3; 0: never). Handing a
   * short graph to another thread and waking the event loop when it ends
   * costs more than a decode step of a small model; a few milliseconds of
   * blocked event loop cost nothing. See {@link CpuBackend.compute}.
   */
  syncBelowMs?: number;
  /**
   * Repack weights where llama.cpp's matching CPU variant does (Q4_0 and
   * Q4_K on AVX2, see lib/backend/cpu_repack.ts; default true). The results
   * are the same bits either way; false keeps mapped weights as the only copy.
   */
  repack?: boolean;
  /**
   * "fast": also repack where a faster float order than llama.cpp's exists
   * (Q8_0 at AVX2 and AVX-512 VNNI: kernels/src/repack_q8_0.c), so results
   * are no longer llama.cpp's bits (ContextOptions.matmulOrder; default
   * "default"). Needs `repack`.
   */
  matmulOrder?: "default" | "fast";
}

/** Default of {@link CpuBackendOptions.syncBelowMs}. */
export const SYNC_BELOW_MS = 3;
// Synchronous runs go on for at most this long (ms of wall time) before
// the event loop gets a turn (see #turn): awaiting resolved promises never
// yields to it, and setImmediate turns poll I/O only now and then. Every
// step of an HTTP request (accept, read, handler, write) waits for such a
// turn: with 16 ms of compute between turns, a server's new request waited
// out a whole 400-token stream (150-220 ms); with 4 ms of wall time it
// reaches its handler in ~25 ms. A turn costs ~0.1-0.2 ms.
const SYNC_SLICE_MS = 4;
// The worker thread's sleep in a turn (µs): long enough that the event
// loop surely parks before the call returns (with a call that returned at
// once, a local request waited up to 2 s behind 0.5 ms steps, because the
// loop then polls I/O only every few dozen turns).
const TURN_PAUSE_US = 50;

/**
 * A buffer allocated natively by the CPU backend: host memory, so set, get
 * and copy are memcpys through its zero-copy `bytes` view.
 */
export interface CpuBuffer extends OwnedBuffer {
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

// Command buffers kept (one per recently computed node array: graph splits alternate).
const MAX_PROGRAMS = 4;

interface Program {
  /** The node array this buffer encodes (identity is the cache key). */
  readonly key: readonly ExecNode[];
  readonly ptr: Deno.PointerObject;
  /** Node slots allocated. */
  readonly cap: number;
  readonly view: DataView;
  /** The node object encoded in each slot (undefined: slot to be encoded). */
  readonly encoded: (ExecNode | undefined)[];
  /** Byte extents of each slot's dst and sources (EXT_PER_NODE per slot), for {@link CpuBackend.#moveNode}. */
  readonly ext: Float64Array;
  /** Milliseconds its last run took (Infinity: not run yet). */
  lastMs: number;
}

// Same type, shape and stride arrays (the same objects) and buffer.
function sameLayout(a: ResolvedTensor, b: ResolvedTensor): boolean {
  return a.type === b.type && a.ne === b.ne && a.nb === b.nb && a.data.buffer === b.data.buffer;
}

// Extents kept per node slot: dst, then the sources.
const EXT_PER_NODE = 1 + MAX_SRC;

// Bytes a validated tensor spans from its offset.
function extentOf(t: ResolvedTensor): number {
  return byteExtent(ggmlTypeInfo(t.type)!, t.ne, t.nb);
}

// The `ext` bytes at the tensor's offset lie inside its buffer (checkTensor's memory rule).
function inBuffer(t: ResolvedTensor, ext: number): boolean {
  const off = t.data.offset;
  return Number.isSafeInteger(off) && off >= 0 && off + ext <= t.data.buffer.size;
}

/** Raised when a disposed CPU backend is used. */
export class BackendDisposedError extends Error {
  /** Creates the error. */
  constructor(message = "CpuBackend used after dispose") {
    super(message);
    this.name = "BackendDisposedError";
  }
}

/**
 * Everything native a backend owns, apart from the backend object, so that
 * the finalizer below can free it for a backend that was never disposed.
 */
interface NativeState {
  readonly lib: NativeLibrary;
  ctx: Deno.PointerObject | null;
  readonly buffers: Set<CpuBuffer>;
  /** Encoded command buffers, most recently used first, keyed by the node array. */
  readonly programs: Program[];
  /** The shared repacked weights this backend reads (cpu_repack.ts). */
  readonly copies: Set<SharedCopy>;
}

function freeProgram(s: NativeState, p: Program): void {
  detachNative(p.view);
  s.lib.symbols.le_free(p.ptr);
}

// Joins the pool's threads and frees every allocation. Runs only when no
// compute is in flight: dispose defers to the compute's end, and an
// unreachable backend has none (a running compute holds the backend).
function freeState(s: NativeState): void {
  if (s.ctx) s.lib.symbols.le_ctx_free(s.ctx);
  s.ctx = null;
  for (const p of s.programs.splice(0)) freeProgram(s, p);
  for (const b of s.buffers) {
    detachNative(b.bytes);
    s.lib.symbols.le_free(b.ptr);
  }
  s.buffers.clear();
  releaseCopies(s.lib, s.copies);
}

/** Frees the native state of backends that were never disposed. */
const forgotten = new FinalizationRegistry<NativeState>(freeState);

/**
 * Native-kernel backend with a persistent thread pool. Disposing it while a
 * compute runs cancels that compute and frees everything when it returns.
 */
export class CpuBackend implements Backend {
  /** Backend name. */
  readonly name = "cpu";
  /**
   * SOFT_MAX writes over its scores (kernels/src/ops.c reads each element
   * before writing it): the KQ matrix of a long prompt is then held once,
   * not twice, as ggml-alloc does.
   */
  readonly inPlaceOps: ReadonlySet<Op> = new Set([Op.SOFT_MAX]);
  /**
   * Every vec_dot and soft_max order of these kernels steps through a KV
   * window in whole chunks of 64 at most (kernels/PARITY.md section 27).
   */
  readonly kvWindowPad = 64;
  /** Threads the native pool runs with. */
  readonly threads: number;
  readonly #s: NativeState;
  #running = 0;
  #closed = false;
  #queue: Promise<void> = Promise.resolve();
  // Computes queued or running (the queue is idle at 0).
  #pending = 0;
  readonly #syncBelowMs: number;
  // When the event loop last turned under this backend's calls (a run on
  // another thread or a #turn completed).
  #yieldedAt = -Infinity;
  #lastSync = false;
  readonly #addr = new WeakMap<BackendBuffer, number>();
  readonly #repack: WeightRepacker | null;

  /** Opens (and if needed builds) the library, then creates the backend. */
  static async create(options: CpuBackendOptions = {}): Promise<CpuBackend> {
    const library = options.library ?? await loadLibrary();
    return new CpuBackend({ ...options, library });
  }

  /** Creates the backend; without `library`, the library must already be built. */
  constructor(options: CpuBackendOptions = {}) {
    const lib = options.library ?? loadLibrarySync();
    const t = options.threads ?? physicalCores();
    if (!Number.isInteger(t) || t < 1 || t > MAX_THREADS) {
      throw new RangeError(`threads ${t} outside 1..${MAX_THREADS}`);
    }
    this.threads = t;
    const sync = options.syncBelowMs ?? SYNC_BELOW_MS;
    if (!(sync >= 0)) throw new RangeError(`syncBelowMs ${sync} is not a number >= 0`);
    this.#syncBelowMs = sync;
    const ctx = lib.symbols.le_ctx_new(t);
    if (ctx === null) throw new NativeComputeError(`le_ctx_new: ${lib.lastError()}`);
    this.#s = { lib, ctx, buffers: new Set(), programs: [], copies: new Set() };
    const order = options.matmulOrder ?? "default";
    if (order !== "default" && order !== "fast") {
      throw new RangeError(`matmulOrder ${JSON.stringify(order)} is not "default" or "fast"`);
    }
    this.#repack = options.repack === false
      ? null
      : new WeightRepacker(lib, this.#s.copies, order === "fast");
    forgotten.register(this, this.#s, this);
  }

  /** Whether the last {@link compute} ran on the caller's thread (see syncBelowMs). */
  get lastComputeSync(): boolean {
    return this.#lastSync;
  }

  /** Bytes held in repacked copies of weights (see {@link CpuBackendOptions.repack}). */
  get repackedBytes(): number {
    return this.#repack?.bytes ?? 0;
  }

  /** Whether a compute is in flight. */
  get busy(): boolean {
    return this.#running > 0;
  }

  /** Whether {@link CpuBackend[Symbol.dispose]} was called. */
  get disposed(): boolean {
    return this.#closed;
  }

  /** The opened native library. */
  get library(): NativeLibrary {
    return this.#s.lib;
  }

  /** Whether the kernels implement `q`. */
  supportsOp(q: OpQuery): boolean {
    return opSupported(q);
  }

  /**
   * A zero-filled native buffer (64-byte aligned) with a zero-copy `bytes`
   * view; its set/get/copy/clear work on that view and throw once freed.
   */
  alloc(size: number): CpuBuffer {
    if (this.#closed) throw new BackendDisposedError();
    if (!Number.isSafeInteger(size) || size < 0) throw new RangeError(`alloc: bad size ${size}`);
    const ptr = this.#s.lib.symbols.le_alloc(BigInt(Math.max(size, 1)), 64n);
    if (ptr === null) throw new RangeError(`alloc(${size}): ${this.#s.lib.lastError()}`);
    const buf = new HostBuffer("cpu", nativeBytes(ptr, size), ptr) as CpuBuffer;
    this.#s.buffers.add(buf);
    return buf;
  }

  /**
   * Frees a buffer from alloc(); its `bytes` read as empty afterwards. After
   * dispose this does nothing: the backend frees all its buffers itself, once
   * no compute is using them.
   */
  free(buf: BackendBuffer): void {
    if (this.#closed) return;
    const b = buf as CpuBuffer;
    if (!this.#s.buffers.has(b)) throw new Error("free: buffer was not allocated by this backend");
    this.#dropPrograms();
    this.#s.buffers.delete(b);
    detachNative(b.bytes);
    this.#s.lib.symbols.le_free(b.ptr);
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

  #encodeTensor(v: DataView, off: number, t: ResolvedTensor | undefined, where: string): void {
    const address = t ? this.#bufAddress(t.data.buffer, where) + t.data.offset : 0;
    writeTensorRecord(v, off, t, address);
  }

  /**
   * The command buffer for `nodes`, validated and encoded. A node array seen
   * before keeps its buffer and only nodes whose object changed since (for
   * example a KV store moved to another cell) are validated and encoded
   * again: a decode step that reuses its plan re-encodes a handful of nodes,
   * not all of them. What native code reads is always what was validated,
   * since the buffer holds the encoded values, not references to the nodes.
   */
  #encode(nodes: readonly ExecNode[]): Deno.PointerObject {
    if (this.#closed) throw new BackendDisposedError();
    // Row ids are data that change with every step: checked every time.
    checkAllRowIds(nodes);
    const k = this.#s.programs.findIndex((p) => p.key === nodes);
    if (k < 0 || this.#s.programs[k].cap < nodes.length) {
      if (k >= 0) this.#dropProgram(k);
      this.#s.programs.unshift(this.#newProgram(nodes));
      while (this.#s.programs.length > MAX_PROGRAMS) this.#dropProgram(this.#s.programs.length - 1);
    } else if (k > 0) {
      this.#s.programs.unshift(...this.#s.programs.splice(k, 1));
    }
    const prog = this.#s.programs[0];
    const v = prog.view;
    let stale: number[] | null = null;
    for (let i = 0; i < nodes.length; i++) {
      const prev = prog.encoded[i], n = nodes[i];
      if (prev === n) continue;
      prog.encoded[i] = undefined; // a failure below leaves it to be checked again
      if (prev && this.#moveNode(prog, i, prev, n)) {
        prog.encoded[i] = n;
        continue;
      }
      (stale ??= []).push(i);
    }
    if (!stale) {
      prog.encoded.length = nodes.length;
      return prog.ptr;
    }
    for (const i of stale) validateNode(nodes[i], i);
    for (const i of stale) {
      const n = nodes[i], base = i * NODE_BYTES, where = `node ${i}`;
      const e = i * EXT_PER_NODE;
      prog.ext[e] = extentOf(n.dst);
      for (let s = 0; s < n.src.length; s++) prog.ext[e + 1 + s] = extentOf(n.src[s]);
      v.setInt32(base + L.OP, n.op, true);
      v.setInt32(base + L.N_SRC, n.src.length, true);
      this.#encodeTensor(v, base + L.DST, n.dst, where);
      for (let s = 0; s < MAX_SRC; s++) {
        this.#encodeTensor(v, base + L.SRC + s * TENSOR_BYTES, n.src[s], where);
      }
      if (n.op === Op.MUL_MAT && this.#repack) {
        const a = n.src[0], at = this.#bufAddress(a.data.buffer, where) + a.data.offset;
        const r = this.#repack.forMulMat(n, at);
        if (r) writeTensorRecord(v, base + L.SRC, a, r.address, r.flags);
      }
      for (let p = 0; p < MAX_PARAMS; p++) {
        v.setInt32(base + L.PARAMS + 4 * p, n.params[p] ?? 0, true);
      }
      prog.encoded[i] = n;
    }
    prog.encoded.length = nodes.length;
    return prog.ptr;
  }

  /**
   * Re-encodes node `i` when it differs from `prev` (validated and encoded in
   * that slot) only in where its tensors lie inside the same buffers, as a
   * KV store moved to the next cell does every decode step: the op, params,
   * types and shape arrays are the same objects, so only the new extents
   * need checking against their buffers and only the addresses rewriting.
   * Returns false (nothing written) when anything else differs or a check
   * fails; the caller then validates and encodes the node in full.
   */
  #moveNode(prog: Program, i: number, prev: ExecNode, n: ExecNode): boolean {
    const ns = n.src.length, v = prog.view, e = i * EXT_PER_NODE;
    if (prev.op !== n.op || prev.params !== n.params || prev.src.length !== ns) return false;
    if (!sameLayout(prev.dst, n.dst)) return false;
    for (let s = 0; s < ns; s++) if (!sameLayout(prev.src[s], n.src[s])) return false;
    // The extents are those computed when `prev` was encoded (same layouts).
    if (!inBuffer(n.dst, prog.ext[e])) return false;
    for (let s = 0; s < ns; s++) if (!inBuffer(n.src[s], prog.ext[e + 1 + s])) return false;
    const base = i * NODE_BYTES, where = `node ${i}`;
    this.#writeAddress(v, base + L.DST, n.dst, where);
    for (let s = 0; s < ns; s++) {
      this.#writeAddress(v, base + L.SRC + s * TENSOR_BYTES, n.src[s], where);
    }
    return true;
  }

  #writeAddress(v: DataView, off: number, t: ResolvedTensor, where: string): void {
    setAddress(v, off + L.T_DATA, this.#bufAddress(t.data.buffer, where) + t.data.offset);
  }

  #newProgram(nodes: readonly ExecNode[]): Program {
    const cap = Math.max(nodes.length, 64);
    const ptr = this.#s.lib.symbols.le_alloc(BigInt(cap * NODE_BYTES), 64n);
    if (ptr === null) throw new RangeError(`command buffer: ${this.#s.lib.lastError()}`);
    const bytes = nativeBytes(ptr, cap * NODE_BYTES);
    const view = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
    const ext = new Float64Array(cap * EXT_PER_NODE);
    return { key: nodes, ptr, cap, view, encoded: [], ext, lastMs: Infinity };
  }

  #dropProgram(k: number): void {
    const [p] = this.#s.programs.splice(k, 1);
    freeProgram(this.#s, p);
  }

  // Encoded addresses may point into a buffer about to be freed: forget them all.
  #dropPrograms(): void {
    if (this.#running) throw new Error("CpuBackend: buffer freed while a compute is running");
    while (this.#s.programs.length) this.#dropProgram(0);
  }

  #check(rc: number): void {
    if (rc !== 0) {
      throw new NativeComputeError(
        `le_graph_compute failed (${rc}): ${
          cString(this.#s.lib.symbols.le_ctx_error(this.#s.ctx))
        }`,
      );
    }
  }

  /**
   * Runs the nodes with one FFI call. A node array whose last run took more
   * than `syncBelowMs` (or that never ran) runs on another thread with a
   * nonblocking call, so the event loop stays free; when `signal` aborts,
   * the kernels stop at their next node or row chunk and the promise
   * rejects with the signal's reason. A shorter one runs on this thread
   * (a decode step of a small model: the thread hop would cost a good part
   * of the step); once `SYNC_SLICE_MS` have passed since the event loop's
   * last turn, the promise of such a run resolves only after a turn (I/O
   * polled), so a loop of short decodes never starves a server's sockets.
   * Calls on one backend are queued, as they share the command buffer.
   */
  compute(nodes: readonly ExecNode[], signal?: AbortSignal): Promise<void> {
    if (this.#pending === 0 && !this.#closed && nodes.length > 0 && !signal?.aborted) {
      const prog = this.#programFor(nodes);
      const inSlice = performance.now() - this.#yieldedAt < SYNC_SLICE_MS;
      if (prog && prog.lastMs <= this.#syncBelowMs) {
        try {
          this.#lastSync = true;
          this.#runSync(nodes);
          return inSlice ? Promise.resolve() : this.#turn();
        } catch (e) {
          return Promise.reject(e);
        }
      }
    }
    const run = async () => {
      if (this.#closed) throw new BackendDisposedError();
      signal?.throwIfAborted();
      if (nodes.length === 0) return;
      this.#lastSync = false;
      const cmd = this.#encode(nodes);
      const prog = this.#s.programs[0];
      const s = this.#s, sym = s.lib.symbols;
      // Cleared here, on the thread that also sets it, before the call
      // starts: an abort from now on cannot be lost.
      sym.le_ctx_cancel(s.ctx, 0);
      const onAbort = () => {
        if (s.ctx) sym.le_ctx_cancel(s.ctx, 1);
      };
      signal?.addEventListener("abort", onAbort);
      this.#running++;
      let rc = 0, msg = "";
      const t0 = performance.now();
      try {
        rc = await sym.le_graph_compute(s.ctx, cmd, nodes.length);
        if (rc !== 0) msg = cString(sym.le_ctx_error(s.ctx));
      } finally {
        this.#yieldedAt = performance.now();
        signal?.removeEventListener("abort", onAbort);
        this.#running--;
        if (this.#closed && this.#running === 0) this.#release();
      }
      // The wall time of a completed call, wake-ups and event loop delay
      // included: an overestimate, so a graph runs synchronously only when
      // surely short (a cancelled one says nothing of its length).
      if (rc === 0) prog.lastMs = performance.now() - t0;
      if (rc === LE_CANCELLED) {
        if (signal?.aborted) throw signal.reason;
        throw new BackendDisposedError("CpuBackend disposed while computing");
      }
      if (rc !== 0) throw new NativeComputeError(`le_graph_compute failed (${rc}): ${msg}`);
    };
    this.#pending++;
    const p = this.#queue.then(run, run);
    const done = () => {
      this.#pending--;
    };
    this.#queue = p.then(done, done);
    return p;
  }

  // Resolves after the event loop has parked once and polled I/O: a
  // nonblocking le_pause of TURN_PAUSE_US (~0.1-0.2 ms in all).
  async #turn(): Promise<void> {
    await this.#s.lib.symbols.le_pause(TURN_PAUSE_US);
    this.#yieldedAt = performance.now();
  }

  // The cached program of `nodes` if it still encodes that array (no encoding).
  #programFor(nodes: readonly ExecNode[]): Program | undefined {
    const p = this.#s.programs[0];
    return p?.key === nodes ? p : this.#s.programs.find((q) => q.key === nodes);
  }

  // One synchronous run (the queue is idle, so no other compute uses the buffers).
  #runSync(nodes: readonly ExecNode[]): void {
    const cmd = this.#encode(nodes);
    const prog = this.#s.programs[0];
    const sym = this.#s.lib.symbols;
    sym.le_ctx_cancel(this.#s.ctx, 0);
    const t0 = performance.now();
    const rc = sym.le_graph_compute_sync(this.#s.ctx, cmd, nodes.length);
    const ms = performance.now() - t0;
    this.#check(rc);
    prog.lastMs = ms;
  }

  /** Runs the nodes synchronously on this thread's caller (small graphs, tests). */
  computeSync(nodes: readonly ExecNode[]): void {
    if (this.#closed) throw new BackendDisposedError();
    if (nodes.length === 0) return;
    // Encoding could evict the command buffer an asynchronous compute is reading.
    if (this.#running) throw new Error("computeSync: an asynchronous compute is running");
    this.#runSync(nodes);
  }

  #release(): void {
    forgotten.unregister(this);
    freeState(this.#s);
  }

  /**
   * Frees the thread pool, the command buffers and every buffer still
   * allocated. While a compute runs, it is cancelled and the memory is freed
   * when it returns: never under the kernels.
   */
  [Symbol.dispose](): void {
    if (this.#closed) return;
    this.#closed = true;
    if (this.#running > 0) {
      this.#s.lib.symbols.le_ctx_cancel(this.#s.ctx, 1);
      return;
    }
    this.#release();
  }
}
