/**
 * Random-weight phi3 GGUFs in llama.cpp's tensor names and layout (what
 * convert_hf_to_gguf.py's Phi3MiniModel writes): fused `attn_qkv` or
 * separate `attn_q/k/v`, fused gate|up `ffn_up` [nEmbd, 2 nFF], optional
 * LongRoPE factors and the sliding-window key llama.cpp reads and ignores.
 *
 * @module
 */
import { type RandomTensor, randomVocabSize, writeRandomGGUF } from "../../lib/model/random.ts";
import type { RandomMetaValue } from "../../lib/model/random.ts";

/** Shape and layout of {@link writeRandomPhi3}'s model. */
export interface RandomPhi3Options {
  /** Weight type of the matrices. */
  type: "f32" | "f16";
  /** `general.name`; llama.cpp's vocab loader special-cases names containing "phi3"/"phi-3". */
  name: string;
  /** Embedding width (default 128). */
  nEmbd?: number;
  /** Blocks (default 2). */
  nLayer?: number;
  /** Query heads (default 4). */
  nHead?: number;
  /** Key/value heads (default 2). */
  nHeadKv?: number;
  /** Feed-forward width (default 192). */
  nFF?: number;
  /** Rotated dimensions per head (default the head size). */
  nRot?: number;
  /** Minimal vocabulary size without `tokenizerFrom` (default 512). */
  nVocab?: number;
  /** GGUF whose tokenizer is copied. */
  tokenizerFrom?: string;
  /** Separate q/k/v matrices instead of the fused one. */
  separateQkv?: boolean;
  /**
   * q/k/v biases: `attn_qkv.bias` beside a fused matrix, `attn_q/k/v.bias`
   * beside separate ones; "separate" writes `attn_q/k/v.bias` in either case.
   */
  qkvBias?: boolean | "separate";
  /** Leaves out `attention.layer_norm_rms_epsilon` (which llama.cpp requires for phi3). */
  noNormEps?: boolean;
  /** No `output.weight`: the head is tied to the token embeddings. */
  tied?: boolean;
  /** Writes `rope_factors_long/short.weight` (values 1 + 0.1 normal). */
  ropeFactors?: boolean;
  /** `rope.scaling.original_context_length` (absent when undefined). */
  nCtxOrig?: number;
  /** `rope.scaling.attn_factor` (absent when undefined). */
  attnFactor?: number;
  /** `attention.sliding_window` (absent when undefined). */
  slidingWindow?: number;
  /** Standard deviation of the matrices. */
  std: number;
  /** Generator seed (default 1). */
  seed?: number;
}

/** Writes a phi3 GGUF with random weights to `path`; returns its vocabulary size. */
export async function writeRandomPhi3(path: string, o: RandomPhi3Options): Promise<number> {
  const nEmbd = o.nEmbd ?? 128, nLayer = o.nLayer ?? 2, nFF = o.nFF ?? 192;
  const nHead = o.nHead ?? 4, nHeadKv = o.nHeadKv ?? 2;
  const headDim = nEmbd / nHead, gqa = headDim * nHeadKv;
  const nRot = o.nRot ?? headDim;
  const nVocab = await randomVocabSize({ tokenizerFrom: o.tokenizerFrom, nVocab: o.nVocab ?? 512 });
  const tensors: RandomTensor[] = [];
  const matrix = (name: string, cols: number, rows: number) =>
    tensors.push({ name, ne: [cols, rows], kind: "matrix" });
  const vec = (name: string, n: number, kind: "norm" | "bias") =>
    tensors.push({ name, ne: [n], kind });
  matrix("token_embd.weight", nEmbd, nVocab);
  vec("output_norm.weight", nEmbd, "norm");
  if (!o.tied) matrix("output.weight", nEmbd, nVocab);
  if (o.ropeFactors) {
    // Frequency divisors near 1 (the short factors of real files are 1..3).
    vec("rope_factors_long.weight", nRot / 2, "norm");
    vec("rope_factors_short.weight", nRot / 2, "norm");
  }
  for (let i = 0; i < nLayer; i++) {
    const b = `blk.${i}.`;
    vec(`${b}attn_norm.weight`, nEmbd, "norm");
    if (o.separateQkv) {
      matrix(`${b}attn_q.weight`, nEmbd, nEmbd);
      matrix(`${b}attn_k.weight`, nEmbd, gqa);
      matrix(`${b}attn_v.weight`, nEmbd, gqa);
    } else {
      matrix(`${b}attn_qkv.weight`, nEmbd, nEmbd + 2 * gqa);
      if (o.qkvBias === true) vec(`${b}attn_qkv.bias`, nEmbd + 2 * gqa, "bias");
    }
    if (o.qkvBias === "separate" || (o.qkvBias && o.separateQkv)) {
      vec(`${b}attn_q.bias`, nEmbd, "bias");
      vec(`${b}attn_k.bias`, gqa, "bias");
      vec(`${b}attn_v.bias`, gqa, "bias");
    }
    matrix(`${b}attn_output.weight`, nEmbd, nEmbd);
    vec(`${b}ffn_norm.weight`, nEmbd, "norm");
    matrix(`${b}ffn_down.weight`, nFF, nEmbd);
    matrix(`${b}ffn_up.weight`, nEmbd, 2 * nFF);
  }
  const meta: Record<string, RandomMetaValue> = {
    context_length: 4096,
    embedding_length: nEmbd,
    feed_forward_length: nFF,
    block_count: nLayer,
    "attention.head_count": nHead,
    "attention.head_count_kv": nHeadKv,
    "rope.dimension_count": nRot,
  };
  if (!o.noNormEps) meta["attention.layer_norm_rms_epsilon"] = { f32: 1e-5 };
  if (o.nCtxOrig !== undefined) meta["rope.scaling.original_context_length"] = o.nCtxOrig;
  if (o.attnFactor !== undefined) meta["rope.scaling.attn_factor"] = { f32: o.attnFactor };
  if (o.slidingWindow !== undefined) meta["attention.sliding_window"] = o.slidingWindow;
  await writeRandomGGUF(path, {
    arch: "phi3",
    name: o.name,
    meta,
    tensors,
    type: o.type,
    std: o.std,
    seed: o.seed,
    tokenizerFrom: o.tokenizerFrom,
    nVocab: nVocab,
  });
  return nVocab;
}
