/**
 * gemma (the first generation): llama.cpp's `src/models/gemma.cpp` with the
 * non-flash attention path, step for step. Differences from llama: the
 * token embeddings are scaled by sqrt(nEmbd), the queries are scaled by
 * 1/sqrt(headDim) after RoPE (attention then runs with kq_scale 1), RoPE is
 * NeoX, the feed-forward is GeGLU, and the output head is always the token
 * embedding matrix. The RMSNorm weights are used as stored (gemma's
 * converter already added the 1 the reference implementation adds).
 *
 * @module
 */
import type { Tensor } from "../../graph/graph.ts";
import type { GGUFHeader } from "../../gguf/mod.ts";
import type { HParams } from "../hparams.ts";
import type { WeightMap, WeightRef } from "../weights.ts";
import type { GraphBuilder } from "./builder.ts";
import type { Architecture } from "./types.ts";
import { ModelError } from "../hparams.ts";

/** Weights of one gemma block. */
export interface GemmaLayer {
  /** Attention RMSNorm weight. */
  readonly attnNorm: WeightRef;
  /** Query projection. */
  readonly wq: WeightRef;
  /** Key projection. */
  readonly wk: WeightRef;
  /** Value projection. */
  readonly wv: WeightRef;
  /** Attention output projection. */
  readonly wo: WeightRef;
  /** FFN RMSNorm weight. */
  readonly ffnNorm: WeightRef;
  /** FFN gate projection (its GELU gates the up projection). */
  readonly ffnGate: WeightRef;
  /** FFN up projection. */
  readonly ffnUp: WeightRef;
  /** FFN down projection. */
  readonly ffnDown: WeightRef;
}

/** All weights of a gemma model. */
export interface GemmaWeights {
  /** Token embeddings (rows read by get_rows). */
  readonly tokEmbd: WeightRef;
  /** Final RMSNorm weight. */
  readonly outputNorm: WeightRef;
  /** The output head: `token_embd.weight` again, read by mul_mat. */
  readonly output: WeightRef;
  /** Per-block weights. */
  readonly layers: readonly GemmaLayer[];
}

/** Maps gemma's tensor names (llama.cpp's llama_model_gemma::load_arch_tensors). */
export function gemmaWeights(m: WeightMap, hp: HParams): GemmaWeights {
  const { nEmbd, nVocab, nFF, nHead, nHeadKv, headDimK, headDimV } = hp;
  const layers: GemmaLayer[] = [];
  for (let i = 0; i < hp.nLayer; i++) {
    const b = `blk.${i}.`;
    layers.push({
      attnNorm: m.need(`${b}attn_norm.weight`, "norm", [nEmbd]),
      wq: m.need(`${b}attn_q.weight`, "matrix", [nEmbd, headDimK * nHead]),
      wk: m.need(`${b}attn_k.weight`, "matrix", [nEmbd, headDimK * nHeadKv]),
      wv: m.need(`${b}attn_v.weight`, "matrix", [nEmbd, headDimV * nHeadKv]),
      wo: m.need(`${b}attn_output.weight`, "matrix", [headDimK * nHead, nEmbd]),
      ffnNorm: m.need(`${b}ffn_norm.weight`, "norm", [nEmbd]),
      ffnGate: m.need(`${b}ffn_gate.weight`, "matrix", [nEmbd, nFF]),
      ffnUp: m.need(`${b}ffn_up.weight`, "matrix", [nEmbd, nFF]),
      ffnDown: m.need(`${b}ffn_down.weight`, "matrix", [nFF, nEmbd]),
    });
  }
  return {
    tokEmbd: m.need("token_embd.weight", "embedding", [nEmbd, nVocab]),
    outputNorm: m.need("output_norm.weight", "norm", [nEmbd]),
    // llama.cpp ignores any output.weight and duplicates token_embd as the
    // head; asked for again as a matrix so its type is checked for mul_mat.
    output: m.need("token_embd.weight", "matrix", [nEmbd, nVocab]),
    layers,
  };
}

