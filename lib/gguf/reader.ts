/**
 * GGUF header parsing and validation (v2 and v3). Every count and length is
 * checked against what is left of the file before anything sized by it is
 * allocated, so a hostile header cannot make us allocate more than the file.
 *
 * The checks follow llama.cpp's gguf.cpp (including its rule that tensors are
 * packed in order, each at the aligned end of the previous one), with these
 * deliberate differences: arrays of arrays are accepted (to a depth of 8;
 * gguf.cpp has none), zero dimensions and n_dims 0 are refused, element
 * counts are bounded without 64-bit wrap-around, and tensor data must lie
 * inside the file (llama.cpp checks that later, in its model loader).
 *
 * @module
 */
import { GGUFError, GGUFNeedMoreError } from "./error.ts";
import {
  type GGUFArray,
  GGUFHeaderData,
  type GGUFKV,
  type GGUFScalar,
  type GGUFTensorInfo,
  GGUFValueType,
  valueSize,
} from "./header.ts";
import { ggmlTypeInfo } from "../ggml/types.ts";
import { assertRegularFile } from "../fs/atomic.ts";

/** "GGUF" read as a little-endian u32. */
export const GGUF_MAGIC = 0x46554747;
/** Alignment of tensor data when `general.alignment` is absent. */
export const GGUF_DEFAULT_ALIGNMENT = 32;
/** Deepest nesting of arrays of arrays we accept. */
export const GGUF_MAX_ARRAY_DEPTH = 8;
/** llama.cpp's caps on one string's length and one array's item count. */
export const GGUF_MAX_STRING_LENGTH = 1024 * 1024 * 1024;
/** See GGUF_MAX_STRING_LENGTH. */
export const GGUF_MAX_ARRAY_ELEMENTS = 1024 * 1024 * 1024;
/** ggml's GGML_MAX_NAME: tensor names must be shorter than this. */
export const GGML_MAX_NAME = 64;
/** ggml's GGML_MAX_DIMS. */
export const GGML_MAX_DIMS = 4;

// ignoreBOM: a token that is exactly U+FEFF must stay one character.
const dec = new TextDecoder("utf-8", { ignoreBOM: true });
const TWO53 = 2n ** 53n;

/** Options of parseGGUF. */
export interface ParseOptions {
  /** File name for error messages. */
  path?: string;
  /** Size of the whole file; `bytes` may be a prefix of it. */
  fileSize: number;
}

class Cursor {
  pos = 0;
  readonly dv: DataView;
  readonly end: number;

  constructor(readonly bytes: Uint8Array, readonly fileSize: number, readonly path?: string) {
    this.dv = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
    this.end = Math.min(bytes.length, fileSize);
  }

  fail(detail: string, field: string, offset = this.pos): never {
    throw new GGUFError(detail, { path: this.path, offset, field });
  }

  get remaining(): number {
    return this.fileSize - this.pos;
  }

  /**
   * Ensures n bytes at pos exist in the file and in the prefix we were given.
   * `index` (an array item's) and `suffix` complete the field's name, built
   * only for an error: a vocabulary's strings must not each cost a name.
   */
  need(n: number, field: string, index = -1, suffix = ""): void {
    if (n > this.fileSize - this.pos) {
      this.fail(
        `truncated: needs ${n} bytes, the file has ${this.remaining} left`,
        fieldName(field, index, suffix),
      );
    }
    if (this.pos + n > this.end) {
      throw new GGUFNeedMoreError(this.pos + n, {
        path: this.path,
        offset: this.pos,
        field: fieldName(field, index, suffix),
      });
    }
  }

  u32(field: string): number {
    this.need(4, field);
    const v = this.dv.getUint32(this.pos, true);
    this.pos += 4;
    return v;
  }

  i32(field: string): number {
    this.need(4, field);
    const v = this.dv.getInt32(this.pos, true);
    this.pos += 4;
    return v;
  }

