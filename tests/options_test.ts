/**
 * Public options are checked at the API boundary: each case here once did
 * something silent or cryptic (kvType "q8_0" built as f16, backend "gpu"
 * accepted, NaN token ids decoded as token 0, maxTokens NaN giving 0 tokens,
 * topK NaN repeating token 0, an all -inf logit bias repeating one token) and
 * now throws a typed error naming the option, the value and what is allowed.
 */
import assert from "node:assert/strict";
import { fileURLToPath } from "node:url";
import { Context, generateText, Model, OptionError, SamplingError } from "../mod.ts";
import { samplerChainFromOptions } from "../lib/sample/chain.ts";

const MODEL = fileURLToPath(new URL("../models/tolstoy-6m-f16.gguf", import.meta.url));
// Shared by every test (module-level `using` would dispose before tests run); freed at exit.
const model = await Model.load(MODEL);
const ctx = await Context.create(model, { nCtx: 256, threads: 1 });
const nVocab = model.hparams.nVocab;

/** Asserts `f` rejects with an OptionError on `option` whose message shows `shown`. */
async function rejectsOption(f: () => Promise<unknown>, option: string, shown: string) {
  await assert.rejects(f, (e: unknown) => {
    assert.ok(e instanceof OptionError, `${option}: got ${e}`);
    assert.ok(e instanceof RangeError);
    assert.equal(e.option, option);
    assert.ok(e.message.includes(shown), `${e.message} lacks ${shown}`);
    assert.ok(!e.message.includes("\n"));
    return true;
  });
}

Deno.test("Context.create: bad options are OptionErrors, kvType q8_0 and backend gpu included", async () => {
  const cases: [Record<string, unknown>, string, string][] = [
    [{ nCtx: NaN }, "nCtx", "NaN"],
    [{ nCtx: -1 }, "nCtx", "-1"],
    [{ nCtx: 1.5 }, "nCtx", "1.5"],
    [{ nBatch: 0 }, "nBatch", "0"],
    [{ threads: 0 }, "threads", "1..512"],
    [{ threads: 2.5 }, "threads", "2.5"],
    // was silently built as an f16 cache
    [{ kvType: "q8_0" }, "kvType", `"f16", "f32"`],
    // was accepted (and ran on the CPU)
    [{ backend: "gpu" }, "backend", `"cpu", "ref", "wasm" or { cpuLayers: 0..6 }`],
    [{ backend: { cpuLayers: 99 } }, "backend", "cpuLayers"],
    [{ debugTaps: "l_out-0" }, "debugTaps", "array"],
    // not an option of this engine: ignoring it would hide a typo or a wrong assumption
    [{ nUBatch: 128 }, "options.nUBatch", "nCtx, nBatch"],
    [{ nSeqMax: 0 }, "nSeqMax", "1"],
    [{ nSeqMax: 257 }, "nSeqMax", "256"],
    [{ embeddings: "yes" }, "embeddings", "true or false"],
    [{ flashAttn: true, flashAttnPrecision: "f64" }, "flashAttnPrecision", `"default", "f32"`],
    // f32 is a flash-attention arithmetic: without flashAttn it would change nothing
    [{ flashAttnPrecision: "f32" }, "flashAttnPrecision", "needs flashAttn"],
    [{ matmulOrder: "quick" }, "matmulOrder", `"default", "fast"`],
  ];
  for (const [opts, option, shown] of cases) {
    await rejectsOption(() => Context.create(model, opts), option, shown);
  }
});

Deno.test("Context.decode: NaN, Infinity, 1.5, -1 and nVocab token ids are rejected", async () => {
  // Int32Array.from turned NaN, Infinity and 1.5 into tokens 0, 0 and 1.
  for (const bad of [NaN, Infinity, 1.5, -1, nVocab]) {
    await rejectsOption(() => ctx.decode([1, bad]), "tokens[1]", String(bad));
  }
  await rejectsOption(() => ctx.decode([1], { allLogits: 1 as never }), "allLogits", "1");
  const ok = await ctx.decode([1, 2]);
  assert.equal(ok.logits[0].length, nVocab);
});

