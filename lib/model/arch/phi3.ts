/**
 * phi3 (Phi-3, Phi-3.5, Phi-4 and Phi-4-mini): llama.cpp's
 * `src/models/phi3.cpp` with the non-flash attention path, step for step.
 * RMSNorm, q/k/v from one fused matrix (or three), NeoX RoPE with optional
 * per-pair frequency factors (LongRoPE's `rope_factors_long/short`), the
 * query scaled by 1/sqrt(head size) after RoPE and attention at scale 1,
 * and a SwiGLU feed-forward whose gate and up projections are one matrix.
 *
 * `phi3.attention.sliding_window` is read by llama.cpp and then switched
 * off ("Phi SWA is currently disabled"): every layer attends the whole
 * cache there, so this engine ignores the key too.
 *
 * @module
 */
import type { Tensor } from "../../graph/graph.ts";
import type { HParams } from "../hparams.ts";
import { ModelError, normEpsKey } from "../hparams.ts";
import type { WeightMap, WeightRef } from "../weights.ts";
import type { GraphBuilder, QkvWeights } from "./builder.ts";
import type { Architecture } from "./types.ts";

/** Weights of one phi3 block. */
export interface Phi3Layer {
  /** Attention RMSNorm weight. */
  readonly attnNorm: WeightRef;
  /** Fused q|k|v projection (with optional bias), or separate ones (with optional biases). */
  readonly qkv: QkvWeights;
  /** Attention output projection. */
  readonly wo: WeightRef;
  /** FFN RMSNorm weight. */
  readonly ffnNorm: WeightRef;
  /** Gate and up projections stacked: [nEmbd, 2 nFF], gate first. */
  readonly ffnUp: WeightRef;
  /** FFN down projection. */
  readonly ffnDown: WeightRef;
}

/** All weights of a phi3 model. */
export interface Phi3Weights {
  /** Token embeddings. */
  readonly tokEmbd: WeightRef;
  /** Final RMSNorm weight. */
  readonly outputNorm: WeightRef;
  /** `output.weight`, or `token_embd.weight` when the model ties them. */
  readonly output: WeightRef;
  /** RoPE frequency factors for contexts beyond the original one (LongRoPE). */
  readonly ropeLong?: WeightRef;
  /** RoPE frequency factors for contexts within the original one (LongRoPE). */
  readonly ropeShort?: WeightRef;
  /** Per-block weights. */
  readonly layers: readonly Phi3Layer[];
}

/**
 * create_tensor_qkv: `attn_qkv` (+ `attn_qkv.bias`) when present, else
 * `attn_q/k/v` with optional biases. Separate biases beside a fused matrix
 * (which llama.cpp concatenates) are refused.
 */
function phi3Qkv(m: WeightMap, hp: HParams, path: string, b: string): QkvWeights {
  const { nEmbd } = hp;
  const gqa = hp.headDimK * hp.nHeadKv;
  const wqkv = m.optional(`${b}attn_qkv.weight`, "matrix", [nEmbd, nEmbd + 2 * gqa]);
  if (wqkv) {
    const bqkv = m.optional(`${b}attn_qkv.bias`, "bias", [nEmbd + 2 * gqa]);
    for (const [name, n] of [["attn_q", nEmbd], ["attn_k", gqa], ["attn_v", gqa]] as const) {
      if (!bqkv && m.optional(`${b}${name}.bias`, "bias", [n])) {
        throw new ModelError(
          `${path}: tensor ${b}${name}.bias beside a fused ${b}attn_qkv.weight is not supported`,
        );
      }
    }
    return { wqkv, bqkv };
  }
  return {
    wq: m.need(`${b}attn_q.weight`, "matrix", [nEmbd, nEmbd]),
    wk: m.need(`${b}attn_k.weight`, "matrix", [nEmbd, gqa]),
    wv: m.need(`${b}attn_v.weight`, "matrix", [nEmbd, gqa]),
    bq: m.optional(`${b}attn_q.bias`, "bias", [nEmbd]),
    bk: m.optional(`${b}attn_k.bias`, "bias", [gqa]),
    bv: m.optional(`${b}attn_v.bias`, "bias", [gqa]),
  };
}

