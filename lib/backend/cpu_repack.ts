/**
 * Repacked weights for the CPU backend: llama.cpp's CPU_REPACK buffer. Where
 * llama.cpp's matching CPU variant repacks a weight at load (Q4_0 into
 * q4_0_8x8 and Q4_K into q4_K_8x8 on AVX2 when ne1 % 8 == 0,
 * `ggml_repack_get_optimal_repack_type`),
 * a repacked copy of the weight is made natively on the first compute that
 * reads it, shared by every CPU backend that reads the same weight, and
 * MUL_MAT nodes are encoded against it (with the layout in the `le_tensor`
 * flags). Results are bit-identical to the plain rows' (kernels/src/repack.c):
 * only the memory layout changes. A backend made with matmulOrder "fast"
 * also repacks Q8_0 weights where a faster float order exists
 * (kernels/src/repack_q8_0.c; no longer llama.cpp's bits).
 *
 * Only read-only host memory is repacked (weights mapped from a file): a
 * writable buffer could change under a copy made earlier. A copy is freed
 * when the last backend holding it is freed (never under a compute);
 * the source's pages are handed back to the OS (`le_mmap_drop`), so the
 * weight is resident once, as in llama.cpp's CPU_REPACK buffer.
 *
 * @module
 */
import type { BackendBuffer, ExecNode, ResolvedTensor } from "./types.ts";
import type { NativeLibrary } from "../../ffi/library.ts";
import { GGMLType } from "../ggml/types.ts";
import { address, pointerAt } from "../../ffi/pointers.ts";

/** Where a MUL_MAT's src0 is read from, when it is a repacked copy. */
export interface Repacked {
  /** Address of the copy. */
  readonly address: number;
  /** The `le_tensor` flags naming its layout. */
  readonly flags: number;
}

/**
 * A repacked copy, shared by every CPU backend (of one library) that reads
 * the same weight: a model's contexts hold its repacked weights once, as
 * llama.cpp's model holds its CPU_REPACK buffer (each context had made its
 * own: a second context on a 1.1B Q4_0 model added 530 MiB).
 */
export interface SharedCopy extends Repacked {
  readonly ptr: Deno.PointerObject;
  readonly size: number;
  /** Backends holding it; freed when the last one releases it. */
  users: number;
  readonly table: Map<string, SharedCopy | null>;
  readonly key: string;
}

// Elements and bytes per block of the types a layout exists for.
const BLOCKS = new Map<number, readonly [number, number]>([
  [GGMLType.Q4_0, [32, 18]],
  [GGMLType.Q4_K, [256, 144]],
  [GGMLType.Q8_0, [32, 34]], // in the fast order only (le_repack_flag_fast)
]);

// Per library, per source buffer: "offset:type:ne0:ne1" → the copy (null:
// not repackable). Keyed weakly: a model's buffer that is gone takes its
// entries with it (its copies were freed as their last user released them).
const TABLES = new WeakMap<NativeLibrary, WeakMap<BackendBuffer, Map<string, SharedCopy | null>>>();

/**
 * Drops a backend's hold on its copies (`held`, as given to its
 * {@link WeightRepacker}), freeing each one no other backend holds. Only
 * once none of the backend's computes runs: a copy another backend holds
 * stays, so no kernel ever reads freed memory.
 */
export function releaseCopies(lib: NativeLibrary, held: Set<SharedCopy>): void {
  for (const c of held) {
    if (--c.users > 0) continue;
    c.table.delete(c.key);
    lib.symbols.le_free(c.ptr);
    LIVE.set(lib, (LIVE.get(lib) ?? 1) - 1);
  }
  held.clear();
}

// Copies alive per library (for liveCopies).
const LIVE = new WeakMap<NativeLibrary, number>();

/** How many repacked copies made with `lib` are alive (held by some backend). */
export function liveCopies(lib: NativeLibrary): number {
  return LIVE.get(lib) ?? 0;
}

/** One backend's use of the shared repacked copies. */
export class WeightRepacker {
  readonly #lib: NativeLibrary;
  readonly #held: Set<SharedCopy>;
  readonly #fast: boolean;

