/**
 * llama (1/2/3), and mistral3 which builds the same graph: llama.cpp's
 * `src/models/llama.cpp` with the non-flash attention path, step for step.
 * Also the layout qwen2 shares (see qwen2.ts): RMSNorm, q/k/v with optional
 * biases, RoPE, SwiGLU, and an output head that may be tied to the token
 * embeddings.
 *
 * @module
 */
import type { Tensor } from "../../graph/graph.ts";
import type { HParams } from "../hparams.ts";
import type { WeightMap, WeightRef, WeightRole } from "../weights.ts";
import type { GraphBuilder } from "./builder.ts";
import type { Architecture } from "./types.ts";
import type { GGUFHeader } from "../../gguf/mod.ts";
import { ModelError, readRopeParams } from "../hparams.ts";

/** Weights of one llama block. */
export interface LlamaLayer {
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
  /** Query bias (qwen2). */
  readonly bq?: WeightRef;
  /** Key bias (qwen2). */
  readonly bk?: WeightRef;
  /** Value bias (qwen2). */
  readonly bv?: WeightRef;
  /** Attention output bias. */
  readonly bo?: WeightRef;
  /** FFN RMSNorm weight. */
  readonly ffnNorm: WeightRef;
  /** FFN gate projection. */
  readonly ffnGate: WeightRef;
  /** FFN up projection. */
  readonly ffnUp: WeightRef;
  /** FFN down projection. */
  readonly ffnDown: WeightRef;
  /** FFN gate bias. */
  readonly ffnGateB?: WeightRef;
  /** FFN up bias. */
  readonly ffnUpB?: WeightRef;
  /** FFN down bias. */
  readonly ffnDownB?: WeightRef;
}

/** All weights of a llama-family model. */
export interface LlamaWeights {
  /** Token embeddings. */
  readonly tokEmbd: WeightRef;
  /** Final RMSNorm weight. */
  readonly outputNorm: WeightRef;
  /** `output.weight`, or `token_embd.weight` when the model ties them. */
  readonly output: WeightRef;
  /** Per-block weights. */
  readonly layers: readonly LlamaLayer[];
  /** Frequency divisors of the rotated pairs (llama3's `rope_freqs.weight`, every block). */
  readonly ropeFreqs?: WeightRef;
  /** Bias of the output head (qwen2's `output.bias`). */
  readonly outputB?: WeightRef;
}

/**
 * Maps llama's tensor names (output tied when `output.weight` is absent), with
 * the optional tensors llama.cpp's loader creates for the layout: q/k/v
 * biases for both; attention output and FFN biases and `rope_freqs.weight`
 * for llama (and mistral3); `output.bias` for qwen2.
 */
export function llamaWeights(
  m: WeightMap,
  hp: HParams,
  layout: "llama" | "qwen2" = "llama",
): LlamaWeights {
  const llama = layout === "llama";
  const llamaOnly = (name: string, role: WeightRole, shape: number[]) =>
    llama ? m.optional(name, role, shape) : undefined;
  const { nEmbd, nVocab, nFF, nHead, nHeadKv, headDimK, headDimV } = hp;
  const nQ = headDimK * nHead;
  const nK = headDimK * nHeadKv;
  const nV = headDimV * nHeadKv;
  const layers: LlamaLayer[] = [];
  for (let i = 0; i < hp.nLayer; i++) {
    const b = `blk.${i}.`;
    layers.push({
      attnNorm: m.need(`${b}attn_norm.weight`, "norm", [nEmbd]),
      wq: m.need(`${b}attn_q.weight`, "matrix", [nEmbd, nQ]),
      wk: m.need(`${b}attn_k.weight`, "matrix", [nEmbd, nK]),
      wv: m.need(`${b}attn_v.weight`, "matrix", [nEmbd, nV]),
      wo: m.need(`${b}attn_output.weight`, "matrix", [headDimV * nHead, nEmbd]),
      bq: m.optional(`${b}attn_q.bias`, "bias", [nQ]),
      bk: m.optional(`${b}attn_k.bias`, "bias", [nK]),
      bv: m.optional(`${b}attn_v.bias`, "bias", [nV]),
      bo: llamaOnly(`${b}attn_output.bias`, "bias", [nEmbd]),
      ffnNorm: m.need(`${b}ffn_norm.weight`, "norm", [nEmbd]),
      ffnGate: m.need(`${b}ffn_gate.weight`, "matrix", [nEmbd, nFF]),
      ffnUp: m.need(`${b}ffn_up.weight`, "matrix", [nEmbd, nFF]),
      ffnDown: m.need(`${b}ffn_down.weight`, "matrix", [nFF, nEmbd]),
      ffnGateB: llamaOnly(`${b}ffn_gate.bias`, "bias", [nFF]),
      ffnUpB: llamaOnly(`${b}ffn_up.bias`, "bias", [nFF]),
      ffnDownB: llamaOnly(`${b}ffn_down.bias`, "bias", [nEmbd]),
    });
  }
  const tokEmbd = m.need("token_embd.weight", "embedding", [nEmbd, nVocab]);
  return {
    tokEmbd,
    outputNorm: m.need("output_norm.weight", "norm", [nEmbd]),
    output: m.optional("output.weight", "matrix", [nEmbd, nVocab]) ?? tokEmbd,
    layers,
    ropeFreqs: llamaOnly("rope_freqs.weight", "factors", [hp.rope.nDims / 2]),
    outputB: llama ? undefined : m.optional("output.bias", "bias", [nVocab]),
  };
}

