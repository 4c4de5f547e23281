/**
 * A random-weight gemma GGUF in llama.cpp's layout (llama_model_gemma::
 * load_arch_tensors): no `output.weight` (the head is the token embedding),
 * q/k/v/output projections sized by the head size of `attention.key_length`,
 * GeGLU feed-forward. Norm weights are 1 + 0.1 normal, as a converted
 * checkpoint stores them (the +1 already applied).
 */
import {
  type RandomMetaValue,
  type RandomTensor,
  randomVocabSize,
  writeRandomGGUF,
} from "../../lib/model/random.ts";

/** Shape and content of {@link writeRandomGemma}'s model. */
export interface RandomGemmaOptions {
  /** Type of the matrices. */
  type: "f32" | "f16" | "q8_0" | "q4_0";
  /** Embedding width (default 64). */
  nEmbd?: number;
  /** Blocks (default 2). */
  nLayer?: number;
  /** Query heads (default 4). */
  nHead?: number;
  /** Key/value heads (default 1: multi-query attention, as gemma-2b). */
  nHeadKv?: number;
  /** Head size, written as key_length and value_length (default 32, not nEmbd / nHead). */
  headDim?: number;
  /** Feed-forward width (default 160). */
  nFF?: number;
  /** Vocabulary size of the minimal vocabulary (default 256). */
  nVocab?: number;
  /** Standard deviation of the matrices (default 0.5). */
  std?: number;
  /** Standard deviation of the token embeddings, also the output head (default 0.15). */
  embdStd?: number;
  /** Seed (default 2). */
  seed?: number;
  /** Metadata overrides (after the architecture prefix); null leaves a key out. */
  meta?: Record<string, RandomMetaValue | null>;
  /** Tensors added after the standard ones. */
  extraTensors?: readonly RandomTensor[];
}

/**
 * Writes the model to `path`. The default scales give varied greedy
 * continuations whose top-2 logit gaps are mostly above the near-tie
 * threshold, with gate pre-activations that reach GELU's ±10 clamps.
 */
export async function writeRandomGemma(path: string, o: RandomGemmaOptions): Promise<void> {
  const nEmbd = o.nEmbd ?? 64, nLayer = o.nLayer ?? 2, nHead = o.nHead ?? 4;
  const nHeadKv = o.nHeadKv ?? 1, headDim = o.headDim ?? 32, nFF = o.nFF ?? 160;
  const nVocab = await randomVocabSize({ nVocab: o.nVocab ?? 256 });
  const tensors: RandomTensor[] = [];
  const matrix = (name: string, cols: number, rows: number) =>
    tensors.push({ name, ne: [cols, rows], kind: "matrix" });
  const norm = (name: string) => tensors.push({ name, ne: [nEmbd], kind: "norm" });
  tensors.push({
    name: "token_embd.weight",
    ne: [nEmbd, nVocab],
    kind: "matrix",
    std: o.embdStd ?? 0.15,
  });
  for (let i = 0; i < nLayer; i++) {
    const b = `blk.${i}.`;
    norm(`${b}attn_norm.weight`);
    matrix(`${b}attn_q.weight`, nEmbd, headDim * nHead);
    matrix(`${b}attn_k.weight`, nEmbd, headDim * nHeadKv);
    matrix(`${b}attn_v.weight`, nEmbd, headDim * nHeadKv);
    matrix(`${b}attn_output.weight`, headDim * nHead, nEmbd);
    norm(`${b}ffn_norm.weight`);
    matrix(`${b}ffn_gate.weight`, nEmbd, nFF);
    matrix(`${b}ffn_up.weight`, nEmbd, nFF);
    matrix(`${b}ffn_down.weight`, nFF, nEmbd);
  }
  norm("output_norm.weight");
  tensors.push(...o.extraTensors ?? []);
  const meta: Record<string, RandomMetaValue | null> = {
    context_length: 8192,
    embedding_length: nEmbd,
    block_count: nLayer,
    feed_forward_length: nFF,
    "attention.head_count": nHead,
    "attention.head_count_kv": nHeadKv,
    "attention.key_length": headDim,
    "attention.value_length": headDim,
    "attention.layer_norm_rms_epsilon": { f32: 1e-6 },
    ...o.meta,
  };
  await writeRandomGGUF(path, {
    arch: "gemma",
    meta: Object.fromEntries(
      Object.entries(meta).filter((e): e is [string, RandomMetaValue] => e[1] !== null),
    ),
    tensors,
    type: o.type,
    std: o.std ?? 0.5,
    seed: o.seed ?? 2,
    nVocab,
  });
}
