/**
 * GGUF writing, laid out the way llama.cpp's gguf_write_to_file lays it out:
 * header, key/values, tensor infos, padding to the alignment, then each
 * tensor's data padded to the alignment.
 *
 * @module
 */
import {
  type GGUFArray,
  type GGUFKV,
  type GGUFScalar,
  GGUFValueType,
  valueSize,
} from "./header.ts";
import { GGUF_DEFAULT_ALIGNMENT, GGUF_MAGIC } from "./reader.ts";
import { rowSize } from "../ggml/types.ts";
import { type AtomicWriteOptions, writeAll, writeFileAtomic } from "../fs/atomic.ts";

/** A tensor to write; `data` may be produced lazily (one tensor in memory at a time). */
export interface GGUFWriteTensor {
  /** Tensor name. */
  name: string;
  /** ggml type id. */
  type: number;
  /** Elements per dimension, innermost first; written as given (1..4 entries). */
  ne: number[];
  /** The bytes (exactly the type table's size), or a function producing them. */
  data: Uint8Array | (() => Uint8Array | Promise<Uint8Array>);
}

/** What to write. */
export interface GGUFWriteInput {
  /** Format version, 3 by default. */
  version?: number;
  /** Data alignment when the kv list has no `general.alignment` (default 32). */
  alignment?: number;
  /** Metadata in order. */
  kv: GGUFKV[];
  /** Tensors in order. */
  tensors: GGUFWriteTensor[];
}

/** The encoded header plus where each tensor's data goes. */
export interface EncodedHeader {
  /** Header bytes including the padding up to the data section. */
  header: Uint8Array;
  /** Alignment in effect. */
  alignment: number;
  /** Byte size of each tensor's data. */
  sizes: number[];
  /** Total size of the file. */
  fileSize: number;
}

const enc = new TextEncoder();

class Sink {
  buf = new Uint8Array(1024);
  dv = new DataView(this.buf.buffer);
  len = 0;

  reserve(n: number): void {
    if (this.len + n <= this.buf.length) return;
    let cap = this.buf.length * 2;
    while (cap < this.len + n) cap *= 2;
    const next = new Uint8Array(cap);
    next.set(this.buf.subarray(0, this.len));
    this.buf = next;
    this.dv = new DataView(next.buffer);
  }
  u8(v: number): void {
    this.reserve(1);
    this.dv.setUint8(this.len++, v);
  }
  u32(v: number): void {
    this.reserve(4);
    this.dv.setUint32(this.len, v, true);
    this.len += 4;
  }
  i32(v: number): void {
    this.reserve(4);
    this.dv.setInt32(this.len, v, true);
    this.len += 4;
  }
  u64(v: number | bigint): void {
    this.reserve(8);
    this.dv.setBigUint64(this.len, BigInt(v), true);
    this.len += 8;
  }
  i64(v: number | bigint): void {
    this.reserve(8);
    this.dv.setBigInt64(this.len, BigInt(v), true);
    this.len += 8;
  }
  bytes(b: Uint8Array): void {
    this.reserve(b.length);
    this.buf.set(b, this.len);
    this.len += b.length;
  }
  string(s: string): void {
    const b = enc.encode(s);
    this.u64(b.length);
    this.bytes(b);
  }
  pad(a: number): void {
    while (this.len % a !== 0) this.u8(0);
  }
}

function writeScalar(s: Sink, type: number, v: GGUFScalar, key: string): void {
  const dv = () => s.dv;
  switch (type) {
    case GGUFValueType.STRING:
      return s.string(v as string);
    case GGUFValueType.BOOL:
      return s.u8(v ? 1 : 0);
    case GGUFValueType.UINT64:
      return s.u64(v as bigint);
    case GGUFValueType.INT64:
      return s.i64(v as bigint);
  }
  const size = valueSize(type);
  if (size === 0) throw new TypeError(`${key}: cannot write value type ${type}`);
  s.reserve(size);
  const p = s.len;
  const n = Number(v);
  if (type === GGUFValueType.UINT8) dv().setUint8(p, n);
  else if (type === GGUFValueType.INT8) dv().setInt8(p, n);
  else if (type === GGUFValueType.UINT16) dv().setUint16(p, n, true);
  else if (type === GGUFValueType.INT16) dv().setInt16(p, n, true);
  else if (type === GGUFValueType.UINT32) dv().setUint32(p, n, true);
  else if (type === GGUFValueType.INT32) dv().setInt32(p, n, true);
  else if (type === GGUFValueType.FLOAT32) dv().setFloat32(p, n, true);
  else if (type === GGUFValueType.FLOAT64) dv().setFloat64(p, n, true);
  s.len += size;
}

