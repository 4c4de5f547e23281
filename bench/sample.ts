/**
 * Per-token cost of sampling, for `deno task bench`: the sampler chain over
 * a row of logits, and a grammar's token filter over the whole vocabulary.
 *
 * @module
 */
import { TokenCandidates } from "../lib/sample/candidates.ts";
import type { SamplerChain } from "../lib/sample/chain.ts";
import type { GrammarSampler } from "../lib/sample/grammar.ts";

/**
 * Mean nanoseconds per chain application (candidates rebuilt each time, as
 * per token). The first `warmup` runs are not timed: a generation loop calls
 * the chain for every token, so the steady (JIT-compiled) cost is what counts.
 */
export function measureChainCost(
  chain: SamplerChain,
  logits: Float32Array,
  reps = 50,
  warmup = 30,
): number {
  const c = new TokenCandidates(logits.length);
  for (let i = 0; i < Math.max(1, warmup); i++) chain.applyTo(c.load(logits));
  const t0 = performance.now();
  for (let i = 0; i < reps; i++) chain.applyTo(c.load(logits));
  return (performance.now() - t0) * 1e6 / reps;
}

/**
 * Mean nanoseconds of one full-vocabulary grammar filter, measured while
 * walking `tokens` (a valid token sequence; empty = stay at the start).
 */
export function measureGrammarCost(g: GrammarSampler, tokens: number[] = [], reps = 20): number {
  g.reset();
  g.allowedMask(); // warm-up fills the stack cache as a long generation would
  let total = 0, n = 0;
  const steps = Math.max(1, tokens.length);
  for (let s = 0; s < steps; s++) {
    const per = Math.max(1, Math.floor(reps / steps));
    const t0 = performance.now();
    for (let i = 0; i < per; i++) g.allowedMask();
    total += performance.now() - t0;
    n += per;
    if (s < tokens.length) g.accept(tokens[s]);
  }
  g.reset();
  return total * 1e6 / n;
}