  u64(field: string): bigint {
    this.need(8, field);
    const v = this.dv.getBigUint64(this.pos, true);
    this.pos += 8;
    return v;
  }

  i64(field: string): bigint {
    this.need(8, field);
    const v = this.dv.getBigInt64(this.pos, true);
    this.pos += 8;
    return v;
  }

  /** A string: u64 length, then UTF-8 bytes; `index` as for {@link need}. */
  string(field: string, index = -1): string {
    const at = this.pos;
    this.need(8, field, index, ".length");
    // The u64 length as two u32: a BigInt per string was most of the
    // garbage of reading a vocabulary (it grew V8's heap by ~10 MiB).
    const lo = this.dv.getUint32(at, true), hi = this.dv.getUint32(at + 4, true);
    this.pos += 8;
    const n = hi * 2 ** 32 + lo; // exact below 2^53; only compared above that
    if (n > GGUF_MAX_STRING_LENGTH || n > this.remaining) {
      const len = (BigInt(hi) << 32n) | BigInt(lo);
      this.fail(
        n > GGUF_MAX_STRING_LENGTH
          ? `string length ${len} exceeds the 1 GiB maximum`
          : `string length ${len} exceeds the ${this.remaining} bytes left in the file`,
        fieldName(field, index, ".length"),
        at,
      );
    }
    this.need(n, field, index);
    const v = this.bytes.subarray(this.pos, this.pos + n);
    // A copy when the file lies in shared WebAssembly memory (the threaded
    // build): browsers' TextDecoder refuses shared views.
    const s = dec.decode(v.buffer instanceof ArrayBuffer ? v : v.slice());
    this.pos += n;
    return s;
  }
}

function fieldName(field: string, index: number, suffix: string): string {
  return index < 0 ? field + suffix : `${field}[${index}]${suffix}`;
}

function scalar(c: Cursor, type: number, field: string): GGUFScalar {
  const size = valueSize(type);
  if (type === GGUFValueType.STRING) return c.string(field);
  c.need(size, field);
  const dv = c.dv, p = c.pos;
  c.pos += size;
  switch (type) {
    case GGUFValueType.UINT8:
      return dv.getUint8(p);
    case GGUFValueType.INT8:
      return dv.getInt8(p);
    case GGUFValueType.UINT16:
      return dv.getUint16(p, true);
    case GGUFValueType.INT16:
      return dv.getInt16(p, true);
    case GGUFValueType.UINT32:
      return dv.getUint32(p, true);
    case GGUFValueType.INT32:
      return dv.getInt32(p, true);
    case GGUFValueType.FLOAT32:
      return dv.getFloat32(p, true);
    case GGUFValueType.BOOL:
      return dv.getInt8(p) !== 0;
    case GGUFValueType.UINT64:
      return dv.getBigUint64(p, true);
    case GGUFValueType.INT64:
      return dv.getBigInt64(p, true);
    case GGUFValueType.FLOAT64:
      return dv.getFloat64(p, true);
  }
  return c.fail(`unknown value type ${type}`, field, p);
}

const TYPED: Record<number, { new (b: ArrayBuffer): GGUFArray["values"] }> = {
  [GGUFValueType.UINT8]: Uint8Array,
  [GGUFValueType.INT8]: Int8Array,
  [GGUFValueType.UINT16]: Uint16Array,
  [GGUFValueType.INT16]: Int16Array,
  [GGUFValueType.UINT32]: Uint32Array,
  [GGUFValueType.INT32]: Int32Array,
  [GGUFValueType.FLOAT32]: Float32Array,
  [GGUFValueType.UINT64]: BigUint64Array,
  [GGUFValueType.INT64]: BigInt64Array,
  [GGUFValueType.FLOAT64]: Float64Array,
};

function isValueType(t: number): boolean {
  return Number.isInteger(t) && t >= 0 && t <= 12;
}