function writeArray(s: Sink, a: GGUFArray, key: string): void {
  s.u32(a.itemType);
  s.u64(a.values.length);
  if (a.itemType === GGUFValueType.STRING) {
    for (const v of a.values as string[]) s.string(v);
  } else if (a.itemType === GGUFValueType.ARRAY) {
    for (const v of a.values as GGUFArray[]) writeArray(s, v, key);
  } else if (a.itemType === GGUFValueType.BOOL) {
    for (const v of a.values as boolean[]) s.u8(v ? 1 : 0);
  } else {
    const size = valueSize(a.itemType);
    if (size === 0) throw new TypeError(`${key}: cannot write array item type ${a.itemType}`);
    const v = a.values as Uint8Array;
    if (!ArrayBuffer.isView(v) || v.BYTES_PER_ELEMENT !== size) {
      throw new TypeError(`${key}: array items must be a typed array of ${size}-byte elements`);
    }
    s.bytes(new Uint8Array(v.buffer, v.byteOffset, v.byteLength));
  }
}

/** Size in bytes of a tensor's data, from the ggml type table (RangeError for a partial block). */
export function tensorDataSize(type: number, ne: number[]): number {
  // A whole number of blocks per row makes the element count one too.
  const rows = ne.slice(1).reduce((a, b) => a * b, 1);
  return rowSize(type, ne[0]) * rows;
}

/** Encodes the header (through the padding before the data section). */
export function encodeGGUFHeader(
  out: Omit<GGUFWriteInput, "tensors"> & { tensors: Omit<GGUFWriteTensor, "data">[] },
): EncodedHeader {
  const s = new Sink();
  let alignment = out.alignment ?? GGUF_DEFAULT_ALIGNMENT;
  const a = out.kv.find((p) => p.key === "general.alignment");
  if (a) alignment = Number(a.value);
  if (!(alignment > 0) || (alignment & (alignment - 1)) !== 0) {
    throw new RangeError(`alignment ${alignment} is not a power of two`);
  }
  s.u32(GGUF_MAGIC);
  s.u32(out.version ?? 3);
  s.u64(out.tensors.length);
  s.u64(out.kv.length);
  for (const kv of out.kv) {
    s.string(kv.key);
    s.u32(kv.type);
    if (kv.type === GGUFValueType.ARRAY) writeArray(s, kv.value as GGUFArray, kv.key);
    else writeScalar(s, kv.type, kv.value as GGUFScalar, kv.key);
  }
  const sizes: number[] = [];
  let off = 0;
  for (const t of out.tensors) {
    if (t.ne.length < 1 || t.ne.length > 4) {
      throw new RangeError(`${t.name}: n_dims ${t.ne.length}`);
    }
    s.string(t.name);
    s.u32(t.ne.length);
    for (const d of t.ne) s.i64(d);
    s.i32(t.type);
    s.u64(off);
    const size = tensorDataSize(t.type, t.ne);
    sizes.push(size);
    off += Math.ceil(size / alignment) * alignment;
  }
  // Pad before the data section only when there is one: llama.cpp's reader
  // seeks past the padding only when tensors exist, and gguf-py's tokenizer-only
  // files end right after the metadata, so this keeps them byte-identical.
  if (out.tensors.length > 0) s.pad(alignment);
  return { header: s.buf.slice(0, s.len), alignment, sizes, fileSize: s.len + off };
}

async function tensorData(t: GGUFWriteTensor, size: number): Promise<Uint8Array> {
  const d = typeof t.data === "function" ? await t.data() : t.data;
  if (d.length !== size) {
    throw new RangeError(`${t.name}: ${d.length} bytes of data given, its shape needs ${size}`);
  }
  return d;
}

/** Writes a whole GGUF into memory (tensor data must be given as bytes). */
export function writeGGUF(out: GGUFWriteInput): Uint8Array {
  const h = encodeGGUFHeader(out);
  const file = new Uint8Array(h.fileSize);
  file.set(h.header);
  let p = h.header.length;
  out.tensors.forEach((t, i) => {
    if (typeof t.data === "function") throw new TypeError(`${t.name}: writeGGUF needs bytes`);
    if (t.data.length !== h.sizes[i]) {
      throw new RangeError(
        `${t.name}: ${t.data.length} bytes given, its shape needs ${h.sizes[i]}`,
      );
    }
    file.set(t.data, p);
    p += Math.ceil(h.sizes[i] / h.alignment) * h.alignment;
  });
  return file;
}

/**
 * Streams a GGUF to `path`: the header, then each tensor's data as it is
 * produced, so only one tensor is held in memory at a time. The file is
 * written atomically (a temporary file renamed over `path` once complete,
 * see lib/fs/atomic.ts); `inputs` are the files the content is read from,
 * and `path` naming one of them is refused before anything is written.
 */
export async function writeGGUFFile(
  path: string,
  out: GGUFWriteInput,
  options: AtomicWriteOptions = {},
): Promise<void> {
  const h = encodeGGUFHeader(out);
  await writeFileAtomic(path, async (f) => {
    await writeAll(f, h.header);
    for (let i = 0; i < out.tensors.length; i++) {
      const d = await tensorData(out.tensors[i], h.sizes[i]);
      await writeAll(f, d);
      const padding = Math.ceil(d.length / h.alignment) * h.alignment - d.length;
      if (padding) await writeAll(f, new Uint8Array(padding));
    }
  }, options);
}
