/**
 * Random-weight models for benchmarks and tests: a GGUF of any architecture
 * ({@link writeRandomGGUF}: its metadata and tensor list) with normal(0, std)
 * weights, written one tensor at a time so a model of a few hundred MB never
 * sits in memory whole; {@link writeRandomLlama} is the llama layout. The
 * tokenizer metadata can be copied from another GGUF so that llama.cpp loads
 * the result.
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

/** A metadata value of {@link RandomModelSpec}: numbers are written as u32 when integral, else f32. */
export type RandomMetaValue = number | string | boolean | { f32: number } | readonly string[];

/** One tensor of {@link RandomModelSpec}. */
export interface RandomTensor {
  /** llama.cpp's tensor name. */
  readonly name: string;
  /** Shape, ggml order. */
  readonly ne: readonly number[];
  /**
   * "matrix": normal(0, std) in the spec's weight type; "norm": 1 + 0.1
   * normal, f32; "bias": 0.1 normal, f32; "f32": normal(0, std), f32.
   */
  readonly kind: "matrix" | "norm" | "bias" | "f32";
  /** Overrides the spec's std for this tensor ("matrix" and "f32"). */
  readonly std?: number;
  /** Fixed values instead of random ones (element index to value; e.g. RoPE frequency factors). */
  readonly values?: (i: number) => number;
}

/** What {@link writeRandomGGUF} writes. */
export interface RandomModelSpec {
  /** `general.architecture`. */
  arch: string;
  /** `general.name` (default "random-<arch>"). */
  name?: string;
  /** Metadata keys after the architecture prefix ("embedding_length": 64), or full keys with a dot prefix ("general.foo"). */
  meta: Record<string, RandomMetaValue>;
  /** The tensors, in file order. */
  tensors: readonly RandomTensor[];
  /** Type of "matrix" tensors (default "f32"). */
  type?: "f32" | "f16" | "q8_0" | "q4_0";
  /** Standard deviation of "matrix" weights (default 0.02). */
  std?: number;
  /** Seed of the generator (default 1). */
  seed?: number;
  /** A GGUF whose `tokenizer.*` keys are copied; without it a minimal SPM vocabulary of nVocab tokens. */
  tokenizerFrom?: string;
  /** Vocabulary size of the minimal vocabulary (default 32000). */
  nVocab?: number;
}

/** The vocabulary size {@link writeRandomGGUF} will write for `spec`. */
export async function randomVocabSize(
  spec: Pick<RandomModelSpec, "tokenizerFrom" | "nVocab">,
): Promise<number> {
  if (!spec.tokenizerFrom) return spec.nVocab ?? 32000;
  const src = await readGGUF(spec.tokenizerFrom);
  return src.strings("tokenizer.ggml.tokens")?.length ?? spec.nVocab ?? 32000;
}