/** Maps phi3's tensor names (llama_model_phi3::load_arch_tensors). */
export function phi3Weights(m: WeightMap, hp: HParams): Phi3Weights {
  const { nEmbd, nVocab, nFF } = hp;
  const path = m.path;
  const layers: Phi3Layer[] = [];
  for (let i = 0; i < hp.nLayer; i++) {
    const b = `blk.${i}.`;
    layers.push({
      attnNorm: m.need(`${b}attn_norm.weight`, "norm", [nEmbd]),
      qkv: phi3Qkv(m, hp, path, b),
      wo: m.need(`${b}attn_output.weight`, "matrix", [nEmbd, nEmbd]),
      ffnNorm: m.need(`${b}ffn_norm.weight`, "norm", [nEmbd]),
      ffnDown: m.need(`${b}ffn_down.weight`, "matrix", [nFF, nEmbd]),
      ffnUp: m.need(`${b}ffn_up.weight`, "matrix", [nEmbd, 2 * nFF]),
    });
  }
  const tokEmbd = m.need("token_embd.weight", "embedding", [nEmbd, nVocab]);
  const nPairs = hp.rope.nDims / 2;
  return {
    tokEmbd,
    outputNorm: m.need("output_norm.weight", "norm", [nEmbd]),
    output: m.optional("output.weight", "matrix", [nEmbd, nVocab]) ?? tokEmbd,
    // F32 vectors read element-wise like a norm weight (ggml_rope_ext's `c`).
    ropeLong: m.optional("rope_factors_long.weight", "norm", [nPairs]),
    ropeShort: m.optional("rope_factors_short.weight", "norm", [nPairs]),
    layers,
  };
}

/**
 * llama_model::get_rope_factors: the long factors when a sequence's
 * context exceeds the original training context, else the short ones;
 * either may be absent.
 */
function ropeFactors(w: Phi3Weights, hp: HParams, nCtxSeq: number): WeightRef | undefined {
  return nCtxSeq > hp.rope.nCtxOrig ? w.ropeLong : w.ropeShort;
}

/** The phi3 forward pass. */
export function buildPhi3(b: GraphBuilder, w: Phi3Weights): Tensor | null {
  const { g, hp } = b;
  // 1.0f / sqrtf(float(n_embd_head)), rounded to f32 at each step as in C.
  const qScale = Math.fround(1 / Math.fround(Math.sqrt(hp.headDimK)));
  // A sequence may use the whole unified cache (kv_unified: n_ctx_seq = n_ctx).
  const factors = ropeFactors(w, hp, b.kv?.size ?? b.step.nKv);
  let inpL = b.embed(w.tokEmbd);
  for (let il = 0; il < hp.nLayer; il++) {
    g.setLayer(il);
    const lw = w.layers[il];
    let residual = inpL;
    const normed = b.cb(b.norm(inpL, lw.attnNorm), "attn_norm", il);
    const qkv = b.qkv(normed, lw.qkv, il);
    const q = b.rope(qkv.q, factors);
    qkv.k = b.cb(b.rope(qkv.k, factors), "Kcur", il);
    // The query is scaled after RoPE, and the attention then runs at scale 1.
    qkv.q = b.cb(g.scale(q, qScale), "Qcur", il);
    let cur = b.attention(qkv, lw.wo, undefined, 1, il);
    if (il === hp.nLayer - 1) {
      if (b.noOutputs) return null;
      cur = b.outputRows(cur);
      residual = b.outputRows(residual);
    }
    cur = g.add(cur, residual);
    residual = cur;
    cur = b.cb(b.norm(cur, lw.ffnNorm), "ffn_norm", il);
    cur = b.ffn(cur, { up: lw.ffnUp, fusedGate: true, down: lw.ffnDown }, "silu", il);
    inpL = b.cb(g.add(residual, b.cb(cur, "ffn_out", il)), "l_out", il);
  }
  g.setLayer(-1);
  return b.logits(inpL, w.outputNorm, w.output);
}

/** phi3. */
export const phi3: Architecture<Phi3Weights> = {
  names: ["phi3"],
  memory: "kv",
  output: "logits",
  norm: "rms",
  rope: "neox",
  ropeFactors,
  hparams(h, hp) {
    // llama_model_phi3::load_arch_hparams requires the epsilon (no default).
    const eps = `${hp.arch}.${normEpsKey("rms")}`;
    if (!h.get(eps)) throw new ModelError(`${h.path}: missing metadata key ${eps}`);
    // The graph asserts equal K and V head sizes; q and wo are [nEmbd, nEmbd].
    if (hp.headDimK !== hp.headDimV || hp.headDimK * hp.nHead !== hp.nEmbd) {
      throw new ModelError(
        `${h.path}: ${hp.arch}.attention.key_length/value_length ${hp.headDimK}/${hp.headDimV} ` +
          `are not supported: phi3 needs both equal to embedding_length / head_count`,
      );
    }
    return hp;
  },
  weights: phi3Weights,
  build: buildPhi3,
};
