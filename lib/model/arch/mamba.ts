/**
 * mamba: llama.cpp's `src/models/mamba.cpp` with `build_mamba_layer`
 * (mamba-base.cpp) and `build_rs` (llama-graph.cpp), step for step. Each
 * block is an RMSNorm, the selective state-space layer, and a residual; a
 * sequence's conv and ssm states live in the recurrent memory
 * (lib/kv/recurrent.ts), read through `s_copy` and written back to the
 * slot's cells.
 *
 * @module
 */
import type { Tensor } from "../../graph/graph.ts";
import type { GGUFHeader } from "../../gguf/mod.ts";
import { type HParams, ModelError, type SsmParams } from "../hparams.ts";
import type { WeightMap, WeightRef } from "../weights.ts";
import type { GraphBuilder } from "./builder.ts";
import type { Architecture } from "./types.ts";

/** Weights of one Mamba block. */
export interface MambaLayer {
  /** Block RMSNorm weight. */
  readonly attnNorm: WeightRef;
  /** Input projection to x and z: [nEmbd, 2 dInner]. */
  readonly ssmIn: WeightRef;
  /** Causal convolution weights: [dConv, dInner]. */
  readonly conv1d: WeightRef;
  /** Convolution bias: [dInner]. */
  readonly conv1dB: WeightRef;
  /** Projection to dt, B, C: [dInner, dtRank + 2 dState]. */
  readonly ssmX: WeightRef;
  /** Time-step projection: [dtRank, dInner]. */
  readonly ssmDt: WeightRef;
  /** Time-step bias: [dInner]. */
  readonly ssmDtB: WeightRef;
  /** A = -exp(A_log): [dState, dInner]. */
  readonly ssmA: WeightRef;
  /** Skip connection D: [dInner]. */
  readonly ssmD: WeightRef;
  /** Output projection: [dInner, nEmbd]. */
  readonly ssmOut: WeightRef;
}

/** All weights of a Mamba model. */
export interface MambaWeights {
  /** Token embeddings. */
  readonly tokEmbd: WeightRef;
  /** Final RMSNorm weight. */
  readonly outputNorm: WeightRef;
  /** `output.weight`, or `token_embd.weight` when tied. */
  readonly output: WeightRef;
  /** Per-block weights. */
  readonly layers: readonly MambaLayer[];
}

/** The model's ssm hyper-parameters (set by {@link mamba}'s hparams). */
export function ssmOf(hp: HParams): SsmParams {
  if (!hp.ssm) throw new ModelError(`${hp.arch}: no ssm hyper-parameters`);
  return hp.ssm;
}

/** Floats of one conv state (llama.cpp's n_embd_r for Mamba). */
export function nEmbdR(hp: HParams): number {
  const s = ssmOf(hp);
  return (s.dConv - 1) * s.dInner;
}

/** Floats of one ssm state (n_embd_s). */
export function nEmbdS(hp: HParams): number {
  const s = ssmOf(hp);
  return s.dState * s.dInner;
}

function readSsm(h: GGUFHeader, hp: HParams): HParams {
  const k = (s: string) => `${hp.arch}.ssm.${s}`;
  const int = (key: string) => {
    const v = h.number(k(key));
    if (!Number.isSafeInteger(v) || v <= 0) {
      throw new ModelError(`${h.path}: ${k(key)} = ${v} is invalid: expected a positive integer`);
    }
    return v;
  };
  const ssm: SsmParams = {
    dConv: int("conv_kernel"),
    dInner: int("inner_size"),
    dState: int("state_size"),
    dtRank: int("time_step_rank"),
    dtBCRms: h.bool(k("dt_b_c_rms"), false),
  };
  // llama_model_mamba::load_arch_tensors: "only an expansion factor of 2 is supported".
  if (ssm.dInner !== 2 * hp.nEmbd) {
    throw new ModelError(
      `${h.path}: ${k("inner_size")} = ${ssm.dInner} is invalid: expected ${2 * hp.nEmbd} ` +
        `(2 × embedding_length; only an expansion factor of 2 is supported)`,
    );
  }
  return { ...hp, ssm };
}