/** The llama forward pass (also qwen2's: its biases are optional weights here). */
export function buildLlama(b: GraphBuilder, w: LlamaWeights): Tensor | null {
  const { g, hp } = b;
  const kqScale = 1 / Math.sqrt(hp.headDimK);
  let inpL = b.embed(w.tokEmbd);
  for (let il = 0; il < hp.nLayer; il++) {
    g.setLayer(il);
    const lw = w.layers[il];
    let inpSA = inpL;
    let cur = b.cb(b.norm(inpL, lw.attnNorm), "attn_norm", il);
    const qkv = b.qkv(cur, lw, il);
    qkv.q = b.cb(b.rope(qkv.q, w.ropeFreqs), "Qcur", il);
    qkv.k = b.cb(b.rope(qkv.k, w.ropeFreqs), "Kcur", il);
    cur = b.attention(qkv, lw.wo, lw.bo, kqScale, il);
    if (il === hp.nLayer - 1) {
      // Nothing to output (a prompt chunk before the last): what this
      // micro-batch leaves behind is the keys and values attention() stored.
      if (b.noOutputs) return null;
      // Rows without outputs stop here: the last FFN runs only where logits are wanted.
      cur = b.outputRows(cur);
      inpSA = b.outputRows(inpSA);
    }
    const ffnInp = b.cb(g.add(cur, inpSA), "ffn_inp", il);
    cur = b.cb(b.norm(ffnInp, lw.ffnNorm), "ffn_norm", il);
    const ffn = {
      gate: lw.ffnGate,
      gateB: lw.ffnGateB,
      up: lw.ffnUp,
      upB: lw.ffnUpB,
      down: lw.ffnDown,
      downB: lw.ffnDownB,
    };
    cur = b.ffn(cur, ffn, "silu", il);
    inpL = b.cb(g.add(b.cb(cur, "ffn_out", il), ffnInp), "l_out", il);
  }
  g.setLayer(-1);
  return b.logits(inpL, w.outputNorm, w.output, undefined, w.outputB);
}

/**
 * The checks llama.cpp makes of every llama-family graph: K and V heads of
 * one size, rotated whole (load_hparams insists for llama; the llama,
 * mistral3 and qwen2 graphs GGML_ASSERT it).
 */
export function checkWholeHeadRope(h: GGUFHeader, hp: HParams): void {
  if (hp.rope.nDims !== hp.headDimK) {
    throw new ModelError(
      `${h.path}: ${hp.arch}.rope.dimension_count = ${hp.rope.nDims} is invalid: ` +
        `expected ${hp.headDimK} (the head size) for ${hp.arch}`,
    );
  }
  if (hp.headDimV !== hp.headDimK) {
    throw new ModelError(
      `${h.path}: ${hp.arch}.attention.value_length = ${hp.headDimV} is invalid: ` +
        `expected ${hp.headDimK} (attention.key_length) for ${hp.arch}`,
    );
  }
}

/**
 * llama, and mistral3 (llama's graph and tensors; it also reads YaRN's beta
 * and log-multiplier keys, and its attention temperature scaling is refused).
 */
export const llama: Architecture<LlamaWeights> = {
  names: ["llama", "mistral3"],
  memory: "kv",
  output: "logits",
  norm: "rms",
  rope: "normal",
  ropeFactors: (w) => w.ropeFreqs,
  hparams(h, hp) {
    checkWholeHeadRope(h, hp);
    // Under longrope llama.cpp reads rope_factors_long/short instead of rope_freqs.
    const scaling = `${hp.arch}.rope.scaling.type`;
    if (h.string(scaling, "linear") === "longrope") {
      throw new ModelError(`${h.path}: ${scaling} = 'longrope' is not supported for ${hp.arch}`);
    }
    if (hp.arch !== "mistral3") return hp;
    // llama_model_mistral3::load_arch_hparams: temperature scaling and its own YaRN keys.
    const temp = h.number(`${hp.arch}.attention.temperature_scale`, 0);
    if (temp !== 0) {
      throw new ModelError(
        `${h.path}: ${hp.arch}.attention.temperature_scale = ${temp} is not supported (only 0)`,
      );
    }
    const { nDims, mode } = hp.rope;
    const rope = readRopeParams(h, { nDims, mode, nCtxTrain: hp.nCtxTrain }, {
      beta: true,
      logMul: true,
    });
    return { ...hp, rope };
  },
  weights: llamaWeights,
  build: buildLlama,
};
