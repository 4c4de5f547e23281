/**
 * One KV stream per sequence (kvUnified false) beyond the batch parity and
 * replay tests (seq_batch_parity_test.ts, seq_replay_streams_test.ts):
 *
 * - the cache layout: llama.cpp's n_ctx_seq rule (checked against the
 *   oracle's n_ctx), streams isolated (a sequence's cells fill only its own
 *   stream), a copy between streams copies the bytes;
 * - state files: the whole context and one sequence saved and restored into
 *   fresh contexts continue bit for bit as the saved one would (against the
 *   saved context itself); a state of another layout (unified vs streams,
 *   another stream count) is refused with an error naming nStream;
 * - a context shift on one stream (keep the first tokens, discard half of
 *   the rest, shift), while another sequence decodes in the same batches:
 *   logits after every step against llama.cpp with kv_unified = false
 *   doing the same.
 */
import assert from "node:assert/strict";
import { Model } from "../lib/model/model.ts";
import { Context } from "../lib/runtime/context.ts";
import { StateError, stateFromBytes, stateToBytes } from "../lib/runtime/state.ts";
import { loadOracle, maxAbsDiff } from "./oracle/oracle.ts";
import { OracleBatchContext } from "./oracle/oracle_batch.ts";
import { TOLSTOY_F16 } from "./oracle/models.ts";
import { parityGate } from "./parity_util.ts";
import { mulberry32 } from "./rng.ts";

const EXACT = parityGate((await loadOracle()).cpu).skip === "";
const TOL = 1e-4;

function argmax(x: Float32Array): number {
  let b = 0;
  for (let i = 1; i < x.length; i++) if (x[i] > x[b]) b = i;
  return b;
}

function near(got: Float32Array, want: Float32Array, what: string): number {
  const d = maxAbsDiff(got, want);
  assert.ok(d <= TOL && (!EXACT || d === 0), `${what}: logits differ by ${d}`);
  return d;
}

const rand = mulberry32(0x57e4);
const tokens = (n: number, nVocab: number) =>
  Array.from({ length: n }, () => 3 + Math.floor(rand() * (nVocab - 3)));

Deno.test("kv streams: llama.cpp's n_ctx_seq, streams isolated, a copy between streams", async () => {
  const oracle = await loadOracle();
  using om = oracle.load(TOLSTOY_F16);
  using model = await Model.load(TOLSTOY_F16);
  for (const [nCtx, nSeq] of [[256, 4], [1000, 3], [2048, 2]]) {
    using oc = await OracleBatchContext.create(om, { nCtx, nSeqMax: nSeq, kvUnified: false });
    using ctx = await Context.create(model, { nCtx, nSeqMax: nSeq, kvUnified: false });
    assert.equal(ctx.nCtx, oc.nCtx, `nCtx ${nCtx}, ${nSeq} sequences`);
    assert.equal(ctx.nCtxSeq * nSeq, ctx.nCtx);
    assert.equal(ctx.kvCache!.nStream, nSeq);
  }
  using ctx = await Context.create(model, { nCtx: 512, nSeqMax: 2, kvUnified: false });
  const kv = ctx.kvCache!;
  assert.equal(kv.size, 256);
  // 200 tokens of sequence 1 fill 200 cells of stream 1 only; 256 more do not fit it
  await ctx.decodeBatch({ tokens: tokens(200, model.hparams.nVocab), seqIds: Array(200).fill(1) });
  assert.deepEqual([kv.stream(0).cells.used, kv.stream(1).cells.used], [0, 200]);
  await assert.rejects(
    ctx.decodeBatch({ tokens: tokens(60, model.hparams.nVocab), seqIds: Array(60).fill(1) }),
    /no room/,
  );
  // a part of a sequence cannot be copied into another stream (llama.cpp asserts)
  assert.throws(() => ctx.seqCp(1, 0, 10, 20), /whole sequences/);
  ctx.seqCp(1, 0);
  assert.deepEqual([ctx.seqPosMin(0), ctx.seqPosMax(0)], [0, 199]);
  const next = tokens(1, model.hparams.nVocab);
  const a = await ctx.decodeBatch({ tokens: [next[0], next[0]], seqIds: [0, 1], logits: [1, 1] });
  // the same cells, keys and values in both streams: the same logits
  assert.equal(maxAbsDiff(a.logits[0], a.logits[1]), 0);
  // tokens shared by two sequences need one stream
  await assert.rejects(
    ctx.decodeBatch({ tokens: next, pos: [201], seqIds: [[0, 1]] }),
    /kvUnified false/,
  );
});

