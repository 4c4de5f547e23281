/**
 * GGUF reader/writer acceptance: every shared GGUF parses exactly as
 * llama.cpp's gguf API reports it, and read→write reproduces it byte for byte.
 */
import assert from "node:assert/strict";
import { basename, join } from "node:path";
import {
  type GGUFArray,
  GGUFError,
  type GGUFKV,
  GGUFValueType,
  openGGUF,
  parseGGUF,
  readGGUF,
  splitPath,
  writeGGUF,
  writeGGUFFile,
} from "../lib/gguf/mod.ts";
import { oracleAccepts, oracleReadGGUF } from "./oracle/oracle_gguf.ts";
import { loadOracle } from "./oracle/oracle.ts";
import { sharedGGUFs, tempFile, tinyFile, TOLSTOY } from "./gguf_util.ts";

const FILES = sharedGGUFs();

function decodeScalar(type: number, raw: Uint8Array): number | bigint | boolean {
  const dv = new DataView(raw.buffer, raw.byteOffset, raw.byteLength);
  switch (type) {
    case 0:
      return dv.getUint8(0);
    case 1:
      return dv.getInt8(0);
    case 2:
      return dv.getUint16(0, true);
    case 3:
      return dv.getInt16(0, true);
    case 4:
      return dv.getUint32(0, true);
    case 5:
      return dv.getInt32(0, true);
    case 6:
      return dv.getFloat32(0, true);
    case 7:
      return dv.getInt8(0) !== 0;
    case 10:
      return dv.getBigUint64(0, true);
    case 11:
      return dv.getBigInt64(0, true);
    case 12:
      return dv.getFloat64(0, true);
  }
  throw new Error(`type ${type}`);
}

function arrayBytes(a: GGUFArray): Uint8Array {
  if (a.itemType === GGUFValueType.BOOL) {
    return Uint8Array.from(a.values as boolean[], (b) => (b ? 1 : 0));
  }
  const v = a.values as Uint8Array;
  return new Uint8Array(v.buffer, v.byteOffset, v.byteLength);
}

Deno.test("gguf: the shared fixtures exist", () => {
  assert.ok(FILES.length >= 3, `found ${FILES.length} GGUFs under ../shared`);
  assert.ok(FILES.some((f) => basename(f) === "tolstoy-6m-f32.gguf"));
});

for (const file of FILES) {
  Deno.test(`gguf: ${basename(file)} parses as llama.cpp reports it`, async () => {
    const h = await readGGUF(file);
    const o = await oracleReadGGUF(file);
    assert.ok(o, "llama.cpp rejects the file");
    assert.equal(h.version, o.version);
    assert.equal(h.alignment, o.alignment);
    assert.equal(h.dataOffset, o.dataOffset);
    assert.equal(h.fileSize, Deno.statSync(file).size);
    assert.deepEqual(h.kv.map((k) => k.key), o.kv.map((k) => k.key));
    h.kv.forEach((kv, i) => {
      const ok = o.kv[i];
      assert.equal(kv.type, ok.type, kv.key);
      if (kv.type === GGUFValueType.STRING) assert.equal(kv.value, ok.str, kv.key);
      else if (kv.type === GGUFValueType.ARRAY) {
        const a = kv.value as GGUFArray;
        assert.equal(a.itemType, ok.arrType, kv.key);
        if (a.itemType === GGUFValueType.STRING) assert.deepEqual(a.values, ok.strs, kv.key);
        else assert.deepEqual(arrayBytes(a), ok.raw, kv.key);
      } else {
        const want = decodeScalar(kv.type, ok.raw!);
        assert.ok(Object.is(kv.value, want), `${kv.key}: ${kv.value} vs ${want}`);
      }
    });
    assert.equal(h.tensors.length, o.tensors.length);
    h.tensors.forEach((t, i) => {
      const ot = o.tensors[i];
      assert.equal(t.name, ot.name);
      assert.equal(t.type, ot.type, t.name);
      assert.equal(t.offset, ot.offset, t.name);
      assert.equal(t.size, ot.size, t.name);
      assert.equal(t.fileOffset, o.dataOffset + ot.offset, t.name);
      assert.deepEqual([...t.ne, 1, 1, 1, 1].slice(0, 4), ot.ne, t.name);
      assert.ok(t.nDims >= ot.nDims, t.name);
      assert.equal(h.tensor(t.name), t);
    });
  });

  Deno.test(`gguf: ${basename(file)} read→write is byte-identical`, async () => {
    using m = await openGGUF(file);
    const h = m.header;
    const out = writeGGUF({
      version: h.version,
      kv: h.kv,
      tensors: h.tensors.map((t) => ({
        name: t.name,
        type: t.type,
        ne: t.ne,
        data: m.tensorBytes(t.name),
      })),
    });
    const orig = await Deno.readFile(file);
    assert.equal(out.length, orig.length);
    assert.ok(out.every((b, i) => b === orig[i]), "bytes differ");
  });
}