function minimalVocab(nVocab: number): GGUFKV[] {
  const tokens = Array.from({ length: nVocab }, (_, i) => `<t${i}>`);
  return [
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

function metaKv(key: string, v: RandomMetaValue): GGUFKV {
  if (typeof v === "string") return { key, type: GGUFValueType.STRING, value: v };
  if (typeof v === "boolean") return { key, type: GGUFValueType.BOOL, value: v };
  if (typeof v === "number") {
    return Number.isInteger(v) && v >= 0
      ? { key, type: GGUFValueType.UINT32, value: v }
      : { key, type: GGUFValueType.FLOAT32, value: v };
  }
  if ("f32" in v) return { key, type: GGUFValueType.FLOAT32, value: v.f32 };
  return {
    key,
    type: GGUFValueType.ARRAY,
    value: { itemType: GGUFValueType.STRING, values: [...v] },
  };
}

/**
 * Writes a GGUF of architecture `spec.arch` with random weights to `path`:
 * the metadata given (prefixed with the architecture), `general.*`, a
 * tokenizer, and each tensor drawn as its kind says.
 */
export async function writeRandomGGUF(path: string, spec: RandomModelSpec): Promise<void> {
  const typeName = spec.type ?? "f32";
  const wtype = TYPE_IDS[typeName];
  if (wtype === undefined) throw new RangeError(`writeRandomGGUF: unknown type ${typeName}`);
  const std = spec.std ?? 0.02;
  const next = normalSource(spec.seed ?? 1);
  let tokKv: GGUFKV[];
  if (spec.tokenizerFrom) {
    const src = await readGGUF(spec.tokenizerFrom);
    tokKv = src.kv.filter((kv) => kv.key.startsWith("tokenizer."));
  } else {
    tokKv = minimalVocab(spec.nVocab ?? 32000);
  }
  const kv: GGUFKV[] = [
    { key: "general.architecture", type: GGUFValueType.STRING, value: spec.arch },
    { key: "general.name", type: GGUFValueType.STRING, value: spec.name ?? `random-${spec.arch}` },
    ...Object.entries(spec.meta).map(([k, v]) =>
      metaKv(k.startsWith(".") ? k.slice(1) : `${spec.arch}.${k}`, v)
    ),
    { key: "general.file_type", type: GGUFValueType.UINT32, value: FTYPES[typeName] },
    ...tokKv,
  ];
  const tensors: GGUFWriteTensor[] = spec.tensors.map((t) => {
    const n = t.ne.reduce((a, b) => a * b, 1);
    const type = t.kind === "matrix" ? wtype : GGMLType.F32;
    return {
      name: t.name,
      type,
      ne: [...t.ne],
      data: () => {
        const v = new Float32Array(n);
        const s = t.std ?? std;
        for (let i = 0; i < n; i++) {
          v[i] = t.values
            ? t.values(i)
            : t.kind === "norm"
            ? 1 + 0.1 * next()
            : t.kind === "bias"
            ? 0.1 * next()
            : s * next();
        }
        return encodeRows(type, v, t.ne[0]);
      },
    };
  });
  await writeGGUFFile(path, { kv, tensors });
}

/** The shape of a llama-layout model ({@link llamaTensors}, {@link llamaMeta}). */
export interface LlamaShape {
  /** Embedding width. */
  readonly nEmbd: number;
  /** Transformer blocks. */
  readonly nLayer: number;
  /** Query heads. */
  readonly nHead: number;
  /** Key/value heads. */
  readonly nHeadKv: number;
  /** Feed-forward width. */
  readonly nFF: number;
  /** Vocabulary size. */
  readonly nVocab: number;
  /** Training context written to the metadata. */
  readonly nCtxTrain: number;
}

/** Optional parts of the llama layout (llama.cpp's optional tensors). */
export interface LlamaLayoutOptions {
  /** `attn_q/k/v.bias` (qwen2). */
  qkvBias?: boolean;
  /** `attn_output.bias` and `ffn_gate/up/down.bias` (llama's optional biases). */
  llamaBiases?: boolean;
  /** No `output.weight`: the head is tied to `token_embd`. */
  tied?: boolean;
  /** `output.bias`. */
  outputBias?: boolean;
  /** std of `token_embd` and `output` (default: the spec's). */
  headStd?: number;
}

/** llama's tensors in llama.cpp's names and file order. */
export function llamaTensors(s: LlamaShape, o: LlamaLayoutOptions = {}): RandomTensor[] {
  const { nEmbd, nFF, nVocab } = s;
  const nKv = (nEmbd / s.nHead) * s.nHeadKv;
  const tensors: RandomTensor[] = [];
  const matrix = (name: string, ne: number[], std?: number) =>
    tensors.push({ name, ne, kind: "matrix", std });
  const vec = (name: string, n: number, kind: "norm" | "bias") =>
    tensors.push({ name, ne: [n], kind });
  matrix("token_embd.weight", [nEmbd, nVocab], o.headStd);
  for (let i = 0; i < s.nLayer; i++) {
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
  if (!o.tied) matrix("output.weight", [nEmbd, nVocab], o.headStd);
  if (o.outputBias) vec("output.bias", nVocab, "bias");
  return tensors;
}

/** llama's hyper-parameter metadata (keys after the architecture prefix). */
export function llamaMeta(s: LlamaShape): Record<string, RandomMetaValue> {
  return {
    context_length: s.nCtxTrain,
    embedding_length: s.nEmbd,
    block_count: s.nLayer,
    feed_forward_length: s.nFF,
    "rope.dimension_count": s.nEmbd / s.nHead,
    "attention.head_count": s.nHead,
    "attention.head_count_kv": s.nHeadKv,
    "attention.layer_norm_rms_epsilon": { f32: 1e-5 },
  };
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
  if (TYPE_IDS[typeName] === undefined) {
    throw new RangeError(`writeRandomLlama: unknown type ${typeName}`);
  }
  if (nEmbd % nHead !== 0 || nHead % nHeadKv !== 0) {
    throw new RangeError("writeRandomLlama: nEmbd must divide by nHead, nHead by nHeadKv");
  }
  const shape: LlamaShape = {
    nEmbd,
    nLayer,
    nHead,
    nHeadKv,
    nFF,
    nVocab: await randomVocabSize(opts),
    nCtxTrain: opts.nCtxTrain ?? 2048,
  };
  await writeRandomGGUF(path, {
    arch: "llama",
    name: "random-llama",
    meta: llamaMeta(shape),
    tensors: llamaTensors(shape),
    type: typeName,
    std: opts.std,
    seed: opts.seed,
    tokenizerFrom: opts.tokenizerFrom,
    nVocab: opts.nVocab,
  });
}