Deno.test("kv streams: state files round trip, and a state of another layout is refused", async () => {
  using model = await Model.load(TOLSTOY_F16);
  const nVocab = model.hparams.nVocab;
  const opts = { nCtx: 768, nSeqMax: 3, kvUnified: false } as const;
  using ctx = await Context.create(model, opts);
  const lens = [17, 40, 9];
  const batch = lens.flatMap((n, s) => Array.from({ length: n }, () => s));
  await ctx.decodeBatch({ tokens: tokens(batch.length, nVocab), seqIds: batch });
  ctx.seqAdd(1, 5, -1, 3); // a pending K-shift travels with the state
  const whole = await stateToBytes(ctx);
  const seq1 = await stateToBytes(ctx, { seq: 1 });
  const step = tokens(3, nVocab);
  const stepBatch = { tokens: step, seqIds: [0, 1, 2], logits: [1, 1, 1] };
  const want = (await ctx.decodeBatch(stepBatch)).logits;

  using other = await Context.create(model, opts);
  await stateFromBytes(other, whole);
  for (let s = 0; s < 3; s++) {
    assert.deepEqual([other.seqPosMin(s), other.seqPosMax(s)], [
      s === 1 ? 0 : 0,
      lens[s] - 1 + (s === 1 ? 3 : 0),
    ]);
  }
  const got = (await other.decodeBatch(stepBatch)).logits;
  got.forEach((l, s) => assert.equal(maxAbsDiff(l, want[s]), 0, `whole state, sequence ${s}`));

  // sequence 1 into sequence 2 of a context whose stream 2 holds something else
  using third = await Context.create(model, opts);
  await third.decodeBatch({ tokens: tokens(30, nVocab), seqIds: Array(30).fill(2) });
  await stateFromBytes(third, seq1, { dstSeq: 2 });
  assert.deepEqual([third.seqPosMin(2), third.seqPosMax(2)], [0, lens[1] - 1 + 3]);
  // (a batch of the same shape: a one-row graph rounds differently from a three-row one)
  const r = await third.decodeBatch({ ...stepBatch, tokens: [step[0], step[2], step[1]] });
  assert.equal(maxAbsDiff(r.logits[2], want[1]), 0, "sequence state moved into stream 2");

  // another layout: nStream named
  using unified = await Context.create(model, { nCtx: 768, nSeqMax: 3 });
  await assert.rejects(stateFromBytes(unified, whole), (e: Error) => {
    assert.ok(e instanceof StateError, String(e));
    assert.match(e.message, /nStream 3 in the state, 1 in the cache/);
    return true;
  });
  const uState = await stateToBytes(unified);
  await assert.rejects(stateFromBytes(ctx, uState), /nStream 1 in the state, 3 in the cache/);
  using two = await Context.create(model, { nCtx: 768, nSeqMax: 2, kvUnified: false });
  // (3 streams are 3 sequences: the first thing that does not fit is a sequence id)
  await assert.rejects(
    stateFromBytes(two, whole),
    /sequence 2, out of range: context has nSeqMax 2/,
  );
  // a sequence state still moves between layouts (it is one sequence's cells)
  await stateFromBytes(unified, seq1, { dstSeq: 0 });
  assert.deepEqual([unified.seqPosMin(0), unified.seqPosMax(0)], [0, lens[1] - 1 + 3]);
});

Deno.test("kv streams: a context shift on one stream, against llama.cpp kv_unified=false", async () => {
  const oracle = await loadOracle();
  using om = oracle.load(TOLSTOY_F16);
  const o = { nCtx: 512, nSeqMax: 2, nBatch: 512, kvUnified: false } as const;
  using oc = await OracleBatchContext.create(om, o);
  using model = await Model.load(TOLSTOY_F16);
  using ctx = await Context.create(model, { ...o, threads: 2 });
  const nCtxSeq = ctx.nCtxSeq;
  assert.equal(nCtxSeq, 256);
  const nVocab = om.nVocab;
  // sequence 1 nearly fills its stream, sequence 0 has a short prompt
  const p0 = tokens(20, nVocab), p1 = tokens(240, nVocab);
  const prompt = { tokens: [...p0, ...p1], seqIds: [...p0.map(() => 0), ...p1.map(() => 1)] };
  const outs = prompt.tokens.map((_, i) => i === p0.length - 1 || i === prompt.tokens.length - 1);
  const w = oc.decode({ ...prompt, logits: outs });
  assert.equal(w.rc, 0);
  let last = (await ctx.decodeBatch({ ...prompt, logits: outs })).logits;
  last.forEach((l, k) => near(l, w.logits[k], `prompt row ${k}`));
  last = w.logits;
  const nKeep = 4;
  let shifts = 0, worst = 0;
  const past = [p0.length, p1.length];
  for (let step = 0; step < 40; step++) {
    // llama-server's rule: shift when the next token would fill the stream
    if (past[1] + 1 >= nCtxSeq) {
      const nDiscard = Math.trunc((past[1] - nKeep) / 2);
      for (const c of [oc, ctx]) {
        c.seqRm(1, nKeep, nKeep + nDiscard);
        c.seqAdd(1, nKeep + nDiscard, past[1], -nDiscard);
      }
      past[1] -= nDiscard;
      shifts++;
    }
    const b = { tokens: last.map(argmax), pos: [past[0], past[1]], seqIds: [0, 1], logits: [1, 1] };
    const want = oc.decode(b);
    assert.equal(want.rc, 0, `step ${step}`);
    const got = (await ctx.decodeBatch(b)).logits;
    got.forEach((l, k) =>
      worst = Math.max(worst, near(l, want.logits[k], `step ${step} seq ${k}`))
    );
    assert.deepEqual([ctx.seqPosMin(1), ctx.seqPosMax(1)], [oc.seqPosMin(1), oc.seqPosMax(1)]);
    last = want.logits;
    past[0]++, past[1]++;
  }
  assert.ok(shifts >= 1, "the stream never filled");
  console.log(`${shifts} context shift(s) on stream 1; logits max |diff| ${worst}`);
});