Deno.test("gguf: tensor data is a zero-copy view of a native memory map", async () => {
  using m = await openGGUF(TOLSTOY);
  const t = m.header.tensors[0];
  const ref = m.tensorRef(t.name);
  assert.equal(ref.buffer.backend, "host");
  assert.ok(ref.buffer.ptr !== null, "mapped buffer has a native address");
  assert.equal(ref.buffer.size, m.header.fileSize);
  assert.equal(ref.offset, t.fileOffset);
  const bytes = m.tensorBytes(t.name);
  assert.equal(bytes.buffer, ref.buffer.bytes.buffer, "same backing store as the map");
  using f = await Deno.open(TOLSTOY);
  await f.seek(t.fileOffset, Deno.SeekMode.Start);
  const want = new Uint8Array(t.size);
  let got = 0;
  while (got < want.length) got += (await f.read(want.subarray(got)))!;
  assert.deepEqual(bytes, want);
});

Deno.test("gguf: typed accessors", async () => {
  const h = await readGGUF(TOLSTOY);
  const o = await oracleReadGGUF(TOLSTOY);
  const arch = h.string("general.architecture");
  assert.equal(arch, o!.kv.find((k) => k.key === "general.architecture")!.str);
  assert.equal(typeof h.number(`${arch}.block_count`), "number");
  assert.equal(h.number("no.such.key", 7), 7);
  assert.equal(h.string("no.such.key", "x"), "x");
  assert.throws(() => h.string("no.such.key"), GGUFError);
  assert.throws(() => h.number("general.architecture"), GGUFError);
  const tokens = h.strings("tokenizer.ggml.tokens");
  assert.ok(tokens && tokens.length > 0);
  assert.equal(h.strings("no.such.key"), undefined);
  const big = parseGGUF(
    writeGGUF({
      kv: [{ key: "big", type: GGUFValueType.UINT64, value: 2n ** 60n }, {
        key: "ok",
        type: GGUFValueType.UINT64,
        value: 12345n,
      }],
      tensors: [],
    }),
    { fileSize: 1 << 20 },
  );
  assert.throws(() => big.number("big"), GGUFError);
  assert.equal(big.number("ok"), 12345);
});

/** One pair of every value type, arrays of each, and a nested array. */
function allTypesKV(nested: boolean): GGUFKV[] {
  const kv: GGUFKV[] = [
    { key: "t.u8", type: 0, value: 250 },
    { key: "t.i8", type: 1, value: -5 },
    { key: "t.u16", type: 2, value: 65000 },
    { key: "t.i16", type: 3, value: -30000 },
    { key: "t.u32", type: 4, value: 4000000000 },
    { key: "t.i32", type: 5, value: -2000000000 },
    { key: "t.f32", type: 6, value: Math.fround(1.5e-3) },
    { key: "t.bool", type: 7, value: true },
    { key: "t.str", type: 8, value: "héllo \ufeff" },
    { key: "t.u64", type: 10, value: 2n ** 63n + 5n },
    { key: "t.i64", type: 11, value: -(2n ** 62n) },
    { key: "t.f64", type: 12, value: Math.PI },
    { key: "a.u8", type: 9, value: { itemType: 0, values: Uint8Array.of(1, 2, 255) } },
    { key: "a.i16", type: 9, value: { itemType: 3, values: Int16Array.of(-1, 2) } },
    { key: "a.f32", type: 9, value: { itemType: 6, values: Float32Array.of(0.25, -8) } },
    { key: "a.bool", type: 9, value: { itemType: 7, values: [true, false, true] } },
    { key: "a.str", type: 9, value: { itemType: 8, values: ["a", "", "ünï"] } },
    {
      key: "a.u64",
      type: 9,
      value: { itemType: 10, values: BigUint64Array.of(1n, 2n ** 64n - 1n) },
    },
    { key: "a.f64", type: 9, value: { itemType: 12, values: Float64Array.of(1e300) } },
    { key: "a.empty", type: 9, value: { itemType: 5, values: new Int32Array(0) } },
  ];
  if (nested) {
    kv.push({
      key: "a.nested",
      type: 9,
      value: {
        itemType: 9,
        values: [
          { itemType: 5, values: Int32Array.of(1, 2) },
          { itemType: 8, values: ["x"] },
          { itemType: 9, values: [{ itemType: 0, values: Uint8Array.of(9) }] },
        ],
      },
    });
  }
  return kv;
}

