/**
 * A seeded random replay of sequence operations on our context and on
 * llama.cpp (tests/oracle/oracle_batch.ts: kv_unified, flash attention off,
 * F16 cache), compared after every operation.
 *
 * Operations: decodes of batches touching 1-3 sequences (one or several
 * tokens each, in sequence order or interleaved, with varied output flags),
 * decodes of tokens shared by two sequences whose cells agree, seq_rm of
 * ranges (also of sequence -1, and open ends p0/p1 = -1), seq_cp, seq_keep,
 * seq_add and seq_div (whose K-shift, the RoPE re-rotation of the cached
 * keys, runs at the next decode on both sides), the context-shift pattern
 * (seq_rm of a prefix, then seq_add of -n to the rest), and clear. Many hit
 * empty sequences or empty ranges. llama.cpp's defrag is deprecated (a
 * no-op in this revision) and our context has none, so there is no defrag.
 *
 * The cache is small (256 cells over 4 sequences), so it fills: a batch
 * that does not fit must fail on both sides (llama_decode returns 1, ours
 * throws ContextError) and leave both caches as they were. llama.cpp
 * applies a pending K-shift before it looks for cells, so a failed decode
 * still applies it; the counters printed at the end say how often that
 * case and the others came up.
 *
 * After every operation seq_pos_min/max of every sequence must agree;
 * after every decode, every output row's logits must be within 1e-4 (the
 * overall largest difference is printed).
 */
import assert from "node:assert/strict";
import { Model } from "../lib/model/model.ts";
import { Context, ContextDisposedError, ContextError } from "../lib/runtime/context.ts";
import { loadOracle, maxAbsDiff } from "./oracle/oracle.ts";
import { type OracleBatch, OracleBatchContext } from "./oracle/oracle_batch.ts";
import { TOLSTOY_F16 } from "./oracle/models.ts";
import { parityGate } from "./parity_util.ts";
import { mulberry32 } from "./rng.ts";

const SEED = 0x13a5;
const N_OPS = 600;
const N_SEQ = 4;
const N_CTX = 256;
/** Most tokens per decode; micro-batches of half that, so long batches take two graphs. */
const N_BATCH = 64;
const N_UBATCH = 32;
const TOL = 1e-4;

