/**
 * Import of Karpathy's llama2.c checkpoints (`model.bin` + `tokenizer.bin`)
 * into a llama-architecture GGUF, with the tensor names, layouts and
 * tokenizer metadata llama.cpp's own convert-llama2c-to-ggml produces.
 *
 * llama2.c's wq/wk are stored as trained (not permuted like HF checkpoints)
 * and llama2.c rotates adjacent pairs, which is llama.cpp's "normal" RoPE of
 * the llama architecture, so every weight is copied unchanged.
 *
 * @module
 */
import { type GGUFKV, GGUFValueType } from "./header.ts";
import { GGMLType } from "../ggml/types.ts";
import { type GGUFWriteTensor, writeGGUFFile } from "./writer.ts";
import { assertDistinctFiles, assertRegularFile } from "../fs/atomic.ts";

/** A malformed llama2.c file: names the file, byte offset and field. */
export class Llama2cError extends Error {
  /** The file. */
  readonly path: string;
  /** Byte offset of the bad field. */
  readonly offset: number;
  /** The field. */
  readonly field: string;

  /** Builds the error. */
  constructor(detail: string, opts: { path: string; offset: number; field: string }) {
    super(`${opts.path}: byte ${opts.offset}: ${opts.field}: ${detail}`);
    this.name = "Llama2cError";
    this.path = opts.path;
    this.offset = opts.offset;
    this.field = opts.field;
  }
}

/** The 7×int32 header of a llama2.c checkpoint. */
export interface Llama2cConfig {
  /** Embedding width. */
  dim: number;
  /** FFN width. */
  hiddenDim: number;
  /** Transformer blocks. */
  nLayers: number;
  /** Query heads. */
  nHeads: number;
  /** Key/value heads. */
  nKvHeads: number;
  /** Vocabulary size (absolute value of the stored one). */
  vocabSize: number;
  /** Maximum sequence length. */
  seqLen: number;
  /** Whether the classifier is the token embedding (stored vocab_size > 0). */
  sharedClassifier: boolean;
}

/** Byte size of the checkpoint header. */
export const LLAMA2C_HEADER_BYTES = 28;

const HEADER_FIELDS = [
  "dim",
  "hidden_dim",
  "n_layers",
  "n_heads",
  "n_kv_heads",
  "vocab_size",
  "seq_len",
];

/** Reads and checks the 28-byte header. */
export function parseLlama2cConfig(bytes: Uint8Array, path = "<model.bin>"): Llama2cConfig {
  if (bytes.length < LLAMA2C_HEADER_BYTES) {
    throw new Llama2cError("truncated header", { path, offset: bytes.length, field: "header" });
  }
  const dv = new DataView(bytes.buffer, bytes.byteOffset, LLAMA2C_HEADER_BYTES);
  const v = HEADER_FIELDS.map((_, i) => dv.getInt32(4 * i, true));
  v.forEach((x, i) => {
    if (x === 0 || (x < 0 && i !== 5)) {
      throw new Llama2cError(`bad value ${x}`, { path, offset: 4 * i, field: HEADER_FIELDS[i] });
    }
  });
  const [dim, hiddenDim, nLayers, nHeads, nKvHeads, vocab, seqLen] = v;
  if (dim % nHeads !== 0) {
    throw new Llama2cError(`dim ${dim} is not a multiple of n_heads`, {
      path,
      offset: 12,
      field: "n_heads",
    });
  }
  if (nKvHeads > nHeads || nHeads % nKvHeads !== 0) {
    throw new Llama2cError(`n_heads ${nHeads} is not a multiple of n_kv_heads ${nKvHeads}`, {
      path,
      offset: 16,
      field: "n_kv_heads",
    });
  }
  if ((dim / nHeads) % 2 !== 0) {
    throw new Llama2cError("head size must be even for RoPE", {
      path,
      offset: 12,
      field: "n_heads",
    });
  }
  return {
    dim,
    hiddenDim,
    nLayers,
    nHeads,
    nKvHeads,
    vocabSize: Math.abs(vocab),
    seqLen,
    sharedClassifier: vocab > 0,
  };
}

/** One weight array of the checkpoint, with where it goes in the GGUF. */
export interface Llama2cTensor {
  /** llama.cpp tensor name. */
  name: string;
  /** ggml shape (innermost first). */
  ne: number[];
  /** Byte offset in model.bin. */
  offset: number;
}

/**
 * Where each llama2.c array lives in model.bin (run.c's memory_map_weights
 * order) and the llama.cpp tensor it becomes. Returns the tensors in GGUF
 * order and the byte size the checkpoint must have.
 */
