/**
 * Repacked weights for the CPU backend: llama.cpp's CPU_REPACK buffer. Where
 * llama.cpp's matching CPU variant repacks a weight at load (Q4_0 into
 * q4_0_8x8 and Q4_K into q4_K_8x8 on AVX2 when ne1 % 8 == 0,
 * `ggml_repack_get_optimal_repack_type`),
 * the backend keeps a repacked copy of the weight, made natively on the
 * first compute that reads it, and encodes MUL_MAT nodes against the copy
 * (with the layout in the `le_tensor` flags). Results are bit-identical to
 * the plain rows' (kernels/src/repack.c): only the memory layout changes.
 *
 * Only read-only host memory is repacked (weights mapped from a file): a
 * writable buffer could change under a copy made earlier. Copies live in
 * backend-owned buffers, freed with the backend (never under a compute);
 * the source's pages are handed back to the OS (`le_mmap_drop`), so the
 * weight is resident once, as in llama.cpp's CPU_REPACK buffer.
 *
 * @module
 */
import type { BackendBuffer, ExecNode, ResolvedTensor } from "./types.ts";
import type { NativeLibrary } from "../../ffi/library.ts";
import { GGMLType } from "../ggml/types.ts";
import { pointerAt } from "../../ffi/pointers.ts";

/** A backend-owned native buffer, as the repacker needs it. */
export interface RepackBuffer {
  /** Native address. */
  readonly address: number;
}

/** Where a MUL_MAT's src0 is read from, when it is a repacked copy. */
export interface Repacked {
  /** Address of the copy. */
  readonly address: number;
  /** The `le_tensor` flags naming its layout. */
  readonly flags: number;
}

// Elements and bytes per block of the types a layout exists for.
const BLOCKS = new Map<number, readonly [number, number]>([
  [GGMLType.Q4_0, [32, 18]],
  [GGMLType.Q4_K, [256, 144]],
]);

/**
 * The repacked copies of one backend. `alloc` returns a zero-filled
 * backend-owned buffer of at least `size` bytes (64-byte aligned), which the
 * backend frees when it is disposed.
 */
export class WeightRepacker {
  readonly #lib: NativeLibrary;
  readonly #alloc: (size: number) => RepackBuffer;
  // Per source buffer: "offset:type:ne0:ne1" → the copy (null: not repackable).
  readonly #copies = new WeakMap<BackendBuffer, Map<string, Repacked | null>>();
  #bytes = 0;

  /** Copies are made with `lib` into buffers from `alloc`. */
  constructor(lib: NativeLibrary, alloc: (size: number) => RepackBuffer) {
    this.#lib = lib;
    this.#alloc = alloc;
  }

  /** Bytes of repacked copies made so far. */
  get bytes(): number {
    return this.#bytes;
  }

  /**
   * The repacked copy node `n`'s src0 should be read from (made now if it
   * is the first use), or undefined to read the plain rows. `src` is the
   * native address of src0's plain rows, already validated by the caller
   * (validateNode: the whole extent lies inside its buffer).
   */
  forMulMat(n: ExecNode, src: number): Repacked | undefined {
    const a = n.src[0], b = n.src[1], d = n.dst;
    if (!repackable(a) || !b || b.ne[2] !== 1 || b.ne[3] !== 1) return undefined;
    // The kernel writes 8 contiguous f32 outputs per row group.
    if (d.type !== GGMLType.F32 || d.nb[0] !== 4 || d.nb[1] % 4 !== 0) return undefined;
    const buf = a.data.buffer;
    let m = this.#copies.get(buf);
    if (!m) this.#copies.set(buf, m = new Map());
    const key = `${a.data.offset}:${a.type}:${a.ne[0]}:${a.ne[1]}`;
    let r = m.get(key);
    if (r === undefined) {
      r = this.#make(a, src);
      m.set(key, r);
    }
    return r ?? undefined;
  }

  #make(a: ResolvedTensor, src: number): Repacked | null {
    const sym = this.#lib.symbols;
    const [ne0, ne1] = a.ne;
    const flags = sym.le_repack_flag(a.type, BigInt(ne0), BigInt(ne1));
    if (flags === 0) return null;
    const bytes = ne1 * a.nb[1];
    // The copy's size as the layout needs it (Q4_K's is larger than the rows).
    const size = Number(sym.le_repack_size(flags, a.type, BigInt(ne0), BigInt(ne1)));
    if (!(size >= bytes)) throw new Error(`repack: layout ${flags} has no size for ${ne0}x${ne1}`);
    // Re-checked here, right before native code reads `bytes` bytes at src.
    const buf = a.data.buffer;
    if (a.data.offset < 0 || a.data.offset + bytes > buf.size || buf.bytes.byteLength < buf.size) {
      throw new RangeError(
        `repack: ${ne0}x${ne1} weight at offset ${a.data.offset} outside its buffer`,
      );
    }
    const dst = this.#alloc(size);
    const rc = sym.le_repack(
      flags,
      a.type,
      pointerAt(src),
      pointerAt(dst.address),
      BigInt(size),
      BigInt(ne0),
      BigInt(ne1),
    );
    if (rc !== 0) throw new Error(`repack: ${this.#lib.lastError()}`);
    this.#bytes += size;
    // The plain rows' pages go back to the page cache (a mapped file: they
    // read back from it if another op touches them), so resident memory
    // holds the copy, not both. Native code refuses other memory.
    sym.le_mmap_drop(pointerAt(src), BigInt(bytes));
    return { address: dst.address, flags };
  }
}

// A weight llama.cpp could repack: read-only host memory (a mapped model
// file), Q4_0 or Q4_K, plain contiguous 2-D rows, whole groups of 8 rows.
function repackable(a: ResolvedTensor): boolean {
  const buf = a.data.buffer as BackendBuffer & { readOnly?: boolean };
  if (buf.backend !== "host" || buf.readOnly !== true) return false;
  const blk = BLOCKS.get(a.type);
  if (!blk) return false;
  const [ne0, ne1, ne2, ne3] = a.ne, [n, size] = blk;
  return ne0 > 0 && ne0 % n === 0 && ne1 > 0 && ne1 % 8 === 0 && ne2 === 1 && ne3 === 1 &&
    a.nb[0] === size && a.nb[1] === (ne0 / n) * size;
}
