/**
 * Abort reaches the kernels (issue 11, finding 6): an aborted decode stops
 * within a few milliseconds instead of running its whole prompt, and leaves
 * the context as if it had never been called.
 */
import assert from "node:assert/strict";
import { Model } from "../lib/model/model.ts";
import { Context } from "../lib/runtime/context.ts";
import { TOLSTOY_F32 } from "./oracle/models.ts";

const PROMPT = Array.from({ length: 400 }, (_, i) => 1 + (i * 37) % 4000);
const PREFIX = [1, 450, 2471, 1497, 393, 278, 1473, 27, 3012, 1234];
const NEXT = [318, 263, 1009, 931, 42];

function bitsEqual(a: Float32Array, b: Float32Array): boolean {
  const x = new Uint32Array(a.buffer, a.byteOffset, a.length);
  const y = new Uint32Array(b.buffer, b.byteOffset, b.length);
  return x.length === y.length && x.every((v, i) => v === y[i]);
}

/** Aborts `ms` after the call; resolves with the rejection and the time from abort() to it. */
async function abortAfter(ctx: Context, tokens: number[], ms: number) {
  const ac = new AbortController();
  let abortedAt = 0;
  const timer = setTimeout(() => {
    abortedAt = performance.now();
    ac.abort();
  }, ms);
  const t0 = performance.now();
  try {
    await ctx.decode(tokens, { signal: ac.signal });
    return { error: null, latency: NaN, total: performance.now() - t0 };
  } catch (e) {
    const now = performance.now();
    return { error: e as Error, latency: now - abortedAt, total: now - t0 };
  } finally {
    clearTimeout(timer);
  }
}

Deno.test("abort: a 400-token prompt aborted at 1 ms stops within a few ms", async () => {
  using model = await Model.load(TOLSTOY_F32);
  using ctx = await Context.create(model, { nCtx: 512, threads: 2 });
  await ctx.decode(PROMPT); // warm up (plans, JIT)
  ctx.clear();
  const t0 = performance.now();
  await ctx.decode(PROMPT);
  const full = performance.now() - t0;
  const runs = [];
  for (let i = 0; i < 5; i++) {
    ctx.clear();
    const r = await abortAfter(ctx, PROMPT, 1);
    assert.ok(r.error, "the decode was aborted");
    assert.equal(r.error.name, "AbortError");
    assert.equal(ctx.nPast, 0, "nothing of the aborted decode stays in the cache");
    runs.push(r);
  }
  const worst = Math.max(...runs.map((r) => r.latency));
  console.log(
    `400-token decode ${full.toFixed(0)} ms; aborted at 1 ms: rejected ` +
      runs.map((r) => r.latency.toFixed(1)).join("/") + " ms after abort(), " +
      runs.map((r) => r.total.toFixed(0)).join("/") + " ms after the call",
  );
  // A few ms when the machine is idle; generous for a loaded CI box.
  assert.ok(worst < 50, `rejected ${worst} ms after abort()`);
  assert.ok(Math.max(...runs.map((r) => r.total)) < full, "stopped before the full decode time");
});

Deno.test("abort: the next decode gives the logits it would have given had the aborted one never run", async () => {
  using model = await Model.load(TOLSTOY_F32);
  for (const nBatch of [512, 64]) {
    using a = await Context.create(model, { nCtx: 512, nBatch, threads: 2 });
    using b = await Context.create(model, { nCtx: 512, nBatch, threads: 2 });
    await a.decode(PREFIX);
    const t0 = performance.now();
    await a.decode(PROMPT); // warm: the aborted call below reuses these plans
    const full = performance.now() - t0;
    a.truncate(PREFIX.length);
    // With nBatch 64 (7 micro-batches), abort at 40% of the whole: some
    // micro-batches have completed by then, and are undone too.
    const r = await abortAfter(a, PROMPT, nBatch === 64 ? Math.round(0.4 * full) : 2);
    assert.ok(r.error, `nBatch ${nBatch}: the decode was aborted`);
    assert.equal(a.nPast, PREFIX.length);
    const got = (await a.decode(NEXT, { allLogits: true })).logits;
    await b.decode(PREFIX);
    const want = (await b.decode(NEXT, { allLogits: true })).logits;
    assert.equal(got.length, want.length);
    for (let i = 0; i < got.length; i++) {
      assert.ok(bitsEqual(got[i], want[i]), `nBatch ${nBatch}: logits of row ${i} differ`);
    }
    assert.equal(a.nPast, b.nPast);
  }
});

Deno.test("abort: an already-aborted signal and one aborted while waiting for the context", async () => {
  using model = await Model.load(TOLSTOY_F32);
  using ctx = await Context.create(model, { nCtx: 512, threads: 2 });
  await assert.rejects(ctx.decode([1, 2], { signal: AbortSignal.abort() }), { name: "AbortError" });
  const busy = ctx.decode(PROMPT);
  const ac = new AbortController();
  const waiting = ctx.decode([1, 2, 3], { signal: ac.signal });
  ac.abort();
  await assert.rejects(waiting, { name: "AbortError" });
  await busy; // the holder was not disturbed
  assert.equal(ctx.nPast, PROMPT.length);
});
