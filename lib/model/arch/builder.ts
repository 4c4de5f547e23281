/**
 * The shared blocks architectures are built from, in the spirit of
 * llama.cpp's llm_graph_context: the graph's inputs (tokens, positions,
 * mask, output rows), norms, q/k/v projections, RoPE, attention over the
 * KV cache or over the micro-batch alone, feed-forward variants and the
 * output head. Each block emits the same ops in the same order as its
 * llama.cpp counterpart, and names tensors with llama.cpp's callback names
 * so debugging taps line up.
 *
 * @module
 */
import type { Graph, Tensor } from "../../graph/graph.ts";
import { GGMLType, ggmlTypeInfo } from "../../ggml/types.ts";
import type { KvCache } from "../../kv/cache.ts";
import type { RecurrentMemory } from "../../kv/recurrent.ts";
import type { HParams } from "../hparams.ts";
import type { WeightLeaves, WeightRef } from "../weights.ts";
import type { ArchGraph, Architecture, Step } from "./types.ts";

/** Projection weights of one attention block: separate q/k/v (with optional biases) or fused qkv. */
export type QkvWeights =
  | {
    readonly wq: WeightRef;
    readonly wk: WeightRef;
    readonly wv: WeightRef;
    readonly bq?: WeightRef;
    readonly bk?: WeightRef;
    readonly bv?: WeightRef;
  }
  | { readonly wqkv: WeightRef; readonly bqkv?: WeightRef };

/** Query, key and value heads of a micro-batch: [headDim, heads, nTokens]. */
export interface Qkv {
  /** Queries. */
  q: Tensor;
  /** Keys. */
  k: Tensor;
  /** Values. */
  v: Tensor;
}

/**
 * Feed-forward weights. With `gate`, the gate and up projections run in
 * parallel and the activation gates the up projection (SwiGLU/GeGLU);
 * with `fusedGate`, `up` holds gate and up stacked ([nEmbd, 2 nFF], gate
 * first, phi3); otherwise the activation applies to the up projection.
 */
export interface FfnWeights {
  /** Up projection. */
  readonly up: WeightRef;
  /** Up bias. */
  readonly upB?: WeightRef;
  /** Gate projection (parallel gate). */
  readonly gate?: WeightRef;
  /** Gate bias. */
  readonly gateB?: WeightRef;
  /** Whether `up` is gate and up fused. */
  readonly fusedGate?: boolean;
  /** Down projection. */
  readonly down: WeightRef;
  /** Down bias. */
  readonly downB?: WeightRef;
}

/**
 * llama_kv_cache's attn_rot_k / attn_rot_v: a quantized cache of head size
 * divisible by 64 stores keys and values multiplied by an orthonormal
 * Walsh-Hadamard matrix (queries too, and the attention output is rotated
 * back): blocks of the largest power of 2 dividing the key head size, and of
 * 64 for values. 0: no rotation.
 */
export function cacheRotation(kv: KvCache | null, hp: HParams): { k: number; v: number } {
  if (!kv) return { k: 0, v: 0 };
  const quantized = (t: number) => ggmlTypeInfo(t)!.blockSize > 1;
  let k = 0;
  if (quantized(kv.typeK) && hp.headDimK % 64 === 0) {
    k = 64;
    while (hp.headDimK % (2 * k) === 0) k *= 2;
  }
  return { k, v: quantized(kv.typeV) && hp.headDimV % 64 === 0 ? 64 : 0 };
}

