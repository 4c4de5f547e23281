/**
 * Memory as every layer sees it: tensor dimensions and strides, a block of
 * bytes owned by one backend, a place inside such a block, and what hands
 * such blocks out. In lib/ggml, the bottom layer, so gguf (mapped files),
 * graph (tensor placement), the KV cache (its buffers) and the backends
 * (which own the blocks) all stand on it without importing each other.
 *
 * Bytes move in and out of a buffer only through its {@link BufferIO}, in
 * the spirit of ggml's `ggml_backend_buffer_i` (set_tensor, get_tensor,
 * cpy_tensor, clear): the scheduler, the KV cache and the context never look
 * at a buffer's memory themselves, so a backend whose memory the host cannot
 * address (a GPU) fits behind the same calls. {@link bufferSet},
 * {@link bufferGet}, {@link bufferCopy} and {@link bufferClear} are how they
 * call it: every offset and size is checked here, in TypeScript, before the
 * buffer's own code (which may be native) sees it.
 *
 * @module
 */
import type { GGMLTypeInfo } from "./types.ts";

/** Four dimensions, ggml order (index 0 innermost). */
export type Dims = [number, number, number, number];

/**
 * How bytes move in and out of one buffer. The buffer decides how: a host
 * buffer copies with memcpy, a device buffer would issue its own transfers.
 * Offsets and sizes reach these methods already checked when they are
 * called through {@link bufferSet} and friends; implementations check again
 * for direct callers.
 */
export interface BufferIO {
  /** Host → buffer: writes `src` at byte `offset`. */
  set(offset: number, src: Uint8Array): void;
  /** Buffer → host: fills `dst` with the bytes from `offset` on. */
  get(offset: number, dst: Uint8Array): void;
  /**
   * Buffer → buffer: `n` bytes of `src` from `srcOffset` into this buffer at
   * `dstOffset`. The destination decides how (a host buffer asks `src` to
   * {@link BufferIO.get} into its memory); `src` may belong to any backend.
   */
  copy(src: BackendBuffer, srcOffset: number, dstOffset: number, n: number): void;
  /** Sets every byte to `value` (0..255). */
  clear(value: number): void;
}

/**
 * A block of memory owned by one backend. Buffers the backends allocate
 * implement {@link BufferIO}; an object with no methods at all is plain host
 * memory (its `bytes`), served by a {@link HostBuffer} over them.
 */
export interface BackendBuffer extends Partial<BufferIO> {
  /** Name of the backend that owns it ("cpu", "ref", ...; "host" for mapped files). */
  readonly backend: string;
  /** Size in bytes. */
  readonly size: number;
  /**
   * The bytes seen from JavaScript (for native buffers a zero-copy view).
   * Only host memory has them, and only the owning backend's kernels (and
   * code that created the buffer) should look: everyone else goes through
   * {@link BufferIO}. A device buffer's getter throws.
   */
  readonly bytes: Uint8Array;
  /** Native address of bytes[0], or null for JavaScript-heap (or device) buffers. */
  readonly ptr: Deno.PointerValue | null;
  /** How errors name the buffer (default: its backend and size). */
  readonly label?: string;
}

/** A buffer with all of its {@link BufferIO}: what the backends allocate. */
export type OwnedBuffer = BackendBuffer & BufferIO;

/** Where a tensor's element [0,0,0,0] lives. */
export interface BufferRef {
  /** The buffer holding the tensor. */
  readonly buffer: BackendBuffer;
  /** Byte offset of element [0,0,0,0] inside it. */
  readonly offset: number;
}

/** A buffer's name in error messages: `cpu buffer (4096 bytes)`. */
export function describeBuffer(buf: BackendBuffer): string {
  return `${buf.label ?? `${buf.backend} buffer`} (${buf.size} bytes)`;
}

/**
 * Throws a one-line RangeError unless `[offset, offset + n)` lies inside
 * `buf`: both safe non-negative integers, the end at most its size.
 */
export function checkRange(buf: BackendBuffer, what: string, offset: number, n: number): void {
  const ok = Number.isSafeInteger(offset) && offset >= 0 && Number.isSafeInteger(n) && n >= 0 &&
    Number.isSafeInteger(buf.size) && offset + n <= buf.size;
  if (!ok) {
    throw new RangeError(
      `${what}: ${n} bytes at offset ${offset} lie outside ${describeBuffer(buf)}`,
    );
  }
}

function checkView(what: string, v: unknown, name: string): asserts v is Uint8Array {
  if (!(v instanceof Uint8Array)) throw new TypeError(`${what}: ${name} is not a Uint8Array`);
}

function checkByte(buf: BackendBuffer, value: number): void {
  if (!Number.isInteger(value) || value < 0 || value > 255) {
    throw new RangeError(`clear: value ${value} is not a byte (0..255) for ${describeBuffer(buf)}`);
  }
}

// Adapters for plain host blocks ({ backend, size, bytes, ptr } objects).
const plain = new WeakMap<BackendBuffer, BufferIO>();

/**
 * The I/O of `buf`: its own methods, or for a plain host block (no methods
 * at all) a {@link HostBuffer} over its `bytes`. A buffer implementing only
 * some of the methods is an error, not silently half host memory.
 */
export function bufferIO(buf: BackendBuffer): BufferIO {
  const { set, get, copy, clear } = buf;
  if (
    typeof set === "function" && typeof get === "function" && typeof copy === "function" &&
    typeof clear === "function"
  ) {
    return buf as BackendBuffer & BufferIO;
  }
  if (set || get || copy || clear) {
    throw new TypeError(`${describeBuffer(buf)} implements only part of set/get/copy/clear`);
  }
  let io = plain.get(buf);
  if (!io) {
    io = new HostBuffer(buf.backend, buf.bytes, buf.ptr, { size: buf.size, label: buf.label });
    plain.set(buf, io);
  }
  return io;
}