function array(c: Cursor, field: string, depth: number): GGUFArray {
  const at = c.pos;
  const itemType = c.u32(`${field}.itemType`);
  if (!isValueType(itemType)) {
    c.fail(`unknown array item type ${itemType}`, `${field}.itemType`, at);
  }
  if (itemType === GGUFValueType.ARRAY && depth + 1 >= GGUF_MAX_ARRAY_DEPTH) {
    c.fail(`arrays nested deeper than ${GGUF_MAX_ARRAY_DEPTH}`, `${field}.itemType`, at);
  }
  const countAt = c.pos;
  const count = c.u64(`${field}.count`);
  if (count > BigInt(GGUF_MAX_ARRAY_ELEMENTS)) {
    c.fail(`array count ${count} exceeds the 2^30 maximum`, `${field}.count`, countAt);
  }
  // The least bytes one item can take: a fixed-size value, a string's length
  // prefix, or a nested array's type and count.
  const minItem = itemType === GGUFValueType.STRING
    ? 8
    : itemType === GGUFValueType.ARRAY
    ? 12
    : valueSize(itemType);
  if (count * BigInt(minItem) > BigInt(c.remaining)) {
    c.fail(
      `array count ${count} × ${minItem} bytes exceeds the ${c.remaining} bytes left in the file`,
      `${field}.count`,
      countAt,
    );
  }
  const n = Number(count);
  if (itemType === GGUFValueType.STRING) {
    const values: string[] = [];
    for (let i = 0; i < n; i++) values.push(c.string(field, i));
    return { itemType, values };
  }
  if (itemType === GGUFValueType.ARRAY) {
    const values: GGUFArray[] = [];
    for (let i = 0; i < n; i++) values.push(array(c, `${field}[${i}]`, depth + 1));
    return { itemType, values };
  }
  c.need(n * minItem, field);
  const raw = c.bytes.slice(c.pos, c.pos + n * minItem);
  c.pos += n * minItem;
  if (itemType === GGUFValueType.BOOL) return { itemType, values: Array.from(raw, (b) => b !== 0) };
  return { itemType, values: new TYPED[itemType](raw.buffer) };
}

function pad(x: number, a: number): number {
  return Math.ceil(x / a) * a;
}

/**
 * Parses a GGUF header from `bytes`, a prefix of a file of `opts.fileSize`
 * bytes. Throws GGUFError on anything malformed, or GGUFNeedMoreError (a
 * GGUFError) when the header runs past the prefix.
 */
