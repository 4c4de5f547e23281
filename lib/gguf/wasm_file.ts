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

/** Options of {@linkcode readFileIntoWasm}. */
export interface ReadIntoWasmOptions {
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
  if (size + kernels.memoryBytes > WASM32_MAX_BYTES) {
    throw new WasmKernelError(
      `${path}: the model file is ${size} bytes; the WebAssembly (wasm32) memory holds at most ` +
        `${WASM32_MAX_BYTES} bytes (4 GiB), ${kernels.memoryBytes} of them in use: use the CPU ` +
        `backend (--allow-ffi) for this model`,
    );
  }
  const addr = kernels.alloc(size, `reading ${path}`);
  const out = new WasmFile(kernels, path, addr, size);
  const progress = options.progress ?? stderrProgress();
  try {
    let done = 0;
    while (done < size) {
      // a fresh view per read: nothing allocates meanwhile, but stay safe
      const view = out.bytes.subarray(done, Math.min(size, done + CHUNK));
      const n = await file.read(view);
      if (n === null) throw new WasmKernelError(`${path}: file ended at ${done} of ${size} bytes`);
      done += n;
      progress.bytes(`reading ${path} into WebAssembly memory`, done, size);
    }
  } catch (e) {
    out[Symbol.dispose]();
    throw e;
  }
  return out;
}

/**
 * Copies a whole model file already in memory (`bytes`, named `name` in
 * errors) into the WebAssembly kernels' memory: the source where there is
 * no file system (a browser). Dispose the result to free it.
 */
export async function bytesIntoWasm(
  bytes: Uint8Array,
  name: string,
  options: Pick<ReadIntoWasmOptions, "kernels"> = {},
): Promise<MappedFile> {
  const kernels = options.kernels ?? await loadWasmKernels();
  const size = bytes.byteLength;
  if (size + kernels.memoryBytes > WASM32_MAX_BYTES) {
    throw new WasmKernelError(
      `${name}: the model is ${size} bytes; the WebAssembly (wasm32) memory holds at most ` +
        `${WASM32_MAX_BYTES} bytes (4 GiB), ${kernels.memoryBytes} of them in use`,
    );
  }
  const out = new WasmFile(kernels, name, kernels.alloc(size, `copying ${name}`), size);
  out.bytes.set(bytes);
  return out;
}
