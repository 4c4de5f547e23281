/**
 * Random-weight bert GGUFs in llama.cpp's layout (llama_model_bert's tensor
 * names and shapes, the metadata convert_hf_to_gguf.py writes for a
 * BertModel): position and token-type embeddings in f32 as the converter
 * keeps them, LayerNorm weights and biases everywhere.
 */
import { type RandomTensor, randomVocabSize, writeRandomGGUF } from "../../lib/model/random.ts";
import { VOCAB_DIR } from "../tokenizer_util.ts";

/** A WPM (bert) vocabulary: its `tokenizer.*` keys are copied, token_type_count 2 included. */
export const BERT_VOCAB = VOCAB_DIR + "ggml-vocab-bert-bge.gguf";

/** Shape and content of {@link writeRandomBert}'s model. */
export interface RandomBertOptions {
  /** Embedding width (default 64). */
  nEmbd?: number;
  /** Blocks (default 2). */
  nLayer?: number;
  /** Heads (default 4). */
  nHead?: number;
  /** Key/value heads (default: nHead, as bert's converter writes none). */
  nHeadKv?: number;
  /** Feed-forward width (default 128). */
  nFF?: number;
  /** Training context: rows of position_embd (default 128). */
  nCtxTrain?: number;
  /** Rows of token_types (default 2, the vocabulary's token_type_count). */
  nTypes?: number;
  /** Type of the matrices (default f32). */
  type?: "f32" | "f16";
  /** Writes `bert.attention.causal` with this value (default false, as the converter). */
  causal?: boolean;
  /** Seed (default 1). */
  seed?: number;
}

/** Writes a bert GGUF with random weights to `path`. */
export async function writeRandomBert(path: string, o: RandomBertOptions = {}): Promise<void> {
  const nEmbd = o.nEmbd ?? 64, nLayer = o.nLayer ?? 2, nHead = o.nHead ?? 4;
  const nHeadKv = o.nHeadKv ?? nHead, nFF = o.nFF ?? 128, nCtxTrain = o.nCtxTrain ?? 128;
  const nGqa = (nEmbd / nHead) * nHeadKv;
  const nVocab = await randomVocabSize({ tokenizerFrom: BERT_VOCAB });
  const t: RandomTensor[] = [];
  const matrix = (name: string, cols: number, rows: number) =>
    t.push({ name, ne: [cols, rows], kind: "matrix" });
  const normPair = (name: string) =>
    t.push({ name: `${name}.weight`, ne: [nEmbd], kind: "norm" }, {
      name: `${name}.bias`,
      ne: [nEmbd],
      kind: "bias",
    });
  const bias = (name: string, n: number) => t.push({ name, ne: [n], kind: "bias" });
  // Embeddings of unit scale: the sum is LayerNormed at once.
  t.push({ name: "token_embd.weight", ne: [nEmbd, nVocab], kind: "matrix", std: 1 });
  t.push({ name: "token_types.weight", ne: [nEmbd, o.nTypes ?? 2], kind: "f32", std: 1 });
  t.push({ name: "position_embd.weight", ne: [nEmbd, nCtxTrain], kind: "f32", std: 1 });
  normPair("token_embd_norm");
  for (let i = 0; i < nLayer; i++) {
    const b = `blk.${i}.`;
    matrix(`${b}attn_q.weight`, nEmbd, nEmbd);
    bias(`${b}attn_q.bias`, nEmbd);
    matrix(`${b}attn_k.weight`, nEmbd, nGqa);
    bias(`${b}attn_k.bias`, nGqa);
    matrix(`${b}attn_v.weight`, nEmbd, nGqa);
    bias(`${b}attn_v.bias`, nGqa);
    matrix(`${b}attn_output.weight`, nEmbd, nEmbd);
    bias(`${b}attn_output.bias`, nEmbd);
    normPair(`${b}attn_output_norm`);
    matrix(`${b}ffn_up.weight`, nEmbd, nFF);
    bias(`${b}ffn_up.bias`, nFF);
    matrix(`${b}ffn_down.weight`, nFF, nEmbd);
    bias(`${b}ffn_down.bias`, nEmbd);
    normPair(`${b}layer_output_norm`);
  }
  await writeRandomGGUF(path, {
    arch: "bert",
    meta: {
      context_length: nCtxTrain,
      embedding_length: nEmbd,
      feed_forward_length: nFF,
      block_count: nLayer,
      "attention.head_count": nHead,
      ...(o.nHeadKv ? { "attention.head_count_kv": nHeadKv } : {}),
      "attention.layer_norm_epsilon": { f32: 1e-12 },
      "attention.causal": o.causal ?? false,
      // MEAN: read by llama.cpp's context only when pooling is asked for.
      pooling_type: 1,
    },
    tensors: t,
    type: o.type ?? "f32",
    // Large enough that attention is far from uniform over the tokens.
    std: 0.1,
    seed: o.seed ?? 1,
    tokenizerFrom: BERT_VOCAB,
  });
}