/** Builds one micro-batch's graph for an architecture; see the module doc. */
export class GraphBuilder {
  /** The graph under construction. */
  readonly g: Graph;
  /** The model's hyper-parameters. */
  readonly hp: HParams;
  /** What this graph covers. */
  readonly step: Step;
  /** The KV cache, or null for architectures without one. */
  readonly kv: KvCache | null;
  /** The recurrent state memory (Mamba), or null. */
  readonly rs: RecurrentMemory | null;
  /** I32 [rs.n] source cell of each slot cell (build_rs_inp's s_copy), with rs. */
  readonly sCopy: Tensor | null;
  /** I32 [nTokens] token ids. */
  readonly tokens: Tensor | null;
  /** F32 [nEmbd, nTokens] input embeddings, in place of tokens (Step.inputEmbd). */
  readonly embdIn: Tensor | null;
  /**
   * Additive attention mask [nKv, nTokens] ([nKv, nTokens / ns, 1, ns] over
   * a slot of ns KV streams): F32, or F16 for flash attention.
   */
  readonly mask: Tensor;
  /**
   * Attention as ggml_flash_attn_ext: a cache whose V is not transposed is
   * llama.cpp's flash-attention layout (v_trans = !flash_attn); without a
   * cache, as asked.
   */
  readonly flashAttn: boolean;
  /** Flash attention nodes at GGML_PREC_F32 (see FlashAttnOptions.precF32). */
  readonly flashAttnF32: boolean;
  /** I32 [nOutputs] rows kept for the output, or null when every row is. */
  readonly outIds: Tensor | null;
  readonly #arch: Architecture;
  readonly #leaves: WeightLeaves;
  readonly #taps: ReadonlySet<string> | undefined;
  readonly #kept = new Map<string, Tensor>();
  #pos: Tensor | null = null;

  /** A builder for `arch` over graph `g`. */
  constructor(o: {
    g: Graph;
    hp: HParams;
    arch: Architecture;
    leaves: WeightLeaves;
    kv: KvCache | null;
    rs?: RecurrentMemory | null;
    step: Step;
    taps?: ReadonlySet<string>;
    /** Flash attention; with a cache it must match the cache's layout (V not transposed). */
    flashAttn?: boolean;
    /** Flash attention at GGML_PREC_F32 (ContextOptions.flashAttnPrecision "f32"). */
    flashAttnF32?: boolean;
  }) {
    this.g = o.g;
    this.hp = o.hp;
    this.step = o.step;
    this.kv = o.kv;
    this.rs = o.rs ?? null;
    this.sCopy = this.rs ? o.g.input("rs_s_copy", GGMLType.I32, [this.rs.n]) : null;
    this.#arch = o.arch;
    this.#leaves = o.leaves;
    this.#taps = o.taps;
    const n = o.step.nTokens;
    // A batch carries token ids or embeddings, never both (llama_batch).
    this.tokens = o.step.inputEmbd ? null : o.g.input("inp_tokens", GGMLType.I32, [n]);
    this.embdIn = o.step.inputEmbd ? o.g.input("inp_embd", GGMLType.F32, [o.hp.nEmbd, n]) : null;
    if (o.arch.rope !== "none") this.#pos = o.g.input("inp_pos", GGMLType.I32, [n]);
    this.flashAttn = o.kv ? !o.kv.vTrans : o.flashAttn ?? false;
    this.flashAttnF32 = this.flashAttn && (o.flashAttnF32 ?? false);
    if (o.kv && o.flashAttn !== undefined && o.flashAttn !== this.flashAttn) {
      throw new Error(
        `GraphBuilder: flashAttn ${o.flashAttn} with a cache whose vTrans is ${o.kv.vTrans}`,
      );
    }
    // build_attn_inp_kq_mask: F16 for flash attention (no row padding at this
    // revision); one [nKv, n / ns] plane per KV stream of the slot.
    const maskType = this.flashAttn ? GGMLType.F16 : GGMLType.F32;
    const ns = o.step.slot?.ns ?? 1;
    this.mask = o.g.input(
      "kq_mask",
      maskType,
      ns > 1 ? [o.step.nKv, n / ns, 1, ns] : [
        o.step.nKv,
        n,
      ],
    );
    this.outIds = o.step.nOutputs > 0 && o.step.nOutputs < n
      ? o.g.input("inp_out_ids", GGMLType.I32, [o.step.nOutputs])
      : null;
  }

  /** I32 [nTokens] positions (made on first use by architectures without RoPE). */
  get pos(): Tensor {
    this.#pos ??= this.g.input("inp_pos", GGMLType.I32, [this.step.nTokens]);
    return this.#pos;
  }

