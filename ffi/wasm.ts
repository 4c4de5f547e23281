/**
 * The kernels compiled to WebAssembly (build/wasm/llm_edge.wasm, made by
 * `deno task build:wasm`): for runtimes without `Deno.dlopen` (no
 * `--allow-ffi`, Deno Deploy, other JavaScript runtimes). One instance per
 * isolate, shared by every WebAssembly backend and by the model files read
 * into its memory, so weights are read in place by the kernels.
 *
 * The module is wasm32 with SIMD128, built against wasi-libc, in two builds:
 * llm_edge.wasm, single-threaded, with a memory of its own, and
 * llm_edge_mt.wasm, with atomics and an imported shared memory, whose
 * contexts may run more threads on workers (ffi/wasm_workers.ts). The
 * shared instance is the threaded one wherever the runtime can share
 * memory with workers ({@linkcode wasmThreadsAvailable}); a context still
 * runs one thread unless asked for more. Of WASI they import only the
 * environment (LE_PROFILE at most), a clock, fd_write (stderr, for
 * LE_PROFILE-style prints) and proc_exit, stubbed below: they see no files
 * and no network.
 *
 * Nothing here runs at import time: the module is read and instantiated on
 * the first {@linkcode loadWasmKernels} call.
 *
 * @module
 */
import { ABI_VERSION } from "./symbols.ts";
import { REPO_ROOT } from "./build.ts";

/** wasm32's whole address space: the most memory a module can have (65536 pages). */
export const WASM32_MAX_BYTES = 4 * 1024 * 1024 * 1024;

/** The exports of llm_edge.wasm: kernels/include/llm_edge.h with wasm32 types. */
export interface WasmKernelExports {
  /** The module's linear memory (absent in the threaded build, which imports it). */
  readonly memory?: WebAssembly.Memory;
  /** Runs the C constructors (a WASI reactor's entry point). */
  _initialize(): void;
  le_abi_version(): number;
  le_cpu_features(): number;
  le_set_simd_level(level: number): number;
  le_last_error(): number;
  le_alloc(size: bigint, align: bigint): number;
  le_free(p: number): void;
  le_ctx_new(threads: number): number;
  le_ctx_free(ctx: number): void;
  le_ctx_threads(ctx: number): number;
  le_graph_compute(ctx: number, nodes: number, n: number): number;
  le_ctx_cancel(ctx: number, on: number): void;
  le_ctx_error(ctx: number): number;
  le_dequantize_row(type: number, src: number, dst: number, n: bigint): number;
  le_quantize_row(type: number, src: number, dst: number, n: bigint): number;
  le_vec_dot(type: number, n: bigint, x: number, y: number, out: number): number;
}

/** Bytes of memory the threaded module is linked to start with (kernels/Makefile). */
const MT_INITIAL_BYTES = 16 << 20;
const PAGE = 65536;

/** Raised when the WebAssembly kernels cannot be found, instantiated or fit in memory. */
export class WasmKernelError extends Error {
  /** Creates the error. */
  constructor(message: string) {
    super(message);
    this.name = "WasmKernelError";
  }
}

/** What to install and run when the .wasm is missing. */
export const WASM_BUILD_HINT =
  "run: deno task build:wasm (needs clang, lld and wasi-libc: apt-get install clang lld " +
  "wasi-libc libclang-rt-14-dev-wasm32)";

/**
 * Whether native FFI can be used here: `Deno.dlopen` exists and the `ffi`
 * permission is granted (wholly or for some paths). False in browsers,
 * other runtimes and `deno run` without `--allow-ffi`; never prompts.
 */
export function ffiAvailable(): boolean {
  const deno = (globalThis as { Deno?: typeof Deno }).Deno;
  if (!deno || typeof deno.dlopen !== "function") return false;
  try {
    const st = deno.permissions.querySync({ name: "ffi" });
    return st.state === "granted" || (st as { partial?: boolean }).partial === true;
  } catch {
    return false;
  }
}