/** llama_model_mamba::load_arch_tensors' names and shapes (no ".weight" on ssm_a and ssm_d). */
function mambaWeights(m: WeightMap, hp: HParams): MambaWeights {
  const { nEmbd, nVocab } = hp;
  const { dConv, dInner, dState, dtRank } = ssmOf(hp);
  const layers: MambaLayer[] = [];
  for (let i = 0; i < hp.nLayer; i++) {
    const b = `blk.${i}.`;
    layers.push({
      attnNorm: m.need(`${b}attn_norm.weight`, "norm", [nEmbd]),
      ssmIn: m.need(`${b}ssm_in.weight`, "matrix", [nEmbd, 2 * dInner]),
      conv1d: m.need(`${b}ssm_conv1d.weight`, "ssm", [dConv, dInner]),
      conv1dB: m.need(`${b}ssm_conv1d.bias`, "bias", [dInner]),
      ssmX: m.need(`${b}ssm_x.weight`, "matrix", [dInner, dtRank + 2 * dState]),
      ssmDt: m.need(`${b}ssm_dt.weight`, "matrix", [dtRank, dInner]),
      ssmDtB: m.need(`${b}ssm_dt.bias`, "bias", [dInner]),
      ssmA: m.need(`${b}ssm_a`, "ssm", [dState, dInner]),
      ssmD: m.need(`${b}ssm_d`, "ssm", [dInner]),
      ssmOut: m.need(`${b}ssm_out.weight`, "matrix", [dInner, nEmbd]),
    });
  }
  const tokEmbd = m.need("token_embd.weight", "embedding", [nEmbd, nVocab]);
  return {
    tokEmbd,
    outputNorm: m.need("output_norm.weight", "norm", [nEmbd]),
    output: m.optional("output.weight", "matrix", [nEmbd, nVocab]) ?? tokEmbd,
    layers,
  };
}

/**
 * build_rs: zeroes the slot's fresh-state cell, gathers the states the
 * slot's sequences start from (`read`, get_rows by default), and copies the
 * states of the slot's other cells in place.
 */
function buildRs(
  b: GraphBuilder,
  s: Tensor,
  nSeqs: number,
  read?: (states: Tensor, ids: Tensor) => Tensor,
): Tensor {
  const g = b.g, rs = b.rs!, sCopy = b.sCopy!;
  const size = s.ne[0];
  const nb1 = s.nb[1];
  // llama.cpp builds these even when empty (zero-sized no-ops); empty, they are left out.
  if (rs.rsZ >= 0) g.expand(g.scaleInplace(g.view(s, [size], [], rs.rsZ * nb1), 0));
  const main = g.view(sCopy, [nSeqs], [], 0);
  const out = read ? read(s, main) : g.getRows(s, main);
  g.expand(out);
  const nExtra = rs.n - nSeqs;
  if (nExtra > 0) {
    const extra = g.getRows(s, g.view(sCopy, [nExtra], [], 4 * nSeqs));
    g.expand(g.cpy(extra, g.view(s, [size, nExtra], [nb1], (rs.head + nSeqs) * nb1)));
  }
  return out;
}

