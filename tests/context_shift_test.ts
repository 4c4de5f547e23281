/**
 * Context shift: a greedy generation four times the context long, ours
 * (generate with contextShift) against llama.cpp driven through the same
 * rule (llama-server's pre_decode: keep nKeep + BOS, discard half of the
 * rest, seq_rm then seq_add), compared token by token up to llama.cpp's
 * first near-tie and by logits at every step before it.
 */
import assert from "node:assert/strict";
import { Context, generate, Model } from "../mod.ts";
import { loadOracle, NEAR_TIE, top2 } from "./oracle/oracle.ts";
import { OracleBatchContext } from "./oracle/oracle_batch.ts";

const MODEL = new URL("../../shared/models/tolstoy-6m-f16.gguf", import.meta.url).pathname;
const N_CTX = 256;
const N_KEEP = 4;

/** llama.cpp's greedy loop with llama-server's shift rule; returns tokens, gaps, logits. */
function oracleGreedy(c: OracleBatchContext, prompt: number[], n: number, bos: boolean) {
  let nPast = 0;
  const step = (ids: number[]) => {
    const r = c.decode({ tokens: ids, seqIds: ids.map(() => 0) });
    if (r.rc !== 0) throw new Error(`llama_decode returned ${r.rc}`);
    nPast += ids.length;
    return r.logits[0];
  };
  let logits = step(prompt);
  const tokens: number[] = [], gaps: number[] = [], all: Float32Array[] = [];
  let shifts = 0;
  for (let i = 0; i < n; i++) {
    const [best, gap] = top2(logits);
    tokens.push(best), gaps.push(gap), all.push(logits);
    if (i + 1 === n) break;
    if (nPast + 1 >= N_CTX) {
      const nKeep = Math.min(N_CTX - 4, N_KEEP + (bos ? 1 : 0));
      const nLeft = nPast - nKeep;
      const nDiscard = Math.min(Math.max(Math.trunc(nLeft / 2), 0), Math.max(0, nLeft - 1));
      c.seqRm(0, nKeep, nKeep + nDiscard);
      c.seqAdd(0, nKeep + nDiscard, nPast, -nDiscard);
      nPast -= nDiscard;
      shifts++;
    }
    logits = step([best]);
  }
  return { tokens, gaps, logits: all, shifts };
}

Deno.test("context shift: 4x the context, token-identical to llama.cpp with the same rule", async () => {
  const oracle = await loadOracle();
  using om = oracle.load(MODEL);
  using model = await Model.load(MODEL);
  await using ctx = await Context.create(model, { nCtx: N_CTX, threads: 1 });
  const text = "Natasha looked at her mother and";
  const prompt = model.tokenizer.encode(text, { addSpecial: true });
  const n = 4 * N_CTX;
  using oc = await OracleBatchContext.create(om, { nCtx: N_CTX, nBatch: N_CTX });
  const want = oracleGreedy(oc, prompt, n, prompt[0] === model.tokenizer.bos);
  const got: number[] = [];
  const it = generate(ctx, text, {
    maxTokens: n,
    temperature: 0,
    ignoreEos: true,
    contextShift: { nKeep: N_KEEP },
  });
  let r = await it.next();
  while (!r.done) {
    if (r.value.id >= 0) got.push(r.value.id);
    r = await it.next();
  }
  const result = r.value;
  assert.equal(result.stopReason, "length");
  assert.ok(result.timings.shifts >= 4, `only ${result.timings.shifts} shifts`);
  const upto = want.gaps.findIndex((g) => g < NEAR_TIE);
  const end = upto < 0 ? n : upto + 1; // the near-tie step itself may go either way
  console.log(
    `${n} tokens over nCtx ${N_CTX}: ours ${result.timings.shifts} shifts, llama.cpp ${want.shifts}; ` +
      `identical through step ${end}${upto < 0 ? " (no near-tie)" : ` (near-tie at ${upto})`}`,
  );
  assert.deepEqual(got.slice(0, end), want.tokens.slice(0, end));
});
