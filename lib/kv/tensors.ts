/**
 * The graph side of the KV cache: each layer's K and V storage as graph
 * externals, the views attention and K-shift read, and the store copies that
 * write a ubatch's keys and values into its cells (and move them for graph
 * reuse). Cell bookkeeping stays in {@link KvCache}.
 *
 * @module
 */
import type { BufferRef } from "../ggml/memory.ts";
import { rowSize } from "../ggml/types.ts";
import type { Graph } from "../graph/graph.ts";
import type { Tensor } from "../graph/tensor.ts";
import type { SlotInfo } from "./cache.ts";
import { KvError } from "./cells.ts";

/** Where one layer's K and V bytes start. */
export interface LayerStore {
  /** Start of K. */
  k: BufferRef;
  /** Start of V. */
  v: BufferRef;
}

/** The shape facts of a cache its graph tensors depend on. */
export interface KvLayout {
  /** Number of cells per stream. */
  readonly size: number;
  /** Streams, one after the other in each layer's K and V. */
  readonly nStream: number;
  /** Layers with storage. */
  readonly nLayer: number;
  /** KV heads. */
  readonly nHeadKv: number;
  /** Key width per head. */
  readonly nEmbdHeadK: number;
  /** Value width per head. */
  readonly nEmbdHeadV: number;
  /** Key width of all heads. */
  readonly nEmbdKGqa: number;
  /** Value width of all heads. */
  readonly nEmbdVGqa: number;
  /** ggml type of K. */
  readonly typeK: number;
  /** ggml type of V. */
  readonly typeV: number;
  /** V stored transposed. */
  readonly vTrans: boolean;
  /** Where layer il's K and V bytes start. */
  storage(il: number): LayerStore;
}

// A store copy put into a graph: tokens [t0, t0 + len) into K or V.
interface StoreNode {
  readonly node: Tensor;
  readonly which: "k" | "v";
  readonly t0: number;
  readonly len: number;
}

// Token runs of a slot: consecutive tokens in consecutive cells of one stream.
interface Run {
  readonly t0: number;
  readonly s: number;
  readonly c0: number;
  len: number;
}

function slotRuns(slot: SlotInfo, size: number, nStream: number, what: string): Run[] {
  const runs: Run[] = [];
  const { idxs, strm } = slot;
  if (strm && strm.length !== idxs.length) {
    throw new KvError(`${what}: ${strm.length} streams for ${idxs.length} cells`);
  }
  for (let t = 0; t < idxs.length; t++) {
    const c = idxs[t], s = strm ? strm[t] : 0;
    if (!Number.isInteger(c) || c < 0 || c >= size) {
      throw new KvError(`${what}: cell ${c} out of range`);
    }
    if (!Number.isInteger(s) || s < 0 || s >= nStream) {
      throw new KvError(`${what}: stream ${s} out of range`);
    }
    const r = runs[runs.length - 1];
    if (r && r.s === s && r.c0 + r.len === c) r.len++;
    else runs.push({ t0: t, s, c0: c, len: 1 });
  }
  return runs;
}

/** Per-graph K/V externals, views and store copies of one cache. */
export class KvTensors {
  #kv: KvLayout;
  #graphTensors = new WeakMap<Graph, Map<string, Tensor>>();
  #stores = new WeakMap<Graph, StoreNode[]>();

  /** Graph tensors over the storage of `kv`. */
  constructor(kv: KvLayout) {
    this.#kv = kv;
  }

