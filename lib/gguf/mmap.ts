/**
 * Files mapped read-only with le_mmap_file (the native library), so model
 * weights reach the kernels without being copied into the JavaScript heap;
 * the mapping is a host buffer any backend can read.
 *
 * @module
 */
import { HostBuffer, type OwnedBuffer } from "../ggml/memory.ts";
import { loadLibrarySync, type NativeLibrary } from "../../ffi/library.ts";
import { detachNative, nativeBytes, toCString } from "../../ffi/pointers.ts";

/**
 * A read-only mapping of a whole file: a host buffer whose set, copy and
 * clear are refused (writing to `bytes` would crash the process). Kernels
 * read the weights in place through `ptr`; nothing copies them.
 */
export interface MappedFile extends OwnedBuffer, Disposable {
  /** Always "host". */
  readonly backend: "host";
  /**
   * Base address of the mapping; null for a file read into WebAssembly
   * memory (./wasm_file.ts), which only the WebAssembly backend reads.
   */
  readonly ptr: Deno.PointerObject | null;
  /** The mapped file. */
  readonly path: string;
}

/** Raised when a file cannot be mapped. */
export class MapFileError extends Error {
  /** Creates the error. */
  constructor(message: string) {
    super(message);
    this.name = "MapFileError";
  }
}

interface Mapping {
  readonly lib: NativeLibrary;
  readonly ptr: Deno.PointerObject;
  readonly size: number;
}

/**
 * Unmaps files whose bytes became unreachable without a dispose. The target
 * is the ArrayBuffer over the mapping, not the MappedFile: a view kept
 * after the MappedFile is dropped still keeps the memory mapped.
 */
const forgotten = new FinalizationRegistry<Mapping>((m) => {
  m.lib.symbols.le_munmap(m.ptr, BigInt(m.size));
});

/**
 * Maps `path` read-only (private); dispose the result to unmap it. After
 * dispose, `bytes` and every view of it read as empty (the ArrayBuffer is
 * detached) instead of faulting on the unmapped pages.
 */
export function mapFile(path: string, library?: NativeLibrary): MappedFile {
  const lib = library ?? loadLibrarySync();
  const sizeOut = new BigUint64Array(1);
  const ptr = lib.symbols.le_mmap_file(toCString(path), new Uint8Array(sizeOut.buffer));
  if (ptr === null) throw new MapFileError(lib.lastError() || `cannot map ${path}`);
  const size = Number(sizeOut[0]);
  const bytes = nativeBytes(ptr, size);
  const token = {};
  forgotten.register(bytes.buffer, { lib, ptr, size }, token);
  return new FileMapping(path, bytes, ptr, () => {
    forgotten.unregister(token);
    detachNative(bytes);
    lib.symbols.le_munmap(ptr, BigInt(size));
  });
}

// The HostBuffer over the mapping; dispose unmaps it once.
class FileMapping extends HostBuffer<"host"> implements MappedFile {
  declare readonly ptr: Deno.PointerObject;
  readonly path: string;
  #unmap: (() => void) | null;

  constructor(path: string, bytes: Uint8Array, ptr: Deno.PointerObject, unmap: () => void) {
    super("host", bytes, ptr, { readOnly: true, label: `mapping of ${path}` });
    this.path = path;
    this.#unmap = unmap;
  }

  [Symbol.dispose](): void {
    const unmap = this.#unmap;
    this.#unmap = null;
    unmap?.();
  }
}
