/**
 * GGUF validation: each malformed header is refused with a GGUFError naming
 * the field and its byte offset, and llama.cpp's gguf_init_from_file refuses
 * the same file (where llama.cpp has that rule at all).
 */
import assert from "node:assert/strict";
import { GGUFError, GGUFNeedMoreError, parseGGUF, readGGUF } from "../lib/gguf/mod.ts";
import { oracleAccepts } from "./oracle/oracle_gguf.ts";
import { tempFile, tinyFile } from "./gguf_util.ts";

/** Raw little-endian byte builder, so malformed files can be spelled out. */
class B {
  parts: number[] = [];
  u8(v: number) {
    this.parts.push(v & 0xff);
    return this;
  }
  u32(v: number) {
    const b = new Uint8Array(4);
    new DataView(b.buffer).setUint32(0, v >>> 0, true);
    this.parts.push(...b);
    return this;
  }
  u64(v: number | bigint) {
    const b = new Uint8Array(8);
    new DataView(b.buffer).setBigUint64(0, BigInt.asUintN(64, BigInt(v)), true);
    this.parts.push(...b);
    return this;
  }
  str(s: string) {
    const b = new TextEncoder().encode(s);
    return this.u64(b.length).raw(b);
  }
  raw(b: ArrayLike<number>) {
    this.parts.push(...Array.from(b));
    return this;
  }
  get pos(): number {
    return this.parts.length;
  }
  pad(a = 32) {
    while (this.parts.length % a) this.parts.push(0);
    return this;
  }
  bytes(): Uint8Array {
    return Uint8Array.from(this.parts);
  }
}

function head(nTensors: number, nKv: number, version = 3): B {
  return new B().raw([0x47, 0x47, 0x55, 0x46]).u32(version).u64(nTensors).u64(nKv);
}

/** A tensor info: name, dims, type, offset. */
function tinfo(b: B, name: string, ne: (number | bigint)[], type: number, off: number | bigint): B {
  b.str(name).u32(ne.length);
  for (const d of ne) b.u64(d);
  return b.u32(type).u64(off);
}

interface Case {
  name: string;
  bytes: Uint8Array;
  field: RegExp;
  offset?: number;
  message?: RegExp;
  /** What llama.cpp says (oracleAccepts): 0 reject, -1 data out of bounds, 1 accept. */
  llama: number;
}

const cases: Case[] = [];
function add(c: Case) {
  cases.push(c);
}

add({ name: "empty file", bytes: new Uint8Array(0), field: /^magic$/, offset: 0, llama: 0 });
add({
  name: "bad magic",
  bytes: new B().raw([0x47, 0x47, 0x4d, 0x4c]).u32(3).u64(0).u64(0).bytes(),
  field: /^magic$/,
  message: /GGML/,
  offset: 0,
  llama: 0,
});
add({ name: "v1", bytes: head(0, 0, 1).bytes(), field: /^version$/, offset: 4, llama: 0 });
add({ name: "v4", bytes: head(0, 0, 4).bytes(), field: /^version$/, offset: 4, llama: 0 });
add({
  name: "byte-swapped version",
  bytes: head(0, 0, 0x03000000).bytes(),
  field: /^version$/,
  llama: 0,
});
add({
  name: "truncated counts",
  bytes: head(0, 0).bytes().slice(0, 20),
  field: /^n_kv$/,
  offset: 16,
  llama: 0,
});
add({
  name: "huge n_kv",
  bytes: head(0, 2n ** 40n as unknown as number).bytes(),
  field: /^n_kv$/,
  llama: 0,
});
add({ name: "negative n_tensors", bytes: head(-1, 0).bytes(), field: /^n_tensors$/, llama: 0 });
add({
  name: "string length beyond the file",
  bytes: head(0, 1).u64(1000).raw(new Uint8Array(40)).bytes(),
  field: /^kv\[0\]\.key\.length$/,
  offset: 24,
  llama: 0,
});
add({
  name: "string length 2^63",
  bytes: head(0, 1).u64(2n ** 63n).raw(new Uint8Array(40)).bytes(),
  field: /^kv\[0\]\.key\.length$/,
  llama: 0,
});
add({
  name: "empty key",
  bytes: head(0, 1).str("").u32(0).u8(1).raw(new Uint8Array(8)).bytes(),
  field: /^kv\[0\]\.key$/,
  llama: 0,
});
add({
  name: "duplicate key",
  bytes: head(0, 2).str("k").u32(0).u8(1).str("k").u32(0).u8(2).bytes(),
  field: /^kv\[1\]\.key$/,
  offset: 24 + 14,
  message: /duplicate key 'k'/,
  llama: 0,
});
add({
  name: "unknown value type",
  bytes: head(0, 1).str("k").u32(13).u8(1).bytes(),
  field: /^k\.type$/,
  offset: 24 + 9,
  llama: 0,
});
add({
  name: "array count × item size beyond the file",
  bytes: head(0, 1).str("k").u32(9).u32(5).u64(1000).raw([1, 2, 3, 4]).bytes(),
  field: /^k\.count$/,
  offset: 24 + 9 + 8,
  llama: 0,
});
add({
  name: "string array count beyond the file",
  bytes: head(0, 1).str("k").u32(9).u32(8).u64(2n ** 40n).raw([0, 0, 0, 0, 0, 0, 0, 0]).bytes(),
  field: /^k\.count$/,
  llama: 0,
});
add({
  name: "unknown array item type",
  bytes: head(0, 1).str("k").u32(9).u32(99).u64(1).u8(0).bytes(),
  field: /^k\.itemType$/,
  llama: 0,
});
{
  // Nine levels of arrays of arrays, each holding one array.
  const b = head(0, 1).str("k").u32(9);
  for (let i = 0; i < 9; i++) b.u32(9).u64(1);
  b.u32(0).u64(0);
  add({ name: "arrays nested too deep", bytes: b.bytes(), field: /itemType$/, llama: 0 });
}
add({
  name: "general.alignment not u32",
  bytes: head(0, 1).str("general.alignment").u32(5).u32(32).bytes(),
  field: /^general\.alignment$/,
  offset: 24,
  llama: 0,
});
add({
  name: "general.alignment not a power of two",
  bytes: head(0, 1).str("general.alignment").u32(4).u32(48).bytes(),
  field: /^general\.alignment$/,
  llama: 0,
});
add({
  name: "general.alignment zero",
  bytes: head(0, 1).str("general.alignment").u32(4).u32(0).bytes(),
  field: /^general\.alignment$/,
  llama: 0,
});