export function llama2cLayout(c: Llama2cConfig): { tensors: Llama2cTensor[]; fileSize: number } {
  const headSize = c.dim / c.nHeads;
  const kvDim = c.nKvHeads * headSize;
  const L = c.nLayers;
  let p = LLAMA2C_HEADER_BYTES;
  const take = (n: number) => {
    const at = p;
    p += 4 * n;
    return at;
  };
  const emb = take(c.vocabSize * c.dim);
  const rmsAtt = take(L * c.dim);
  const wq = take(L * c.dim * c.dim);
  const wk = take(L * c.dim * kvDim);
  const wv = take(L * c.dim * kvDim);
  const wo = take(L * c.dim * c.dim);
  const rmsFfn = take(L * c.dim);
  const w1 = take(L * c.dim * c.hiddenDim);
  const w2 = take(L * c.hiddenDim * c.dim);
  const w3 = take(L * c.dim * c.hiddenDim);
  const rmsFinal = take(c.dim);
  take(c.seqLen * headSize / 2); // legacy freq_cis_real, unused
  take(c.seqLen * headSize / 2); // legacy freq_cis_imag, unused
  const wcls = c.sharedClassifier ? -1 : take(c.vocabSize * c.dim);

  const t: Llama2cTensor[] = [
    { name: "token_embd.weight", ne: [c.dim, c.vocabSize], offset: emb },
    { name: "output_norm.weight", ne: [c.dim], offset: rmsFinal },
  ];
  // A shared classifier is left out: llama.cpp then uses token_embd for the output.
  if (wcls >= 0) t.push({ name: "output.weight", ne: [c.dim, c.vocabSize], offset: wcls });
  for (let l = 0; l < L; l++) {
    const b = `blk.${l}.`;
    const at = (base: number, n: number) => base + 4 * l * n;
    t.push(
      { name: b + "attn_q.weight", ne: [c.dim, c.dim], offset: at(wq, c.dim * c.dim) },
      { name: b + "attn_k.weight", ne: [c.dim, kvDim], offset: at(wk, c.dim * kvDim) },
      { name: b + "attn_v.weight", ne: [c.dim, kvDim], offset: at(wv, c.dim * kvDim) },
      { name: b + "attn_output.weight", ne: [c.dim, c.dim], offset: at(wo, c.dim * c.dim) },
      { name: b + "attn_norm.weight", ne: [c.dim], offset: at(rmsAtt, c.dim) },
      {
        name: b + "ffn_gate.weight",
        ne: [c.dim, c.hiddenDim],
        offset: at(w1, c.dim * c.hiddenDim),
      },
      {
        name: b + "ffn_down.weight",
        ne: [c.hiddenDim, c.dim],
        offset: at(w2, c.dim * c.hiddenDim),
      },
      { name: b + "ffn_up.weight", ne: [c.dim, c.hiddenDim], offset: at(w3, c.dim * c.hiddenDim) },
      { name: b + "ffn_norm.weight", ne: [c.dim], offset: at(rmsFfn, c.dim) },
    );
  }
  return { tensors: t, fileSize: p };
}

/** llama.cpp token types. */
export const TokenType = {
  NORMAL: 1,
  UNKNOWN: 2,
  CONTROL: 3,
  USER_DEFINED: 4,
  UNUSED: 5,
  BYTE: 6,
} as const;

/** A llama2.c vocabulary as llama.cpp's converter turns it into GGUF metadata. */
export interface Llama2cVocab {
  /** Token texts, spaces escaped as U+2581, ids 0/1/2 renamed `<unk>`, `<s>`, `</s>`. */
  tokens: string[];
  /** SentencePiece scores. */
  scores: Float32Array;
  /** llama.cpp token types. */
  types: Int32Array;
}

/** Reads tokenizer.bin: int32 max_token_length, then {f32 score, i32 len, bytes} per token. */
export function parseLlama2cTokenizer(
  bytes: Uint8Array,
  vocabSize: number,
  path = "<tokenizer.bin>",
): Llama2cVocab {
  const dv = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  const dec = new TextDecoder();
  const tokens: string[] = [];
  const scores = new Float32Array(vocabSize);
  const types = new Int32Array(vocabSize);
  let p = 4;
  if (bytes.length < 4) {
    throw new Llama2cError("truncated", { path, offset: 0, field: "max_token_length" });
  }
  for (let id = 0; id < vocabSize; id++) {
    if (p + 8 > bytes.length) {
      throw new Llama2cError("truncated: fewer tokens than vocab_size", {
        path,
        offset: p,
        field: `token[${id}]`,
      });
    }
    scores[id] = dv.getFloat32(p, true);
    const len = dv.getInt32(p + 4, true);
    if (len < 0 || len > bytes.length - p - 8) {
      throw new Llama2cError(`length ${len} beyond the file`, {
        path,
        offset: p + 4,
        field: `token[${id}].len`,
      });
    }
    let text = dec.decode(bytes.subarray(p + 8, p + 8 + len));
    p += 8 + len;
    let type: number = TokenType.NORMAL;
    if (id === 0) [text, type] = ["<unk>", TokenType.UNKNOWN];
    else if (id === 1) [text, type] = ["<s>", TokenType.CONTROL];
    else if (id === 2) [text, type] = ["</s>", TokenType.CONTROL];
    else if (text.length === 0) type = TokenType.CONTROL;
    else if (/^<0x[0-9A-Fa-f]/.test(text)) type = TokenType.BYTE;
    tokens.push(text.replaceAll(" ", "\u2581"));
    types[id] = type;
  }
  return { tokens, scores, types };
}

