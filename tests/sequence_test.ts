/**
 * Sequence objects and generation on them: shared batches, prompt reuse,
 * fork, erase, dispose. Merged evaluations are checked against the batch
 * they should have become; prompt reuse against llama.cpp doing the same
 * (decodeBatch itself against llama.cpp: seq_batch_parity_test.ts,
 * seq_replay_test.ts; the shift: context_shift_test.ts).
 */
import assert from "node:assert/strict";
import { Context, ContextError, generateText, Model, OptionError } from "../mod.ts";
import { loadOracle } from "./oracle/oracle.ts";
import { OracleBatchContext } from "./oracle/oracle_batch.ts";

const MODEL = new URL("../../shared/models/tolstoy-6m-f16.gguf", import.meta.url).pathname;

const model = await Model.load(MODEL);
const tok = model.tokenizer;
const promptA = tok.encode("Natasha looked at her mother and", { addSpecial: true });
const promptB = tok.encode("Pierre", { addSpecial: true });

Deno.test("sequences: concurrent evaluations become one batch", async () => {
  await using ctx = await Context.create(model, { nCtx: 256, nSeqMax: 3, threads: 1 });
  using a = ctx.sequence(), b = ctx.sequence();
  assert.deepEqual([a.id, b.id], [0, 1]);
  const [ra, rb] = await Promise.all([a.evaluate(promptA), b.evaluate(promptB)]);
  const [sa, sb] = await Promise.all([a.evaluate([100]), b.evaluate([200])]);
  assert.equal(a.nPast, promptA.length + 1);
  assert.equal(ctx.seqPosMax(1), promptB.length);
  // The batches the queue should have made: fewest tokens left first, then one step each.
  await using ref = await Context.create(model, { nCtx: 256, nSeqMax: 3, threads: 1 });
  const r1 = await ref.decodeBatch({
    tokens: [...promptB, ...promptA],
    seqIds: [...promptB.map(() => 1), ...promptA.map(() => 0)],
    logits: [
      ...promptB.map((_, i) => i === promptB.length - 1),
      ...promptA.map((_, i) => i === promptA.length - 1),
    ],
  });
  const r2 = await ref.decodeBatch({ tokens: [100, 200], seqIds: [0, 1], logits: [1, 1] });
  assert.deepEqual([rb.logits[0], ra.logits[0]], r1.logits);
  assert.deepEqual([sa.logits[0], sb.logits[0]], r2.logits);
});

Deno.test("sequences: a follow-up prompt evaluates only its new tokens, as llama.cpp would", async () => {
  await using ctx = await Context.create(model, { nCtx: 256, nSeqMax: 2, threads: 1 });
  using seq = ctx.sequence();
  const p1 = "Natasha looked at her mother and";
  const r1 = await generateText(seq, p1, { maxTokens: 8, temperature: 0 });
  assert.equal(r1.timings.reusedTokens, 0);
  const p2 = p1 + r1.text + " Then";
  const ids2 = tok.encode(p2, { addSpecial: true });
  const held = [...seq.tokens];
  let common = 0;
  while (common < held.length && held[common] === ids2[common]) common++;
  const r2 = await generateText(seq, p2, { maxTokens: 8, temperature: 0 });
  assert.ok(common >= tok.encode(p1, { addSpecial: true }).length);
  assert.equal(r2.timings.reusedTokens, common);
  assert.equal(r2.timings.promptTokens, ids2.length - common);
  // llama.cpp with the same history: the first prompt, the generated tokens
  // one by one, the cache cut at the common prefix, the new suffix.
  await seq.truncate(common);
  const ours = (await seq.evaluate(ids2.slice(common))).logits[0];
  const oracle = await loadOracle();
  using om = oracle.load(MODEL);
  using oc = await OracleBatchContext.create(om, { nCtx: 256, nBatch: 256, nSeqMax: 2 });
  const first = tok.encode(p1, { addSpecial: true });
  oc.decode({ tokens: first });
  for (const id of held.slice(first.length)) oc.decode({ tokens: [id] });
  oc.seqRm(0, common, -1);
  const theirs = oc.decode({ tokens: ids2.slice(common) }).logits[0];
  assert.deepEqual(ours, theirs);
  // From scratch, both engines differ from the reused run alike (the cached
  // keys came from other batch shapes); the difference is llama.cpp's own.
  oc.clear();
  const scratch = oc.decode({ tokens: ids2 }).logits[0];
  await using fresh = await Context.create(model, { nCtx: 256, threads: 1 });
  const oursScratch = (await fresh.decode(ids2)).logits[0];
  assert.deepEqual(oursScratch, scratch);
  let d = 0;
  for (let i = 0; i < scratch.length; i++) d = Math.max(d, Math.abs(scratch[i] - theirs[i]));
  console.log(
    `reused ${common} of ${ids2.length} prompt tokens; logits bit-identical to llama.cpp's ` +
      `same history (llama.cpp's reused vs scratch: ${d.toExponential(2)})`,
  );
});

