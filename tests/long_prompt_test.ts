/**
 * Prompts longer than nBatch: every micro-batch but the last has no output
 * rows and ends at the cache stores (issue 11, finding 1: such a micro-batch
 * used to build a zero-row get_rows and fail validation). Compared with
 * llama.cpp decoding the same prompt in micro-batches of the same size.
 */
import assert from "node:assert/strict";
import { Model } from "../lib/model/model.ts";
import { Context } from "../lib/runtime/context.ts";
import { generateText } from "../lib/runtime/generate.ts";
import { loadOracle, NEAR_TIE, type OracleContext, top2 } from "./oracle/oracle.ts";
import { TOLSTOY_F32 } from "./oracle/models.ts";

const N_BATCH = 32;
// parity_test.ts's tolerance for the f32 model (summation order may differ).
const TOL = 1e-3;
const TEXT = "Well, Prince, so Genoa and Lucca are now just family estates of the Buonapartes. " +
  "But I warn you, if you don't tell me that this means war, if you still try to defend " +
  "the infamies and horrors perpetrated by that Antichrist, I really believe he is " +
  "Antichrist, I will have nothing more to do with you and you are no longer my friend.";

function maxAbsDiff(a: Float32Array, b: Float32Array): number {
  assert.equal(a.length, b.length);
  let m = 0;
  for (let i = 0; i < a.length; i++) m = Math.max(m, Math.abs(a[i] - b[i]));
  return m;
}

/** llama.cpp with micro-batches of N_BATCH: one llama_decode per chunk; last logits. */
function oracleChunked(oc: OracleContext, ids: number[]): Float32Array {
  let last: Float32Array | undefined;
  for (let i = 0; i < ids.length; i += N_BATCH) {
    last = oc.decode(ids.slice(i, i + N_BATCH))[0];
  }
  return last!;
}

Deno.test("long prompt: nBatch 1 decodes a two-token prompt", async () => {
  using model = await Model.load(TOLSTOY_F32);
  using ctx = await Context.create(model, { nCtx: 256, nBatch: 1, threads: 1 });
  const r = await ctx.decode([1, 2]);
  assert.equal(r.logits.length, 1);
  assert.equal(r.logits[0].length, model.hparams.nVocab);
  assert.ok(r.logits[0].every(Number.isFinite));
  assert.equal(ctx.nPast, 2);
});

Deno.test("long prompt: 96 tokens through nBatch 32 give llama.cpp's last logits", async () => {
  const oracle = await loadOracle();
  using om = oracle.load(TOLSTOY_F32);
  const ids = om.tokenize(TEXT, { addSpecial: true }).slice(0, 3 * N_BATCH);
  assert.equal(ids.length, 96);
  using oc = om.context({ nCtx: 256, nBatch: N_BATCH, threads: 1 });
  const want = oracleChunked(oc, ids);

  using model = await Model.load(TOLSTOY_F32);
  using ctx = await Context.create(model, { nCtx: 256, nBatch: N_BATCH, threads: 2 });
  const got = (await ctx.decode(ids)).logits;
  assert.equal(got.length, 1);
  const d = maxAbsDiff(got[0], want);
  console.log(`96-token prompt, nBatch 32: last logits max |diff| = ${d.toExponential(2)}`);
  // Same micro-batch shapes in both engines: bit-identical wherever our
  // kernels follow the oracle's CPU variant (tests/parity_ops_test.ts).
  const limit = oracle.cpu.exact ? 0 : TOL;
  assert.ok(d <= limit, `last logits differ by ${d} (limit ${limit}, ${oracle.cpu.name})`);
  assert.equal(ctx.nPast, 96);
  // One decode of all 96 with one micro-batch agrees as well (same rows, other shapes).
  using whole = await Context.create(model, { nCtx: 256, nBatch: 512, threads: 2 });
  const one = (await whole.decode(ids)).logits[0];
  assert.ok(maxAbsDiff(one, want) <= TOL);
});

Deno.test("long prompt: generate() with a prompt of 3x nBatch follows llama.cpp greedily", async () => {
  const oracle = await loadOracle();
  using om = oracle.load(TOLSTOY_F32);
  const ids = om.tokenize(TEXT, { addSpecial: true });
  assert.ok(ids.length >= 3 * N_BATCH, `prompt has ${ids.length} tokens`);
  using oc = om.context({ nCtx: 256, nBatch: N_BATCH, threads: 1 });
  let logits = oracleChunked(oc, ids);
  const want: number[] = [];
  const gaps: number[] = [];
  for (let s = 0; s < 8; s++) {
    const [best, gap] = top2(logits);
    want.push(best);
    gaps.push(gap);
    logits = oc.decode([best])[0];
  }

  using model = await Model.load(TOLSTOY_F32);
  using ctx = await Context.create(model, { nCtx: 256, nBatch: N_BATCH, threads: 2 });
  assert.deepEqual(model.tokenizer.encode(TEXT), ids);
  const res = await generateText(ctx, TEXT, { maxTokens: 8, temperature: 0, stopAtEog: false });
  const tie = gaps.findIndex((g) => g < NEAR_TIE);
  const upto = tie < 0 ? want.length : tie;
  assert.ok(upto >= 4, `near-tie at step ${tie}`);
  assert.deepEqual(res.tokens.slice(0, upto), want.slice(0, upto));
  assert.equal(res.timings.promptTokens, ids.length);
});
