/**
 * The workers behind the threaded WebAssembly kernels (llm_edge_mt.wasm,
 * see ffi/wasm.ts): each is a worker running its own instance of the module
 * on the shared memory, with its own stack and TLS block, parked in the
 * module's `le_wasm_worker` loop (kernels/src/wasm_threads.c). `le_ctx_new(n)`
 * hands n - 1 of them its thread function, so the pool must hold that many
 * free workers first: {@linkcode acquireWasmWorkers}.
 *
 * Where the runtime has `node:worker_threads` (Deno, Node) its workers are
 * used and unref'd, so that parked workers never keep a process alive;
 * elsewhere (browsers) Web Workers, which need a cross-origin isolated page
 * for the shared memory. The worker's code is a self-contained function
 * sent as a data: URL, so a bundle of the package needs no worker file.
 *
 * @module
 */
import { nodeWorkerThreads, WasmKernelError, type WasmKernels } from "./wasm.ts";

/** Stack of each worker's instance (as the main thread's: kernels/Makefile). */
const STACK_BYTES = 1 << 20;
/** How long the workers may take to start and park before it is an error. */
const START_TIMEOUT_MS = 30_000;

/** The threaded module's exports used to start a worker. */
interface ThreadExports {
  __tls_size: WebAssembly.Global;
  __tls_align: WebAssembly.Global;
  le_wasm_workers(): number;
  le_wasm_max_workers(): number;
}

/** What a worker is sent: everything it needs to run its instance. */
interface WorkerStart {
  module: WebAssembly.Module;
  memory: WebAssembly.Memory;
  id: number;
  stackTop: number;
  tls: number;
}

interface HostWorker {
  postMessage(m: unknown): void;
  terminate(): unknown;
}

interface Pool {
  readonly workers: HostWorker[];
  /** Workers held by live contexts. */
  held: number;
  /** The start in flight, if any (starts are serialized). */
  starting?: Promise<void>;
  /** Why a start failed: the pool is not used again. */
  failed?: Error;
}

const pools = new WeakMap<WasmKernels, Pool>();

/**
 * Runs inside the worker; self-contained (it is sent as source). Instantiates
 * the module on the shared memory with WASI stubs (a clock for the waits'
 * timing; no environment, no output), sets its stack and TLS, says it is
 * ready, and parks in `le_wasm_worker` for good.
 */
function workerMain(): void {
  type Port = { once(ev: string, f: (d: unknown) => void): void; postMessage(m: unknown): void };
  const g = globalThis as unknown as {
    process?: { getBuiltinModule?: (id: string) => { parentPort?: Port | null } | undefined };
    onmessage: ((e: { data: unknown }) => void) | null;
    postMessage(m: unknown): void;
  };
  const port = g.process?.getBuiltinModule?.("node:worker_threads")?.parentPort ?? null;
  const post = (m: unknown) => port ? port.postMessage(m) : g.postMessage(m);
  const run = async (data: unknown) => {
    const { module, memory, id, stackTop, tls } = data as WorkerStart;
    try {
      const t0 = performance.now();
      const dv = () => new DataView(memory.buffer);
      const wasi: Record<string, (...a: never[]) => unknown> = {};
      for (const imp of WebAssembly.Module.imports(module)) {
        if (imp.module === "wasi_snapshot_preview1") wasi[imp.name] = () => 52; // ENOSYS
      }
      wasi.clock_time_get = (_id: number, _precision: bigint, out: number) => {
        dv().setBigUint64(out, BigInt(Math.round((performance.now() - t0) * 1e6)), true);
        return 0;
      };
      wasi.environ_sizes_get = (count: number, size: number) => {
        dv().setUint32(count, 0, true);
        dv().setUint32(size, 0, true);
        return 0;
      };
      wasi.proc_exit = (code: number) => {
        throw new Error(`the WebAssembly kernels exited (code ${code}) in worker ${id}`);
      };
      const inst = await WebAssembly.instantiate(module, {
        env: { memory },
        wasi_snapshot_preview1: wasi,
      });
      const ex = inst.exports as unknown as {
        __stack_pointer: WebAssembly.Global;
        __wasm_init_tls(p: number): void;
        le_wasm_worker(id: number): void;
      };
      ex.__stack_pointer.value = stackTop;
      ex.__wasm_init_tls(tls);
      post({ id, ok: true });
      ex.le_wasm_worker(id); // parks for good
    } catch (e) {
      post({ id, ok: false, error: String((e as Error)?.message ?? e) });
    }
  };
  if (port) port.once("message", run);
  else g.onmessage = (e) => run(e.data);
}

const WORKER_SOURCE = `(${workerMain.toString()})();`;