Deno.test("sequences: fork shares cells, erase moves later tokens down, dispose frees", async () => {
  await using ctx = await Context.create(model, { nCtx: 256, nSeqMax: 2, threads: 1 });
  const a = ctx.sequence();
  await a.evaluate(promptA);
  const used = ctx.kvCache!.cells.used;
  const b = await a.fork();
  assert.equal(ctx.kvCache!.cells.used, used); // shared, not copied
  assert.deepEqual(b.tokens, a.tokens);
  assert.throws(() => ctx.sequence(), ContextError); // both ids held
  const next = (await b.evaluate([7])).logits[0];
  const again = (await a.evaluate([7])).logits[0];
  assert.deepEqual(next, again); // the same cells, the same one-token batch
  // erase(1, 3): positions stay 0..nPast-1 and the next token continues them.
  await a.erase(1, 3);
  assert.equal(a.nPast, promptA.length + 1 - 2);
  assert.equal(ctx.seqPosMax(a.id), a.nPast - 1);
  assert.equal(ctx.seqPosMin(a.id), 0);
  b[Symbol.dispose]();
  await using lease = await ctx.acquire(); // the dispose's removal ran before this lease
  assert.equal(lease.seqPosMax(1), -1);
  lease[Symbol.dispose]();
  const c = ctx.sequence();
  assert.equal(c.id, 1);
  await assert.rejects(() => b.evaluate([1]), ContextError);
  await assert.rejects(() => a.erase(2, 1), ContextError);
  await assert.rejects(() => a.evaluate([1.5]), OptionError);
  a[Symbol.dispose]();
  c[Symbol.dispose]();
});

Deno.test("sequences: decode on a context refuses sequence 0 held by a Sequence", async () => {
  await using ctx = await Context.create(model, { nCtx: 256, nSeqMax: 2, threads: 1 });
  using s = ctx.sequence();
  await assert.rejects(() => ctx.decode([1]), /held by a Sequence object/);
  await assert.rejects(() => generateText(ctx, "x", { maxTokens: 1 }), /held by a Sequence object/);
  assert.equal(s.nPast, 0);
});

Deno.test("sequences: a prompt longer than the context names both lengths", async () => {
  await using ctx = await Context.create(model, { nCtx: 256, threads: 1 });
  const long = "the ".repeat(400);
  await assert.rejects(
    () => generateText(ctx, long, { maxTokens: 1 }),
    /the prompt has \d+ tokens; the context holds 256/,
  );
});

Deno.test("sequences: an aborted evaluation leaves the sequence as it was", async () => {
  await using ctx = await Context.create(model, { nCtx: 512, nSeqMax: 2, nBatch: 32, threads: 1 });
  using a = ctx.sequence(), b = ctx.sequence();
  await a.evaluate(promptA);
  const before = a.nPast;
  const ac = new AbortController();
  const long = Array.from({ length: 300 }, (_, i) => 10 + (i % 50));
  const p = a.evaluate(long, { signal: ac.signal });
  const q = b.evaluate(promptB);
  setTimeout(() => ac.abort(new Error("stop")), 5);
  await assert.rejects(p, /stop/);
  await q;
  assert.equal(a.nPast, before);
  assert.equal(ctx.seqPosMax(a.id), before - 1);
  assert.equal(b.nPast, promptB.length);
});

Deno.test("model cleanup", () => model[Symbol.dispose]());

Deno.test("batches: embeddings in place of token ids give the tokens' logits", async () => {
  // f32 weights: the embedding rows are exactly what get_rows would produce.
  const path = new URL("../../shared/models/tolstoy-6m-f32.gguf", import.meta.url).pathname;
  using m32 = await Model.load(path);
  await using ctx = await Context.create(m32, { nCtx: 256, nSeqMax: 2, threads: 1 });
  const nEmbd = m32.hparams.nEmbd;
  const table = new Float32Array(m32.file.tensorBytes("token_embd.weight").slice().buffer);
  const embd = new Float32Array(promptA.length * nEmbd);
  promptA.forEach((t, i) => embd.set(table.subarray(t * nEmbd, (t + 1) * nEmbd), i * nEmbd));
  const viaTokens = await ctx.decodeBatch({ tokens: promptA, seqIds: promptA.map(() => 1) });
  ctx.clear();
  const viaEmbd = await ctx.decodeBatch({ embd, seqIds: promptA.map(() => 1) });
  assert.deepEqual(viaEmbd.logits, viaTokens.logits);
  await assert.rejects(() => ctx.decodeBatch({ embd: new Float32Array(nEmbd + 1) }), OptionError);
  await assert.rejects(() => ctx.decodeBatch({ tokens: [1], embd }), OptionError);
  const nan = embd.slice(0, nEmbd);
  nan[3] = NaN;
  await assert.rejects(() => ctx.decodeBatch({ embd: nan }), /embd\[3\]/);
});