  /** The graph leaf of a weight. */
  w(ref: WeightRef): Tensor {
    return this.#leaves.get(ref);
  }

  /**
   * Names a tensor like llama.cpp's graph callback ("name-il", or "name"
   * outside layers) and keeps it when a debugging tap asks for that name.
   */
  cb(t: Tensor, name: string, il = -1): Tensor {
    const full = il >= 0 ? `${name}-${il}` : name;
    if (this.#taps?.has(full)) {
      t.name = full;
      this.#kept.set(full, t);
    }
    return t;
  }

  /** `x + b`, or `x` without a bias. */
  bias(x: Tensor, b: WeightRef | undefined): Tensor {
    return b ? this.g.add(x, this.w(b)) : x;
  }

  /** The token embeddings of the micro-batch, or its input embeddings (build_inp_embd). */
  embed(tokEmbd: WeightRef): Tensor {
    return this.embdIn ?? this.g.getRows(this.w(tokEmbd), this.tokens!);
  }

  /** build_norm: the architecture's norm, times `w`, plus `b`. */
  norm(x: Tensor, w: WeightRef | undefined, b?: WeightRef, eps = this.hp.normEps): Tensor {
    let cur = this.#arch.norm === "rms" ? this.g.rmsNorm(x, eps) : this.g.norm(x, eps);
    if (w) cur = this.g.mul(cur, this.w(w));
    return this.bias(cur, b);
  }

  /**
   * build_qkv: the projections as [headDim, heads, nTokens] (views of one
   * matrix product for fused qkv). Expanded now so they come before the
   * RoPE and cache-store nodes that follow.
   */
  qkv(x: Tensor, lw: QkvWeights, il: number): Qkv {
    const g = this.g;
    const n = this.step.nTokens;
    const { nHead, nHeadKv, headDimK, headDimV } = this.hp;
    if ("wqkv" in lw) {
      const qkv = this.cb(this.bias(g.mulMat(this.w(lw.wqkv), x), lw.bqkv), "wqkv", il);
      const nQ = headDimK * nHead;
      const nK = headDimK * nHeadKv;
      const view = (d: number, h: number, at: number) =>
        g.view(qkv, [d, h, n], [4 * d, qkv.nb[1]], 4 * at);
      const out = {
        q: view(headDimK, nHead, 0),
        k: view(headDimK, nHeadKv, nQ),
        v: this.cb(view(headDimV, nHeadKv, nQ + nK), "Vcur", il),
      };
      g.expand(qkv);
      return out;
    }
    const q = this.bias(g.mulMat(this.w(lw.wq), x), lw.bq);
    const k = this.bias(g.mulMat(this.w(lw.wk), x), lw.bk);
    const v = this.cb(this.bias(g.mulMat(this.w(lw.wv), x), lw.bv), "Vcur", il);
    // Node order only decides what the CPU backend may run without a barrier
    // in between (nodes that share no written memory): the projections
    // together, then rope(k) with the V store, then rope(q) with the K store
    // (see attention()).
    g.expand(q), g.expand(k), g.expand(v);
    return {
      q: g.reshape(q, [headDimK, nHead, n]),
      k: g.reshape(k, [headDimK, nHeadKv, n]),
      v: g.reshape(v, [headDimV, nHeadKv, n]),
    };
  }

  /** ggml_rope_ext with the model's RoPE settings (and frequency factors, llama3's rope_freqs, phi3's long/short factors). */
  rope(x: Tensor, factors?: WeightRef): Tensor {
    const o = factors ? { ...this.hp.rope, freqFactors: this.w(factors) } : this.hp.rope;
    return this.g.rope(x, this.pos, o);
  }

