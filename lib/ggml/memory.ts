/**
 * Memory as every layer sees it: tensor dimensions, a block of bytes owned
 * by one backend, and a place inside such a block. The bottom of lib/: it
 * imports nothing, so gguf (mapped files), graph (tensor placement) and the
 * backends (which own the blocks) can all stand on it.
 *
 * @module
 */

/** Four dimensions, ggml order (index 0 innermost). */
export type Dims = [number, number, number, number];

/** A block of memory owned by one backend. */
export interface BackendBuffer {
  /** Name of the backend that owns it ("cpu", "ref", ...). */
  readonly backend: string;
  /** Size in bytes. */
  readonly size: number;
  /** The bytes, seen from JavaScript (for native buffers, a zero-copy view). */
  readonly bytes: Uint8Array;
  /** Native address of bytes[0], or null for JavaScript-heap buffers. */
  readonly ptr: Deno.PointerValue | null;
}

/** Where a tensor's element [0,0,0,0] lives. */
export interface BufferRef {
  /** The buffer holding the tensor. */
  readonly buffer: BackendBuffer;
  /** Byte offset of element [0,0,0,0] inside it. */
  readonly offset: number;
}
