/**
 * qwen2: llama's layout with q/k/v biases, an optional output bias and NeoX
 * RoPE (llama.cpp's `src/models/qwen2.cpp` builds the same ops in the same
 * order; its loader reads no attention output or FFN biases and no
 * `rope_freqs.weight`, and its graph asserts whole-head rotation).
 *
 * @module
 */
import { buildLlama, checkWholeHeadRope, type LlamaWeights, llamaWeights } from "./llama.ts";
import type { Architecture } from "./types.ts";

/** qwen2 (biases are optional weights of the shared llama layout). */
export const qwen2: Architecture<LlamaWeights> = {
  names: ["qwen2"],
  memory: "kv",
  output: "logits",
  norm: "rms",
  rope: "neox",
  hparams(h, hp) {
    checkWholeHeadRope(h, hp);
    return hp;
  },
  weights: (m, hp) => llamaWeights(m, hp, "qwen2"),
  build: buildLlama,
};
