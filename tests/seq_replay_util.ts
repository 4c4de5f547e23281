/**
 * A seeded random replay of sequence operations on our context and on
 * llama.cpp (tests/oracle/oracle_batch.ts: flash attention off, F16 cache,
 * kv_unified or one KV stream per sequence), compared after every operation;
 * tests/seq_replay_test.ts (unified) and tests/seq_replay_streams_test.ts
 * run it.
 *
 * Operations: decodes of batches touching 1-3 sequences (one or several
 * tokens each, in sequence order or interleaved, with varied output flags),
 * decodes of tokens shared by two sequences whose cells agree (forking one
 * with seq_rm + seq_cp first when none do), seq_rm of ranges (also of
 * sequence -1, and open ends p0/p1 = -1), seq_cp, seq_keep, seq_add and
 * seq_div (whose K-shift, the RoPE re-rotation of the cached keys, runs at
 * the next decode on both sides), the context-shift pattern (seq_rm of a
 * prefix, then seq_add of -n to the rest), batches llama.cpp rejects
 * (positions that skip, repeat or decrease, a token outside the vocabulary,
 * coupled sequences that differ), and clear. Many hit empty sequences or
 * empty ranges. llama.cpp's defrag is deprecated (a no-op in this revision)
 * and our context has none, so there is no defrag.
 *
 * The cache is small (256 cells over 4 sequences), so it fills: a batch
 * that does not fit must fail on both sides (llama_decode returns 1, ours
 * throws ContextError) and leave both caches as they were. When the K-shift
 * runs matters to the bits: llama.cpp runs it after it validated a batch
 * and before it looks for cells, so a batch that does not fit still applies
 * it, a rejected batch (-1) does not, and two seq_adds on either side of a
 * rejected batch become one rotation. The counters printed at the end say
 * how often each case came up, and the test requires each at least once.
 *
 * After every operation seq_pos_min/max of every sequence must agree;
 * after every decode, every output row's logits must be within 1e-4, and
 * bit-identical where our SIMD level follows llama.cpp's CPU variant
 * (tests/parity_util.ts parityGate); the largest difference is printed.
 *
 * With one KV stream per sequence (kvUnified false on both sides) the same
 * operations run but for two: a seq_cp copies whole sequences only
 * (llama.cpp asserts it across streams), and tokens shared by two sequences
 * are refused by both (llama_decode returns 1: split_equal cannot place
 * them). seq_keep then looks at its own stream only, as llama.cpp's does.
 */
import assert from "node:assert/strict";
import { Model } from "../lib/model/model.ts";
import { OptionError } from "../lib/options.ts";
import { Context, ContextDisposedError, ContextError } from "../lib/runtime/context.ts";
import { loadOracle, maxAbsDiff } from "./oracle/oracle.ts";
import { type OracleBatch, OracleBatchContext } from "./oracle/oracle_batch.ts";
import { TOLSTOY_F16 } from "./oracle/models.ts";
import { parityGate } from "./parity_util.ts";
import { mulberry32 } from "./rng.ts";

const N_SEQ = 4;
const N_CTX = 256;
/** Most tokens per decode; micro-batches of half that, so long batches take two graphs. */
const N_BATCH = 64;
const N_UBATCH = 32;
const TOL = 1e-4;

type Op =
  | { kind: "decode"; batch: OracleBatch; shared: boolean; invalid?: string }
  | { kind: "rm"; seq: number; p0: number; p1: number }
  | { kind: "cp"; src: number; dst: number; p0: number; p1: number }
  | { kind: "keep"; seq: number }
  | { kind: "add"; seq: number; p0: number; p1: number; delta: number }
  | { kind: "div"; seq: number; p0: number; p1: number; d: number }
  | { kind: "clear" };

/** Reads positions from the oracle to choose operations that keep batches valid. */
interface Positions {
  min(seq: number): number;
  max(seq: number): number;
}

class OpSource {
  #r: () => number;
  #nVocab: number;
  #streams: boolean;

  /** With `streams` (one KV stream per sequence) sequences are copied only whole. */
  constructor(seed: number, nVocab: number, streams = false) {
    this.#r = mulberry32(seed);
    this.#nVocab = nVocab;
    this.#streams = streams;
  }

