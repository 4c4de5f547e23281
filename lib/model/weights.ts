/**
 * Weight tensors of a llama-family model, looked up by llama.cpp's tensor
 * names and checked against the hyper-parameters before any graph uses them.
 *
 * @module
 */
import type { GGUFModelFile } from "../gguf/mod.ts";
import type { Graph, Tensor } from "../graph/graph.ts";
import { ggmlTypeName } from "../ggml/types.ts";
import { type HParams, ModelError } from "./hparams.ts";

/** A weight as the graph needs it: where it is, its type and shape. */
export interface WeightRef {
  /** Tensor name in the GGUF file. */
  readonly name: string;
  /** ggml type id. */
  readonly type: number;
  /** Shape, ggml order. */
  readonly ne: readonly number[];
}

/** Weights of one transformer block. */
export interface LayerWeights {
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
  /** FFN RMSNorm weight. */
  readonly ffnNorm: WeightRef;
  /** FFN gate projection. */
  readonly ffnGate: WeightRef;
  /** FFN up projection. */
  readonly ffnUp: WeightRef;
  /** FFN down projection. */
  readonly ffnDown: WeightRef;
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
  readonly layers: readonly LayerWeights[];
}

/** Finds and shape-checks every weight the llama graph reads. */
export function mapLlamaWeights(file: GGUFModelFile, hp: HParams): LlamaWeights {
  const h = file.header;
  const get = (name: string, shape: number[], optional = false): WeightRef | undefined => {
    const t = h.tensor(name);
    if (!t) {
      if (optional) return undefined;
      throw new ModelError(`${h.path}: missing tensor ${name}`);
    }
    const ne = [...t.ne];
    while (ne.length < shape.length) ne.push(1);
    if (ne.length !== shape.length || ne.some((n, i) => n !== shape[i])) {
      throw new ModelError(
        `${h.path}: tensor ${name} has shape [${t.ne}] (${
          ggmlTypeName(t.type)
        }), expected [${shape}]`,
      );
    }
    return { name, type: t.type, ne };
  };
  const need = (name: string, shape: number[]) => get(name, shape)!;
  const { nEmbd, nVocab, nFF, nHead, nHeadKv, headDimK, headDimV } = hp;
  const nQ = headDimK * nHead;
  const nK = headDimK * nHeadKv;
  const nV = headDimV * nHeadKv;
  const layers: LayerWeights[] = [];
  for (let i = 0; i < hp.nLayer; i++) {
    const b = `blk.${i}.`;
    layers.push({
      attnNorm: need(`${b}attn_norm.weight`, [nEmbd]),
      wq: need(`${b}attn_q.weight`, [nEmbd, nQ]),
      wk: need(`${b}attn_k.weight`, [nEmbd, nK]),
      wv: need(`${b}attn_v.weight`, [nEmbd, nV]),
      wo: need(`${b}attn_output.weight`, [headDimV * nHead, nEmbd]),
      bq: get(`${b}attn_q.bias`, [nQ], true),
      bk: get(`${b}attn_k.bias`, [nK], true),
      bv: get(`${b}attn_v.bias`, [nV], true),
      ffnNorm: need(`${b}ffn_norm.weight`, [nEmbd]),
      ffnGate: need(`${b}ffn_gate.weight`, [nEmbd, nFF]),
      ffnUp: need(`${b}ffn_up.weight`, [nEmbd, nFF]),
      ffnDown: need(`${b}ffn_down.weight`, [nFF, nEmbd]),
    });
  }
  const tokEmbd = need("token_embd.weight", [nEmbd, nVocab]);
  return {
    tokEmbd,
    outputNorm: need("output_norm.weight", [nEmbd]),
    output: get("output.weight", [nEmbd, nVocab], true) ?? tokEmbd,
    layers,
  };
}

/** Makes graph leaves for weights, one leaf per tensor per graph. */
export class WeightLeaves {
  #file: GGUFModelFile;
  #g: Graph;
  #cache = new Map<string, Tensor>();

  /** Leaves of `file`'s tensors in graph `g`. */
  constructor(file: GGUFModelFile, g: Graph) {
    this.#file = file;
    this.#g = g;
  }

  /** The graph leaf of weight `w`. */
  get(w: WeightRef): Tensor {
    let t = this.#cache.get(w.name);
    if (!t) {
      t = this.#g.weight(w.name, w.type, w.ne, this.#file.tensorRef(w.name));
      this.#cache.set(w.name, t);
    }
    return t;
  }
}