/** A started worker and the promise of its first message. */
function spawn(): { worker: HostWorker; first: Promise<unknown> } {
  const wt = nodeWorkerThreads();
  if (wt) {
    // node:worker_threads takes file: and data: URLs only
    const worker = new wt.Worker(
      new URL("data:text/javascript," + encodeURIComponent(WORKER_SOURCE)),
    );
    worker.unref(); // a parked worker must not keep the process alive
    const first = new Promise((resolve, reject) => {
      worker.once("message", resolve);
      worker.once("error", reject);
    });
    return { worker, first };
  }
  if (typeof Worker !== "function") {
    throw new WasmKernelError("WebAssembly threads: this runtime has no Worker");
  }
  // A blob: URL keeps the page's origin (a data: URL worker's is opaque,
  // and the shared memory could not be posted to it).
  const url = URL.createObjectURL(new Blob([WORKER_SOURCE], { type: "text/javascript" }));
  const worker = new Worker(url, { type: "module" });
  URL.revokeObjectURL(url);
  const first = new Promise((resolve, reject) => {
    worker.onmessage = (e) => resolve(e.data);
    worker.onerror = (e) => {
      e.preventDefault();
      reject(new Error(e.message));
    };
  });
  return { worker, first };
}

function poolOf(kernels: WasmKernels): Pool {
  let pool = pools.get(kernels);
  if (!pool) pools.set(kernels, pool = { workers: [], held: 0 });
  return pool;
}

async function start(kernels: WasmKernels, pool: Pool, count: number): Promise<void> {
  const ex = kernels.exports as unknown as ThreadExports;
  const max = ex.le_wasm_max_workers();
  if (pool.workers.length + count > max) {
    throw new WasmKernelError(
      `WebAssembly threads: ${pool.workers.length + count} workers asked, the module holds ${max}`,
    );
  }
  const tlsSize = Number(ex.__tls_size.value), tlsAlign = Number(ex.__tls_align.value);
  if (tlsAlign > 64) throw new WasmKernelError(`WebAssembly threads: TLS alignment ${tlsAlign}`);
  const started = [];
  for (let i = 0; i < count; i++) {
    const id = pool.workers.length;
    // Never freed: a parked worker's stack and TLS stay in use for the instance's life.
    const stack = kernels.alloc(STACK_BYTES, `worker ${id} stack`);
    const tls = kernels.alloc(Math.max(tlsSize, 1), `worker ${id} TLS`);
    const { worker, first } = spawn();
    pool.workers.push(worker);
    const msg: WorkerStart = {
      module: kernels.module,
      memory: kernels.memory,
      id,
      stackTop: stack + STACK_BYTES,
      tls,
    };
    worker.postMessage(msg);
    started.push(first.then((m) => {
      const r = m as { ok?: boolean; error?: string };
      if (!r?.ok) throw new WasmKernelError(`WebAssembly worker ${id}: ${r?.error ?? "failed"}`);
    }));
  }
  let timer: ReturnType<typeof setTimeout> | undefined;
  const timeout = new Promise<never>((_, reject) => {
    timer = setTimeout(
      () => reject(new WasmKernelError(`WebAssembly threads: workers not ready after 30 s`)),
      START_TIMEOUT_MS,
    );
  });
  try {
    await Promise.race([Promise.all(started), timeout]);
    // "ready" is sent just before the worker parks: wait for the park itself.
    while (ex.le_wasm_workers() < pool.workers.length) {
      await Promise.race([new Promise((r) => setTimeout(r, 1)), timeout]);
    }
  } finally {
    clearTimeout(timer);
  }
}

/**
 * Makes sure `count` parked workers are free for a context of `count + 1`
 * threads on `kernels` (a threaded module), starting more where needed, and
 * holds them until the returned object is disposed (after `le_ctx_free`).
 */
export async function acquireWasmWorkers(
  kernels: WasmKernels,
  count: number,
): Promise<Disposable> {
  if (!kernels.threaded) {
    throw new WasmKernelError(`WebAssembly threads: ${kernels.path} is the single-threaded build`);
  }
  const pool = poolOf(kernels);
  while (pool.starting) await pool.starting.catch(() => {});
  if (pool.failed) throw pool.failed;
  const missing = pool.held + count - pool.workers.length;
  if (missing > 0) {
    pool.starting = start(kernels, pool, missing);
    try {
      await pool.starting;
    } catch (e) {
      // A worker that did not park leaves a slot the pool cannot count on.
      for (const w of pool.workers) w.terminate();
      pool.failed = e as Error;
      throw e;
    } finally {
      pool.starting = undefined;
    }
  }
  pool.held += count;
  let released = false;
  return {
    [Symbol.dispose]() {
      if (released) return;
      released = true;
      pool.held -= count;
    },
  };
}
