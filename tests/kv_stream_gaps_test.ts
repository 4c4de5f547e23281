/**
 * One KV stream per sequence with `kvStreamGaps`: a batch whose sequence
 * ids have gaps (a server's idle slots) is one micro-batch, attention
 * running once per run of consecutive streams, where llama.cpp's
 * split_equal (and ours by default) starts a new micro-batch at each gap.
 *
 * The expectation is llama.cpp's own: the same batches with the sequences
 * renumbered so that every batch's ids are consecutive (0, 1, 3, 4 become
 * 0, 1, 2, 3), which llama.cpp decodes as one micro-batch too. Each stream
 * attends only its own cells and the matrix products see the same token
 * count, so the logits must be bit-identical where our SIMD level follows
 * llama.cpp's CPU variant (tests/parity_util.ts), else within 1e-4. The
 * default (no gaps) is checked against llama.cpp on the original ids, and
 * the number of graph runs per step against the micro-batches expected.
 */
import assert from "node:assert/strict";
import { Model } from "../lib/model/model.ts";
import { Context } from "../lib/runtime/context.ts";
import { Scheduler } from "../lib/sched/scheduler.ts";
import { loadOracle, maxAbsDiff } from "./oracle/oracle.ts";
import { OracleBatchContext } from "./oracle/oracle_batch.ts";
import { TOLSTOY_F16 } from "./oracle/models.ts";
import { parityGate } from "./parity_util.ts";
import { mulberry32 } from "./rng.ts";

const EXACT = parityGate((await loadOracle()).cpu).skip === "";
const TOL = 1e-4;
/** Our sequence ids and llama.cpp's for them (consecutive in every batch below). */
const OURS = [0, 1, 3, 4];
const THEIRS = [0, 1, 2, 3];
/** Prompt lengths (unequal: split_equal then makes several micro-batches). */
const LENS = [5, 9, 5, 7];
/** The sequences (indices into OURS) of each decode step, one token each. */
const STEPS = [[0, 1, 2, 3], [1, 2, 3], [0, 1, 2], [2, 3], [0, 1, 2, 3]];

// Graph runs per decodeBatch call, counted at the scheduler.
let runs = 0;
const compute = Scheduler.prototype.compute;
Scheduler.prototype.compute = function (this: Scheduler, ...a: Parameters<typeof compute>) {
  runs++;
  return compute.apply(this, a);
};

function argmax(x: Float32Array): number {
  let b = 0;
  for (let i = 1; i < x.length; i++) if (x[i] > x[b]) b = i;
  return b;
}

for (const flashAttn of [false, true]) {
  Deno.test(`kv stream gaps: one micro-batch over streams with gaps (flash attention ${flashAttn})`, async () => {
    const oracle = await loadOracle();
    using om = oracle.load(TOLSTOY_F16);
    using model = await Model.load(TOLSTOY_F16);
    const o = { nCtx: 6 * 256, nSeqMax: 6, nBatch: 64, kvUnified: false, flashAttn } as const;
    using oc = await OracleBatchContext.create(om, o);
    using gaps = await Context.create(model, { ...o, threads: 2, kvStreamGaps: true });
    using plain = await Context.create(model, { ...o, threads: 2 });
    // llama.cpp on the original ids, for the default (a micro-batch per gap).
    using ocGaps = await OracleBatchContext.create(om, o);
    const r = mulberry32(0x9a95);
    const prompts = LENS.map((n) =>
      Array.from({ length: n }, () => 3 + Math.floor(r() * (om.nVocab - 3)))
    );
    const batch = (seqs: number[], toks: number[][], ids: number[], pos?: number[]) => ({
      tokens: seqs.flatMap((k) => toks[k]),
      seqIds: seqs.flatMap((k) => toks[k].map(() => ids[k])),
      pos: pos ? seqs.flatMap((k) => toks[k].map((_, i) => pos[k] + i)) : undefined,
      logits: seqs.flatMap((k) => toks[k].map((_, i) => i === toks[k].length - 1)),
    });
    const past = LENS.map(() => 0);
    let worst = 0;
    let last: Float32Array[] = [];
    const step = async (seqs: number[], toks: number[][], what: string) => {
      const want = oc.decode(batch(seqs, toks, THEIRS, past));
      assert.equal(want.rc, 0, what);
      const wantGaps = ocGaps.decode(batch(seqs, toks, OURS, past));
      assert.equal(wantGaps.rc, 0, what);
      runs = 0;
      const got = (await gaps.decodeBatch(batch(seqs, toks, OURS, past))).logits;
      const gapRuns = runs;
      runs = 0;
      const ref = (await plain.decodeBatch(batch(seqs, toks, OURS, past))).logits;
      const plainRuns = runs;
      got.forEach((l, i) => {
        const d = maxAbsDiff(l, want.logits[i]);
        worst = Math.max(worst, d);
        assert.ok(d <= TOL && (!EXACT || d === 0), `${what} row ${i}: gaps vs llama.cpp ${d}`);
        const e = maxAbsDiff(ref[i], wantGaps.logits[i]);
        assert.ok(e <= TOL && (!EXACT || e === 0), `${what} row ${i}: default vs llama.cpp ${e}`);
      });
      for (const k of seqs) past[k] += toks[k].length;
      return { got, gapRuns, plainRuns };
    };
    // The prompts: split_equal makes micro-batches of equal slices either way.
    await step([0, 1, 2, 3], prompts, "prompts");
    last = (await step([0, 1, 2, 3], prompts.map((p) => [p[0]]), "first step")).got;
    let next = OURS.map((_, k) => [argmax(last[k])]);
    for (const [j, seqs] of STEPS.entries()) {
      const { got, gapRuns, plainRuns } = await step(seqs, next, `step ${j}`);
      // One graph run for the whole step, whatever the gaps; by default one per run of ids.
      const ids = seqs.map((k) => OURS[k]);
      const idRuns = ids.filter((id, i) => i === 0 || id !== ids[i - 1] + 1).length;
      assert.equal(gapRuns, 1, `step ${j}: ${gapRuns} graph runs`);
      assert.equal(plainRuns, idRuns, `step ${j}: ${plainRuns} graph runs by default`);
      next = next.map((t) => [...t]);
      seqs.forEach((k, i) => (next[k] = [argmax(got[i])]));
    }
    console.log(`flash attention ${flashAttn}: gaps vs llama.cpp renumbered, max |diff| ${worst}`);
  });
}
