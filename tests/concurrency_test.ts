/**
 * One context, one decode at a time (issue 11, finding 5): concurrent
 * generate() and decode() calls on a context queue in call order instead of
 * corrupting each other's cache and inputs.
 */
import assert from "node:assert/strict";
import { Model } from "../lib/model/model.ts";
import { Context, ContextBusyError } from "../lib/runtime/context.ts";
import { generate, type GeneratedToken, generateText } from "../lib/runtime/generate.ts";
import { TOLSTOY_F32 } from "./oracle/models.ts";

const A = "The prince said that";
const B = "Natasha looked at her mother and";
const OPTS = { maxTokens: 24, temperature: 0.8, seed: 7 } as const;

Deno.test("concurrency: two generate() calls at once give the tokens of one after the other", async () => {
  using model = await Model.load(TOLSTOY_F32);
  using ctx = await Context.create(model, { nCtx: 256, nBatch: 4, threads: 2 });
  const a = await generateText(ctx, A, OPTS);
  const b = await generateText(ctx, B, OPTS);
  assert.notDeepEqual(a.tokens, b.tokens);
  const [a2, b2] = await Promise.all([generateText(ctx, A, OPTS), generateText(ctx, B, OPTS)]);
  assert.deepEqual(a2.tokens, a.tokens);
  assert.deepEqual(b2.tokens, b.tokens);
  // Interleaved steps of two iterators: the second waits for the first to finish.
  const itA = generate(ctx, A, OPTS), itB = generate(ctx, B, OPTS);
  const firstA = itA.next();
  const firstB = itB.next();
  assert.equal(((await firstA).value as GeneratedToken).id, a.tokens[0]);
  let settledB = false;
  firstB.then(() => settledB = true);
  await new Promise((r) => setTimeout(r, 20));
  assert.equal(settledB, false, "the second generation waits while the first holds the context");
  await itA.return(undefined as never); // releases the context
  assert.equal(((await firstB).value as GeneratedToken).id, b.tokens[0]);
  await itB.return(undefined as never);
});

Deno.test("concurrency: concurrent decodes run in call order", async () => {
  using model = await Model.load(TOLSTOY_F32);
  using seq = await Context.create(model, { nCtx: 256, threads: 2 });
  using par = await Context.create(model, { nCtx: 256, threads: 2 });
  const chunks = [[1, 450, 2471], [1497, 393], [278, 1473, 27, 3012], [42]];
  const want: Float32Array[] = [];
  for (const c of chunks) want.push((await seq.decode(c)).logits[0]);
  const got = await Promise.all(chunks.map((c) => par.decode(c)));
  got.forEach((r, i) => assert.deepEqual(r.logits[0], want[i], `chunk ${i}`));
  assert.equal(par.nPast, 10);
});

Deno.test("concurrency: clear() and truncate() while a generation holds the context are refused", async () => {
  using model = await Model.load(TOLSTOY_F32);
  using ctx = await Context.create(model, { nCtx: 256, threads: 2 });
  const it = generate(ctx, A, OPTS);
  await it.next();
  assert.throws(() => ctx.clear(), ContextBusyError);
  assert.throws(() => ctx.truncate(0), ContextBusyError);
  assert.equal(ctx.busy, true);
  await it.return(undefined as never);
  assert.equal(ctx.busy, false);
  ctx.clear();
  assert.equal(ctx.nPast, 0);
});
