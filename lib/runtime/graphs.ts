/**
 * Builds a context's graphs through the model's architecture, and fills the
 * attention mask of architectures without a KV cache.
 *
 * @module
 */
import { Graph } from "../graph/graph.ts";
import type { Ubatch } from "../kv/batch.ts";
import type { KvCache } from "../kv/cache.ts";
import { GraphBuilder } from "../model/arch/builder.ts";
import type { ArchGraph, Step } from "../model/arch/types.ts";
import type { Model } from "../model/model.ts";
import { WeightLeaves } from "../model/weights.ts";

/** One micro-batch's forward pass of `model`, with the taps it was asked to keep. */
export function buildGraph(
  model: Model,
  kv: KvCache | null,
  taps: ReadonlySet<string> | undefined,
  step: Step,
): { g: Graph; io: ArchGraph } {
  const g = new Graph();
  const b = new GraphBuilder({
    g,
    hp: model.hparams,
    arch: model.arch,
    leaves: new WeightLeaves(model.file, g),
    kv,
    step,
    taps,
  });
  const out = model.arch.build(b, model.weights);
  return { g, io: b.finish(out) };
}

/**
 * The [nTokens, nTokens] mask of a micro-batch attending only to itself
 * (llama.cpp's no-cache attention input): a token sees the tokens of its
 * own sequence, and with `causal` only those at earlier or equal positions.
 */
export function encoderMask(ub: Ubatch, causal: boolean, out: Float32Array): void {
  const n = ub.nTokens;
  for (let i = 0; i < n; i++) {
    for (let j = 0; j < n; j++) {
      const same = ub.seqId[i].some((s) => ub.seqId[j].includes(s));
      const seen = same && (!causal || ub.pos[j] <= ub.pos[i]);
      out[i * n + j] = seen ? 0 : -Infinity;
    }
  }
}
