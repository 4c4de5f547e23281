/**
 * Hostile batches and cache edits: 400 seeded calls of decodeBatch and the
 * seq* edits with valid, borderline and invalid arguments (wrong types,
 * NaN, huge or negative positions, unknown sequences, mismatched lengths,
 * positions that skip or go back, batches that do not fit). Every call
 * either succeeds or throws an OptionError or ContextError; nothing else
 * escapes, the process survives, and afterwards the context still gives
 * the logits of a fresh one.
 */
import assert from "node:assert/strict";
import { Context, ContextError, Model, OptionError } from "../mod.ts";
import { mulberry32 } from "./rng.ts";

const MODEL = new URL("../../shared/models/tolstoy-6m-f16.gguf", import.meta.url).pathname;

Deno.test("batches: 400 hostile calls end in OptionError/ContextError or success, never worse", async () => {
  using model = await Model.load(MODEL);
  await using ctx = await Context.create(model, { nCtx: 256, nSeqMax: 3, nBatch: 64, threads: 1 });
  const rnd = mulberry32(20261123);
  const pick = <T>(xs: readonly T[]): T => xs[Math.floor(rnd() * xs.length)];
  const int = (lo: number, hi: number) => lo + Math.floor(rnd() * (hi - lo + 1));
  const nVocab = model.hparams.nVocab;
  const weird = [NaN, Infinity, -1, 1.5, 2 ** 31, -(2 ** 31), "3", null, undefined, {}, [], 1e300];
  const counts = { ok: 0, option: 0, context: 0 };
  for (let i = 0; i < 400; i++) {
    const n = int(1, 12);
    const bad = rnd() < 0.5;
    const tokens: unknown[] = Array.from({ length: n }, () => int(0, nVocab - 1));
    const seqIds: unknown[] = Array.from({ length: n }, () => int(0, 2));
    let pos: unknown[] | undefined = undefined;
    let logits: unknown[] | undefined = undefined;
    if (rnd() < 0.3) {
      const start = int(0, 300);
      pos = Array.from({ length: n }, (_, k) => start + k);
    }
    if (rnd() < 0.3) logits = Array.from({ length: n }, () => rnd() < 0.5);
    if (bad) {
      const what = int(0, 6);
      if (what === 0) tokens[int(0, n - 1)] = pick(weird);
      if (what === 1) seqIds[int(0, n - 1)] = pick([...weird, 3, 255, [0, 0], [], [0, 9]]);
      if (what === 2) pos = Array.from({ length: n }, () => pick([...weird, 0, 5]));
      if (what === 3) logits = Array.from({ length: n + 1 }, () => 1);
      if (what === 4) tokens.length = 0;
      if (what === 5) tokens.push(...Array.from({ length: 70 }, () => 1)); // over nBatch
      if (what === 6) seqIds.length = n - 1;
    }
    const op = rnd();
    try {
      if (op < 0.7) {
        await ctx.decodeBatch(
          { tokens, seqIds, pos, logits } as unknown as Parameters<Context["decodeBatch"]>[0],
        );
      } else {
        const seq = bad ? pick(weird) as number : int(-1, 2);
        const p0 = bad ? pick(weird) as number : int(-1, 40);
        const p1 = int(-1, 80);
        const e = pick(["seqRm", "seqCp", "seqKeep", "seqAdd", "seqDiv"] as const);
        if (e === "seqRm") ctx.seqRm(seq, p0, p1);
        if (e === "seqCp") ctx.seqCp(seq, int(0, 2), p0, p1);
        if (e === "seqKeep") ctx.seqKeep(seq);
        if (e === "seqAdd") ctx.seqAdd(seq, p0, p1, bad ? pick(weird) as number : int(-20, 20));
        if (e === "seqDiv") ctx.seqDiv(seq, p0, p1, bad ? pick(weird) as number : int(1, 4));
      }
      counts.ok++;
    } catch (e) {
      if (e instanceof OptionError) counts.option++;
      else if (e instanceof ContextError) counts.context++;
      else throw new Error(`call ${i}: unexpected ${e}`, { cause: e });
      assert.ok(!(e as Error).message.includes("\n"), `call ${i}: a multi-line message`);
    }
    if (ctx.kvCache!.cells.used > 200) ctx.clear();
  }
  console.log(
    `400 calls: ${counts.ok} ok, ${counts.option} OptionError, ${counts.context} ContextError`,
  );
  assert.ok(counts.ok > 50 && counts.option > 50 && counts.context > 5);
  // The context still computes what a fresh one does.
  ctx.clear();
  const prompt = model.tokenizer.encode("Natasha looked at her mother and", { addSpecial: true });
  const after = (await ctx.decodeBatch({ tokens: prompt, seqIds: prompt.map(() => 2) })).logits[0];
  await using fresh = await Context.create(model, {
    nCtx: 256,
    nSeqMax: 3,
    nBatch: 64,
    threads: 1,
  });
  const want = (await fresh.decodeBatch({ tokens: prompt, seqIds: prompt.map(() => 2) })).logits[0];
  assert.deepEqual(after, want);
});