Deno.test("Context.decode into: the row lands in the caller's array, same values; misuse is refused", async () => {
  const into = new Float32Array(nVocab);
  for (const [bad, shown] of [[[1, 2], "1,2"], [new Float32Array(3), "3 floats"]] as const) {
    await rejectsOption(() => ctx.decode([1], { into: bad as never }), "into", shown);
  }
  await rejectsOption(() => ctx.decode([1], { into, allLogits: true }), "into", "allLogits");
  using emb = await Context.create(model, { nCtx: 64, threads: 1, embeddings: true });
  await rejectsOption(() => emb.decode([1], { into }), "into", "embeddings");
  ctx.clear();
  const fresh = (await ctx.decode([1, 2, 3])).logits[0].slice();
  ctx.clear();
  const r = await ctx.decode([1, 2, 3], { into });
  assert.equal(r.logits.length, 1);
  assert.equal(r.logits[0], into);
  assert.deepEqual(into, fresh);
  const step = (await ctx.decode([4], { into })).logits[0];
  assert.equal(step, into);
  assert.notDeepEqual(into, fresh); // the next step's row overwrote it
  ctx.clear();
});

Deno.test("decodeBatch and Sequence.evaluate into: rows in the caller's array, same values; misuse is refused", async () => {
  using c2 = await Context.create(model, { nCtx: 256, nSeqMax: 2, threads: 1 });
  const batch = { tokens: [1, 2, 1, 2], seqIds: [0, 0, 1, 1], logits: [false, true, false, true] };
  const plain = (await c2.decodeBatch(batch)).logits.map((r) => r.slice());
  c2.clear();
  const into = new Float32Array(2 * nVocab);
  await rejectsOption(
    () => c2.decodeBatch(batch, { into: new Float32Array(nVocab) }),
    "into",
    `${nVocab} floats`,
  );
  const r = await c2.decodeBatch(batch, { into });
  assert.equal(r.logits.length, 2);
  for (const row of r.logits) assert.equal(row.buffer, into.buffer);
  assert.deepEqual(r.logits.map((x) => x.slice()), plain);
  c2.clear();
  using a = c2.sequence();
  using b = c2.sequence();
  const row = new Float32Array(nVocab);
  const [ra, rb] = await Promise.all([a.evaluate([1, 2], { into: row }), b.evaluate([1, 2])]);
  assert.equal(ra.logits[0], row);
  assert.deepEqual(row, plain[0]);
  assert.deepEqual(rb.logits[0], plain[1]);
  const kept = rb.logits[0].slice();
  await a.evaluate([3], { into: row }); // b's row was copied out of the shared buffer
  assert.deepEqual(rb.logits[0], kept);
  await rejectsOption(() => a.evaluate([3], { into: row, allLogits: true }), "into", "allLogits");
  await rejectsOption(() => a.evaluate([3], { into: new Float32Array(5) }), "into", "5 floats");
});

Deno.test("generate: NaN and out-of-range sampling options are OptionErrors", async () => {
  const cases: [Record<string, unknown>, string, string][] = [
    [{ maxTokens: NaN }, "maxTokens", "NaN"], // gave 0 tokens
    [{ maxTokens: -2 }, "maxTokens", "-2"],
    [{ topK: NaN }, "topK", "NaN"], // repeated token 0
    [{ topK: 1.5 }, "topK", "1.5"], // "candidates: order buffer holds 1 < 1.5"
    [{ cfg: { negativePrompt: "war", scale: NaN } }, "cfg.scale", "NaN"],
    [{ cfg: { negativePrompt: 3, scale: 2 } }, "cfg.negativePrompt", "3"],
    [{ temperature: NaN }, "temperature", "NaN"],
    [{ topP: 1.5 }, "topP", "0..1"],
    [{ minP: -0.1 }, "minP", "-0.1"],
    [{ typicalP: NaN }, "typicalP", "NaN"],
    [{ repeatPenalty: 0 }, "repeatPenalty", "> 0"],
    [{ repeatLastN: -2 }, "repeatLastN", "-2"],
    [{ frequencyPenalty: Infinity }, "frequencyPenalty", "Infinity"],
    [{ mirostat: 3 }, "mirostat", "0, 1, 2"],
    [{ mirostatTau: NaN }, "mirostatTau", "NaN"],
    [{ mirostatEta: -1 }, "mirostatEta", "-1"],
    [{ seed: 1.5 }, "seed", "1.5"],
    [{ seed: -2 }, "seed", "-2"],
    [{ seed: 2 ** 32 }, "seed", "4294967296"],
    [{ logitBias: [[5, NaN]] }, "logitBias[0] bias", "NaN"],
    [{ logitBias: [[5, Infinity]] }, "logitBias[0] bias", "-Infinity (ban)"],
    [{ logitBias: [[nVocab, -1]] }, "logitBias[0] token", String(nVocab)],
    [{ grammar: "root ::= [a]", jsonSchema: {} }, "jsonSchema", "not both"],
    [{ stopAtEog: "no" }, "stopAtEog", "true or false"],
    [{ maxToken: 5 }, "options.maxToken", "maxTokens"],
  ];
  for (const [opts, option, shown] of cases) {
    await rejectsOption(() => generateText(ctx, "The prince", opts), option, shown);
  }
  await rejectsOption(() => generateText(ctx, 42 as never, {}), "prompt", "42");
});

