/**
 * llama.cpp's choice of a type per tensor when quantizing a model
 * (src/llama-quant.cpp, llama_tensor_get_type, for dense llama-family models
 * without an importance matrix): which tensors are quantized at all, the
 * output / attn_v / ffn_down / attn_output bumps of the K-quant mixes, and the
 * fallback when a row is not a whole number of blocks.
 *
 * @module
 */
import { GGMLType, ggmlTypeInfo } from "../ggml/types.ts";

/** A quantization preset: llama_ftype value and the type most tensors get. */
export interface QuantPreset {
  /** The `deno task quantize` name (lower case, llama.cpp's `llama-quantize` spelling). */
  readonly name: string;
  /** llama_ftype value written to `general.file_type`. */
  readonly ftype: number;
  /** Default tensor type (llama_ftype_get_default_type). */
  readonly type: number;
}

const { Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, F16 } = GGMLType;

/** Presets by name. */
export const QUANT_PRESETS: ReadonlyMap<string, QuantPreset> = new Map(
  ([
    ["q4_0", 2, Q4_0],
    ["q4_1", 3, Q4_1],
    ["q8_0", 7, Q8_0],
    ["q5_0", 8, Q5_0],
    ["q5_1", 9, Q5_1],
    ["q2_k", 10, Q2_K],
    ["q3_k_s", 11, Q3_K],
    ["q3_k", 12, Q3_K], // llama-quantize's Q3_K means Q3_K_M
    ["q3_k_m", 12, Q3_K],
    ["q4_k_s", 14, Q4_K],
    ["q4_k", 15, Q4_K], // Q4_K means Q4_K_M
    ["q4_k_m", 15, Q4_K],
    ["q5_k_s", 16, Q5_K],
    ["q5_k", 17, Q5_K], // Q5_K means Q5_K_M
    ["q5_k_m", 17, Q5_K],
    ["q6_k", 18, Q6_K],
  ] as const).map(([name, ftype, type]) => [name, { name, ftype, type }]),
);

/** llama_ftype values of the presets (include/llama.h). */
export const Ftype = {
  Q4_0: 2,
  Q4_1: 3,
  Q8_0: 7,
  Q5_0: 8,
  Q5_1: 9,
  Q2_K: 10,
  Q3_K_S: 11,
  Q3_K_M: 12,
  Q4_K_S: 14,
  Q4_K_M: 15,
  Q5_K_S: 16,
  Q5_K_M: 17,
  Q6_K: 18,
} as const;

/** What the rules need to know about one tensor. */
export interface TensorDesc {
  /** Tensor name. */
  readonly name: string;
  /** Elements per dimension as stored. */
  readonly ne: readonly number[];
  /** Current ggml type. */
  readonly type: number;
}

/** Whole-model facts the rules use. */
export interface ModelFacts {
  /** Number of transformer blocks. */
  readonly nLayer: number;
  /** n_head / n_head_kv. */
  readonly nGqa: number;
}

type Category =
  | "output"
  | "token_embd"
  | "attn_qkv"
  | "attn_v"
  | "attn_output"
  | "ffn_down"
  | "other";

function category(name: string): Category {
  if (name === "output.weight") return "output";
  if (name === "token_embd.weight") return "token_embd";
  if (name.includes("attn_qkv.weight")) return "attn_qkv";
  if (name.includes("attn_kv_b.weight") || name.includes("attn_v.weight")) return "attn_v";
  if (name.includes("attn_output.weight")) return "attn_output";
  if (name.includes("ffn_down")) return "ffn_down";
  return "other";
}

/** llama.cpp's tensor_allows_quantization for the tensors of dense models. */
export function isQuantizable(t: TensorDesc): boolean {
  let dims = t.ne.length; // ggml_n_dims: trailing 1s do not count
  while (dims > 1 && t.ne[dims - 1] === 1) dims--;
  if (dims < 2) return false;
  const n = t.name;
  return n.endsWith("weight") && !n.includes("_norm.weight") &&
    !n.includes("ffn_gate_inp.weight") &&
    !n.includes("ssm_conv1d") && n !== "position_embd.weight" && n !== "token_types.weight";
}

