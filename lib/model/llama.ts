/**
 * The llama-family forward pass as a graph (llama 1/2/3, mistral, qwen2 with
 * its q/k/v biases): llama.cpp's build_llama with the non-flash attention
 * path, step for step, so the same ops run in the same order.
 *
 * @module
 */
import type { Graph, Tensor } from "../graph/graph.ts";
import { GGMLType } from "../ggml/types.ts";
import type { KvCache, SlotInfo } from "../kv/cache.ts";
import type { HParams } from "./hparams.ts";
import type { LlamaWeights, WeightLeaves } from "./weights.ts";

/** What one evaluation of the graph covers. */
export interface LlamaStep {
  /** Tokens in the micro-batch. */
  readonly nTokens: number;
  /** Rows that produce logits (indices into the micro-batch). */
  readonly nOutputs: number;
  /** Cache cells the attention reads (the padded window). */
  readonly nKv: number;
  /** Cells receiving this micro-batch's keys and values. */
  readonly slot: SlotInfo;
}

/** The graph's inputs, to be filled before compute, and its output. */
export interface LlamaGraph {
  /** I32 [nTokens] token ids. */
  readonly tokens: Tensor;
  /** I32 [nTokens] positions. */
  readonly pos: Tensor;
  /** F32 [nKv, nTokens] additive attention mask. */
  readonly mask: Tensor;
  /** I32 [nOutputs] rows kept for the logits, or null when every row is. */
  readonly outIds: Tensor | null;
  /**
   * F32 [nVocab, nOutputs]; null when the micro-batch has no output rows
   * (the graph then ends at the last layer's cache stores).
   */
  readonly logits: Tensor | null;
  /** Tensors asked for by `taps`, by llama.cpp callback name (kept as graph outputs). */
  readonly taps: Map<string, Tensor>;
}

/**
 * Names a tensor like llama.cpp's graph callback does ("name-il", or "name"
 * outside layers) and, when that name is wanted, keeps it for debugging.
 */
type TapFn = (t: Tensor, name: string, il?: number) => Tensor;

function withBias(g: Graph, x: Tensor, b: Tensor | undefined): Tensor {
  return b ? g.add(x, b) : x;
}

/** One attention block: q/k/v projections, RoPE, cache store, softmax(qk)v, output projection. */
function attention(
  g: Graph,
  x: Tensor,
  il: number,
  hp: HParams,
  lw: LlamaWeights["layers"][number],
  w: WeightLeaves,
  kv: KvCache,
  io: { pos: Tensor; mask: Tensor; cb: TapFn },
  step: LlamaStep,
): Tensor {
  const cb = io.cb;
  const n = step.nTokens;
  const { nHead, nHeadKv, headDimK, headDimV, rope } = hp;
  let q = withBias(g, g.mulMat(w.get(lw.wq), x), lw.bq && w.get(lw.bq));
  let k = withBias(g, g.mulMat(w.get(lw.wk), x), lw.bk && w.get(lw.bk));
  let v = cb(withBias(g, g.mulMat(w.get(lw.wv), x), lw.bv && w.get(lw.bv)), "Vcur", il);
  // Node order only decides what the CPU backend may run without a barrier
  // in between (nodes that share no written memory): the projections
  // together, then rope(k) with the V store, then rope(q) with the K store
  // (in this order, so that rope(q) does not reuse the memory the K store reads).
  g.expand(q), g.expand(k), g.expand(v);
  q = g.reshape(q, [headDimK, nHead, n]);
  k = g.reshape(k, [headDimK, nHeadKv, n]);
  v = g.reshape(v, [headDimV, nHeadKv, n]);
  q = cb(g.rope(q, io.pos, rope), "Qcur", il);
  k = cb(g.rope(k, io.pos, rope), "Kcur", il);
  g.expand(k);
  kv.storeV(g, il, v, step.slot);
  g.expand(q);
  kv.storeK(g, il, k, step.slot);

  // Heads become the outer dimension so one mul_mat per head pair does q·k.
  const qh = g.permute(q, 0, 2, 1, 3); // [headDimK, n, nHead]
  let kq = cb(g.mulMat(kv.kView(g, il, step.nKv), qh), "kq", il); // [nKv, n, nHead]
  kq = cb(g.softMax(kq, { mask: io.mask, scale: 1 / Math.sqrt(headDimK) }), "kq_soft_max", il);
  const kqv = cb(g.mulMat(kv.vView(g, il, step.nKv), kq), "kqv", il); // [headDimV, n, nHead]
  const merged = cb(g.cont(g.permute(kqv, 0, 2, 1, 3), [headDimV * nHead, n]), "kqv_out", il);
  return cb(g.mulMat(w.get(lw.wo), merged), "attn_out", il);
}

