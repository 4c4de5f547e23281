/**
 * Model.load rejects bad files the way llama.cpp's loader does, with one
 * ModelError naming the file and the key or tensor, at load time: each case
 * is a small random llama with one thing broken (written with the GGUF
 * writer in a temp dir). Before these checks a mamba file failed with
 * "embedding_length ... is not a multiple of head_count 0", and bad rope
 * dimensions, norm epsilons, rope bases or integer weights loaded and
 * failed later in the graph or produced garbage.
 */
import { SUPPORTED_ARCHS } from "../lib/model/arch/registry.ts";
import assert from "node:assert/strict";
import { join } from "node:path";
import { Model, ModelError } from "../mod.ts";
import { type GGUFKV, GGUFValueType, openGGUF, writeGGUFFile } from "../lib/gguf/mod.ts";
import type { GGUFWriteTensor } from "../lib/gguf/writer.ts";
import { GGMLType } from "../lib/ggml/types.ts";
import { writeRandomLlama } from "../lib/model/random.ts";

const DIR = Deno.makeTempDirSync({ prefix: "llm-edge-validate-" });
const SHAPE = { nEmbd: 64, nLayer: 2, nHead: 4, nHeadKv: 2, nFF: 128, nVocab: 64, nCtxTrain: 128 };
const F32_MODEL = join(DIR, "base-f32.gguf");
const Q8_MODEL = join(DIR, "base-q8_0.gguf");
await writeRandomLlama(F32_MODEL, { ...SHAPE, type: "f32" });
await writeRandomLlama(Q8_MODEL, { ...SHAPE, type: "q8_0" });

interface Edit {
  kv?: (kv: GGUFKV[]) => GGUFKV[];
  tensor?: (t: GGUFWriteTensor) => GGUFWriteTensor;
}

let n = 0;
/** A copy of `base` with `edit` applied; returns its path. */
async function variant(edit: Edit, base = F32_MODEL): Promise<string> {
  using src = await openGGUF(base);
  const h = src.header;
  const kv = (edit.kv ?? ((x) => x))(h.kv.filter((x) => x.key !== "general.alignment"));
  const tensors = h.tensors.map((t) => {
    const w: GGUFWriteTensor = {
      name: t.name,
      type: t.type,
      ne: [...t.ne],
      data: src.tensorBytes(t.name).slice(),
    };
    return edit.tensor ? edit.tensor(w) : w;
  });
  const path = join(DIR, `variant-${n++}.gguf`);
  await writeGGUFFile(path, { kv, tensors });
  return path;
}

const setKv = (key: string, type: number, value: number | string) => (kv: GGUFKV[]) => [
  ...kv.filter((x) => x.key !== key),
  { key, type, value } as GGUFKV,
];
const f32Kv = (key: string, value: number) => setKv(key, GGUFValueType.FLOAT32, value);
const u32Kv = (key: string, value: number) => setKv(key, GGUFValueType.UINT32, value);

/** Asserts Model.load(path) rejects with one ModelError line naming the file and `parts`. */
async function rejectsLoad(path: string, parts: (string | RegExp)[], opts = {}) {
  await assert.rejects(() => Model.load(path, opts), (e: unknown) => {
    assert.ok(e instanceof ModelError, `not a ModelError: ${e}`);
    assert.ok(e.message.startsWith(`${path}: `), e.message);
    assert.ok(!e.message.includes("\n"), e.message);
    for (const p of parts) {
      if (typeof p === "string") assert.ok(e.message.includes(p), `${e.message} lacks ${p}`);
      else assert.match(e.message, p);
    }
    return true;
  });
}

Deno.test("validate: the unmodified small llama loads and the data scan passes", async () => {
  using m = await Model.load(F32_MODEL, { validate: "data" });
  assert.equal(m.hparams.nEmbd, 64);
  using q = await Model.load(Q8_MODEL, { validate: "data" });
  assert.equal(q.weightRefs.find((r) => r.name === "blk.0.attn_q.weight")!.type, GGMLType.Q8_0);
});

Deno.test("validate: an unsupported architecture is named before any key is read", async () => {
  // An rwkv6-like file: llama keys renamed and no attention heads.
  const path = await variant({
    kv: (kv) =>
      u32Kv("rwkv6.attention.head_count", 0)(
        kv.map((x) =>
          x.key === "general.architecture"
            ? { ...x, value: "rwkv6" }
            : x.key.startsWith("llama.")
            ? { ...x, key: "rwkv6." + x.key.slice(6) }
            : x
        ),
      ),
  });
  await rejectsLoad(path, [
    `architecture 'rwkv6' is not supported (supported: ${SUPPORTED_ARCHS.join(", ")})`,
  ]);
});