const useMoreBits = (i: number, n: number) =>
  i < Math.trunc(n / 8) || i >= Math.trunc((7 * n) / 8) ||
  (i - Math.trunc(n / 8)) % 3 === 2;

/** Stateful per-model type chooser: call {@linkcode TypeChooser.choose} on tensors in file order. */
export class TypeChooser {
  #preset: QuantPreset;
  #facts: ModelFacts;
  #nAttnV: number;
  #tied: boolean;
  #iAttnV = 0;
  #iFfnDown = 0;

  /** Prepares the counters from the whole tensor list. */
  constructor(preset: QuantPreset, facts: ModelFacts, tensors: readonly TensorDesc[]) {
    this.#preset = preset;
    this.#facts = facts;
    this.#nAttnV = tensors.filter((t) => {
      const c = category(t.name);
      return c === "attn_v" || c === "attn_qkv";
    }).length;
    this.#tied = !tensors.some((t) => t.name === "output.weight");
  }

  /** The type tensor `t` is written as. */
  choose(t: TensorDesc): number {
    if (!isQuantizable(t)) return t.type;
    const f = this.#preset.ftype, cat = category(t.name);
    let type: number = this.#preset.type;
    if (cat === "output" || (this.#tied && cat === "token_embd")) {
      if (t.ne[0] % ggmlTypeInfo(type)!.blockSize !== 0) type = Q8_0;
      else if (type !== Q8_0) type = Q6_K;
    } else if (cat === "attn_v" || cat === "attn_qkv") {
      if (cat === "attn_qkv") {
        if (f === Ftype.Q3_K_M) type = Q4_K;
        else if (f === Ftype.Q4_K_M) type = Q5_K;
        else if (f === Ftype.Q5_K_M) type = Q6_K;
      } else if (f === Ftype.Q2_K) type = this.#facts.nGqa >= 4 ? Q4_K : Q3_K;
      else if (f === Ftype.Q3_K_M) type = this.#iAttnV < 2 ? Q5_K : Q4_K;
      else if (
        (f === Ftype.Q4_K_M || f === Ftype.Q5_K_M) && useMoreBits(this.#iAttnV, this.#nAttnV)
      ) type = Q6_K;
      else if (f === Ftype.Q4_K_S && this.#iAttnV < 4) type = Q5_K;
      this.#iAttnV++;
    } else if (cat === "ffn_down") {
      const i = this.#iFfnDown, n = this.#facts.nLayer;
      if (f === Ftype.Q2_K) type = Q3_K;
      else if (f === Ftype.Q3_K_M) type = i < Math.trunc(n / 16) ? Q5_K : Q4_K;
      else if (f === Ftype.Q4_K_M || f === Ftype.Q5_K_M) {
        if (useMoreBits(i, n)) type = Q6_K;
      } else if (f === Ftype.Q4_K_S && i < Math.trunc(n / 8)) type = Q5_K;
      this.#iFfnDown++;
    } else if (cat === "attn_output") {
      if (f === Ftype.Q2_K) type = Q3_K;
      else if (f === Ftype.Q3_K_M) type = Q4_K;
    }
    return fallback(t, type);
  }
}

/** tensor_type_fallback: a type whose block divides the row, else F16. */
function fallback(t: TensorDesc, type: number): number {
  const ok = (ty: number) => t.ne[0] % ggmlTypeInfo(ty)!.blockSize === 0;
  if (ok(type)) return type;
  const alt: Record<number, number> = {
    [Q2_K]: Q4_0,
    [Q3_K]: Q4_0,
    [Q4_K]: Q5_0,
    [Q5_K]: Q5_1,
    [Q6_K]: Q8_0,
  };
  const r = alt[type] ?? type;
  return ok(r) ? r : F16;
}