  /**
   * build_attn: stores k and v in the cache (when there is one), then
   * softmax(kq * kqScale + mask) v over the cache window or the micro-batch,
   * merged heads, output projection and bias.
   */
  attention(
    qkv: Qkv,
    wo: WeightRef,
    bo: WeightRef | undefined,
    kqScale: number,
    il: number,
  ): Tensor {
    const g = this.g;
    const n = this.step.nTokens;
    let { q, k, v } = qkv;
    const rot = cacheRotation(this.kv, this.hp);
    if (rot.k) q = g.hadamard(q, rot.k), k = g.hadamard(k, rot.k);
    if (rot.v) v = g.hadamard(v, rot.v);
    let merged: Tensor;
    if (this.kv) {
      // rope(k) with the V store, then rope(q) with the K store (in this
      // order, so that rope(q) does not reuse the memory the K store reads).
      g.expand(k);
      this.kv.storeV(g, il, v, this.step.slot!);
      g.expand(q);
      this.kv.storeK(g, il, k, this.step.slot!);
      const { s0 = 0, ns = 1, runs } = this.step.slot!;
      const nKv = this.step.nKv;
      // build_attn_mha: the tokens split into the slot's streams (dim 3),
      // each stream's tokens attending only its own cells. Streams with
      // gaps between them: once per run of consecutive streams, the runs'
      // merged heads then joined (token order is stream order).
      const nTps = n / ns;
      const part = (first: number, count: number, at: number) => {
        const qr = g.view(q, [q.ne[0], q.ne[1], nTps, count], [
          q.nb[1],
          q.nb[2],
          q.nb[2] * nTps,
        ], at * nTps * q.nb[2]);
        const m = this.mask;
        const mr = runs
          ? g.view(m, [m.ne[0], m.ne[1], 1, count], [m.nb[1], m.nb[2], m.nb[3]], at * m.nb[3])
          : m;
        const kr = this.kv!.kView(g, il, nKv, first, count);
        const vr = this.kv!.vView(g, il, nKv, first, count);
        return this.#attend(runs || count > 1 ? qr : q, kr, vr, mr, kqScale, il, nTps * count);
      };
      if (!runs) merged = part(s0, ns, 0);
      else {
        let at = 0;
        merged = part(runs[0][0], runs[0][1], 0);
        at += runs[0][1];
        for (let r = 1; r < runs.length; r++) {
          merged = g.concat(merged, part(runs[r][0], runs[r][1], at), 1);
          at += runs[r][1];
        }
      }
    } else {
      // build_attn_mha without a cache: heads outer, and V transposed so
      // one mul_mat per head computes kq·v.
      const kAll = g.permute(k, 0, 2, 1, 3); // [headDimK, n, nHeadKv]
      const vAll = this.flashAttn
        ? g.permute(v, 0, 2, 1, 3) // [headDimV, n, nHeadKv], cast to F16 below
        : g.cont(g.transpose(g.permute(v, 0, 2, 1, 3))); // [n, headDimV, nHeadKv]
      merged = this.#attend(q, kAll, vAll, this.mask, kqScale, il, n);
    }
    if (rot.v) merged = g.hadamard(merged, rot.v); // back from the rotated values
    return this.cb(this.bias(g.mulMat(this.w(wo), merged), bo), "attn_out", il);
  }