/** The GGUF metadata of a converted checkpoint. */
export function llama2cMetadata(c: Llama2cConfig, v: Llama2cVocab, name: string): GGUFKV[] {
  const u32 = (key: string, value: number): GGUFKV => ({ key, type: GGUFValueType.UINT32, value });
  return [
    { key: "general.architecture", type: GGUFValueType.STRING, value: "llama" },
    { key: "general.name", type: GGUFValueType.STRING, value: name },
    u32("general.file_type", 0),
    u32("llama.context_length", c.seqLen),
    u32("llama.embedding_length", c.dim),
    u32("llama.feed_forward_length", c.hiddenDim),
    u32("llama.block_count", c.nLayers),
    u32("llama.attention.head_count", c.nHeads),
    u32("llama.attention.head_count_kv", c.nKvHeads),
    u32("llama.rope.dimension_count", c.dim / c.nHeads),
    {
      key: "llama.attention.layer_norm_rms_epsilon",
      type: GGUFValueType.FLOAT32,
      value: Math.fround(1e-5),
    },
    { key: "llama.rope.freq_base", type: GGUFValueType.FLOAT32, value: 10000 },
    u32("llama.vocab_size", c.vocabSize),
    { key: "tokenizer.ggml.model", type: GGUFValueType.STRING, value: "llama" },
    {
      key: "tokenizer.ggml.tokens",
      type: GGUFValueType.ARRAY,
      value: { itemType: GGUFValueType.STRING, values: v.tokens },
    },
    {
      key: "tokenizer.ggml.scores",
      type: GGUFValueType.ARRAY,
      value: { itemType: GGUFValueType.FLOAT32, values: v.scores },
    },
    {
      key: "tokenizer.ggml.token_type",
      type: GGUFValueType.ARRAY,
      value: { itemType: GGUFValueType.INT32, values: v.types },
    },
    u32("tokenizer.ggml.unknown_token_id", 0),
    u32("tokenizer.ggml.bos_token_id", 1),
    u32("tokenizer.ggml.eos_token_id", 2),
  ];
}

/** Options of convertLlama2c. */
export interface ConvertLlama2cOptions {
  /** llama2.c checkpoint. */
  model: string;
  /** llama2.c tokenizer.bin. */
  tokenizer: string;
  /** GGUF to write. */
  out: string;
  /** general.name (default: the checkpoint's file name). */
  name?: string;
}

/**
 * Converts a llama2.c checkpoint to GGUF, streaming one tensor at a time from
 * the checkpoint so memory stays at the largest tensor. The output is
 * written atomically and may not be one of the inputs (SameFileError).
 */
export async function convertLlama2c(opts: ConvertLlama2cOptions): Promise<Llama2cConfig> {
  const inputs = [opts.model, opts.tokenizer];
  for (const p of inputs) await assertRegularFile(p);
  await assertDistinctFiles(opts.out, inputs);
  using f = await Deno.open(opts.model, { read: true });
  const size = (await f.stat()).size;
  const read = async (offset: number, n: number): Promise<Uint8Array> => {
    const buf = new Uint8Array(n);
    await f.seek(offset, Deno.SeekMode.Start);
    let got = 0;
    while (got < n) {
      const k = await f.read(buf.subarray(got));
      if (!k) {
        throw new Llama2cError("unexpected end of file", {
          path: opts.model,
          offset: offset + got,
          field: "weights",
        });
      }
      got += k;
    }
    return buf;
  };
  const config = parseLlama2cConfig(
    await read(0, Math.min(size, LLAMA2C_HEADER_BYTES)),
    opts.model,
  );
  const layout = llama2cLayout(config);
  if (size < layout.fileSize) {
    throw new Llama2cError(`file has ${size} bytes, the header implies ${layout.fileSize}`, {
      path: opts.model,
      offset: size,
      field: "weights",
    });
  }
  const vocab = parseLlama2cTokenizer(
    await Deno.readFile(opts.tokenizer),
    config.vocabSize,
    opts.tokenizer,
  );
  const name = opts.name ?? opts.model.split(/[\\/]/).pop()!.replace(/\.bin$/, "");
  const tensors: GGUFWriteTensor[] = layout.tensors.map((t) => ({
    name: t.name,
    type: GGMLType.F32,
    ne: t.ne,
    data: () => read(t.offset, 4 * t.ne.reduce((a, b) => a * b, 1)),
  }));
  await writeGGUFFile(opts.out, { kv: llama2cMetadata(config, vocab, name), tensors }, { inputs });
  return config;
}