Deno.test("validate: zero heads and bad rope dimensions name their keys", async () => {
  await rejectsLoad(await variant({ kv: u32Kv("llama.attention.head_count", 0) }), [
    "llama.attention.head_count = 0",
  ]);
  for (const dims of [15, 32, 8]) { // odd, more than the head (16), partial for llama
    await rejectsLoad(await variant({ kv: u32Kv("llama.rope.dimension_count", dims) }), [
      `llama.rope.dimension_count = ${dims} is invalid`,
    ]);
  }
});

Deno.test("validate: NaN, negative or zero norm epsilon and bad rope bases are rejected", async () => {
  for (const eps of [NaN, -1e-5, 0]) {
    await rejectsLoad(
      await variant({ kv: f32Kv("llama.attention.layer_norm_rms_epsilon", eps) }),
      [`llama.attention.layer_norm_rms_epsilon = ${eps} is invalid`],
    );
  }
  for (const base of [Infinity, NaN, 0, -10000]) {
    await rejectsLoad(await variant({ kv: f32Kv("llama.rope.freq_base", base) }), [
      `llama.rope.freq_base = ${base} is invalid`,
    ]);
  }
  await rejectsLoad(await variant({ kv: f32Kv("llama.rope.scaling.factor", -2) }), [
    "llama.rope.scaling.factor",
  ]);
});

Deno.test("validate: integer and unusable weight types are named with their tensor", async () => {
  const retype = (name: string, type: number, bytesPer: number) => (t: GGUFWriteTensor) =>
    t.name === name
      ? { ...t, type, data: new Uint8Array(t.ne.reduce((a, b) => a * b, 1) * bytesPer) }
      : t;
  const cases: [string, number, number, string][] = [
    ["blk.0.attn_q.weight", GGMLType.I32, 4, "type i32, which cannot be used as a matrix"],
    ["blk.1.ffn_down.weight", GGMLType.I8, 1, "type i8, which cannot be used as a matrix"],
    ["token_embd.weight", GGMLType.I16, 2, "type i16, which cannot be used as a token embedding"],
    ["blk.0.attn_norm.weight", GGMLType.I32, 4, "type i32, which cannot be used as a norm"],
    ["output_norm.weight", GGMLType.F16, 2, "type f16, which cannot be used as a norm"],
  ];
  for (const [name, type, bytes, want] of cases) {
    await rejectsLoad(await variant({ tensor: retype(name, type, bytes) }), [
      `tensor ${name} has ${want}`,
    ]);
  }
});

Deno.test("validate: a wrong tensor shape is a ModelError at load", async () => {
  const path = await variant({
    tensor: (t) =>
      t.name === "blk.1.attn_k.weight"
        ? { ...t, ne: [64, 16], data: (t.data as Uint8Array).subarray(0, 64 * 16 * 4) }
        : t,
  });
  await rejectsLoad(path, ["tensor blk.1.attn_k.weight has shape [64,16]", "expected [64,32]"]);
});

Deno.test('validate: "data" finds NaN/Inf weights by tensor and index (--check-tensors)', async () => {
  const poison =
    (name: string, at: number, how: (dv: DataView) => void) => (t: GGUFWriteTensor) => {
      if (t.name !== name) return t;
      const data = (t.data as Uint8Array).slice();
      how(new DataView(data.buffer, at));
      return { ...t, data };
    };
  const f32 = await variant({
    tensor: poison("blk.1.ffn_up.weight", 4 * (64 + 37), (dv) => dv.setFloat32(0, NaN, true)),
  });
  // Without the scan the file loads: the check is opt-in, as in llama.cpp.
  (await Model.load(f32))[Symbol.dispose]();
  await rejectsLoad(f32, ["tensor blk.1.ffn_up.weight (f32)", "element 101 (row 1, column 37)"], {
    validate: "data",
  });
  // q8_0: block 2's f16 scale set to +Inf poisons elements 64..95.
  const q8 = await variant({
    tensor: poison("output.weight", 2 * 34, (dv) => dv.setUint16(0, 0x7c00, true)),
  }, Q8_MODEL);
  await rejectsLoad(q8, ["tensor output.weight (q8_0)", "element 64 (row 1, column 0)"], {
    validate: "data",
  });
});