  // softmax(q·k * kqScale + mask) v with the heads merged: [headDimV * nHead, n].
  #attend(
    q: Tensor,
    kAll: Tensor,
    vAll: Tensor,
    mask: Tensor,
    kqScale: number,
    il: number,
    n: number,
  ): Tensor {
    const g = this.g;
    const { nHead, headDimV } = this.hp;
    // Heads become the outer dimension so one mul_mat per head pair does q·k.
    const qh = g.permute(q, 0, 2, 1, 3); // [headDimK, n, nHead(, ns)]
    if (this.flashAttn) {
      // build_attn_mha's flash path: one op over the cache views (V not
      // transposed), F32 accumulation; its [headDimV, nHead, n] result is
      // already the merged heads.
      // An F32 cache is cast to F16 first, as llama.cpp does.
      const f16 = (t: Tensor) => t.type === GGMLType.F32 ? g.cast(t, GGMLType.F16) : t;
      const fa = this.cb(
        g.flashAttnExt(qh, f16(kAll), f16(vAll), {
          mask,
          scale: kqScale,
          precF32: this.flashAttnF32,
        }),
        "fattn",
        il,
      );
      return this.cb(g.reshape(fa, [headDimV * nHead, n]), "kqv_out", il);
    }
    let kq = this.cb(g.mulMat(kAll, qh), "kq", il); // [nKv, n, nHead]
    kq = this.cb(g.softMax(kq, { mask, scale: kqScale }), "kq_soft_max", il);
    const kqv = this.cb(g.mulMat(vAll, kq), "kqv", il); // [headDimV, n, nHead]
    return this.cb(
      g.cont(g.permute(kqv, 0, 2, 1, 3), [headDimV * nHead, n]),
      "kqv_out",
      il,
    );
  }

  /** Keeps only the output rows (build_inp_out_ids' get_rows), before the last FFN. */
  outputRows(x: Tensor): Tensor {
    return this.outIds ? this.g.getRows(x, this.outIds) : x;
  }

  /** build_ffn with the variants of the type comment on {@link FfnWeights}. */
  ffn(x: Tensor, f: FfnWeights, act: "silu" | "gelu", il: number): Tensor {
    const g = this.g;
    let cur: Tensor;
    if (f.gate) {
      const gate = this.cb(this.bias(g.mulMat(this.w(f.gate), x), f.gateB), "ffn_gate", il);
      const up = this.cb(this.bias(g.mulMat(this.w(f.up), x), f.upB), "ffn_up", il);
      cur = act === "silu"
        ? this.cb(g.swiglu(gate, up), "ffn_swiglu", il)
        : this.cb(g.geglu(gate, up), "ffn_geglu", il);
    } else if (f.fusedGate) {
      const gu = this.cb(this.bias(g.mulMat(this.w(f.up), x), f.upB), "ffn_up", il);
      const nFF = gu.ne[0] / 2;
      // ggml_swiglu on one tensor: its first half gates its second.
      const half = (at: number) => g.view(gu, [nFF, gu.ne[1]], [gu.nb[1]], 4 * at);
      if (act !== "silu") throw new Error("fused gate|up is implemented for SwiGLU only");
      cur = this.cb(g.swiglu(half(0), half(nFF)), "ffn_swiglu", il);
    } else {
      const up = this.cb(this.bias(g.mulMat(this.w(f.up), x), f.upB), "ffn_up", il);
      cur = act === "silu"
        ? this.cb(g.silu(up), "ffn_silu", il)
        : this.cb(g.gelu(up), "ffn_gelu", il);
    }
    return this.bias(g.mulMat(this.w(f.down), cur), f.downB);
  }

  /**
   * The output head: final norm, then the vocabulary projection (plus its
   * bias, qwen2); in embeddings mode only the norm.
   */
  logits(
    x: Tensor,
    norm: WeightRef,
    output: WeightRef,
    normB?: WeightRef,
    outputB?: WeightRef,
  ): Tensor {
    const normed = this.cb(this.norm(x, norm, normB), "result_norm");
    if (this.step.embeddings) return normed;
    return this.cb(this.bias(this.g.mulMat(this.w(output), normed), outputB), "result_output");
  }

  /**
   * Ends a graph whose micro-batch has no output rows: only the cache
   * stores matter then (llama.cpp runs the rest on zero rows, computing
   * nothing; a zero-row get_rows would build shapes no kernel accepts).
   */
  get noOutputs(): boolean {
    return this.step.nOutputs === 0;
  }

  /** Marks the output and the taps and returns the graph's handles. */
  finish(output: Tensor | null): ArchGraph {
    this.g.setLayer(-1);
    if (output) this.g.markOutput(output);
    // After the output so the taps do not change the node order.
    for (const t of this.#kept.values()) this.g.markOutput(t);
    return {
      tokens: this.tokens,
      embd: this.embdIn,
      pos: this.#pos,
      mask: this.mask,
      outIds: this.outIds,
      output,
      taps: this.#kept,
      sCopy: this.sCopy,
    };
  }
}
