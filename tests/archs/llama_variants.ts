/**
 * Random-weight GGUF writers for the llama family's variants, in llama.cpp's
 * tensor names and layouts (src/models/llama.cpp, mistral3.cpp, qwen2.cpp):
 * qwen2 (q/k/v biases, NeoX RoPE, optional output bias), mistral3 (llama's
 * tensors under another name), llama with rope scaling metadata, and any of
 * them with the output head tied to the token embeddings (no
 * `output.weight`).
 */
import {
  llamaMeta,
  llamaTensors,
  type RandomMetaValue,
  writeRandomGGUF,
} from "../../lib/model/random.ts";

/** What {@link writeLlamaVariant} writes. */
export interface LlamaVariantOptions {
  /** `general.architecture`: "llama", "mistral3" or "qwen2". */
  arch: "llama" | "mistral3" | "qwen2";
  /** Weight type of the matrices (default "f32"). */
  type?: "f32" | "f16";
  /** q/k/v biases `blk.N.attn_{q,k,v}.bias` (qwen2's layout). */
  qkvBias?: boolean;
  /** `output.bias` [nVocab] (qwen2 reads it). */
  outputBias?: boolean;
  /** Attention output and FFN gate/up/down biases (llama and mistral3 read them). */
  llamaBiases?: boolean;
  /** `rope_freqs.weight` [headDim/2] (llama3's frequency divisors; llama and mistral3). */
  ropeFreqs?: boolean;
  /** No `output.weight`: the head reads `token_embd.weight`. */
  tied?: boolean;
  /** Extra metadata after the architecture prefix (rope scaling keys, ...). */
  meta?: Record<string, RandomMetaValue>;
  /** Seed of the weights (default 1). */
  seed?: number;
}

/** Std of the token embeddings and output head: logits spread enough that near-ties are rare. */
const HEAD_STD = 0.5;

/** The shape every variant shares: 2 blocks, 4 query heads of 32, 2 KV heads, 256 tokens. */
export const VARIANT_SHAPE = {
  nEmbd: 128,
  nLayer: 2,
  nHead: 4,
  nHeadKv: 2,
  nFF: 256,
  nVocab: 256,
  nCtxTrain: 4096,
} as const;

/**
 * Writes a random llama-family model to `path` (see the module doc). The
 * weights' std (0.08) keeps most greedy steps' top-2 gaps well above
 * llama.cpp's near-tie threshold.
 */
export async function writeLlamaVariant(path: string, o: LlamaVariantOptions): Promise<void> {
  const headDim = VARIANT_SHAPE.nEmbd / VARIANT_SHAPE.nHead;
  const tensors = llamaTensors(VARIANT_SHAPE, { ...o, headStd: HEAD_STD });
  // Divisors from 1 to 8 over the pairs, like llama3's smooth low-frequency scaling.
  if (o.ropeFreqs) {
    const n = headDim / 2;
    tensors.push({
      name: "rope_freqs.weight",
      ne: [n],
      kind: "f32",
      values: (i) => 1 + 7 * i / (n - 1),
    });
  }
  await writeRandomGGUF(path, {
    arch: o.arch,
    meta: { ...llamaMeta(VARIANT_SHAPE), ...o.meta },
    tensors,
    type: o.type ?? "f32",
    std: 0.08,
    seed: o.seed ?? 1,
    nVocab: VARIANT_SHAPE.nVocab,
  });
}