  #external(g: Graph, il: number, which: "k" | "v"): Tensor {
    let m = this.#graphTensors.get(g);
    if (!m) this.#graphTensors.set(g, m = new Map());
    const key = `${which}${il}`;
    let t = m.get(key);
    if (!t) {
      const kv = this.#kv;
      const st = kv.storage(il);
      const cells = kv.size * kv.nStream;
      t = which === "k"
        ? g.external(`cache_k_l${il}`, kv.typeK, [kv.nEmbdKGqa, cells], st.k)
        : kv.vTrans
        ? g.external(`cache_v_l${il}`, kv.typeV, [kv.size, kv.nEmbdVGqa * kv.nStream], st.v)
        : g.external(`cache_v_l${il}`, kv.typeV, [kv.nEmbdVGqa, cells], st.v);
      m.set(key, t);
    }
    return t;
  }

  /** Whole K of layer il as a graph external: [nEmbdKGqa, size]. */
  kTensor(g: Graph, il: number): Tensor {
    return this.#external(g, il, "k");
  }

  /** Whole V of layer il: [size, nEmbdVGqa] when transposed, else [nEmbdVGqa, size]. */
  vTensor(g: Graph, il: number): Tensor {
    return this.#external(g, il, "v");
  }

  /**
   * Keys of the first nKv cells: [headDimK, nKv, nHeadKv] (q·k via mulMat(k,
   * q)); of streams s0..s0+ns-1 as dim 3 when ns > 1 (llama.cpp's get_k).
   */
  kView(g: Graph, il: number, nKv: number, s0 = 0, ns = 1): Tensor {
    const kv = this.#kv;
    const k = this.kTensor(g, il);
    const row = rowSize(kv.typeK, kv.nEmbdKGqa);
    const shape = [kv.nEmbdHeadK, nKv, kv.nHeadKv];
    const strides = [row, rowSize(kv.typeK, kv.nEmbdHeadK)];
    if (ns === 1) return g.view(k, shape, strides, s0 * row * kv.size);
    return g.view(k, [...shape, ns], [...strides, row * kv.size], s0 * row * kv.size);
  }

  /**
   * Values of the first nKv cells: [nKv, headDimV, nHeadKv] when transposed
   * (kqv = mulMat(v, kq)), else [headDimV, nKv, nHeadKv].
   */
  vView(g: Graph, il: number, nKv: number, s0 = 0, ns = 1): Tensor {
    const kv = this.#kv;
    const v = this.vTensor(g, il);
    const stream = rowSize(kv.typeV, kv.nEmbdVGqa) * kv.size;
    const [shape, strides] = !kv.vTrans
      ? [[kv.nEmbdHeadV, nKv, kv.nHeadKv], [
        rowSize(kv.typeV, kv.nEmbdVGqa),
        rowSize(kv.typeV, kv.nEmbdHeadV),
      ]]
      : [[nKv, kv.nEmbdHeadV, kv.nHeadKv], [
        rowSize(kv.typeV, kv.size),
        rowSize(kv.typeV, kv.size * kv.nEmbdHeadV),
      ]];
    if (ns === 1) return g.view(v, shape, strides, s0 * stream);
    return g.view(v, [...shape, ns], [...strides, stream], s0 * stream);
  }

  /** Rotated part of every cached key: [nRot, nHeadKv, size], for an in-place rope by {@link KvCache.shiftInput}. */
  kShiftView(g: Graph, il: number, nRot: number): Tensor {
    const kv = this.#kv;
    const k = this.kTensor(g, il);
    return g.view(k, [nRot, kv.nHeadKv, kv.size * kv.nStream], [
      rowSize(kv.typeK, kv.nEmbdHeadK),
      rowSize(kv.typeK, kv.nEmbdKGqa),
    ], 0);
  }

  // Token rows of cur [head, nHead, nTokens] or [width, nTokens] as runs of cells.
  #runs(cur: Tensor, width: number, slot: SlotInfo, what: string) {
    const threeD = !(cur.ne[0] === width && cur.ne[2] === 1);
    const nTok = threeD ? cur.ne[2] : cur.ne[1];
    if (cur.ne[0] * (threeD ? cur.ne[1] : 1) !== width || cur.ne[3] !== 1) {
      throw new KvError(`${what}: ${cur.describe()} is not [${width}/heads, heads, tokens]`);
    }
    if (threeD && cur.ne[1] > 1 && cur.nb[1] !== rowSize(cur.type, cur.ne[0])) {
      throw new KvError(`${what}: heads of ${cur.describe()} are not packed`);
    }
    if (slot.idxs.length !== nTok) {
      throw new KvError(`${what}: ${slot.idxs.length} cells for ${nTok} tokens`);
    }
    const tokStride = threeD ? cur.nb[2] : cur.nb[1];
    return { runs: slotRuns(slot, this.#kv.size, this.#kv.nStream, what), tokStride };
  }

  /** Copy nodes storing kCur's token rows into the slot's cells (expanded into g, in order). */
  storeK(g: Graph, il: number, kCur: Tensor, slot: SlotInfo): Tensor[] {
    const kv = this.#kv;
    const k = this.kTensor(g, il);
    const w = kv.nEmbdKGqa;
    const row = rowSize(kv.typeK, w);
    const { runs, tokStride } = this.#runs(kCur, w, slot, "storeK");
    return runs.map(({ t0, s, c0, len }) => {
      const src = g.view(kCur, [w, len], [tokStride], t0 * tokStride);
      const node = g.cpy(src, g.view(k, [w, len], [row], this.#storeOffset("k", s, c0)));
      g.expand(node);
      this.#noteStore(g, { node, which: "k", t0, len });
      return node;
    });
  }

  /** Copy nodes storing vCur's token rows (transposed when vTrans). */
  storeV(g: Graph, il: number, vCur: Tensor, slot: SlotInfo): Tensor[] {
    const kv = this.#kv;
    const v = this.vTensor(g, il);
    const w = kv.nEmbdVGqa;
    const { runs, tokStride } = this.#runs(vCur, w, slot, "storeV");
    return runs.map(({ t0, s, c0, len }) => {
      const src = g.view(vCur, [w, len], [tokStride], t0 * tokStride);
      const at = this.#storeOffset("v", s, c0);
      const node = kv.vTrans
        ? g.cpy(g.transpose(src), g.view(v, [len, w], [rowSize(kv.typeV, kv.size)], at))
        : g.cpy(src, g.view(v, [w, len], [rowSize(kv.typeV, w)], at));
      g.expand(node);
      this.#noteStore(g, { node, which: "v", t0, len });
      return node;
    });
  }

  // Byte offset of cell c0 of stream s in a layer's K or V storage.
  #storeOffset(which: "k" | "v", s: number, c0: number): number {
    const kv = this.#kv;
    if (which === "k") return (s * kv.size + c0) * rowSize(kv.typeK, kv.nEmbdKGqa);
    const stream = s * kv.size * rowSize(kv.typeV, kv.nEmbdVGqa);
    return stream + c0 * rowSize(kv.typeV, kv.vTrans ? 1 : kv.nEmbdVGqa);
  }

  #noteStore(g: Graph, s: StoreNode): void {
    const list = this.#stores.get(g);
    if (list) list.push(s);
    else this.#stores.set(g, [s]);
  }

  /**
   * Point the store copies that {@link storeK}/{@link storeV} put into `g`
   * at the cells of `slot`, so a graph built (and planned) for one decode
   * step serves the next one of the same shape (llama.cpp's graph reuse).
   * The slot must split the tokens into runs of consecutive cells exactly
   * as the slot `g` was built with; otherwise nothing changes and the result
   * is null (build a new graph). Returns the moved nodes, for the scheduler.
   */
  moveStores(g: Graph, slot: SlotInfo): Tensor[] | null {
    const stores = this.#stores.get(g);
    if (!stores?.length) return null;
    // Run starts (token index -> run) of the new slot.
    const runs = slotRuns(slot, this.#kv.size, this.#kv.nStream, "moveStores");
    const start = new Map(runs.map((r) => [r.t0, r]));
    const runsPerGraph = stores.length / (2 * this.#kv.nLayer);
    if (runs.length !== runsPerGraph) return null;
    // As many runs, each old run start a new one: the same cut into runs.
    for (const s of stores) if (!start.has(s.t0)) return null;
    return stores.map((s) => {
      const r = start.get(s.t0)!;
      g.moveView(s.node, this.#storeOffset(s.which, r.s, r.c0));
      return s.node;
    });
  }
}
