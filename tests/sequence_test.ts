/**
 * Sequence objects and generation on them: shared batches, prompt reuse,
 * fork, erase, dispose; checked against the same work done alone or from
 * scratch on our own engine (the batch and shift parity with llama.cpp is
 * in seq_batch_parity_test.ts, seq_replay_test.ts and context_shift_test.ts).
 */
import assert from "node:assert/strict";
import { Context, ContextError, generateText, Model, OptionError } from "../mod.ts";

const MODEL = new URL("../../shared/models/tolstoy-6m-f16.gguf", import.meta.url).pathname;
// One stated threshold for "equal logits" where the two runs cut the work
// into different micro-batches (a matmul over N rows rounds differently
// from N matmuls over one); the runs agree to ~2e-6 here.
const SAME = 1e-4;
const KV = (Deno.env.get("KV") ?? "f16") as "f16";

function maxDiff(a: Float32Array, b: Float32Array): number {
  let m = 0;
  for (let i = 0; i < a.length; i++) m = Math.max(m, Math.abs(a[i] - b[i]));
  return m;
}

const model = await Model.load(MODEL);
const tok = model.tokenizer;
const promptA = tok.encode("Natasha looked at her mother and", { addSpecial: true });
const promptB = tok.encode("Pierre", { addSpecial: true });

Deno.test("sequences: concurrent evaluations share batches and equal lone ones", async () => {
  await using ctx = await Context.create(model, { nCtx: 256, nSeqMax: 3, threads: 1, kvType: KV });
  using a = ctx.sequence(), b = ctx.sequence();
  assert.deepEqual([a.id, b.id], [0, 1]);
  const [ra, rb] = await Promise.all([a.evaluate(promptA), b.evaluate(promptB)]);
  assert.equal(a.nPast, promptA.length);
  assert.equal(ctx.seqPosMax(1), promptB.length - 1);
  await using alone = await Context.create(model, { nCtx: 256, threads: 1, kvType: KV });
  const la = (await alone.decode(promptA)).logits[0];
  alone.clear();
  const lb = (await alone.decode(promptB)).logits[0];
  const d = Math.max(maxDiff(ra.logits[0], la), maxDiff(rb.logits[0], lb));
  console.log(`two sequences in one batch vs alone: max |diff| ${d.toExponential(2)}`);
  assert.ok(d <= SAME);
  // Generation steps of both, again together.
  const [sa, sb] = await Promise.all([a.evaluate([100]), b.evaluate([200])]);
  const la2 = (await alone.decode([200])).logits[0];
  alone.clear();
  await alone.decode(promptA);
  const lb2 = (await alone.decode([100])).logits[0];
  console.log("steps", maxDiff(sb.logits[0], la2), maxDiff(sa.logits[0], lb2));
  assert.ok(maxDiff(sb.logits[0], la2) <= SAME && maxDiff(sa.logits[0], lb2) <= SAME);
});

Deno.test("sequences: a follow-up prompt evaluates only its new tokens", async () => {
  await using ctx = await Context.create(model, { nCtx: 256, nSeqMax: 2, threads: 1, kvType: KV });
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
  assert.ok(common > tok.encode(p1, { addSpecial: true }).length - 1);
  assert.equal(r2.timings.reusedTokens, common);
  assert.equal(r2.timings.promptTokens, ids2.length - common);
  // The same generation from scratch.
  await using fresh = await Context.create(model, { nCtx: 256, threads: 1, kvType: KV });
  const r3 = await generateText(fresh, p2, { maxTokens: 8, temperature: 0 });
  assert.deepEqual(r2.tokens, r3.tokens);
  // And the logits of the suffix evaluation equal a whole-prompt decode.
  await seq.truncate(common);
  const suffix = (await seq.evaluate(ids2.slice(common))).logits[0];
  fresh.clear();
  const whole = (await fresh.decode(ids2)).logits[0];
  const d = maxDiff(suffix, whole);
  console.log(
    `reused ${common} of ${ids2.length} prompt tokens; logits vs scratch ${d.toExponential(2)}`,
  );
  assert.ok(d <= SAME);
});

Deno.test("sequences: fork shares cells, erase moves later tokens down, dispose frees", async () => {
  await using ctx = await Context.create(model, { nCtx: 256, nSeqMax: 2, threads: 1, kvType: KV });
  const a = ctx.sequence();
  await a.evaluate(promptA);
  const used = ctx.kvCache!.cells.used;
  const b = await a.fork();
  assert.equal(ctx.kvCache!.cells.used, used); // shared, not copied
  assert.deepEqual(b.tokens, a.tokens);
  assert.throws(() => ctx.sequence(), ContextError); // both ids held
  const next = (await b.evaluate([7])).logits[0];
  const again = (await a.evaluate([7])).logits[0];
  assert.ok(maxDiff(next, again) <= SAME);
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
  await using ctx = await Context.create(model, { nCtx: 256, nSeqMax: 2, threads: 1, kvType: KV });
  using s = ctx.sequence();
  await assert.rejects(() => ctx.decode([1]), /held by a Sequence object/);
  await assert.rejects(() => generateText(ctx, "x", { maxTokens: 1 }), /held by a Sequence object/);
  assert.equal(s.nPast, 0);
});

Deno.test("sequences: a prompt longer than the context names both lengths", async () => {
  await using ctx = await Context.create(model, { nCtx: 256, threads: 1, kvType: KV });
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
