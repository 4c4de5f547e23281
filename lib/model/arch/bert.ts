/**
 * bert: the non-causal encoder behind most embedding models, llama.cpp's
 * `src/models/bert.cpp` (LLM_ARCH_BERT) with the non-flash attention path,
 * step for step. Token, token-type (row 0: "sentence A") and absolute
 * position embeddings, a LayerNorm, then post-norm blocks: attention over
 * the whole input with q/k/v biases, residual, LayerNorm, GELU feed-forward,
 * residual, LayerNorm. The output is every token's final hidden state
 * (llama.cpp's "result_embd"), unpooled.
 *
 * @module
 */
import type { GGUFHeader } from "../../gguf/mod.ts";
import type { Tensor } from "../../graph/graph.ts";
import { type HParams, ModelError } from "../hparams.ts";
import type { WeightMap, WeightRef } from "../weights.ts";
import type { GraphBuilder } from "./builder.ts";
import type { Architecture } from "./types.ts";

/** bert's hyper-parameters: the common ones and the token-type count. */
export interface BertHParams extends HParams {
  /** `tokenizer.ggml.token_type_count`: rows of `token_types.weight`. */
  readonly nTokenTypes: number;
}

/** Weights of one bert block. */
export interface BertLayer {
  /** Query projection. */
  readonly wq: WeightRef;
  /** Key projection. */
  readonly wk: WeightRef;
  /** Value projection. */
  readonly wv: WeightRef;
  /** Query bias. */
  readonly bq?: WeightRef;
  /** Key bias. */
  readonly bk?: WeightRef;
  /** Value bias. */
  readonly bv?: WeightRef;
  /** Attention output projection. */
  readonly wo: WeightRef;
  /** Attention output bias. */
  readonly bo?: WeightRef;
  /** LayerNorm after the attention residual: weight. */
  readonly attnOutNorm: WeightRef;
  /** LayerNorm after the attention residual: bias. */
  readonly attnOutNormB: WeightRef;
  /** FFN up projection. */
  readonly ffnUp: WeightRef;
  /** FFN up bias. */
  readonly ffnUpB?: WeightRef;
  /** FFN down projection. */
  readonly ffnDown: WeightRef;
  /** FFN down bias. */
  readonly ffnDownB?: WeightRef;
  /** LayerNorm after the FFN residual: weight. */
  readonly layerOutNorm: WeightRef;
  /** LayerNorm after the FFN residual: bias. */
  readonly layerOutNormB: WeightRef;
}

/** All weights of a bert model. */
export interface BertWeights {
  /** Token embeddings. */
  readonly tokEmbd: WeightRef;
  /** Token-type embeddings [nEmbd, nTokenTypes]; row 0 is added to every token. */
  readonly typeEmbd?: WeightRef;
  /** Absolute position embeddings [nEmbd, nCtxTrain]. */
  readonly posEmbd: WeightRef;
  /** LayerNorm of the summed embeddings: weight. */
  readonly tokNorm: WeightRef;
  /** LayerNorm of the summed embeddings: bias. */
  readonly tokNormB: WeightRef;
  /** Per-block weights. */
  readonly layers: readonly BertLayer[];
}

/**
 * llama_model_bert::load_arch_hparams plus what its graph assumes: the
 * token-type count (llama.cpp refuses 0), one head size for K and V that
 * tiles the embedding (the graph reshapes [nEmbd] into heads).
 */
function bertHParams(h: GGUFHeader, hp: HParams): BertHParams {
  const nTokenTypes = h.number("tokenizer.ggml.token_type_count", 0);
  if (!Number.isSafeInteger(nTokenTypes) || nTokenTypes <= 0) {
    throw new ModelError(
      `${h.path}: tokenizer.ggml.token_type_count = ${nTokenTypes} is invalid: ` +
        `bert needs a positive token type count`,
    );
  }
  if (hp.headDimK !== hp.headDimV || hp.headDimK * hp.nHead !== hp.nEmbd) {
    throw new ModelError(
      `${h.path}: ${hp.arch}.attention.key_length ${hp.headDimK} / value_length ` +
        `${hp.headDimV} is not supported: bert needs both equal to embedding_length / head_count`,
    );
  }
  return { ...hp, nTokenTypes };
}

/**
 * Maps bert's tensor names (llama_model_bert::load_arch_tensors; biases
 * optional as there). Separate q/k/v only, as the converter writes them: a
 * file with a fused attn_qkv fails on the missing attn_q.
 */