/** The instantiated module with helpers over its memory. */
export class WasmKernels {
  /** The raw exports. */
  readonly exports: WasmKernelExports;
  /** Where the module was read from. */
  readonly path: string;
  /** The compiled module (workers instantiate it again on the shared memory). */
  readonly module: WebAssembly.Module;
  /** Whether this is the threaded build: shared memory, contexts of more than one thread. */
  readonly threaded: boolean;
  readonly #memory: WebAssembly.Memory;
  #u8: Uint8Array;

  /**
   * Wraps an instance whose `_initialize` already ran; `memory` is the one it
   * imported (the threaded build's shared memory), else its own export.
   */
  constructor(
    exports: WasmKernelExports,
    path: string,
    module: WebAssembly.Module,
    memory?: WebAssembly.Memory,
  ) {
    this.exports = exports;
    this.path = path;
    this.module = module;
    this.threaded = memory !== undefined;
    const own = memory ?? exports.memory;
    if (!own) throw new WasmKernelError(`${path}: the module neither exports nor imports a memory`);
    this.#memory = own;
    this.#u8 = new Uint8Array(this.#memory.buffer);
  }

  /** The module memory. */
  get memory(): WebAssembly.Memory {
    return this.#memory;
  }

  /** A view of the whole memory as it is now (growing detaches older views). */
  get u8(): Uint8Array {
    if (this.#u8.buffer !== this.#memory.buffer) this.#u8 = new Uint8Array(this.#memory.buffer);
    return this.#u8;
  }

  /** Bytes of memory the module has now. */
  get memoryBytes(): number {
    return this.#memory.buffer.byteLength;
  }

  /** The NUL-terminated string at `addr` (empty for 0). */
  cString(addr: number): string {
    if (!addr) return "";
    const u8 = this.u8, a = addr >>> 0;
    let e = a;
    while (e < u8.length && u8[e] !== 0) e++;
    return new TextDecoder().decode(u8.slice(a, e)); // a copy: decode refuses shared memory
  }

  /** le_last_error's text. */
  lastError(): string {
    return this.cString(this.exports.le_last_error());
  }

  /**
   * `size` zero-filled bytes (64-byte aligned) of module memory: the address.
   * Throws a {@link WasmKernelError} with the sizes when wasm32's 4 GiB cannot
   * hold them.
   */
  alloc(size: number, what = "alloc"): number {
    if (!Number.isSafeInteger(size) || size < 0) throw new RangeError(`${what}: bad size ${size}`);
    if (size > WASM32_MAX_BYTES) throw new WasmKernelError(tooBig(what, size, this.memoryBytes));
    const p = this.exports.le_alloc(BigInt(Math.max(size, 1)), 64n) >>> 0;
    if (p === 0) {
      throw new WasmKernelError(`${tooBig(what, size, this.memoryBytes)} (${this.lastError()})`);
    }
    return p;
  }

  /** Frees an address from {@link WasmKernels.alloc}. */
  free(addr: number): void {
    this.exports.le_free(addr);
  }
}

function tooBig(what: string, size: number, used: number): string {
  return `${what}: ${size} bytes do not fit the WebAssembly (wasm32) memory: it holds at most ` +
    `${WASM32_MAX_BYTES} bytes (4 GiB) and has ${used} in use`;
}

/** The module's name in a published package's dist/ (`deno task build:dist`). */
export const WASM_DIST_FILE = "llm_edge.wasm";
/** The threaded module's name there. */
export const WASM_MT_DIST_FILE = "llm_edge_mt.wasm";

/**
 * Whether WebAssembly threads can run here: a shared `WebAssembly.Memory`
 * can be made (in a browser only on a cross-origin isolated page, with
 * COOP/COEP headers) and there are workers (Web Workers, or
 * `node:worker_threads`). True in Deno. Probed, not guessed from globals.
 */
export function wasmThreadsAvailable(): boolean {
  if (threadsProbe !== undefined) return threadsProbe;
  let shared = false;
  try {
    new WebAssembly.Memory({ initial: 1, maximum: 1, shared: true });
    shared = (globalThis as { crossOriginIsolated?: boolean }).crossOriginIsolated !== false;
  } catch {
    // no shared memory here
  }
  return threadsProbe = shared &&
    (typeof globalThis.Worker === "function" || !!nodeWorkerThreads());
}
let threadsProbe: boolean | undefined;

/** A node:worker_threads Worker (the parts ffi/wasm_workers.ts uses). */
export interface NodeWorker {
  postMessage(m: unknown): void;
  terminate(): unknown;
  once(ev: string, f: (d: unknown) => void): void;
  unref(): void;
}

/**
 * `node:worker_threads` where the runtime has it (Deno, Node), through
 * `process.getBuiltinModule` rather than an import: a browser bundle of
 * mod.ts cannot import node: modules.
 */
export function nodeWorkerThreads(): { Worker: new (url: URL) => NodeWorker } | undefined {
  const p = (globalThis as { process?: { getBuiltinModule?: (id: string) => unknown } }).process;
  try {
    const m = p?.getBuiltinModule?.("node:worker_threads") as
      | { Worker?: new (url: URL) => NodeWorker }
      | undefined;
    return typeof m?.Worker === "function" ? { Worker: m.Worker } : undefined;
  } catch {
    return undefined; // no such built-in
  }
}

/**
 * Where the .wasm is looked for: `LLM_EDGE_WASM` (a path or URL, either
 * build), else in a checkout build/wasm/llm_edge.wasm, falling back to
 * dist/llm_edge.wasm; in a package loaded over the network (JSR) its
 * dist/llm_edge.wasm, fetched from the same place as the code itself. With
 * `threaded`, llm_edge_mt.wasm in the same places.
 */
export function wasmPath(root: string = REPO_ROOT, threaded = false): string {
  let env: string | undefined;
  try {
    env = (globalThis as { Deno?: typeof Deno }).Deno?.env.get("LLM_EDGE_WASM");
  } catch {
    // no env permission: the default path
  }
  if (env) return env;
  const file = threaded ? WASM_MT_DIST_FILE : WASM_DIST_FILE;
  if (!root.startsWith("/")) return new URL(`dist/${file}`, root.replace(/\/?$/, "/")).href;
  const built = `${root}/build/wasm/${file}`, dist = `${root}/dist/${file}`;
  try {
    Deno.statSync(built);
    return built;
  } catch {
    try {
      Deno.statSync(dist);
      return dist;
    } catch {
      return built; // the error names the path to build
    }
  }
}

// One instance per isolate (see the module comment).
let shared: Promise<WasmKernels> | undefined;

/** Options of {@linkcode loadWasmKernels}. */
export interface LoadWasmOptions {
  /** The module's bytes or path (default: {@link wasmPath}); gives a new, unshared instance. */
  source?: string | Uint8Array;
}

/**
 * The shared instance, instantiated on the first call; with `source`, a new
 * instance of that module (tests). Throws {@link WasmKernelError} naming the
 * path and what to run when the module is missing.
 */
export function loadWasmKernels(options: LoadWasmOptions = {}): Promise<WasmKernels> {
  if (options.source !== undefined) return instantiate(options.source);
  if (!shared) {
    shared = instantiate(wasmPath(REPO_ROOT, wasmThreadsAvailable()));
    shared.catch(() => (shared = undefined)); // a later call may find it built
  }
  return shared;
}

async function instantiate(source: string | Uint8Array): Promise<WasmKernels> {
  const path = typeof source === "string" ? source : "(bytes)";
  let bytes: Uint8Array;
  if (typeof source === "string") {
    try {
      bytes = await readModule(source);
    } catch (e) {
      const notFound = (globalThis as { Deno?: typeof Deno }).Deno?.errors.NotFound;
      if (notFound && e instanceof notFound) {
        throw new WasmKernelError(`${source} not found; ${WASM_BUILD_HINT}`);
      }
      throw e;
    }
  } else bytes = source;
  const started: { memory?: WebAssembly.Memory } = {};
  const mem = () => {
    if (!started.memory) {
      throw new WasmKernelError(`${path}: a WASI call before the module started`);
    }
    return started.memory;
  };
  let instance: WebAssembly.Instance, module: WebAssembly.Module;
  let memory: WebAssembly.Memory | undefined; // the threaded build imports a shared one
  try {
    module = await WebAssembly.compile(bytes as Uint8Array<ArrayBuffer>);
    const imports: WebAssembly.Imports = { wasi_snapshot_preview1: wasiStubs(mem) };
    if (WebAssembly.Module.imports(module).some((i) => i.kind === "memory")) {
      memory = new WebAssembly.Memory({
        initial: MT_INITIAL_BYTES / PAGE,
        maximum: WASM32_MAX_BYTES / PAGE,
        shared: true,
      });
      imports.env = { memory };
    }
    instance = await WebAssembly.instantiate(module, imports);
  } catch (e) {
    throw new WasmKernelError(`${path}: cannot instantiate: ${(e as Error).message}`);
  }
  const ex = instance.exports as unknown as WasmKernelExports;
  const kernels = new WasmKernels(ex, path, module, memory);
  started.memory = kernels.memory;
  ex._initialize();
  const abi = ex.le_abi_version();
  if (abi !== ABI_VERSION) {
    throw new WasmKernelError(
      `${path}: ABI version ${abi}, expected ${ABI_VERSION}; rebuild it: deno task build:wasm`,
    );
  }
  return kernels;
}

async function readModule(path: string): Promise<Uint8Array> {
  if (/^(https?|file):/.test(path)) {
    const r = await fetch(path);
    if (!r.ok) throw new WasmKernelError(`${path}: HTTP ${r.status}; ${WASM_BUILD_HINT}`);
    return new Uint8Array(await r.arrayBuffer());
  }
  return await Deno.readFile(path);
}

/** Thrown by the module's proc_exit (abort() in C): it stops the call that made it. */
export class WasmExitError extends WasmKernelError {
  /** The exit code. */
  readonly code: number;
  /** Creates the error. */
  constructor(code: number) {
    super(`the WebAssembly kernels exited (code ${code}): an abort in C`);
    this.name = "WasmExitError";
    this.code = code;
  }
}

const EBADF = 8;

// The WASI calls wasi-libc makes for what the kernels use: an environment
// holding LE_PROFILE at most (getenv), a monotonic clock (profiling),
// stdout/stderr.
function wasiStubs(mem: () => WebAssembly.Memory): Record<string, (...a: never[]) => unknown> {
  const dv = () => new DataView(mem().buffer);
  const t0 = performance.now();
  let line = "";
  // The one variable the kernels read: LE_PROFILE (per-op times printed when a context is freed).
  let profile: string | undefined;
  try {
    profile = (globalThis as { Deno?: typeof Deno }).Deno?.env.get("LE_PROFILE");
  } catch {
    // no env permission: no profile
  }
  const env = profile ? [new TextEncoder().encode(`LE_PROFILE=${profile}\0`)] : [];
  return {
    environ_sizes_get(count: number, size: number) {
      dv().setUint32(count, env.length, true);
      dv().setUint32(size, env.reduce((n, e) => n + e.length, 0), true);
      return 0;
    },
    environ_get(ptrs: number, buf: number) {
      const v = dv(), u8 = new Uint8Array(mem().buffer);
      for (const [i, e] of env.entries()) {
        v.setUint32(ptrs + 4 * i, buf, true);
        u8.set(e, buf);
        buf += e.length;
      }
      return 0;
    },
    clock_time_get(_id: number, _precision: bigint, out: number) {
      const ns = BigInt(Math.round((performance.now() - t0) * 1e6));
      dv().setBigUint64(out, ns, true);
      return 0;
    },
    fd_write(fd: number, iovs: number, n: number, written: number) {
      if (fd !== 1 && fd !== 2) return EBADF;
      const v = dv();
      let total = 0;
      for (let i = 0; i < n; i++) {
        const p = v.getUint32(iovs + 8 * i, true), len = v.getUint32(iovs + 8 * i + 4, true);
        line += new TextDecoder().decode(new Uint8Array(mem().buffer).slice(p, p + len));
        total += len;
      }
      const nl = line.lastIndexOf("\n");
      if (nl >= 0) {
        console.error(line.slice(0, nl));
        line = line.slice(nl + 1);
      }
      v.setUint32(written, total, true);
      return 0;
    },
    fd_close() {
      return EBADF;
    },
    fd_seek() {
      return EBADF;
    },
    proc_exit(code: number) {
      throw new WasmExitError(code);
    },
  };
}