/** build_mamba_layer: one block's selective state-space layer. */
function mambaLayer(b: GraphBuilder, lw: MambaLayer, cur: Tensor, il: number): Tensor {
  const { g, hp, step } = b;
  const rs = b.rs!;
  const { dConv, dInner, dState, dtRank, dtBCRms } = ssmOf(hp);
  const nSeqs = step.nSeqs ?? 1;
  const nSeqTokens = step.nTokens / nSeqs;
  const head = rs.head;
  const convAll = rs.rTensor(g, il);
  const ssmAll = rs.sTensor(g, il);

  let conv = buildRs(b, convAll, nSeqs);
  conv = g.reshape(conv, [dConv - 1, dInner, nSeqs]);
  cur = g.reshape(cur, [cur.ne[0], nSeqTokens, nSeqs]);
  const xz = g.mulMat(b.w(lw.ssmIn), cur);
  let x = g.view(xz, [dInner, xz.ne[1], xz.ne[2]], [xz.nb[1], xz.nb[2]], 0);
  const z = g.view(xz, [dInner, xz.ne[1], xz.ne[2]], [xz.nb[1], xz.nb[2]], 4 * dInner);

  {
    const convX = g.concat(conv, g.transpose(x), 0);
    const last = g.view(
      convX,
      [dConv - 1, dInner, nSeqs],
      [convX.nb[1], convX.nb[2]],
      nSeqTokens * convX.nb[0],
    );
    const n = (dConv - 1) * dInner;
    g.expand(g.cpy(last, g.view(convAll, [n * nSeqs], [], head * n * 4)));
    x = g.ssmConv(convX, b.w(lw.conv1d));
    x = g.add(x, b.w(lw.conv1dB));
    x = g.silu(x);
  }

  const xDb = g.mulMat(b.w(lw.ssmX), x);
  let dt = g.view(xDb, [dtRank, nSeqTokens, nSeqs], [xDb.nb[1], xDb.nb[2]], 0);
  let B = g.view(
    xDb,
    [dState, 1, nSeqTokens, nSeqs],
    [dState * xDb.nb[0], xDb.nb[1], xDb.nb[2]],
    4 * dtRank,
  );
  let C = g.view(
    xDb,
    [dState, 1, nSeqTokens, nSeqs],
    [dState * xDb.nb[0], xDb.nb[1], xDb.nb[2]],
    4 * (dtRank + dState),
  );
  if (dtBCRms) {
    // build_norm without a weight: the bare RMS norm (FalconMamba).
    dt = b.cb(g.rmsNorm(dt, hp.normEps), "norm", il);
    B = b.cb(g.rmsNorm(B, hp.normEps), "norm", il);
    C = b.cb(g.rmsNorm(C, hp.normEps), "norm", il);
  } else dt = g.cont(dt);
  dt = g.mulMat(b.w(lw.ssmDt), dt);
  dt = g.add(dt, b.w(lw.ssmDtB));

  cur = x;
  x = g.reshape(x, [1, dInner, nSeqTokens, nSeqs]);
  const A = b.w(lw.ssmA);
  const ySsm = buildRs(b, ssmAll, nSeqs, (states, ids) => {
    const ssm = g.reshape(states, [dState, 1, dInner, rs.size]);
    return g.ssmScan(ssm, x, dt, A, B, C, ids);
  });
  // The last states follow the outputs y in the scan's result.
  const nS = dState * dInner;
  g.expand(
    g.cpy(
      g.view(ySsm, [nS * nSeqs], [], x.nb[3] * x.ne[3]),
      g.view(ssmAll, [nS * nSeqs], [], head * nS * 4),
    ),
  );
  let y = g.view(ySsm, [dInner, nSeqTokens, nSeqs], [x.nb[2], x.nb[3]], 0);
  y = g.add(y, g.mul(cur, b.w(lw.ssmD)));
  y = g.swiglu(g.cont(z), y);
  cur = g.mulMat(b.w(lw.ssmOut), y);
  return g.reshape(cur, [cur.ne[0], nSeqTokens * nSeqs]);
}

/** llama_model_mamba::graph. */
function buildMamba(b: GraphBuilder, w: MambaWeights): Tensor | null {
  const { g, hp } = b;
  let inpL = b.embed(w.tokEmbd);
  for (let il = 0; il < hp.nLayer; il++) {
    g.setLayer(il);
    const lw = w.layers[il];
    let cur = b.cb(b.norm(inpL, lw.attnNorm), "attn_norm", il);
    cur = mambaLayer(b, lw, cur, il);
    if (il === hp.nLayer - 1) {
      // The states are stored; without output rows nothing else is needed.
      if (b.noOutputs) return null;
      cur = b.outputRows(cur);
      inpL = b.outputRows(inpL);
    }
    cur = b.cb(g.add(cur, inpL), "l_out", il);
    inpL = cur;
  }
  g.setLayer(-1);
  return b.logits(inpL, w.outputNorm, w.output);
}

/** mamba (Mamba 1): RMSNorm blocks of selective state-space layers, recurrent memory. */
export const mamba: Architecture<MambaWeights> = {
  names: ["mamba"],
  memory: "recurrent",
  output: "logits",
  norm: "rms",
  rope: "none",
  attention: false,
  hparams: readSsm,
  stateSizes: (hp) => ({ r: nEmbdR(hp), s: nEmbdS(hp) }),
  weights: mambaWeights,
  build: buildMamba,
};
