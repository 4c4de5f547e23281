/**
 * qwen2: llama's layout with q/k/v biases and NeoX RoPE (llama.cpp's
 * `src/models/qwen2.cpp` builds the same ops in the same order).
 *
 * @module
 */
import { buildLlama, type LlamaWeights, llamaWeights } from "./llama.ts";
import type { Architecture } from "./types.ts";

/** qwen2 (biases are optional weights of the shared llama layout). */
export const qwen2: Architecture<LlamaWeights> = {
  names: ["qwen2"],
  memory: "kv",
  output: "logits",
  norm: "rms",
  rope: "neox",
  weights: llamaWeights,
  build: buildLlama,
};