function withTensors(infos: (b: B) => void, dataBytes: number, n: number): Uint8Array {
  const b = head(n, 0);
  infos(b);
  b.pad();
  b.raw(new Uint8Array(dataBytes));
  return b.bytes();
}

add({
  name: "n_dims 5",
  bytes: withTensors((b) => tinfo(b, "t", [1, 1, 1, 1, 1], 0, 0), 32, 1),
  field: /^t\.n_dims$/,
  offset: 24 + 9,
  llama: 0,
});
add({
  name: "negative dimension",
  bytes: withTensors((b) => tinfo(b, "t", [4, -2], 0, 0), 32, 1),
  field: /^t\.ne\[1\]$/,
  offset: 24 + 9 + 4 + 8,
  llama: 0,
});
add({
  name: "element count overflow",
  bytes: withTensors((b) => tinfo(b, "t", [2n ** 40n + 1n, 2n ** 30n], 0, 0), 32, 1),
  field: /^t\.ne\[\d\]$/,
  message: /overflow/,
  llama: 0,
});
add({
  // 2^80 elements wrap to 0 in gguf.cpp's int64 product, which skips its
  // overflow check, so llama.cpp accepts this file; we keep refusing it.
  name: "element count wrapping to zero in 64 bits",
  bytes: withTensors((b) => tinfo(b, "t", [2n ** 40n, 2n ** 40n], 0, 0), 32, 1),
  field: /^t\.ne\[\d\]$/,
  message: /overflow/,
  llama: 1,
});
add({
  name: "unknown ggml type (4, removed Q4_2)",
  bytes: withTensors((b) => tinfo(b, "t", [32], 4, 0), 32, 1),
  field: /^t\.type$/,
  message: /unknown ggml type id 4/,
  llama: 0,
});
add({
  name: "unknown ggml type 43",
  bytes: withTensors((b) => tinfo(b, "t", [32], 43, 0), 32, 1),
  field: /^t\.type$/,
  message: /id 43/,
  llama: 0,
});
add({
  name: "row not a multiple of the block size",
  bytes: withTensors((b) => tinfo(b, "t", [30], 2, 0), 64, 1),
  field: /^t\.ne\[0\]$/,
  message: /block size 32/,
  llama: 0,
});
add({
  name: "tensor name too long",
  bytes: withTensors((b) => tinfo(b, "x".repeat(64), [4], 0, 0), 32, 1),
  field: /^tensor\[0\]\.name$/,
  llama: 0,
});
add({
  name: "duplicate tensor names",
  bytes: withTensors(
    (b) => {
      tinfo(b, "t", [4], 0, 0);
      tinfo(b, "t", [4], 0, 32);
    },
    64,
    2,
  ),
  field: /^tensor\[1\]\.name$/,
  message: /duplicate tensor name 't'/,
  llama: 0,
});
add({
  name: "misaligned offset",
  bytes: withTensors(
    (b) => {
      tinfo(b, "a", [4], 0, 0);
      tinfo(b, "b", [4], 0, 16);
    },
    64,
    2,
  ),
  field: /^b\.offset$/,
  message: /not a multiple of alignment 32/,
  llama: 0,
});
add({
  name: "overlapping tensors",
  bytes: withTensors(
    (b) => {
      tinfo(b, "a", [16], 0, 0);
      tinfo(b, "b", [4], 0, 32);
    },
    96,
    2,
  ),
  field: /^b\.offset$/,
  message: /overlaps/,
  llama: 0,
});
add({
  name: "swapped offsets",
  bytes: withTensors(
    (b) => {
      tinfo(b, "a", [4], 0, 32);
      tinfo(b, "b", [4], 0, 0);
    },
    64,
    2,
  ),
  field: /^a\.offset$/,
  llama: 0,
});
add({
  name: "tensor data beyond the end of the file",
  bytes: withTensors((b) => tinfo(b, "t", [16], 0, 0), 32, 1),
  field: /^t\.offset$/,
  message: /outside the file/,
  llama: -1,
});
add({
  name: "tensor offset beyond the end of the file",
  bytes: withTensors((b) => tinfo(b, "t", [4], 0, 2n ** 62n), 32, 1),
  field: /^t\.offset$/,
  llama: 0,
});
add({
  name: "data section beyond the file",
  bytes: (() => {
    const b = head(1, 0);
    tinfo(b, "t", [4], 0, 0);
    return b.bytes();
  })(),
  field: /^data$/,
  llama: 0,
});