  /**
   * Copies are made with `lib`; the ones this backend reads go into `held`.
   * `fast`: also the layouts of a faster float order (le_repack_flag_fast).
   */
  constructor(lib: NativeLibrary, held: Set<SharedCopy>, fast = false) {
    this.#lib = lib;
    this.#held = held;
    this.#fast = fast;
  }

  /** Bytes of the repacked copies this backend reads. */
  get bytes(): number {
    let n = 0;
    for (const c of this.#held) n += c.size;
    return n;
  }

  /**
   * The repacked copy node `n`'s src0 should be read from (made now if no
   * backend made it yet), or undefined to read the plain rows. `src` is the
   * native address of src0's plain rows, already validated by the caller
   * (validateNode: the whole extent lies inside its buffer).
   */
  forMulMat(n: ExecNode, src: number): Repacked | undefined {
    const a = n.src[0], b = n.src[1], d = n.dst;
    if (!repackable(a) || !b || b.ne[2] !== 1 || b.ne[3] !== 1) return undefined;
    // The kernel writes 8 contiguous f32 outputs per row group.
    if (d.type !== GGMLType.F32 || d.nb[0] !== 4 || d.nb[1] % 4 !== 0) return undefined;
    const buf = a.data.buffer;
    let bufs = TABLES.get(this.#lib);
    if (!bufs) TABLES.set(this.#lib, bufs = new WeakMap());
    let table = bufs.get(buf);
    if (!table) bufs.set(buf, table = new Map());
    // A weight the two orders repack differently (Q8_0: only the fast one
    // does) has a copy per order; the others share theirs.
    const order = this.#fast && a.type === GGMLType.Q8_0 ? ":fast" : "";
    const key = `${a.data.offset}:${a.type}:${a.ne[0]}:${a.ne[1]}${order}`;
    let r = table.get(key);
    if (r === undefined) {
      r = this.#make(a, src, table, key);
      table.set(key, r);
    }
    if (r === null) return undefined;
    if (!this.#held.has(r)) {
      this.#held.add(r);
      r.users++;
    }
    return r;
  }

  #make(
    a: ResolvedTensor,
    src: number,
    table: Map<string, SharedCopy | null>,
    key: string,
  ): SharedCopy | null {
    const sym = this.#lib.symbols;
    const [ne0, ne1] = a.ne;
    const flags = this.#fast
      ? sym.le_repack_flag_fast(a.type, BigInt(ne0), BigInt(ne1))
      : sym.le_repack_flag(a.type, BigInt(ne0), BigInt(ne1));
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
    const ptr = sym.le_alloc(BigInt(size), 64n);
    if (ptr === null) throw new RangeError(`repack: ${size} bytes: ${this.#lib.lastError()}`);
    const rc = sym.le_repack(
      flags,
      a.type,
      pointerAt(src),
      ptr,
      BigInt(size),
      BigInt(ne0),
      BigInt(ne1),
    );
    if (rc !== 0) {
      const why = this.#lib.lastError();
      sym.le_free(ptr);
      throw new Error(`repack: ${why}`);
    }
    // The plain rows' pages go back to the page cache (a mapped file: they
    // read back from it if another op touches them), so resident memory
    // holds the copy, not both. Native code refuses other memory.
    sym.le_mmap_drop(pointerAt(src), BigInt(bytes));
    LIVE.set(this.#lib, liveCopies(this.#lib) + 1);
    return { address: address(ptr), flags, ptr, size, users: 0, table, key };
  }
}

// A weight llama.cpp could repack: read-only host memory (a mapped model
// file), Q4_0 or Q4_K (or Q8_0, repacked in the fast order only), plain
// contiguous 2-D rows, whole groups of 8 rows (16 for Q8_0: the C side says).
function repackable(a: ResolvedTensor): boolean {
  const buf = a.data.buffer as BackendBuffer & { readOnly?: boolean };
  if (buf.backend !== "host" || buf.readOnly !== true) return false;
  const blk = BLOCKS.get(a.type);
  if (!blk) return false;
  const [ne0, ne1, ne2, ne3] = a.ne, [n, size] = blk;
  return ne0 > 0 && ne0 % n === 0 && ne1 > 0 && ne1 % 8 === 0 && ne2 === 1 && ne3 === 1 &&
    a.nb[0] === size && a.nb[1] === (ne0 / n) * size;
}