type Op =
  | { kind: "decode"; batch: OracleBatch; shared: boolean }
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

  constructor(seed: number, nVocab: number) {
    this.#r = mulberry32(seed);
    this.#nVocab = nVocab;
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
    const seqs = [...Array(N_SEQ).keys()].sort(() => this.#r() - 0.5).slice(0, this.#int(1, 3));
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

  /** Tokens in two sequences at once; llama.cpp requires their cells to agree (same min and max). */
  #shared(pos: Positions): Op | null {
    const pairs: [number, number][] = [];
    for (let a = 0; a < N_SEQ; a++) {
      for (let b = a + 1; b < N_SEQ; b++) {
        if (pos.min(a) === pos.min(b) && pos.max(a) === pos.max(b)) pairs.push([a, b]);
      }
    }
    if (pairs.length === 0) return null;
    const [a, b] = pairs[this.#int(0, pairs.length - 1)];
    const n = this.#int(1, 5);
    const start = this.#start(pos, a);
    return {
      kind: "decode",
      shared: true,
      batch: {
        tokens: Array.from({ length: n }, () => this.#token()),
        pos: Array.from({ length: n }, (_, i) => start + i),
        seqIds: Array.from({ length: n }, () => this.#chance(0.5) ? [a, b] : [b, a]),
        logits: Array.from({ length: n }, (_, i) => i === n - 1 || this.#chance(0.3)),
      },
    };
  }

  /**
   * The next operations (two for the context-shift pattern). While `grow`,
   * mostly decodes, so that the cache fills up.
   */
  next(pos: Positions, grow: boolean): Op[] {
    const u = grow && this.#chance(0.6) ? 0 : this.#r() * 100;
    const seq = this.#int(0, N_SEQ - 1);
    if (u < 48) return [this.#decode(pos, grow)];
    if (u < 53) return [this.#shared(pos) ?? this.#decode(pos, grow)];
    if (u < 65) {
      const [p0, p1] = this.#range(pos, seq);
      return [{ kind: "rm", seq: this.#chance(0.1) ? -1 : seq, p0, p1 }];
    }
    if (u < 73) {
      const [p0, p1] = this.#range(pos, seq);
      return [{ kind: "cp", src: seq, dst: this.#int(0, N_SEQ - 1), p0, p1 }];
    }
    if (u < 75) return [{ kind: "keep", seq }];
    if (u < 85) {
      const [p0, p1] = this.#range(pos, seq);
      // positions drift down when they grew large, so they stay near the model's context
      const delta = pos.max(seq) > 300 ? this.#int(-40, -1) : this.#int(-12, 12);
      return [{ kind: "add", seq, p0, p1, delta }];
    }
    if (u < 91) {
      const [p0, p1] = this.#range(pos, seq);
      return [{ kind: "div", seq, p0, p1, d: this.#int(1, 4) }];
    }
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
  return `decode${op.shared ? " (shared)" : ""} of ${b.tokens.length}: ` +
    b.tokens.map((_, i) => `${JSON.stringify(b.seqIds![i])}@${b.pos![i]}${b.logits![i] ? "*" : ""}`)
      .join(" ");
}

Deno.test("sequence operations replayed on ours and llama.cpp agree", async () => {
  const oracle = await loadOracle();
  const exact = parityGate(oracle.cpu).skip === "";
  using om = oracle.load(TOLSTOY_F16);
  using oc = await OracleBatchContext.create(om, {
    nCtx: N_CTX,
    nBatch: N_BATCH,
    nUbatch: N_UBATCH,
    nSeqMax: N_SEQ,
  });
  using model = await Model.load(TOLSTOY_F16);
  using ctx = await Context.create(model, {
    nCtx: N_CTX,
    nBatch: N_BATCH,
    nUbatch: N_UBATCH,
    nSeqMax: N_SEQ,
    threads: 2,
  });
  assert.equal(oc.nCtx, N_CTX);

  const pos: Positions = { min: (s) => oc.seqPosMin(s), max: (s) => oc.seqPosMax(s) };
  const src = new OpSource(SEED, om.nVocab);
  const counts = new Map<string, number>();
  const count = (k: string) => counts.set(k, (counts.get(k) ?? 0) + 1);
  const history: string[] = [];
  let worst = 0, rows = 0;
  /** A seq_add/seq_div moved cells since the last decode. */
  let shiftPending = false;
  /** A failed decode applied a K-shift (llama.cpp does, before it looks for cells). */
  let shiftedAtFailure = false;

  for (let n = 0; n < N_OPS;) {
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
          assert.ok(want.rc === 0 || want.rc === 1, `${what}: llama_decode returned ${want.rc}`);
          let got: Float32Array[] | null = null;
          try {
            got = (await ctx.decodeBatch(op.batch)).logits;
          } catch (e) {
            if (!(e instanceof ContextError) || e instanceof ContextDisposedError) throw e;
            assert.equal(want.rc, 1, `${what}: ours threw ${e.message}, llama.cpp decoded it`);
          }
          if (want.rc === 1) {
            assert.equal(got, null, `${what}: llama.cpp found no cells, ours decoded it`);
            count(shiftPending ? "decode failed with a K-shift pending" : "decode failed");
            shiftedAtFailure ||= shiftPending;
          } else {
            assert.ok(got, what);
            assert.equal(got.length, want.logits.length, `${what}: output rows`);
            got.forEach((l, i) => {
              const d = maxAbsDiff(l, want.logits[i]);
              worst = Math.max(worst, d);
              assert.ok(d <= TOL, `${what}: row ${want.outputIds[i]}: logits differ by ${d}`);
            });
            rows += got.length;
            if (shiftPending) count("decode after a K-shift");
            if (shiftPending && shiftedAtFailure) {
              count("decode after K-shifts on both sides of a failed decode");
            }
            shiftedAtFailure = false;
            if (op.shared) count("shared-token decode");
            if (op.batch.tokens.length > N_UBATCH) count("decode of two micro-batches");
          }
          shiftPending = false;
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
          shiftedAtFailure = false;
          break;
      }
      for (let s = 0; s < N_SEQ; s++) {
        const want = [pos.min(s), pos.max(s)];
        const got = [ctx.seqPosMin(s), ctx.seqPosMax(s)];
        if (got[0] !== want[0] || got[1] !== want[1]) {
          assert.fail(
            `${what}: seq ${s}: ours [${got}], llama.cpp [${want}] (before: ${
              JSON.stringify(before)
            })\nlast ops:\n${history.slice(-12).join("\n")}`,
          );
        }
      }
      if ((op.kind === "add" || op.kind === "div") && before[op.seq][1] >= 0) shiftPending = true;
    }
  }

  console.log(
    `${N_OPS} operations (seed ${SEED}): ${rows} output rows compared, logits max |diff| ` +
      `${worst === 0 ? "0" : worst.toExponential(2)}` +
      (exact ? "" : " (our SIMD level does not follow llama.cpp's variant here)"),
  );
  console.log([...counts].map(([k, v]) => `${k}: ${v}`).join(", "));
  // the replay must have reached the cases it is for
  for (const k of ["decode failed", "decode after a K-shift", "shared-token decode", "keep"]) {
    assert.ok((counts.get(k) ?? 0) > 0, `the replay never made a "${k}"`);
  }
});