export function parseGGUF(bytes: Uint8Array, opts: ParseOptions): GGUFHeaderData {
  const fileSize = opts.fileSize;
  if (!Number.isSafeInteger(fileSize) || fileSize < 0) {
    throw new GGUFError(`bad file size ${fileSize}`, { path: opts.path, offset: 0, field: "file" });
  }
  const c = new Cursor(bytes, fileSize, opts.path);

  const magic = c.u32("magic");
  if (magic !== GGUF_MAGIC) {
    const shown = [0, 1, 2, 3].map((i) => {
      const b = (magic >>> (8 * i)) & 0xff;
      return b >= 0x20 && b < 0x7f ? String.fromCharCode(b) : "?";
    }).join("");
    c.fail(`bad magic '${shown}', expected 'GGUF'`, "magic", 0);
  }
  const version = c.u32("version");
  if (version === 0 || (version & 0xffff) === 0) {
    c.fail(`bad version ${version} (byte order mismatch?)`, "version", 4);
  }
  if (version === 1) c.fail("GGUF v1 is not supported (only v2 and v3)", "version", 4);
  if (version > 3) c.fail(`version ${version} is newer than 3`, "version", 4);

  const nTensors = c.i64("n_tensors");
  const nKv = c.i64("n_kv");
  // Cheapest possible kv: 8-byte length + 1-byte key + 4-byte type + 1-byte value.
  // Cheapest tensor info: 8-byte length + 4 n_dims + 8 ne + 4 type + 8 offset.
  if (nTensors < 0n || nTensors * 32n > BigInt(c.remaining)) {
    c.fail(`tensor count ${nTensors} cannot fit in the ${c.remaining} bytes left`, "n_tensors", 8);
  }
  if (nKv < 0n || nKv * 14n > BigInt(c.remaining)) {
    c.fail(`key/value count ${nKv} cannot fit in the ${c.remaining} bytes left`, "n_kv", 16);
  }

  const kv: GGUFKV[] = [];
  const kvOffsets: number[] = [];
  const keys = new Set<string>();
  for (let i = 0; i < Number(nKv); i++) {
    const at = c.pos;
    const key = c.string(`kv[${i}].key`);
    if (key.length === 0) c.fail("empty key", `kv[${i}].key`, at);
    if (keys.has(key)) c.fail(`duplicate key '${key}'`, `kv[${i}].key`, at);
    keys.add(key);
    const typeAt = c.pos;
    const type = c.u32(`${key}.type`);
    if (!isValueType(type)) c.fail(`unknown value type ${type}`, `${key}.type`, typeAt);
    const value = type === GGUFValueType.ARRAY ? array(c, key, 0) : scalar(c, type, key);
    kv.push({ key, type, value });
    kvOffsets.push(at);
  }

  let alignment = GGUF_DEFAULT_ALIGNMENT;
  const ai = kv.findIndex((p) => p.key === "general.alignment");
  if (ai >= 0) {
    const a = kv[ai];
    if (a.type !== GGUFValueType.UINT32) {
      c.fail("general.alignment must be of type u32", "general.alignment", kvOffsets[ai]);
    }
    alignment = a.value as number;
    if (alignment === 0 || (alignment & (alignment - 1)) !== 0) {
      c.fail(`alignment ${alignment} is not a power of two`, "general.alignment", kvOffsets[ai]);
    }
  }

  interface Pending {
    name: string;
    ne: number[];
    type: number;
    offset: number;
    size: number;
    at: number;
  }
  const pending: Pending[] = [];
  const names = new Set<string>();
  for (let i = 0; i < Number(nTensors); i++) {
    const f = `tensor[${i}]`;
    const at = c.pos;
    const name = c.string(`${f}.name`);
    if (new TextEncoder().encode(name).length >= GGML_MAX_NAME) {
      c.fail(`name '${name}' is longer than ${GGML_MAX_NAME - 1} bytes`, `${f}.name`, at);
    }
    if (names.has(name)) c.fail(`duplicate tensor name '${name}'`, `${f}.name`, at);
    names.add(name);
    const dimsAt = c.pos;
    const nDims = c.u32(`${name}.n_dims`);
    if (nDims === 0 || nDims > GGML_MAX_DIMS) {
      c.fail(`n_dims ${nDims} is not in 1..${GGML_MAX_DIMS}`, `${name}.n_dims`, dimsAt);
    }
    const ne: number[] = [];
    let nel = 1n;
    for (let j = 0; j < nDims; j++) {
      const neAt = c.pos;
      const d = c.i64(`${name}.ne[${j}]`);
      if (d <= 0n) c.fail(`dimension ${d} is not positive`, `${name}.ne[${j}]`, neAt);
      nel *= d;
      // No ggml type packs more than 256 elements per byte, so a larger count
      // cannot fit in the file; this also keeps every product exact in a double.
      if (nel > BigInt(fileSize) * 256n || d >= TWO53) {
        c.fail(`element count overflows the file`, `${name}.ne[${j}]`, neAt);
      }
      ne.push(Number(d));
    }
    const typeAt = c.pos;
    const type = c.i32(`${name}.type`);
    const ti = ggmlTypeInfo(type) ?? c.fail(`unknown ggml type id ${type}`, `${name}.type`, typeAt);
    if (ne[0] % ti.blockSize !== 0) {
      c.fail(
        `row of ${ne[0]} elements is not a multiple of ${ti.name} block size ${ti.blockSize}`,
        `${name}.ne[0]`,
        typeAt,
      );
    }
    const size = (nel / BigInt(ti.blockSize)) * BigInt(ti.typeSize);
    if (size > BigInt(fileSize)) {
      c.fail(`${size} bytes of data cannot fit in the file`, `${name}.ne`, dimsAt);
    }
    const offAt = c.pos;
    const off = c.u64(`${name}.offset`);
    if (off > BigInt(fileSize)) c.fail(`offset ${off} is beyond the file`, `${name}.offset`, offAt);
    pending.push({ name, ne, type, offset: Number(off), size: Number(size), at: offAt });
  }

  // llama.cpp seeks to the aligned data section only when there are tensors.
  const dataOffset = pending.length > 0 ? pad(c.pos, alignment) : c.pos;
  if (dataOffset > fileSize) {
    c.fail(`data section at ${dataOffset} starts beyond the file`, "data", c.pos);
  }
  const tensors: GGUFTensorInfo[] = [];
  // llama.cpp requires tensors to be packed in order, each at the aligned end
  // of the one before; anything else is a gap, an overlap or misalignment.
  let expect = 0;
  for (const p of pending) {
    const field = `${p.name}.offset`;
    if (p.offset % alignment !== 0) {
      c.fail(`offset ${p.offset} is not a multiple of alignment ${alignment}`, field, p.at);
    }
    if (p.offset < expect) {
      c.fail(`data at ${p.offset} overlaps the previous tensor (ends at ${expect})`, field, p.at);
    }
    if (p.offset > expect) {
      c.fail(
        `data at ${p.offset} leaves a gap after the previous tensor (expected ${expect})`,
        field,
        p.at,
      );
    }
    if (dataOffset + p.offset + p.size > fileSize) {
      c.fail(
        `data [${dataOffset + p.offset}, ${
          dataOffset + p.offset + p.size
        }) lies outside the file of ${fileSize} bytes`,
        field,
        p.at,
      );
    }
    expect += pad(p.size, alignment);
    tensors.push({
      name: p.name,
      nDims: p.ne.length,
      ne: p.ne,
      type: p.type,
      offset: p.offset,
      size: p.size,
      split: 0,
      fileOffset: dataOffset + p.offset,
    });
  }

  return new GGUFHeaderData({
    path: opts.path ?? "",
    version,
    kv,
    kvOffsets,
    tensors,
    alignment,
    dataOffset,
    fileSize,
  });
}

