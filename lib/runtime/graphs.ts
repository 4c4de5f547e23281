/**
 * Builds a context's graphs through the model's architecture, and fills the
 * attention mask of architectures without a KV cache.
 *
 * @module
 */
import { Graph, type Tensor } from "../graph/graph.ts";
import { GGMLType, ggmlTypeInfo } from "../ggml/types.ts";
import type { Ubatch } from "../kv/batch.ts";
import type { KvCache } from "../kv/cache.ts";
import type { RecurrentMemory } from "../kv/recurrent.ts";
import { cacheRotation, GraphBuilder } from "../model/arch/builder.ts";
import type { ArchGraph, Step } from "../model/arch/types.ts";
import type { Model } from "../model/model.ts";
import { WeightLeaves } from "../model/weights.ts";

/** One micro-batch's forward pass of `model`, with the taps it was asked to keep. */
export function buildGraph(
  model: Model,
  kv: KvCache | null,
  taps: ReadonlySet<string> | undefined,
  step: Step,
  rs: RecurrentMemory | null = null,
  flashAttn = false,
  flashAttnF32 = false,
): { g: Graph; io: ArchGraph } {
  const g = new Graph();
  const b = new GraphBuilder({
    g,
    hp: model.hparams,
    arch: model.arch,
    leaves: new WeightLeaves(model.file, g),
    kv,
    rs,
    step,
    taps,
    flashAttn,
    flashAttnF32,
  });
  const out = model.arch.build(b, model.weights);
  return { g, io: b.finish(out) };
}

/**
 * The [nTokens, nTokens] mask of a micro-batch attending only to itself
 * (llama.cpp's no-cache attention input): a token sees the tokens of its
 * own sequence, and with `causal` only those at earlier or equal positions.
 */
export function encoderMask(ub: Ubatch, causal: boolean, out: Float32Array | Uint16Array): void {
  const n = ub.nTokens;
  // F16 bits (flash attention's mask): 0 and -inf
  const [zero, drop] = out instanceof Uint16Array ? [0, 0xfc00] : [0, -Infinity];
  for (let i = 0; i < n; i++) {
    for (let j = 0; j < n; j++) {
      const same = ub.seqId[i].some((s) => ub.seqId[j].includes(s));
      const seen = same && (!causal || ub.pos[j] <= ub.pos[i]);
      out[i * n + j] = seen ? zero : drop;
    }
  }
}

/** The K-shift graph and its input: one position delta per cache cell. */
export interface ShiftGraph {
  /** The graph: an in-place RoPE of every layer's cached keys. */
  readonly g: Graph;
  /** I32 [cells] position deltas ({@link KvCache.shiftInput}). */
  readonly shift: Tensor;
}

/**
 * llama_kv_cache::build_graph_shift: after positions of cached tokens
 * moved (seqAdd, seqDiv), their keys are rotated again by each cell's
 * delta, in place, with the model's RoPE settings and frequency factors,
 * so they equal keys computed at the new positions (up to rounding).
 */
export function buildShiftGraph(model: Model, kv: KvCache): ShiftGraph {
  const hp = model.hparams;
  const g = new Graph();
  const leaves = new WeightLeaves(model.file, g);
  const shift = g.input("k_shift", GGMLType.I32, [kv.size * kv.nStream]);
  // A sequence's context is its stream (the whole cache when unified).
  const ref = model.arch.ropeFactors?.(model.weights, hp, kv.size);
  const rope = { ...hp.rope, inplace: true, freqFactors: ref ? leaves.get(ref) : undefined };
  const quantized = ggmlTypeInfo(kv.typeK)!.blockSize > 1;
  const rot = cacheRotation(kv, hp);
  for (let il = 0; il < kv.nLayer; il++) {
    g.setLayer(il);
    const k = kv.kShiftView(g, il, hp.rope.nDims);
    if (quantized) {
      // build_rope_shift: dequantize to f32, rope, quantize back.
      // With llama.cpp's Hadamard rotation of the cache (an orthonormal,
      // symmetric matrix): rotated back before the rope and again after.
      let f = g.cast(k, GGMLType.F32);
      if (rot.k) f = g.hadamard(f, rot.k);
      f = g.rope(f, shift, { ...rope, inplace: false });
      if (rot.k) f = g.hadamard(f, rot.k);
      g.expand(g.cpy(f, k));
    } else {
      g.expand(g.rope(k, shift, rope));
    }
  }
  g.setLayer(-1);
  return { g, shift };
}
