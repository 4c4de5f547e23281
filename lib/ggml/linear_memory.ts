/**
 * A buffer inside a WebAssembly module's linear memory: the memory of the
 * WebAssembly backend (lib/backend/wasm.ts) and of model files read into it
 * where FFI is unavailable. Growing a `WebAssembly.Memory` detaches its
 * ArrayBuffer, so `bytes` is a getter that makes a view of the current one:
 * never keep it across an allocation.
 *
 * @module
 */
import {
  type BackendBuffer,
  type BufferIO,
  bufferIO,
  checkRange,
  describeBuffer,
} from "./memory.ts";

/** Options of {@link LinearMemoryBuffer}. */
export interface LinearMemoryBufferOptions {
  /** Writes are refused (a model file: the weights are read-only). */
  readOnly?: boolean;
  /** How errors name the buffer. */
  label?: string;
}

/**
 * `size` bytes at `address` of `memory`. The owner frees the memory and then
 * calls {@link LinearMemoryBuffer.markFreed}: from then on every method throws.
 */
export class LinearMemoryBuffer<B extends string = string> implements BackendBuffer, BufferIO {
  /** Name of the owning backend ("wasm"; "host" for a model file). */
  readonly backend: B;
  /** The module memory the buffer lies in. */
  readonly memory: WebAssembly.Memory;
  /** Byte address of byte 0 in that memory. */
  readonly address: number;
  /** Size in bytes. */
  readonly size: number;
  /** Not a native pointer: the memory belongs to a WebAssembly instance. */
  readonly ptr = null;
  /** How errors name the buffer. */
  readonly label: string | undefined;
  readonly #readOnly: boolean;
  #freed = false;

  /** Wraps `[address, address + size)` of `memory`, which must lie inside it. */
  constructor(
    backend: B,
    memory: WebAssembly.Memory,
    address: number,
    size: number,
    options: LinearMemoryBufferOptions = {},
  ) {
    if (
      !Number.isSafeInteger(address) || address < 0 || !Number.isSafeInteger(size) || size < 0 ||
      address + size > memory.buffer.byteLength
    ) {
      throw new RangeError(
        `LinearMemoryBuffer: ${size} bytes at ${address} lie outside the module memory ` +
          `(${memory.buffer.byteLength} bytes)`,
      );
    }
    this.backend = backend;
    this.memory = memory;
    this.address = address;
    this.size = size;
    this.label = options.label;
    this.#readOnly = options.readOnly ?? false;
  }

  /** A view of the current memory (made anew on each access; empty once freed). */
  get bytes(): Uint8Array {
    if (this.#freed) return new Uint8Array(0);
    return new Uint8Array(this.memory.buffer, this.address, this.size);
  }

  /** Whether the owner freed the memory. */
  get freed(): boolean {
    return this.#freed;
  }

  /** Whether writes are refused. */
  get readOnly(): boolean {
    return this.#readOnly;
  }

  /** Marks the buffer freed (its owner released the memory). */
  markFreed(): void {
    this.#freed = true;
  }

  #check(what: string, offset: number, n: number, write: boolean): void {
    checkRange(this, what, offset, n);
    if (this.#freed) throw new RangeError(`${what}: ${describeBuffer(this)} was freed`);
    if (write && this.#readOnly) {
      throw new RangeError(`${what}: ${describeBuffer(this)} is read-only`);
    }
  }

  /** Writes `src` at `offset`. */
  set(offset: number, src: Uint8Array): void {
    if (!(src instanceof Uint8Array)) throw new TypeError("set: src is not a Uint8Array");
    this.#check("set", offset, src.byteLength, true);
    this.bytes.set(src, offset);
  }

  /** Fills `dst` from `offset`. */
  get(offset: number, dst: Uint8Array): void {
    if (!(dst instanceof Uint8Array)) throw new TypeError("get: dst is not a Uint8Array");
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

  /** Sets every byte to `value` (0..255). */
  clear(value: number): void {
    if (!Number.isInteger(value) || value < 0 || value > 255) {
      throw new RangeError(`clear: value ${value} is not a byte (0..255)`);
    }
    this.#check("clear", 0, this.size, true);
    this.bytes.fill(value);
  }
}