/** The gemma forward pass (llm_build_gemma). */
export function buildGemma(b: GraphBuilder, w: GemmaWeights): Tensor | null {
  const { g, hp } = b;
  // sqrtf(n_embd) and 1.0f/sqrtf(float(n_embd_head)), rounded as float.
  const embdScale = Math.fround(Math.sqrt(hp.nEmbd));
  const qScale = Math.fround(1 / Math.fround(Math.sqrt(hp.headDimV)));
  let inpL = b.cb(g.scale(b.embed(w.tokEmbd), embdScale), "inp_scaled");
  for (let il = 0; il < hp.nLayer; il++) {
    g.setLayer(il);
    const lw = w.layers[il];
    let cur = b.cb(b.norm(inpL, lw.attnNorm), "attn_norm", il);
    const qkv = b.qkv(cur, lw, il);
    qkv.q = b.cb(b.rope(qkv.q), "Qcur", il);
    qkv.k = b.cb(b.rope(qkv.k), "Kcur", il);
    qkv.q = b.cb(g.scale(qkv.q, qScale), "Qcur_scaled", il);
    cur = b.attention(qkv, lw.wo, undefined, 1, il);
    if (il === hp.nLayer - 1) {
      // Nothing to output: the keys and values attention() stored are all
      // this micro-batch leaves behind.
      if (b.noOutputs) return null;
      cur = b.outputRows(cur);
      inpL = b.outputRows(inpL);
    }
    const saOut = b.cb(g.add(cur, inpL), "sa_out", il);
    cur = b.cb(b.norm(saOut, lw.ffnNorm), "ffn_norm", il);
    cur = b.ffn(cur, { gate: lw.ffnGate, up: lw.ffnUp, down: lw.ffnDown }, "gelu", il);
    inpL = b.cb(g.add(b.cb(cur, "ffn_out", il), saOut), "l_out", il);
  }
  g.setLayer(-1);
  return b.logits(inpL, w.outputNorm, w.output);
}

/**
 * What llama.cpp's gemma loader reads beyond the common keys, and the
 * layouts it accepts that this engine does not build (refused by name).
 */
function gemmaHParams(h: GGUFHeader, hp: HParams): HParams {
  const key = (k: string) => `${hp.arch}.${k}`;
  // llama_model_gemma::load_arch_hparams requires the epsilon (no default).
  if (!h.get(key("attention.layer_norm_rms_epsilon"))) {
    throw new ModelError(
      `${h.path}: missing metadata key ${key("attention.layer_norm_rms_epsilon")}`,
    );
  }
  // llama.cpp shapes q, k and v with the value head size: files whose key
  // and value heads differ do not run there either.
  if (hp.headDimK !== hp.headDimV) {
    throw new ModelError(
      `${h.path}: ${key("attention.key_length")} = ${hp.headDimK} differing from ` +
        `${key("attention.value_length")} = ${hp.headDimV} is not supported for gemma`,
    );
  }
  if (hp.rope.nDims !== hp.headDimK) {
    throw new ModelError(
      `${h.path}: ${key("rope.dimension_count")} = ${hp.rope.nDims} is not supported ` +
        `(only the head size, ${hp.headDimK})`,
    );
  }
  // create_tensor_qkv also takes a fused qkv or q/k/v biases; gemma
  // checkpoints have neither, and this engine's gemma is tested without them.
  for (let i = 0; i < hp.nLayer; i++) {
    for (const t of ["attn_qkv.weight", "attn_q.bias", "attn_k.bias", "attn_v.bias"]) {
      if (h.tensor(`blk.${i}.${t}`)) {
        throw new ModelError(`${h.path}: tensor blk.${i}.${t} is not supported for gemma`);
      }
    }
  }
  return hp;
}

/** gemma (1): llama.cpp's `gemma` architecture. */
export const gemma: Architecture<GemmaWeights> = {
  names: ["gemma"],
  memory: "kv",
  output: "logits",
  norm: "rms",
  rope: "neox",
  hparams: gemmaHParams,
  weights: gemmaWeights,
  build: buildGemma,
};
