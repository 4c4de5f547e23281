/**
 * Shared fixtures of the quantization tests: tolstoy-6m quantized by
 * llama.cpp (llama_model_quantize) to each ftype (cached by tests/oracle/models.ts),
 * and where our own quantize tool's outputs go.
 *
 * @module
 */
import assert from "node:assert/strict";
import { fileURLToPath } from "node:url";
import { Model } from "../lib/model/model.ts";
import { Context } from "../lib/runtime/context.ts";
import { loadOracle, top2 } from "./oracle/oracle.ts";
import { Ftype } from "../lib/quant/rules.ts";
import { TOLSTOY_F32, tolstoyQuantized } from "./oracle/models.ts";

/** The repository root. */
export const ROOT: string = fileURLToPath(new URL("../", import.meta.url));
export { TOLSTOY_F32 };
/** Where the tests write our quantize tool's files. */
export const QUANT_DIR: string = `${ROOT}.cache/quant`;

/** llama.cpp's llama_ftype values (include/llama.h). */
export const FTYPE = Ftype;

/** Path of tolstoy-6m quantized by llama.cpp to `ftype` (made on first use). */
export const llamaQuantized: (name: keyof typeof FTYPE) => Promise<string> = tolstoyQuantized;

const PROMPT = "Natasha looked at her mother and";
/** Greedy steps compared. */
export const N_GEN = 64;
const TIE = 1e-3;

/** Our greedy continuation with each step's top-2 gap. */
export async function ourGreedy(path: string, prompt: number[], n: number) {
  using model = await Model.load(path);
  using ctx = await Context.create(model, { nCtx: 256, threads: 2 });
  let logits = (await ctx.decode(prompt)).logits[0];
  const tokens: number[] = [], gaps: number[] = [];
  for (let i = 0; i < n; i++) {
    const [best, gap] = top2(logits);
    tokens.push(best);
    gaps.push(gap);
    if (i + 1 < n) logits = (await ctx.decode([best])).logits[0];
  }
  return { tokens, gaps };
}

/** Asserts identical greedy tokens or a first divergence at a near-tie in both engines. */
export async function assertSameGreedy(path: string, label: string): Promise<number> {
  const oracle = await loadOracle();
  using om = oracle.load(path);
  using oc = om.context({ nCtx: 256, threads: 2 });
  const prompt = om.tokenize(PROMPT, { addSpecial: true });
  const want = oc.greedy(prompt, N_GEN);
  const got = await ourGreedy(path, prompt, N_GEN);
  const i = want.tokens.findIndex((t, k) => t !== got.tokens[k]);
  if (i >= 0) {
    assert.ok(
      want.gaps[i] < TIE && got.gaps[i] < TIE,
      `${label}: first divergence at step ${i} (llama.cpp ${want.tokens[i]}, ours ${
        got.tokens[i]
      }) with top-2 gaps ${want.gaps[i]} / ${got.gaps[i]}, not a near-tie`,
    );
  }
  return i < 0 ? N_GEN : i;
}