export function bertWeights(m: WeightMap, hp: HParams): BertWeights {
  const { nEmbd, nVocab, nFF, headDimK, nHeadKv, nCtxTrain } = hp;
  const nGqa = headDimK * nHeadKv;
  const layers: BertLayer[] = [];
  for (let i = 0; i < hp.nLayer; i++) {
    const b = `blk.${i}.`;
    layers.push({
      wq: m.need(`${b}attn_q.weight`, "matrix", [nEmbd, nEmbd]),
      wk: m.need(`${b}attn_k.weight`, "matrix", [nEmbd, nGqa]),
      wv: m.need(`${b}attn_v.weight`, "matrix", [nEmbd, nGqa]),
      bq: m.optional(`${b}attn_q.bias`, "bias", [nEmbd]),
      bk: m.optional(`${b}attn_k.bias`, "bias", [nGqa]),
      bv: m.optional(`${b}attn_v.bias`, "bias", [nGqa]),
      wo: m.need(`${b}attn_output.weight`, "matrix", [nEmbd, nEmbd]),
      bo: m.optional(`${b}attn_output.bias`, "bias", [nEmbd]),
      attnOutNorm: m.need(`${b}attn_output_norm.weight`, "norm", [nEmbd]),
      attnOutNormB: m.need(`${b}attn_output_norm.bias`, "bias", [nEmbd]),
      ffnUp: m.need(`${b}ffn_up.weight`, "matrix", [nEmbd, nFF]),
      ffnUpB: m.optional(`${b}ffn_up.bias`, "bias", [nFF]),
      ffnDown: m.need(`${b}ffn_down.weight`, "matrix", [nFF, nEmbd]),
      ffnDownB: m.optional(`${b}ffn_down.bias`, "bias", [nEmbd]),
      layerOutNorm: m.need(`${b}layer_output_norm.weight`, "norm", [nEmbd]),
      layerOutNormB: m.need(`${b}layer_output_norm.bias`, "bias", [nEmbd]),
    });
  }
  return {
    tokEmbd: m.need("token_embd.weight", "embedding", [nEmbd, nVocab]),
    // Added (a view of row 0), so f32 like every bias.
    typeEmbd: m.optional("token_types.weight", "bias", [
      nEmbd,
      (hp as BertHParams).nTokenTypes,
    ]),
    posEmbd: m.need("position_embd.weight", "embedding", [nEmbd, nCtxTrain]),
    tokNorm: m.need("token_embd_norm.weight", "norm", [nEmbd]),
    tokNormB: m.need("token_embd_norm.bias", "bias", [nEmbd]),
    layers,
  };
}

/** Token + type row 0 + position embeddings, then their LayerNorm ("inp_norm"). */
function bertInput(b: GraphBuilder, w: BertWeights): Tensor {
  const { g, hp } = b;
  let inpL = b.embed(w.tokEmbd);
  // Token types are always 0 ("sentence A"), as in llama.cpp.
  if (w.typeEmbd) inpL = g.add(inpL, g.view(b.w(w.typeEmbd), [hp.nEmbd], [], 0));
  inpL = b.cb(g.add(g.getRows(b.w(w.posEmbd), b.pos), inpL), "inp_embd");
  return b.cb(b.norm(inpL, w.tokNorm, w.tokNormB), "inp_norm", 0);
}

/** The bert forward pass; returns the final hidden states of the output rows. */
export function buildBert(b: GraphBuilder, w: BertWeights): Tensor | null {
  const { g, hp } = b;
  const kqScale = 1 / Math.sqrt(hp.headDimK);
  let inpL = bertInput(b, w);
  for (let il = 0; il < hp.nLayer; il++) {
    g.setLayer(il);
    const lw = w.layers[il];
    const qkv = b.qkv(inpL, lw, il);
    b.cb(qkv.q, "Qcur", il), b.cb(qkv.k, "Kcur", il);
    let cur = b.attention(qkv, lw.wo, lw.bo, kqScale, il);
    if (il === hp.nLayer - 1) {
      if (b.noOutputs) return null;
      // Only the rows asked for go on (LayerNorm and FFN are per row).
      cur = b.outputRows(cur);
      inpL = b.outputRows(inpL);
    }
    cur = b.norm(g.add(cur, inpL), lw.attnOutNorm, lw.attnOutNormB);
    const ffnInp = b.cb(cur, "ffn_inp", il);
    cur = b.ffn(
      ffnInp,
      { up: lw.ffnUp, upB: lw.ffnUpB, down: lw.ffnDown, downB: lw.ffnDownB },
      "gelu",
      il,
    );
    cur = g.add(b.cb(cur, "ffn_out", il), ffnInp);
    inpL = b.norm(cur, lw.layerOutNorm, lw.layerOutNormB);
  }
  g.setLayer(-1);
  return b.cb(inpL, "result_embd");
}

/** bert (LLM_ARCH_BERT): no cache, hidden states out, LayerNorm, no RoPE, non-causal. */
export const bert: Architecture<BertWeights> = {
  names: ["bert"],
  memory: "none",
  output: "embeddings",
  norm: "layer",
  rope: "none",
  causal: false,
  hparams: bertHParams,
  weights: bertWeights,
  build: buildBert,
};
