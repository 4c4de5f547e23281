/**
 * Random-weight llama models for benchmarks and tests: a llama-shaped GGUF
 * with normal(0, std) weights, written one tensor at a time so a model of a
 * few hundred MB never sits in memory whole. The tokenizer metadata can be
 * copied from another GGUF so that llama.cpp loads the result.
 *
 * @module
 */
import {
  type GGUFKV,
  GGUFValueType,
  type GGUFWriteTensor,
  readGGUF,
  writeGGUFFile,
} from "../gguf/mod.ts";
import { GGMLType, rowSize } from "../ggml/types.ts";
import { f32ToFp16 } from "../ggml/half.ts";
import { QUANT_REF } from "../ggml/ref_quants.ts";

/** Shape and content of {@link writeRandomLlama}'s model. */
export interface RandomLlamaOptions {
  /** Embedding width (default 768). */
  nEmbd?: number;
  /** Transformer blocks (default 12). */
  nLayer?: number;
  /** Query heads (default 12). */
  nHead?: number;
  /** Key/value heads (default 4: grouped-query attention). */
  nHeadKv?: number;
  /** Feed-forward width (default 2048). */
  nFF?: number;
  /** Vocabulary size when no tokenizer source is given (default 32000). */
  nVocab?: number;
  /** Training context written to the metadata (default 2048). */
  nCtxTrain?: number;
  /** Type of the 2-D weights: "f32", "f16" (default), "q8_0" or "q4_0". Norms stay F32. */
  type?: "f32" | "f16" | "q8_0" | "q4_0";
  /** Standard deviation of the weights (default 0.02). */
  std?: number;
  /** Seed of the generator (default 1). */
  seed?: number;
  /**
   * A GGUF whose `tokenizer.*` keys are copied (its vocabulary size wins over
   * `nVocab`). Without it, a minimal byte-less SPM vocabulary is written.
   */
  tokenizerFrom?: string;
}

const TYPE_IDS = {
  f32: GGMLType.F32,
  f16: GGMLType.F16,
  q8_0: GGMLType.Q8_0,
  q4_0: GGMLType.Q4_0,
} as const;

// llama_ftype values for general.file_type.
const FTYPES = { f32: 0, f16: 1, q8_0: 7, q4_0: 2 } as const;

/** A seeded standard-normal generator (mulberry32 + Box-Muller). */
function normalSource(seed: number): () => number {
  let s = seed >>> 0;
  const uniform = () => {
    s = (s + 0x6d2b79f5) >>> 0;
    let t = s;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return (((t ^ (t >>> 14)) >>> 0) + 0.5) / 4294967296;
  };
  let spare = NaN;
  return () => {
    if (!Number.isNaN(spare)) {
      const v = spare;
      spare = NaN;
      return v;
    }
    const r = Math.sqrt(-2 * Math.log(uniform())), a = 2 * Math.PI * uniform();
    spare = r * Math.sin(a);
    return r * Math.cos(a);
  };
}

function encodeRows(type: number, values: Float32Array, rowLen: number): Uint8Array {
  const nRows = values.length / rowLen;
  if (type === GGMLType.F32) return new Uint8Array(values.buffer);
  if (type === GGMLType.F16) {
    const out = new Uint16Array(values.length);
    for (let i = 0; i < values.length; i++) out[i] = f32ToFp16(values[i]);
    return new Uint8Array(out.buffer);
  }
  const q = QUANT_REF.get(type)!;
  const rb = rowSize(type, rowLen);
  const out = new Uint8Array(rb * nRows);
  for (let r = 0; r < nRows; r++) {
    q(values.subarray(r * rowLen, (r + 1) * rowLen), out.subarray(r * rb, (r + 1) * rb));
  }
  return out;
}

/**
 * Writes a llama-architecture GGUF with random weights to `path` (token
 * embedding, untied output, per-layer attention and SwiGLU feed-forward).
 * The defaults give about 125M parameters.
 */