Deno.test("generate: llama.cpp's -1 values work (temperature < 0 greedy, seed -1, maxTokens -1)", async () => {
  const greedy = await generateText(ctx, "The prince", { temperature: 0, maxTokens: 8 });
  const neg = await generateText(ctx, "The prince", { temperature: -1, seed: -1, maxTokens: 8 });
  assert.deepEqual(neg.tokens, greedy.tokens);
  const all = await generateText(ctx, "The prince", {
    maxTokens: -1,
    ignoreEos: true,
    temperature: 0,
  });
  assert.equal(all.stopReason, "context");
  // The cache holds the prompt and every token but the last, which is sampled, never decoded.
  assert.equal(all.timings.promptTokens + all.tokens.length - 1, ctx.nCtx);
});

Deno.test("sampling: -inf biases on every token are a SamplingError, not one token repeated", async () => {
  const everyToken = Array.from({ length: nVocab }, (_, i) => [i, -Infinity] as [number, number]);
  await assert.rejects(
    () => generateText(ctx, "The prince", { logitBias: everyToken, maxTokens: 4 }),
    (e: unknown) => e instanceof SamplingError && e.reason === "logit-bias",
  );
  // The same with greedy and with mirostat selectors.
  for (const extra of [{ temperature: 0 }, { mirostat: 2 as const }]) {
    const chain = samplerChainFromOptions({
      nVocab: 3,
      logitBias: everyToken.slice(0, 3),
      ...extra,
    });
    assert.throws(() => chain.sample(new Float32Array([1, 2, 3])), SamplingError);
  }
  // One finite token left: it is the pick.
  const chain = samplerChainFromOptions({ nVocab: 3, logitBias: [[0, -Infinity], [2, -Infinity]] });
  assert.equal(chain.sample(new Float32Array([5, 1, 9])), 1);
});

Deno.test("sampling: a grammar that admits no token is a SamplingError (was a bare Error)", async () => {
  const pieces = ["a", "b", "c"].map((s) => new TextEncoder().encode(s));
  const chain = samplerChainFromOptions({
    nVocab: 3,
    grammar: 'root ::= "z"',
    pieces: (id) => pieces[id],
    eogTokens: [],
  });
  assert.throws(
    () => chain.sample(new Float32Array([1, 2, 3])),
    (e: unknown) =>
      e instanceof SamplingError && e.reason === "grammar" && /admits no token/.test(e.message),
  );
  // End to end: the grammar is complete at once and ignoreEos bans its only way out.
  await assert.rejects(
    () => generateText(ctx, "The prince", { grammar: 'root ::= ""', ignoreEos: true }),
    (e: unknown) => e instanceof SamplingError && e.reason === "grammar",
  );
});

Deno.test("Model.load: bad options are OptionErrors before the file is opened", async () => {
  await rejectsOption(() => Model.load(MODEL, { validate: "full" as never }), "validate", "full");
  await rejectsOption(() => Model.load(MODEL, { onProgress: 1 as never }), "onProgress", "1");
  await rejectsOption(() => Model.load("" as string), "path", '""');
});