Deno.test("gguf: all 13 value types round-trip, and llama.cpp reads them the same", async () => {
  for (const version of [2, 3]) {
    const bytes = tinyFile({ version, kv: allTypesKV(false) });
    const h = parseGGUF(bytes, { fileSize: bytes.length });
    assert.equal(h.version, version);
    assert.deepEqual(h.kv, allTypesKV(false));
    const path = tempFile(bytes);
    const o = await oracleReadGGUF(path);
    assert.ok(o, `llama.cpp reads our v${version} file`);
    assert.equal(o.version, version);
    assert.deepEqual(o.kv.map((k) => k.key), h.kv.map((k) => k.key));
    assert.deepEqual(o.kv.find((k) => k.key === "a.str")!.strs, ["a", "", "ünï"]);
    assert.equal(o.kv.find((k) => k.key === "t.str")!.str, "héllo \ufeff");
    assert.equal(decodeScalar(10, o.kv.find((k) => k.key === "t.u64")!.raw!), 2n ** 63n + 5n);
    assert.equal(o.tensors.length, 2);
    Deno.removeSync(path);
  }
});

Deno.test("gguf: arrays of arrays are read and written (llama.cpp itself rejects them)", async () => {
  const bytes = tinyFile({ kv: allTypesKV(true) });
  const h = parseGGUF(bytes, { fileSize: bytes.length });
  assert.deepEqual(h.kv, allTypesKV(true));
  const again = writeGGUF({
    kv: h.kv,
    tensors: h.tensors.map((t) => ({
      ...t,
      data: bytes.subarray(t.fileOffset, t.fileOffset + t.size),
    })),
  });
  assert.deepEqual(again, bytes);
  const path = tempFile(bytes);
  assert.equal(await oracleAccepts(path), 0, "llama.cpp's gguf.cpp has no nested arrays");
  Deno.removeSync(path);
});

Deno.test("gguf: streaming writer equals the in-memory writer", async () => {
  const h = await readGGUF(TOLSTOY);
  using m = await openGGUF(TOLSTOY);
  const path = Deno.makeTempFileSync({ suffix: ".gguf" });
  await writeGGUFFile(path, {
    kv: h.kv,
    tensors: h.tensors.map((t) => ({ ...t, data: () => m.tensorBytes(t.name) })),
  });
  const a = await Deno.readFile(path);
  const b = await Deno.readFile(TOLSTOY);
  assert.equal(a.length, b.length);
  assert.ok(a.every((x, i) => x === b[i]));
  Deno.removeSync(path);
});

Deno.test("gguf: split files merge, and llama.cpp loads the same split set", async () => {
  const h = await readGGUF(TOLSTOY);
  using m = await openGGUF(TOLSTOY);
  const dir = Deno.makeTempDirSync();
  const prefix = join(dir, "tolstoy");
  const n = 3;
  const parts: (typeof h.tensors)[] = [[], [], []];
  h.tensors.forEach((t, i) => parts[Math.floor((i * n) / h.tensors.length)].push(t));
  for (let s = 0; s < n; s++) {
    const splitKv: GGUFKV[] = [
      { key: "split.no", type: GGUFValueType.UINT16, value: s },
      { key: "split.count", type: GGUFValueType.UINT16, value: n },
      { key: "split.tensors.count", type: GGUFValueType.INT32, value: h.tensors.length },
    ];
    await writeGGUFFile(splitPath(prefix, s, n), {
      kv: s === 0 ? [...h.kv, ...splitKv] : splitKv,
      tensors: parts[s].map((t) => ({ ...t, data: () => m.tensorBytes(t.name) })),
    });
  }
  {
    using sm = await openGGUF(splitPath(prefix, 0, n));
    assert.equal(sm.paths.length, n);
    assert.deepEqual(sm.header.tensors.map((t) => t.name), h.tensors.map((t) => t.name));
    assert.deepEqual(
      sm.header.tensors.map((t) => t.split),
      parts.flatMap((p, s) => p.map(() => s)),
    );
    for (const t of h.tensors) assert.deepEqual(sm.tensorBytes(t.name), m.tensorBytes(t.name));
  }
  // llama.cpp finds the other splits itself from the first one's name.
  const oracle = await loadOracle();
  const prompt = [1, 100, 200, 300];
  const logits = (p: string) => {
    using model = oracle.load(p);
    using ctx = model.context({ nCtx: 64 });
    return ctx.decode(prompt)[0];
  };
  assert.deepEqual(logits(splitPath(prefix, 0, n)), logits(TOLSTOY));
  await assert.rejects(() => openGGUF(splitPath(prefix, 1, n)), GGUFError);
  Deno.removeSync(splitPath(prefix, 2, n));
  await assert.rejects(() => openGGUF(splitPath(prefix, 0, n)));
  Deno.removeSync(dir, { recursive: true });
});