export async function writeRandomLlama(path: string, opts: RandomLlamaOptions = {}): Promise<void> {
  const nEmbd = opts.nEmbd ?? 768, nLayer = opts.nLayer ?? 12;
  const nHead = opts.nHead ?? 12, nHeadKv = opts.nHeadKv ?? 4, nFF = opts.nFF ?? 2048;
  const typeName = opts.type ?? "f16";
  const wtype = TYPE_IDS[typeName];
  if (wtype === undefined) throw new RangeError(`writeRandomLlama: unknown type ${typeName}`);
  if (nEmbd % nHead !== 0 || nHead % nHeadKv !== 0) {
    throw new RangeError("writeRandomLlama: nEmbd must divide by nHead, nHead by nHeadKv");
  }
  const headDim = nEmbd / nHead;
  const std = opts.std ?? 0.02;
  const next = normalSource(opts.seed ?? 1);

  let tokKv: GGUFKV[];
  let nVocab = opts.nVocab ?? 32000;
  if (opts.tokenizerFrom) {
    const src = await readGGUF(opts.tokenizerFrom);
    tokKv = src.kv.filter((kv) => kv.key.startsWith("tokenizer."));
    nVocab = src.strings("tokenizer.ggml.tokens")?.length ?? nVocab;
  } else {
    const tokens = Array.from({ length: nVocab }, (_, i) => `<t${i}>`);
    tokKv = [
      { key: "tokenizer.ggml.model", type: GGUFValueType.STRING, value: "llama" },
      {
        key: "tokenizer.ggml.tokens",
        type: GGUFValueType.ARRAY,
        value: { itemType: GGUFValueType.STRING, values: tokens },
      },
      {
        key: "tokenizer.ggml.scores",
        type: GGUFValueType.ARRAY,
        value: { itemType: GGUFValueType.FLOAT32, values: new Float32Array(nVocab) },
      },
      {
        key: "tokenizer.ggml.token_type",
        type: GGUFValueType.ARRAY,
        value: { itemType: GGUFValueType.INT32, values: new Int32Array(nVocab).fill(1) },
      },
    ];
  }
  const u32 = (key: string, value: number): GGUFKV => ({
    key,
    type: GGUFValueType.UINT32,
    value,
  });
  const kv: GGUFKV[] = [
    { key: "general.architecture", type: GGUFValueType.STRING, value: "llama" },
    { key: "general.name", type: GGUFValueType.STRING, value: "random-llama" },
    u32("llama.context_length", opts.nCtxTrain ?? 2048),
    u32("llama.embedding_length", nEmbd),
    u32("llama.block_count", nLayer),
    u32("llama.feed_forward_length", nFF),
    u32("llama.rope.dimension_count", headDim),
    u32("llama.attention.head_count", nHead),
    u32("llama.attention.head_count_kv", nHeadKv),
    { key: "llama.attention.layer_norm_rms_epsilon", type: GGUFValueType.FLOAT32, value: 1e-5 },
    u32("general.file_type", FTYPES[typeName]),
    ...tokKv,
  ];

  const tensors: GGUFWriteTensor[] = [];
  const matrix = (name: string, cols: number, rows: number) =>
    tensors.push({
      name,
      type: wtype,
      ne: [cols, rows],
      data: () => {
        const v = new Float32Array(cols * rows);
        for (let i = 0; i < v.length; i++) v[i] = std * next();
        return encodeRows(wtype, v, cols);
      },
    });
  const norm = (name: string) =>
    tensors.push({
      name,
      type: GGMLType.F32,
      ne: [nEmbd],
      data: () => {
        const v = new Float32Array(nEmbd);
        for (let i = 0; i < nEmbd; i++) v[i] = 1 + 0.1 * next();
        return new Uint8Array(v.buffer);
      },
    });
  matrix("token_embd.weight", nEmbd, nVocab);
  for (let i = 0; i < nLayer; i++) {
    const b = `blk.${i}.`;
    norm(`${b}attn_norm.weight`);
    matrix(`${b}attn_q.weight`, nEmbd, nEmbd);
    matrix(`${b}attn_k.weight`, nEmbd, headDim * nHeadKv);
    matrix(`${b}attn_v.weight`, nEmbd, headDim * nHeadKv);
    matrix(`${b}attn_output.weight`, nEmbd, nEmbd);
    norm(`${b}ffn_norm.weight`);
    matrix(`${b}ffn_gate.weight`, nEmbd, nFF);
    matrix(`${b}ffn_up.weight`, nEmbd, nFF);
    matrix(`${b}ffn_down.weight`, nFF, nEmbd);
  }
  norm("output_norm.weight");
  matrix("output.weight", nEmbd, nVocab);
  await writeGGUFFile(path, { kv, tensors });
}