/**
 * Reads and validates the header of the GGUF file at `path`, reading only
 * as many bytes as the header takes (growing the read when needed). A path
 * that is not a regular file (a FIFO, a directory) throws NotAFileError.
 */
export async function readGGUF(path: string): Promise<GGUFHeaderData> {
  // Opening a FIFO would wait forever for a writer; a directory fails obscurely.
  await assertRegularFile(path);
  using file = await Deno.open(path, { read: true });
  const fileSize = (await file.stat()).size;
  let buf = new Uint8Array(Math.min(fileSize, 1 << 18));
  let have = await fill(file, buf, 0);
  for (;;) {
    try {
      return parseGGUF(buf.subarray(0, have), { path, fileSize });
    } catch (e) {
      if (!(e instanceof GGUFNeedMoreError) || have < buf.length) throw e;
      const next = new Uint8Array(Math.min(fileSize, Math.max(e.needed, buf.length * 2)));
      next.set(buf);
      buf = next;
      have = await fill(file, buf, have);
    }
  }
}

/** Reads into buf from `from` until full or EOF; returns bytes held. */
async function fill(file: Deno.FsFile, buf: Uint8Array, from: number): Promise<number> {
  await file.seek(from, Deno.SeekMode.Start);
  let have = from;
  while (have < buf.length) {
    const n = await file.read(buf.subarray(have));
    if (n === null || n === 0) break;
    have += n;
  }
  return have;
}
