/**
 * Host buffers: files mapped read-only with le_mmap_file, so model weights
 * reach the kernels without being copied into the JavaScript heap.
 *
 * @module
 */
import type { BackendBuffer } from "./types.ts";
import { loadLibrarySync, type NativeLibrary } from "../../ffi/library.ts";
import { nativeBytes, toCString } from "../../ffi/pointers.ts";

/** A read-only mapping of a whole file. Writing to `bytes` crashes the process. */
export interface MappedFile extends BackendBuffer, Disposable {
  /** Always "host". */
  readonly backend: "host";
  /** Base address of the mapping. */
  readonly ptr: Deno.PointerObject;
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

/** Maps `path` read-only (private); dispose the result to unmap it. */
export function mapFile(path: string, library?: NativeLibrary): MappedFile {
  const lib = library ?? loadLibrarySync();
  const sizeOut = new BigUint64Array(1);
  const ptr = lib.symbols.le_mmap_file(toCString(path), new Uint8Array(sizeOut.buffer));
  if (ptr === null) throw new MapFileError(lib.lastError() || `cannot map ${path}`);
  const size = Number(sizeOut[0]);
  let mapped = true;
  return {
    backend: "host",
    path,
    size,
    ptr,
    bytes: nativeBytes(ptr, size),
    [Symbol.dispose]() {
      if (!mapped) return;
      mapped = false;
      lib.symbols.le_munmap(ptr, BigInt(size));
    },
  };
}