/** Host → buffer: writes `src` into `buf` at `offset`, range checked first. */
export function bufferSet(buf: BackendBuffer, offset: number, src: Uint8Array): void {
  checkView("set", src, "src");
  checkRange(buf, "set", offset, src.byteLength);
  bufferIO(buf).set(offset, src);
}

/**
 * Buffer → host: fills `dst` from `buf` at `offset`, or with a number `n`
 * returns a new array of the `n` bytes there. Range checked first.
 */
export function bufferGet(
  buf: BackendBuffer,
  offset: number,
  dst: Uint8Array | number,
): Uint8Array {
  const out = typeof dst === "number" ? new Uint8Array(checkedLength(buf, offset, dst)) : dst;
  checkView("get", out, "dst");
  checkRange(buf, "get", offset, out.byteLength);
  bufferIO(buf).get(offset, out);
  return out;
}

// A length to allocate for `get`: checked before the allocation.
function checkedLength(buf: BackendBuffer, offset: number, n: number): number {
  checkRange(buf, "get", offset, n);
  return n;
}

/**
 * Buffer → buffer: `n` bytes from `src` at `srcOffset` into `dst` at
 * `dstOffset`, both ranges checked first; the destination decides how.
 */
export function bufferCopy(
  dst: BackendBuffer,
  dstOffset: number,
  src: BackendBuffer,
  srcOffset: number,
  n: number,
): void {
  checkRange(dst, "copy (destination)", dstOffset, n);
  checkRange(src, "copy (source)", srcOffset, n);
  bufferIO(dst).copy(src, srcOffset, dstOffset, n);
}

/** Sets every byte of `buf` to `value` (0..255), checked first. */
export function bufferClear(buf: BackendBuffer, value = 0): void {
  checkByte(buf, value);
  bufferIO(buf).clear(value);
}

/** Options of {@link HostBuffer}. */
export interface HostBufferOptions {
  /** Size in bytes (default: the view's length; a shorter view reads as freed). */
  size?: number;
  /** Writes are refused (a read-only file mapping: writing would crash the process). */
  readOnly?: boolean;
  /** How errors name the buffer. */
  label?: string;
}

/**
 * Memory the host addresses directly, seen through one Uint8Array: JavaScript
 * heap (the reference backend), native allocations (the CPU backend) or a
 * mapped file. Every transfer is a memcpy in JavaScript, after the range
 * check: nothing here calls native code. When the owner frees native memory
 * it detaches the view, and from then on every method throws instead of
 * reaching freed memory.
 */
export class HostBuffer<B extends string = string> implements BackendBuffer, BufferIO {
  /** Name of the owning backend. */
  readonly backend: B;
  /** Size in bytes. */
  readonly size: number;
  /** The memory, for the owning backend's kernels. */
  readonly bytes: Uint8Array;
  /** Native address of bytes[0], or null for JavaScript-heap memory. */
  readonly ptr: Deno.PointerValue | null;
  /** How errors name the buffer. */
  readonly label: string | undefined;
  readonly #readOnly: boolean;

  /** A buffer of `backend` over `bytes` (at native address `ptr`, if any). */
  constructor(
    backend: B,
    bytes: Uint8Array,
    ptr: Deno.PointerValue | null = null,
    options: HostBufferOptions = {},
  ) {
    this.backend = backend;
    this.bytes = bytes;
    this.size = options.size ?? bytes.byteLength;
    this.ptr = ptr;
    this.label = options.label;
    this.#readOnly = options.readOnly ?? false;
  }

  /** Whether writes are refused. */
  get readOnly(): boolean {
    return this.#readOnly;
  }

  // Range, liveness and (for writes) writability, before any byte moves.
  #check(what: string, offset: number, n: number, write: boolean): void {
    checkRange(this, what, offset, n);
    if (this.bytes.byteLength < this.size) {
      throw new RangeError(`${what}: ${describeBuffer(this)} was freed`);
    }
    if (write && this.#readOnly) {
      throw new RangeError(`${what}: ${describeBuffer(this)} is read-only`);
    }
  }

  /** Writes `src` at `offset`. */
  set(offset: number, src: Uint8Array): void {
    checkView("set", src, "src");
    this.#check("set", offset, src.byteLength, true);
    this.bytes.set(src, offset);
  }

  /** Fills `dst` from `offset`. */
  get(offset: number, dst: Uint8Array): void {
    checkView("get", dst, "dst");
    this.#check("get", offset, dst.byteLength, false);
    dst.set(this.bytes.subarray(offset, offset + dst.byteLength));
  }

  /** Copies `n` bytes of `src` (any backend) into this buffer: `src` reads into our memory. */
  copy(src: BackendBuffer, srcOffset: number, dstOffset: number, n: number): void {
    this.#check("copy (destination)", dstOffset, n, true);
    checkRange(src, "copy (source)", srcOffset, n);
    if (n === 0) return;
    bufferIO(src).get(srcOffset, this.bytes.subarray(dstOffset, dstOffset + n));
  }

  /** Sets every byte to `value`. */
  clear(value: number): void {
    checkByte(this, value);
    this.#check("clear", 0, this.size, true);
    this.bytes.fill(value, 0, this.size);
  }
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
  // Plain comparisons, no closure: this runs for every moved node of every step.
  if (ne[0] <= 0 || ne[1] <= 0 || ne[2] <= 0 || ne[3] <= 0) return 0;
  let last = t.typeSize + (ne[0] / t.blockSize - 1) * nb[0];
  for (let i = 1; i < 4; i++) last += (ne[i] - 1) * nb[i];
  return last;
}
