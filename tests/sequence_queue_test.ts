/**
 * The sequences' queue under tight timing: an evaluation submitted a few
 * microtasks after the previous one resolved (as a generation loop or
 * Promise.all over sequences does) must still run. Found by
 * bench/batched.ts: a request submitted after the pump's loop saw the queue
 * empty, but before the pump was marked finished, waited forever.
 */
import assert from "node:assert/strict";
import { Context, Model } from "../mod.ts";
import { loadOracle } from "./oracle/oracle.ts";
import { OracleBatchContext } from "./oracle/oracle_batch.ts";

const MODEL = new URL("../../shared/models/tolstoy-6m-f16.gguf", import.meta.url).pathname;

Deno.test("sequence queue: an evaluation submitted k microtasks after the last one resolved runs (k = 0..8)", async () => {
  using model = await Model.load(MODEL);
  const prompt = model.tokenizer.encode("Natasha looked at her mother", { addSpecial: true });
  const next = model.tokenizer.encode(" and", { addSpecial: false });
  // llama.cpp with the same history gives the logits the second evaluation must return.
  const oracle = await loadOracle();
  using om = oracle.load(MODEL);
  using oc = await OracleBatchContext.create(om, { nCtx: 256, nBatch: 256 });
  oc.decode({ tokens: prompt });
  const want = oc.decode({ tokens: next }).logits[0];

  await using ctx = await Context.create(model, { nCtx: 256, threads: 1 });
  using seq = ctx.sequence();
  for (let k = 0; k <= 8; k++) {
    await seq.clear();
    // The second evaluation is submitted from k microtasks after the first resolved.
    const second = await new Promise<{ p: Promise<{ logits: Float32Array[] }> }>((resolve) => {
      seq.evaluate(prompt).then(() => {
        const later = (i: number): void =>
          i === 0 ? resolve({ p: seq.evaluate(next) }) : queueMicrotask(() => later(i - 1));
        later(k);
      });
    });
    let timer: ReturnType<typeof setTimeout> | undefined;
    const hung = new Promise<null>((resolve) => (timer = setTimeout(() => resolve(null), 10_000)));
    const r = await Promise.race([second.p, hung]);
    clearTimeout(timer);
    assert.ok(r, `k=${k}: the evaluation never ran`);
    assert.deepEqual(r.logits[0], want, `k=${k}`);
  }
});
