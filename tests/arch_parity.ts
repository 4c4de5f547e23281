/**
 * The llama parity standard applied to any decoder architecture on a
 * random-weight GGUF: logits at every position of each prompt within `tol`
 * of llama.cpp's, then greedy continuations identical up to llama.cpp's
 * first near-tie (tests/oracle/oracle.ts NEAR_TIE) with logits within `tol`
 * at each of those steps. Prompts are token ids, so random vocabularies
 * need no tokenizer agreement.
 */
import assert from "node:assert/strict";
import { Model } from "../lib/model/model.ts";
import { Context, type ContextOptions } from "../lib/runtime/context.ts";
import { assertGreedyMatch, loadOracle, maxAbsDiff, NEAR_TIE, top2 } from "./oracle/oracle.ts";

/** What {@link checkDecoderParity} compares. */
export interface DecoderParityOptions {
  /** Label in messages. */
  label: string;
  /** Largest logit difference allowed (the llama parity tolerances: 1e-3 f32, 2e-2 f16/quantized). */
  tol: number;
  /** Prompts as token ids. */
  prompts: readonly (readonly number[])[];
  /** Greedy steps after each prompt (default 32). */
  nGen?: number;
  /** Context options of ours (nCtx defaults to 256). */
  ctx?: ContextOptions;
  /** Architecture name `inspect`/the model must report (default: not checked). */
  arch?: string;
}

/** A deterministic prompt of `n` ids in [lo, hi) (xorshift; the same on every run). */
export function promptIds(n: number, lo: number, hi: number, seed: number): number[] {
  let s = seed >>> 0 || 1;
  return Array.from({ length: n }, () => {
    s ^= s << 13, s >>>= 0, s ^= s >>> 17, s ^= s << 5, s >>>= 0;
    return lo + (s % (hi - lo));
  });
}

/** Runs the comparison; see the module doc. Returns the worst logit difference seen. */
export async function checkDecoderParity(path: string, o: DecoderParityOptions): Promise<number> {
  const oracle = await loadOracle();
  using om = oracle.load(path);
  using oc = om.context({ nCtx: 256, threads: 1 });
  using model = await Model.load(path);
  if (o.arch) assert.equal(model.hparams.arch, o.arch);
  using ctx = await Context.create(model, { nCtx: 256, threads: 2, ...o.ctx });
  const nGen = o.nGen ?? 32;
  let worst = 0;
  for (const [p, prompt] of o.prompts.entries()) {
    oc.clear();
    const want = oc.decode([...prompt], true);
    ctx.clear();
    const got = (await ctx.decode(prompt, { allLogits: true })).logits;
    for (let i = 0; i < prompt.length; i++) {
      const d = maxAbsDiff(got[i], want[i]);
      worst = Math.max(worst, d);
      assert.ok(d <= o.tol, `${o.label}: prompt ${p} position ${i}: logits differ by ${d}`);
    }
    const theirs = oc.greedy([...prompt], nGen);
    ctx.clear();
    let logits = (await ctx.decode(prompt)).logits[0];
    const tokens: number[] = [];
    const all: Float32Array[] = [];
    for (let i = 0; i < nGen; i++) {
      const [best] = top2(logits);
      tokens.push(best);
      all.push(logits);
      if (i + 1 < nGen) logits = (await ctx.decode([best])).logits[0];
    }
    const r = assertGreedyMatch(`${o.label}: prompt ${p}`, theirs, { tokens, logits: all }, o.tol);
    worst = Math.max(worst, r.worst);
    console.log(
      `${o.label}: prompt ${p} (${prompt.length} tokens) greedy identical for ${r.upto}/${nGen} ` +
        (r.upto === nGen ? `(no near-tie < ${NEAR_TIE})` : `(near-tie at ${r.upto})`) +
        `, logits max |diff| ${r.worst.toExponential(2)}`,
    );
  }
  return worst;
}
