/**
 * Shared fixtures of the quantization tests: tolstoy-6m quantized by
 * llama.cpp (llama_model_quantize) to each ftype (cached by tests/oracle/models.ts),
 * and where our own quantize tool's outputs go.
 *
 * @module
 */
import { fileURLToPath } from "node:url";
import assert from "node:assert/strict";
import { Model } from "../lib/model/model.ts";
import { Context } from "../lib/runtime/context.ts";
import { assertGreedyMatch, type GreedyMatch, loadOracle, top2 } from "./oracle/oracle.ts";
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

/**
 * Two prompts, so that every preset has steps before llama.cpp's first
 * near-tie (Q4_K ties at the first step after the first one).
 */
export const PROMPTS = ["Natasha looked at her mother and", "He was silent for a long time."];
/** Fewest steps that must be compared over PROMPTS (else the check would be empty). */
export const MIN_COMPARED = 16;
/** Greedy steps compared. */
export const N_GEN = 64;
/**
 * Largest logit difference allowed at the compared steps (those before
 * llama.cpp's first near-tie): our kernels follow llama.cpp's order for
 * every preset, so the logits agree far more closely than this.
 */
export const LOGIT_TOL = 2e-2;

/** Our greedy continuation with each step's top-2 gap and logits (2 threads on the default backend unless told). */
export async function ourGreedy(
  path: string,
  prompt: number[],
  n: number,
  opts: { backend?: "cpu" | "wasm"; threads?: number; matmulOrder?: "default" | "fast" } = {},
) {
  using model = await Model.load(path);
  using ctx = await Context.create(model, {
    nCtx: 256,
    threads: opts.threads ?? 2,
    ...(opts.backend ? { backend: opts.backend } : {}),
    ...(opts.matmulOrder ? { matmulOrder: opts.matmulOrder } : {}),
  });
  let logits = (await ctx.decode(prompt)).logits[0];
  const tokens: number[] = [], gaps: number[] = [], all: Float32Array[] = [];
  for (let i = 0; i < n; i++) {
    const [best, gap] = top2(logits);
    tokens.push(best);
    gaps.push(gap);
    all.push(logits);
    if (i + 1 < n) logits = (await ctx.decode([best])).logits[0];
  }
  return { tokens, gaps, logits: all };
}

/**
 * Asserts the shared near-tie rule (tests/oracle/oracle.ts NEAR_TIE) for
 * greedy continuations of `path` in our engine against llama.cpp's, one per
 * prompt of PROMPTS: the same tokens, and logits within LOGIT_TOL, at every
 * step before llama.cpp's first top-2 gap below NEAR_TIE.
 */
export async function assertSameGreedy(path: string, label: string): Promise<GreedyMatch[]> {
  const oracle = await loadOracle();
  using om = oracle.load(path);
  using oc = om.context({ nCtx: 256, threads: 1 });
  const out: GreedyMatch[] = [];
  for (const text of PROMPTS) {
    const prompt = om.tokenize(text, { addSpecial: true });
    const want = oc.greedy(prompt, N_GEN);
    const got = await ourGreedy(path, prompt, N_GEN);
    out.push(assertGreedyMatch(`${label} ${JSON.stringify(text)}`, want, got, LOGIT_TOL));
  }
  const compared = out.reduce((n, r) => n + r.upto, 0);
  assert.ok(compared >= MIN_COMPARED, `${label}: only ${compared} steps before near-ties`);
  return out;
}