for (const c of cases) {
  Deno.test(`gguf validate: ${c.name}`, async () => {
    let err: unknown;
    try {
      parseGGUF(c.bytes, { path: "case.gguf", fileSize: c.bytes.length });
    } catch (e) {
      err = e;
    }
    assert.ok(err instanceof GGUFError, `expected GGUFError, got ${err}`);
    assert.ok(!(err instanceof GGUFNeedMoreError), "whole file given: never 'need more'");
    assert.match(err.field, c.field, err.message);
    if (c.offset !== undefined) assert.equal(err.offset, c.offset, err.message);
    if (c.message) assert.match(err.message, c.message);
    assert.match(err.message, /^case\.gguf: byte \d+: /);
    const path = tempFile(c.bytes);
    try {
      await assert.rejects(() => readGGUF(path), GGUFError);
      assert.equal(await oracleAccepts(path), c.llama, "llama.cpp's verdict");
    } finally {
      Deno.removeSync(path);
    }
  });
}

Deno.test("gguf validate: zero dimensions and n_dims 0 are refused (llama.cpp accepts them)", async () => {
  // Kept stricter than gguf.cpp: no writer produces these, and a zero-sized
  // weight can only be a corrupt file.
  for (const ne of [[0], []]) {
    const bytes = withTensors((b) => tinfo(b, "t", ne, 0, 0), 32, 1);
    assert.throws(() => parseGGUF(bytes, { fileSize: bytes.length }), GGUFError);
    const path = tempFile(bytes);
    assert.equal(await oracleAccepts(path), 1);
    Deno.removeSync(path);
  }
});

Deno.test("gguf validate: a prefix gives 'need more bytes', never a wrong answer", () => {
  const file = tinyFile();
  const full = parseGGUF(file, { fileSize: file.length });
  let n = 0;
  for (;; n++) {
    try {
      const h = parseGGUF(file.subarray(0, n), { fileSize: file.length });
      assert.deepEqual(h, full);
      break;
    } catch (e) {
      assert.ok(e instanceof GGUFNeedMoreError, `prefix ${n}: ${e}`);
      assert.ok(e.needed > n && e.needed <= file.length);
    }
  }
  // Parsing needs the tensor infos, not the padding before the data section.
  assert.ok(n <= full.dataOffset && n > full.dataOffset - full.alignment);
});

Deno.test("gguf validate: readGGUF reads only the header of a large file", async () => {
  // A header followed by 64 MiB of zeros: readGGUF must not touch the data.
  const b = head(1, 1).str("general.alignment").u32(4).u32(32);
  tinfo(b, "big", [16 * 1024 * 1024], 0, 0);
  b.pad();
  const path = Deno.makeTempFileSync({ suffix: ".gguf" });
  const f = Deno.openSync(path, { write: true });
  f.writeSync(b.bytes());
  f.truncateSync(b.pos + 64 * 1024 * 1024);
  f.close();
  const before = Deno.memoryUsage().rss;
  const h = await readGGUF(path);
  assert.equal(h.tensors[0].size, 64 * 1024 * 1024);
  assert.ok(Deno.memoryUsage().rss - before < 32 * 1024 * 1024, "did not read the data");
  Deno.removeSync(path);
});