/**
 * Builds the forward pass of one micro-batch into `g`. `taps` (debugging)
 * names intermediate tensors to keep, with llama.cpp's callback names
 * ("attn_norm-0", "kq_soft_max-3", "l_out-5", "result_norm", ...).
 */
export function buildLlamaGraph(
  g: Graph,
  hp: HParams,
  weights: LlamaWeights,
  w: WeightLeaves,
  kv: KvCache,
  step: LlamaStep,
  taps?: ReadonlySet<string>,
): LlamaGraph {
  const n = step.nTokens;
  const tokens = g.input("inp_tokens", GGMLType.I32, [n]);
  const pos = g.input("inp_pos", GGMLType.I32, [n]);
  const mask = g.input("kq_mask", GGMLType.F32, [step.nKv, n]);
  const outIds = step.nOutputs > 0 && step.nOutputs < n
    ? g.input("inp_out_ids", GGMLType.I32, [step.nOutputs])
    : null;
  const kept = new Map<string, Tensor>();
  const cb: TapFn = (t, name, il = -1) => {
    const full = il >= 0 ? `${name}-${il}` : name;
    if (taps?.has(full)) {
      t.name = full;
      kept.set(full, t);
    }
    return t;
  };
  const io = { pos, mask, cb };

  let inpL = g.getRows(w.get(weights.tokEmbd), tokens);
  for (let il = 0; il < hp.nLayer; il++) {
    g.setLayer(il);
    const lw = weights.layers[il];
    let inpSA = inpL;
    let cur = cb(g.mul(g.rmsNorm(inpL, hp.normEps), w.get(lw.attnNorm)), "attn_norm", il);
    cur = attention(g, cur, il, hp, lw, w, kv, io, step);
    if (il === hp.nLayer - 1 && step.nOutputs === 0) {
      // Nothing to output (a prompt chunk before the last): what this
      // micro-batch leaves behind is the keys and values attention() stored,
      // so the last layer's FFN and the output head are left out (llama.cpp
      // runs them on zero rows, which computes nothing). A zero-row
      // get_rows would build nodes with empty shapes no kernel accepts.
      g.setLayer(-1);
      for (const t of kept.values()) g.markOutput(t);
      return { tokens, pos, mask, outIds, logits: null, taps: kept };
    }
    if (il === hp.nLayer - 1 && outIds) {
      // Rows without outputs stop here: the last FFN runs only where logits are wanted.
      cur = g.getRows(cur, outIds);
      inpSA = g.getRows(inpSA, outIds);
    }
    const ffnInp = cb(g.add(cur, inpSA), "ffn_inp", il);
    cur = cb(g.mul(g.rmsNorm(ffnInp, hp.normEps), w.get(lw.ffnNorm)), "ffn_norm", il);
    const gate = cb(g.mulMat(w.get(lw.ffnGate), cur), "ffn_gate", il);
    const up = cb(g.mulMat(w.get(lw.ffnUp), cur), "ffn_up", il);
    cur = cb(g.mulMat(w.get(lw.ffnDown), cb(g.swiglu(gate, up), "ffn_swiglu", il)), "ffn_out", il);
    inpL = cb(g.add(cur, ffnInp), "l_out", il);
  }
  g.setLayer(-1);
  const normed = cb(g.mul(g.rmsNorm(inpL, hp.normEps), w.get(weights.outputNorm)), "result_norm");
  const logits = cb(g.mulMat(w.get(weights.output), normed), "result_output");
  g.markOutput(logits);
  // After the logits so the taps do not change the node order.
  for (const t of kept.values()) g.markOutput(t);
  return { tokens, pos, mask, outIds, logits, taps: kept };
}