  #int(lo: number, hi: number): number {
    return lo + Math.floor(this.#r() * (hi - lo + 1));
  }
  #chance(p: number): boolean {
    return this.#r() < p;
  }
  #token(): number {
    return this.#int(3, this.#nVocab - 1);
  }

  /**
   * 0..n-1 in a random order (Fisher-Yates; sorting with a random
   * comparator is not reproducible: V8 may call it a different number of
   * times from one run to the next).
   */
  #shuffled(n: number): number[] {
    const a = [...Array(n).keys()];
    for (let i = n - 1; i > 0; i--) {
      const j = this.#int(0, i);
      [a[i], a[j]] = [a[j], a[i]];
    }
    return a;
  }

  /** A range [p0, p1) around a sequence's positions, with -1 open ends at times. */
  #range(pos: Positions, seq: number): [number, number] {
    const lo = pos.min(seq) < 0 ? 0 : pos.min(seq);
    const hi = pos.max(seq) < 0 ? 20 : pos.max(seq);
    const p = () => Math.max(0, this.#int(lo - 3, hi + 3));
    const u = this.#r();
    if (u < 0.15) return [-1, -1];
    if (u < 0.35) return [p(), -1];
    if (u < 0.5) return [-1, p()];
    const a = p(), b = p();
    return a <= b ? [a, b] : [b, a];
  }

  /** Where a sequence's next tokens go: after its last position, or anywhere when empty. */
  #start(pos: Positions, seq: number): number {
    const m = pos.max(seq);
    if (m >= 0) return m + 1;
    return this.#chance(0.7) ? 0 : this.#int(1, 40);
  }

  #decode(pos: Positions, grow: boolean): Op {
    const seqs = this.#shuffled(N_SEQ).slice(0, this.#int(1, 3));
    const lens = seqs.map(() => {
      const u = this.#r();
      return u < (grow ? 0.3 : 0.55)
        ? 1
        : u < (grow ? 0.6 : 0.85)
        ? this.#int(2, 6)
        : this.#int(7, 20);
    });
    const order: [number, number][] = [];
    if (this.#chance(0.5)) {
      seqs.forEach((_, k) => {
        for (let i = 0; i < lens[k]; i++) order.push([k, i]);
      });
    } else {
      for (let i = 0; i < Math.max(...lens); i++) {
        seqs.forEach((_, k) => i < lens[k] && order.push([k, i]));
      }
    }
    const starts = seqs.map((s) => this.#start(pos, s));
    const u = this.#r();
    const out = (k: number, i: number) =>
      u < 0.65
        ? i === lens[k] - 1
        : u < 0.8
        ? true
        : u < 0.95
        ? i === lens[k] - 1 || this.#chance(0.3)
        : false;
    return {
      kind: "decode",
      shared: false,
      batch: {
        tokens: order.map(() => this.#token()),
        pos: order.map(([k, i]) => starts[k] + i),
        seqIds: order.map(([k]) => seqs[k]),
        logits: order.map(([k, i]) => out(k, i)),
      },
    };
  }

  /**
   * Tokens in two sequences at once. llama.cpp requires their cells to
   * agree (same min and max); when no pair does, one is forked first
   * (seq_rm of the whole of b, seq_cp of a to b), as llama.cpp's parallel
   * example shares a prompt.
   */
  #shared(pos: Positions): Op[] {
    const pairs: [number, number][] = [];
    for (let a = 0; a < N_SEQ; a++) {
      for (let b = a + 1; b < N_SEQ; b++) {
        if (pos.min(a) === pos.min(b) && pos.max(a) === pos.max(b)) pairs.push([a, b]);
      }
    }
    const ops: Op[] = [];
    let a: number, b: number;
    if (pairs.length > 0) {
      [a, b] = pairs[this.#int(0, pairs.length - 1)];
    } else {
      [a, b] = this.#shuffled(N_SEQ);
      ops.push({ kind: "rm", seq: b, p0: -1, p1: -1 }, {
        kind: "cp",
        src: a,
        dst: b,
        p0: -1,
        p1: -1,
      });
    }
    const n = this.#int(1, 5);
    const start = this.#start(pos, a);
    ops.push({
      kind: "decode",
      shared: true,
      batch: {
        tokens: Array.from({ length: n }, () => this.#token()),
        pos: Array.from({ length: n }, (_, i) => start + i),
        seqIds: Array.from({ length: n }, () => this.#chance(0.5) ? [a, b] : [b, a]),
        logits: Array.from({ length: n }, (_, i) => i === n - 1 || this.#chance(0.3)),
      },
    });
    return ops;
  }

  /**
   * A batch llama.cpp rejects (llama_batch_allocr::init; llama_decode
   * returns -1 before it touches the cache, so a pending K-shift stays
   * pending): positions that skip or repeat, decrease within a sequence,
   * a token id outside the vocabulary, or tokens shared by two sequences
   * whose cells differ.
   */
  #invalid(pos: Positions, seq: number): Op {
    const decode = (batch: OracleBatch, invalid: string, shared = false): Op => ({
      kind: "decode",
      shared,
      invalid,
      batch: { ...batch, logits: batch.tokens.map((_, i) => i === batch.tokens.length - 1) },
    });
    const u = this.#r();
    const m = pos.max(seq);
    if (u < 0.5 && m >= 0) {
      const start = this.#chance(0.6) ? m + this.#int(2, 4) : Math.max(0, m - this.#int(0, 2));
      const n = this.#int(1, 3);
      return decode({
        tokens: Array.from({ length: n }, () => this.#token()),
        pos: Array.from({ length: n }, (_, i) => start + i),
        seqIds: Array(n).fill(seq),
      }, start > m ? "positions skip" : "positions repeat");
    }
    const start = this.#start(pos, seq);
    if (u < 0.65) {
      return decode({
        tokens: [this.#token(), this.#token()],
        pos: [start + 1, start],
        seqIds: [seq, seq],
      }, "positions decrease");
    }
    if (u < 0.8) {
      return decode(
        { tokens: [this.#nVocab + this.#int(0, 5)], pos: [start], seqIds: [seq], logits: [true] },
        "token outside the vocabulary",
      );
    }
    const other = [...Array(N_SEQ).keys()].find((b) =>
      pos.min(b) !== pos.min(seq) || pos.max(b) !== pos.max(seq)
    );
    if (other === undefined) {
      return decode(
        { tokens: [this.#nVocab], pos: [start], seqIds: [seq], logits: [true] },
        "token outside the vocabulary",
      );
    }
    return decode(
      { tokens: [this.#token()], pos: [start], seqIds: [[seq, other]] },
      "coupled sequences differ",
      true,
    );
  }

  /**
   * seq_add, a rejected batch, seq_add again, then a decode: llama.cpp
   * rotates the keys once, by both shifts together, at the decode (the
   * rejected batch does not run the memory update); rotating twice rounds
   * differently.
   */
  #shiftAroundInvalid(pos: Positions, seq: number): Op[] {
    const m = pos.max(seq);
    if (m < 0) return [this.#invalid(pos, seq)];
    const d1 = this.#int(1, 9), d2 = this.#int(1, 9);
    const gap = m + d1 + 2;
    return [
      { kind: "add", seq, p0: -1, p1: -1, delta: d1 },
      {
        kind: "decode",
        shared: false,
        invalid: "positions skip",
        batch: { tokens: [this.#token()], pos: [gap], seqIds: [seq], logits: [true] },
      },
      { kind: "add", seq, p0: -1, p1: -1, delta: d2 },
      {
        kind: "decode",
        shared: false,
        batch: { tokens: [this.#token()], pos: [m + d1 + d2 + 1], seqIds: [seq], logits: [true] },
      },
    ];
  }

  /**
   * The next operations (several for the context-shift and fork patterns). While `grow`,
   * mostly decodes, so that the cache fills up.
   */
  next(pos: Positions, grow: boolean): Op[] {
    const u = grow && this.#chance(0.6) ? 0 : this.#r() * 100;
    const seq = this.#int(0, N_SEQ - 1);
    if (u < 48) return [this.#decode(pos, grow)];
    if (u < 53) return this.#shared(pos);
    if (u < 65) {
      const [p0, p1] = this.#range(pos, seq);
      return [{ kind: "rm", seq: this.#chance(0.1) ? -1 : seq, p0, p1 }];
    }
    if (u < 73) {
      let [p0, p1] = this.#range(pos, seq);
      // llama.cpp copies only whole sequences between streams (it asserts)
      if (this.#streams) [p0, p1] = [-1, -1];
      return [{ kind: "cp", src: seq, dst: this.#int(0, N_SEQ - 1), p0, p1 }];
    }
    if (u < 75) return [{ kind: "keep", seq }];
    if (u < 85) {
      const [p0, p1] = this.#range(pos, seq);
      // positions drift down when they grew large, so they stay near the model's context
      const delta = pos.max(seq) > 300 ? this.#int(-40, -1) : this.#int(-12, 12);
      return [{ kind: "add", seq, p0, p1, delta }];
    }
    if (u < 90) {
      const [p0, p1] = this.#range(pos, seq);
      return [{ kind: "div", seq, p0, p1, d: this.#int(1, 4) }];
    }
    if (u < 94) return [this.#invalid(pos, seq)];
    if (u < 95) return this.#shiftAroundInvalid(pos, seq);
    if (u < 99) {
      // context shift: drop the first n positions, move the rest down by n
      const lo = pos.min(seq), n = this.#int(1, 16);
      if (lo < 0) return [{ kind: "rm", seq, p0: -1, p1: -1 }];
      return [
        { kind: "rm", seq, p0: lo, p1: lo + n },
        { kind: "add", seq, p0: lo + n, p1: -1, delta: -n },
      ];
    }
    return [{ kind: "clear" }];
  }
}

function describe(op: Op): string {
  if (op.kind !== "decode") return JSON.stringify(op);
  const b = op.batch;
  return `decode${op.shared ? " (shared)" : ""}${
    op.invalid ? ` (${op.invalid})` : ""
  } of ${b.tokens.length}: ` +
    b.tokens.map((_, i) =>
      `${JSON.stringify(b.seqIds![i])}@${b.pos![i]}${
        (b.logits?.[i] ?? i === b.tokens.length - 1) ? "*" : ""
      }`
    )
      .join(" ");
}

/** What a replay runs. */
export interface ReplayOptions {
  /** The seed of the operations. */
  seed: number;
  /** Operations at least (a pattern of several may end past it). */
  nOps: number;
  /** kv_unified on both sides (default true). */
  kvUnified?: boolean;
  /** Cases the replay must have reached (counter names, see the module doc). */
  required: readonly string[];
}

/** Replays `o.nOps` seeded operations on ours and llama.cpp and compares them after each. */
export async function replay(o: ReplayOptions): Promise<void> {
  const SEED = o.seed, N_OPS = o.nOps;
  const kvUnified = o.kvUnified ?? true;
  const oracle = await loadOracle();
  const exact = parityGate(oracle.cpu).skip === "";
  using om = oracle.load(TOLSTOY_F16);
  using oc = await OracleBatchContext.create(om, {
    nCtx: N_CTX,
    nBatch: N_BATCH,
    nUbatch: N_UBATCH,
    nSeqMax: N_SEQ,
    kvUnified,
  });
  using model = await Model.load(TOLSTOY_F16);
  using ctx = await Context.create(model, {
    nCtx: N_CTX,
    nBatch: N_BATCH,
    nUbatch: N_UBATCH,
    nSeqMax: N_SEQ,
    threads: 2,
    kvUnified,
  });
  assert.equal(ctx.nCtx, oc.nCtx);

  const pos: Positions = { min: (s) => oc.seqPosMin(s), max: (s) => oc.seqPosMax(s) };
  const src = new OpSource(SEED, om.nVocab, !kvUnified);
  const counts = new Map<string, number>();
  const count = (k: string) => counts.set(k, (counts.get(k) ?? 0) + 1);
  const history: string[] = [];
  const recent = () => history.slice(-16).join("\n");
  let worst = 0, rows = 0;
  /** seq_add/seq_div of non-empty sequences since the cache last ran its update. */
  let shifts = 0;
  /** A decode that found no cells applied a K-shift (llama.cpp does, before it looks for cells). */
  let shiftedAtFailure = false;
  /** `shifts` when a rejected batch left a K-shift pending, else 0. */
  let shiftsAtInvalid = 0;

  let n = 0;
  while (n < N_OPS) {
    // phases of 100 operations: churn (all kinds alike), then growth (mostly decodes)
    for (const op of src.next(pos, Math.floor(n / 100) % 2 === 1)) {
      n++;
      const what = `op ${n} ${describe(op)}`;
      history.push(what);
      const before = [...Array(N_SEQ).keys()].map((s) => [pos.min(s), pos.max(s)]);
      count(op.kind);
      switch (op.kind) {
        case "decode": {
          const want = oc.decode(op.batch);
          const rcs = op.invalid ? [-1] : [0, 1];
          assert.ok(rcs.includes(want.rc), `${what}: llama_decode returned ${want.rc}`);
          let got: Float32Array[] | null = null;
          try {
            got = (await ctx.decodeBatch(op.batch)).logits;
          } catch (e) {
            // a batch that does not fit, or positions that do not continue the cache, are a
            // ContextError; a token id outside the vocabulary an OptionError (a bad argument)
            const rejected = e instanceof ContextError && !(e instanceof ContextDisposedError);
            if (!rejected && !(e instanceof OptionError && want.rc === -1)) throw e;
            assert.notEqual(want.rc, 0, `${what}: ours threw ${e.message}, llama.cpp decoded it`);
          }
          if (want.rc !== 0) {
            assert.equal(got, null, `${what}: llama.cpp returned ${want.rc}, ours decoded it`);
          }
          if (want.rc === -1) {
            // llama.cpp rejected the batch before its memory update: shifts stay pending
            count(shifts > 0 ? "rejected batch with a K-shift pending" : "rejected batch");
            if (shifts > 0) shiftsAtInvalid = shifts;
            break;
          }
          if (want.rc === 1 && op.shared && !kvUnified) count("shared tokens refused");
          else if (want.rc === 1) {
            count(shifts > 0 ? "decode failed with a K-shift pending" : "decode failed");
            shiftedAtFailure ||= shifts > 0;
          } else {
            assert.ok(got, what);
            assert.equal(got.length, want.logits.length, `${what}: output rows`);
            got.forEach((l, i) => {
              const d = maxAbsDiff(l, want.logits[i]);
              worst = Math.max(worst, d);
              if (d > TOL || (exact && d !== 0)) {
                assert.fail(
                  `${what}: row ${want.outputIds[i]}: logits differ by ${d}` +
                    `${exact ? " (bit-identity expected)" : ""}\nlast ops:\n${recent()}`,
                );
              }
            });
            rows += got.length;
            if (shifts > 0) count("decode after a K-shift");
            if (shifts > 0 && shiftedAtFailure) {
              count("decode after K-shifts on both sides of a failed decode");
            }
            if (shiftsAtInvalid > 0 && shifts > shiftsAtInvalid) {
              count("decode after K-shifts on both sides of a rejected batch");
            }
            shiftedAtFailure = false;
            if (op.shared) count("shared-token decode");
            if (op.batch.seqIds && new Set(op.batch.seqIds.flat()).size > 1) {
              count("decode of several sequences");
            }
            if (op.batch.tokens.length > N_UBATCH) count("decode of two micro-batches");
          }
          shifts = 0;
          shiftsAtInvalid = 0;
          break;
        }
        case "rm":
          assert.equal(
            ctx.seqRm(op.seq, op.p0, op.p1),
            oc.seqRm(op.seq, op.p0, op.p1),
            `${what}: seq_rm's result`,
          );
          break;
        case "cp":
          oc.seqCp(op.src, op.dst, op.p0, op.p1);
          ctx.seqCp(op.src, op.dst, op.p0, op.p1);
          break;
        case "keep":
          oc.seqKeep(op.seq);
          ctx.seqKeep(op.seq);
          break;
        case "add":
          oc.seqAdd(op.seq, op.p0, op.p1, op.delta);
          ctx.seqAdd(op.seq, op.p0, op.p1, op.delta);
          break;
        case "div":
          oc.seqDiv(op.seq, op.p0, op.p1, op.d);
          ctx.seqDiv(op.seq, op.p0, op.p1, op.d);
          break;
        case "clear":
          oc.clear();
          ctx.clear();
          shifts = 0;
          shiftedAtFailure = false;
          shiftsAtInvalid = 0;
          break;
      }
      for (let s = 0; s < N_SEQ; s++) {
        const want = [pos.min(s), pos.max(s)];
        const got = [ctx.seqPosMin(s), ctx.seqPosMax(s)];
        if (got[0] !== want[0] || got[1] !== want[1]) {
          assert.fail(
            `${what}: seq ${s}: ours [${got}], llama.cpp [${want}] (before: ${
              JSON.stringify(before)
            })\nlast ops:\n${recent()}`,
          );
        }
      }
      if ((op.kind === "add" || op.kind === "div") && before[op.seq][1] >= 0) shifts++;
    }
  }

  console.log(
    `${n} operations (seed ${SEED}): ${rows} output rows compared, logits max |diff| ` +
      `${worst === 0 ? "0" : worst.toExponential(2)}` +
      (exact ? "" : " (our SIMD level does not follow llama.cpp's variant here)"),
  );
  console.log([...counts].map(([k, v]) => `${k}: ${v}`).join(", "));
  // the replay must have reached the cases it is for
  for (const k of o.required) {
    assert.ok((counts.get(k) ?? 0) > 0, `the replay never made a "${k}"`);
  }
}
