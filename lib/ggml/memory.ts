/**
 * Memory as every layer sees it: tensor dimensions and strides, a block of
 * bytes owned by one backend, a place inside such a block, and what hands
 * such blocks out. In lib/ggml, the bottom layer, so gguf (mapped files),
 * graph (tensor placement), the KV cache (its buffers) and the backends
 * (which own the blocks) all stand on it without importing each other.
 *
 * @module
 */
import type { GGMLTypeInfo } from "./types.ts";

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

/**
 * What allocates buffers: the part of a backend that memory owners such as
 * the KV cache need (a Backend is one), so they do not depend on backends.
 */
export interface BufferAllocator {
  /** A zero-filled buffer of `size` bytes. */
  alloc(size: number): BackendBuffer;
  /** Releases a buffer from {@link BufferAllocator.alloc}. */
  free(buf: BackendBuffer): void;
}

/** The block facts layout arithmetic needs (a {@link GGMLTypeInfo} has them). */
export type BlockFacts = Pick<GGMLTypeInfo, "blockSize" | "typeSize">;

/**
 * Byte strides of a packed tensor of shape `ne` (ggml_new_tensor). The
 * caller checks that ne[0] is a multiple of the block size.
 */
export function packedStrides(t: BlockFacts, ne: Dims): Dims {
  const nb1 = (ne[0] / t.blockSize) * t.typeSize;
  return [t.typeSize, nb1, nb1 * ne[1], nb1 * ne[1] * ne[2]];
}

/**
 * Bytes from element [0,0,0,0] to one past the last byte a tensor touches
 * (0 when it has no elements). With packed rows (nb[0] = bytes per block)
 * this is ggml_nbytes; it stays exact for any strides, which is what bounds
 * checks against a buffer need.
 */
export function byteExtent(t: BlockFacts, ne: Dims, nb: Dims): number {
  if (ne.some((n) => n <= 0)) return 0;
  let last = t.typeSize + (ne[0] / t.blockSize - 1) * nb[0];
  for (let i = 1; i < 4; i++) last += (ne[i] - 1) * nb[i];
  return last;
}
