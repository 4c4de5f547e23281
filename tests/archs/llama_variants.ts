/**
 * Random-weight GGUF writers for the llama family's variants, in llama.cpp's
 * tensor names and layouts (src/models/llama.cpp, mistral3.cpp, qwen2.cpp):
 * qwen2 (q/k/v biases, NeoX RoPE, optional output bias), mistral3 (llama's
 * tensors under another name), llama with rope scaling metadata, and any of
 * them with the output head tied to the token embeddings (no
 * `output.weight`).
 */
import {
  type RandomMetaValue,
  type RandomTensor,
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
  const { nEmbd, nLayer, nHead, nHeadKv, nFF, nVocab, nCtxTrain } = VARIANT_SHAPE;
  const headDim = nEmbd / nHead;
  const nKv = headDim * nHeadKv;
  const tensors: RandomTensor[] = [];
  const matrix = (name: string, ne: number[], std?: number) =>
    tensors.push({ name, ne, kind: "matrix", std });
  const vec = (name: string, n: number, kind: "norm" | "bias") =>
    tensors.push({ name, ne: [n], kind });
  matrix("token_embd.weight", [nEmbd, nVocab], HEAD_STD);
  for (let i = 0; i < nLayer; i++) {
    const b = `blk.${i}.`;
    vec(`${b}attn_norm.weight`, nEmbd, "norm");
    matrix(`${b}attn_q.weight`, [nEmbd, nEmbd]);
    matrix(`${b}attn_k.weight`, [nEmbd, nKv]);
    matrix(`${b}attn_v.weight`, [nEmbd, nKv]);
    if (o.qkvBias) {
      vec(`${b}attn_q.bias`, nEmbd, "bias");
      vec(`${b}attn_k.bias`, nKv, "bias");
      vec(`${b}attn_v.bias`, nKv, "bias");
    }
    matrix(`${b}attn_output.weight`, [nEmbd, nEmbd]);
    if (o.llamaBiases) vec(`${b}attn_output.bias`, nEmbd, "bias");
    vec(`${b}ffn_norm.weight`, nEmbd, "norm");
    matrix(`${b}ffn_gate.weight`, [nEmbd, nFF]);
    matrix(`${b}ffn_up.weight`, [nEmbd, nFF]);
    matrix(`${b}ffn_down.weight`, [nFF, nEmbd]);
    if (o.llamaBiases) {
      vec(`${b}ffn_gate.bias`, nFF, "bias");
      vec(`${b}ffn_up.bias`, nFF, "bias");
      vec(`${b}ffn_down.bias`, nEmbd, "bias");
    }
  }
  vec("output_norm.weight", nEmbd, "norm");
  if (!o.tied) matrix("output.weight", [nEmbd, nVocab], HEAD_STD);
  if (o.outputBias) vec("output.bias", nVocab, "bias");
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
    meta: {
      context_length: nCtxTrain,
      embedding_length: nEmbd,
      block_count: nLayer,
      feed_forward_length: nFF,
      "rope.dimension_count": headDim,
      "attention.head_count": nHead,
      "attention.head_count_kv": nHeadKv,
      "attention.layer_norm_rms_epsilon": { f32: 1e-5 },
      ...o.meta,
    },
    tensors,
    type: o.type ?? "f32",
    std: 0.08,
    seed: o.seed ?? 1,
    nVocab,
  });
}
