/**
 * Model files read into the WebAssembly kernels' memory, where FFI (and so
 * le_mmap_file) is unavailable: the file is streamed into one allocation of
 * the shared module (ffi/wasm.ts), whose kernels then read the weights in
 * place. A file that cannot fit wasm32's 4 GiB is refused before anything is
 * read, with both sizes.
 *
 * @module
 */
import { LinearMemoryBuffer } from "../ggml/linear_memory.ts";
import type { MappedFile } from "./mmap.ts";
import {
  loadWasmKernels,
  WASM32_MAX_BYTES,
  WasmKernelError,
  type WasmKernels,
} from "../../ffi/wasm.ts";
import { type Progress, stderrProgress } from "../../ffi/progress.ts";

/** Bytes read per call (progress is redrawn per chunk). */
const CHUNK = 16 << 20;

// A read-only LinearMemoryBuffer named "host" (a model file) that frees its memory on dispose.
class WasmFile extends LinearMemoryBuffer<"host"> implements MappedFile {
  readonly path: string;
  #kernels: WasmKernels | null;

  constructor(kernels: WasmKernels, path: string, address: number, size: number) {
    super("host", kernels.memory, address, size, {
      readOnly: true,
      label: `${path} in WebAssembly memory`,
    });
    this.path = path;
    this.#kernels = kernels;
  }

  [Symbol.dispose](): void {
    const k = this.#kernels;
    this.#kernels = null;
    if (!k) return;
    this.markFreed();
    k.free(this.address);
  }
}

/** Progress and cancellation of a copy into WebAssembly memory. */
export interface CopyOptions {
  /**
   * Called after each chunk with the bytes copied so far and the total:
   * `done` never decreases and the last call has `done === total`.
   */
  onBytes?: (done: number, total: number) => void;
  /**
   * Checked before each chunk (a turn of the event loop apart, so that an
   * abort can land): the copy frees what it allocated and rejects with the
   * signal's reason.
   */
  signal?: AbortSignal;
}

/** Options of {@linkcode readFileIntoWasm}. */
export interface ReadIntoWasmOptions extends CopyOptions {
  /** The kernels whose memory receives the file (default: the shared instance). */
  kernels?: WasmKernels;
  /** Where progress goes (default: stderr, quiet with LLM_EDGE_QUIET=1). */
  progress?: Progress;
}

/**
 * Reads `path` into the WebAssembly kernels' memory; dispose the result to
 * free it. The result is a read-only host buffer like a mapped file.
 */
export async function readFileIntoWasm(
  path: string,
  options: ReadIntoWasmOptions = {},
): Promise<MappedFile> {
  const kernels = options.kernels ?? await loadWasmKernels();
  using file = await Deno.open(path, { read: true });
  const size = (await file.stat()).size;
  const progress = options.progress ?? stderrProgress();
  return await fill(kernels, path, size, options, async (out, report) => {
    for (let done = 0; done < size;) {
      options.signal?.throwIfAborted();
      const n = await file.read(out.bytes.subarray(done, Math.min(size, done + CHUNK)));
      if (n === null) throw new WasmKernelError(`${path}: file ended at ${done} of ${size} bytes`);
      done += n;
      progress.bytes(`reading ${path} into WebAssembly memory`, done, size);
      report(done);
    }
  });
}

/**
 * Allocates `size` bytes of the kernels' memory for `name` (refused with
 * both sizes when wasm32 cannot hold them) and has `copy` fill them, calling
 * `report(done)` after each chunk; the last report is the total, also for an
 * empty file. On any error the allocation is freed and the error rethrown.
 */
async function fill(
  kernels: WasmKernels,
  name: string,
  size: number,
  options: CopyOptions,
  copy: (out: WasmFile, report: (done: number) => void) => Promise<void>,
): Promise<WasmFile> {
  if (size + kernels.memoryBytes > WASM32_MAX_BYTES) {
    throw new WasmKernelError(
      `${name}: the model is ${size} bytes; the WebAssembly (wasm32) memory holds at most ` +
        `${WASM32_MAX_BYTES} bytes (4 GiB), ${kernels.memoryBytes} of them in use: use the CPU ` +
        `backend (--allow-ffi) for this model`,
    );
  }
  const out = new WasmFile(kernels, name, kernels.alloc(size, `reading ${name}`), size);
  try {
    await copy(out, (done) => options.onBytes?.(done, size));
    if (size === 0) options.onBytes?.(0, 0);
  } catch (e) {
    out[Symbol.dispose]();
    throw e;
  }
  return out;
}

// One turn of the event loop (a timer: the only turn every runtime has),
// so that an abort requested meanwhile is seen by the next check.
const turn = () => new Promise<void>((resolve) => setTimeout(resolve, 0));

/**
 * Copies a whole model file already in memory (`bytes`, named `name` in
 * errors) into the WebAssembly kernels' memory: the source where there is
 * no file system (a browser). Copied in 16 MiB chunks with
 * `options.onBytes` after each; `options.signal` is checked between them.
 * Dispose the result to free it.
 */
export async function bytesIntoWasm(
  bytes: Uint8Array,
  name: string,
  options: Pick<ReadIntoWasmOptions, "kernels" | "onBytes" | "signal"> = {},
): Promise<MappedFile> {
  options.signal?.throwIfAborted();
  const kernels = options.kernels ?? await loadWasmKernels();
  const size = bytes.byteLength;
  return await fill(kernels, name, size, options, async (out, report) => {
    for (let done = 0; done < size;) {
      if (options.signal && done > 0) {
        await turn();
        options.signal.throwIfAborted();
      }
      const end = Math.min(size, done + CHUNK);
      out.bytes.set(bytes.subarray(done, end), done);
      done = end;
      report(done);
    }
  });
}

/**
 * Streams `size` bytes from `body` (a fetch Response's body whose length is
 * known) straight into the WebAssembly kernels' memory, without a second
 * copy in JavaScript memory: `options.onBytes` after each chunk received,
 * `options.signal` checked between them (the stream is then cancelled). A
 * body shorter or longer than `size` is an error naming both counts.
 * Dispose the result to free it.
 */
export async function streamIntoWasm(
  body: ReadableStream<Uint8Array>,
  size: number,
  name: string,
  options: Pick<ReadIntoWasmOptions, "kernels" | "onBytes" | "signal"> = {},
): Promise<MappedFile> {
  options.signal?.throwIfAborted();
  const kernels = options.kernels ?? await loadWasmKernels();
  const reader = body.getReader();
  try {
    return await fill(kernels, name, size, options, async (out, report) => {
      let done = 0;
      for (;;) {
        options.signal?.throwIfAborted();
        const { value, done: end } = await reader.read();
        if (end) break;
        if (done + value.byteLength > size) {
          throw new WasmKernelError(
            `${name}: the body is longer than its ${size} bytes (Content-Length)`,
          );
        }
        out.bytes.set(value, done);
        done += value.byteLength;
        report(done);
      }
      if (done !== size) {
        throw new WasmKernelError(
          `${name}: the body ended at ${done} of ${size} bytes (Content-Length)`,
        );
      }
    });
  } catch (e) {
    await reader.cancel().catch(() => {});
    throw e;
  }
}
