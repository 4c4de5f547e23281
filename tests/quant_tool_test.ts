/**
 * Our quantize tool against llama_model_quantize on tolstoy-6m: the same type
 * for every tensor and byte-identical tensor data (so the K-quant RMSE
 * against llama.cpp's files is 0), general.file_type set, and llama.cpp loads
 * the result and decodes the same greedy tokens as from its own file.
 */
import assert from "node:assert/strict";
import { openGGUF } from "../lib/gguf/mod.ts";
import { quantizeModel } from "../lib/quant/quantize.ts";
import { QUANT_PRESETS } from "../lib/quant/rules.ts";
import { loadOracle } from "./oracle/oracle.ts";
import {
  assertSameGreedy,
  type FTYPE,
  llamaQuantized,
  QUANT_DIR,
  TOLSTOY_F32,
} from "./quant_util.ts";

// All 11 presets were checked byte-identical by hand; CI keeps the mixes and a
// legacy/K pair to stay fast.
const PRESETS: [string, keyof typeof FTYPE][] = [
  ["q8_0", "Q8_0"],
  ["q5_1", "Q5_1"],
  ["q2_k", "Q2_K"],
  ["q4_k_m", "Q4_K_M"],
  ["q5_k_m", "Q5_K_M"],
];

for (const [ours, theirs] of PRESETS) {
  Deno.test(`quantize ${ours}: same tensors and bytes as llama.cpp, loads in llama.cpp`, async () => {
    const want = await llamaQuantized(theirs);
    await Deno.mkdir(QUANT_DIR, { recursive: true });
    const out = `${QUANT_DIR}/tolstoy-6m-ours-${ours}.gguf`;
    let progress = 0;
    await quantizeModel(TOLSTOY_F32, out, ours, { onProgress: () => progress++ });
    using a = await openGGUF(out);
    using b = await openGGUF(want);
    assert.equal(progress, a.header.tensors.length);
    assert.equal(a.header.number("general.file_type"), QUANT_PRESETS.get(ours)!.ftype);
    // llama.cpp reorders tensors (output first, then by layer); compare by name
    const types = (f: typeof a) =>
      new Map(f.header.tensors.map((t) => [t.name, t.type] as [string, number]));
    assert.deepEqual(types(a), types(b));
    for (const t of a.header.tensors) {
      assert.deepEqual(a.tensorBytes(t.name), b.tensorBytes(t.name), `${ours} ${t.name}`);
    }
    const oracle = await loadOracle();
    using m1 = oracle.load(out);
    using m2 = oracle.load(want);
    using c1 = m1.context({ nCtx: 128 });
    using c2 = m2.context({ nCtx: 128 });
    const prompt = m1.tokenize("The prince said that", { addSpecial: true });
    assert.deepEqual(c1.greedy(prompt, 16).tokens, c2.greedy(prompt, 16).tokens);
    // and our engine's greedy tokens on our file equal llama.cpp's on it
    await assertSameGreedy(out, `ours ${ours}`);
  });
}
