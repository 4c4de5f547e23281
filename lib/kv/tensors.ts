/**
 * The graph side of the KV cache: each layer's K and V storage as graph
 * externals, the views attention and K-shift read, and the set_rows stores
 * that write a ubatch's keys and values into its cells, one node per layer
 * for K and for V whatever cells the tokens land in, with the cells as row
 * ids (graph inputs, so a planned graph is reused across decode steps).
 * Cell bookkeeping stays in {@link KvCache}.
 *
 * @module
 */
import type { BufferRef } from "../ggml/memory.ts";
import { GGMLType, rowSize } from "../ggml/types.ts";
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

// The row-id inputs of a graph's stores: one for K, one for V (shared by
// every layer), with the buffers their values are built in.
interface StoreIds {
  readonly k: Tensor;
  readonly v: Tensor;
  readonly nTok: number;
  // Made by the first storeInputs: graphs only measured or reserved never need them.
  kIds?: Int32Array;
  vIds?: Int32Array;
}

// Checks a slot's cells and streams; calls at(t, s, c) per token.
function forSlot(
  slot: SlotInfo,
  size: number,
  nStream: number,
  what: string,
  at: (t: number, s: number, c: number) => void,
): void {
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
    at(t, s, c);
  }
}

/** Per-graph K/V externals, views and store copies of one cache. */
export class KvTensors {
  #kv: KvLayout;
  #graphTensors = new WeakMap<Graph, Map<string, Tensor>>();
  #ids = new WeakMap<Graph, StoreIds>();

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

  // Token rows of cur [head, nHead, nTokens] or [width, nTokens] as a view
  // [width, nTokens] (heads packed), checked against the graph's store ids.
  #rows(g: Graph, cur: Tensor, width: number, slot: SlotInfo, what: string): Tensor {
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
    if (this.#storeIds(g, nTok).nTok !== nTok) {
      throw new KvError(`${what}: ${nTok} tokens in a graph storing ${this.#ids.get(g)!.nTok}`);
    }
    return g.view(cur, [width, nTok], [threeD ? cur.nb[2] : cur.nb[1]], 0);
  }

  // The graph's row-id inputs (made on first use): K's rows are cells of all
  // streams, one after the other; V's, when transposed, single elements.
  #storeIds(g: Graph, nTok: number): StoreIds {
    let ids = this.#ids.get(g);
    if (!ids) {
      const kv = this.#kv;
      const nv = kv.vTrans ? nTok * kv.nEmbdVGqa : nTok;
      if (kv.vTrans && kv.size * kv.nStream * kv.nEmbdVGqa > 0x7fffffff) {
        throw new KvError(`storeV: ${kv.size * kv.nStream} cells of V are too many for I32 ids`);
      }
      ids = {
        k: g.input("k_idxs", GGMLType.I32, [nTok]),
        v: g.input("v_idxs", GGMLType.I32, [nv]),
        nTok,
      };
      this.#ids.set(g, ids);
    }
    return ids;
  }

  /**
   * One set_rows node storing kCur's token rows into the slot's cells
   * (expanded into g); its row ids are the graph input that
   * {@link storeInputs} fills for each step.
   */
  storeK(g: Graph, il: number, kCur: Tensor, slot: SlotInfo): Tensor[] {
    const rows = this.#rows(g, kCur, this.#kv.nEmbdKGqa, slot, "storeK");
    const node = g.setRows(this.kTensor(g, il), rows, this.#ids.get(g)!.k);
    g.expand(node);
    return [node];
  }

  /**
   * One set_rows node storing vCur's token rows; transposed, each element is
   * a row of its own (llama.cpp's cpy_v and v_idxs).
   */
  storeV(g: Graph, il: number, vCur: Tensor, slot: SlotInfo): Tensor[] {
    const kv = this.#kv;
    const w = kv.nEmbdVGqa;
    let rows = this.#rows(g, vCur, w, slot, "storeV");
    const v = this.vTensor(g, il);
    let dst = v;
    if (kv.vTrans) {
      const n = rows.ne[1] * w;
      if (rows.nb[1] !== rowSize(rows.type, w)) rows = g.cont(rows);
      rows = g.view(rows, [1, n], [rowSize(rows.type, 1)], 0);
      dst = g.view(v, [1, kv.size * w * kv.nStream], [rowSize(kv.typeV, 1)], 0);
    }
    const node = g.setRows(dst, rows, this.#ids.get(g)!.v);
    g.expand(node);
    return [node];
  }

  /**
   * The row-id inputs of the stores in `g` and their values for `slot`
   * (llama.cpp's set_input_k_idxs / set_input_v_idxs), to be written before
   * each run of `g`: a graph planned for one decode step serves the next one
   * of the same shape, wherever its cells lie. Empty when g stores nothing.
   * Throws KvError for a cell or stream out of range.
   */
  storeInputs(g: Graph, slot: SlotInfo): Array<[Tensor, Int32Array]> {
    const ids = this.#ids.get(g);
    if (!ids) return [];
    const kv = this.#kv, size = kv.size, w = kv.nEmbdVGqa;
    if (slot.idxs.length !== ids.nTok) {
      throw new KvError(`storeInputs: ${slot.idxs.length} cells for ${ids.nTok} tokens`);
    }
    const kIds = ids.kIds ??= new Int32Array(ids.nTok);
    const vIds = ids.vIds ??= new Int32Array(ids.v.ne[0]);
    forSlot(slot, size, kv.nStream, "storeInputs", (t, s, c) => {
      kIds[t] = s * size + c;
      if (!kv.vTrans) vIds[t] = s * size + c;
      else for (let j = 0, o = s * size * w + c; j < w; j++, o += size) vIds[t * w + j] = o;
    });
    return [[ids.k, kIds], [ids.v, vIds]];
  }

  /**
   * Whether the stores of `g` can serve `slot` (as many tokens; the cells
   * are inputs, see {@link storeInputs}): then the nodes to update, none,
   * else null (build a new graph). Throws KvError for a cell or stream out
   * of range.
   */
  moveStores(g: Graph, slot: SlotInfo): Tensor[] | null {
    const ids = this.#ids.get(g);
    forSlot(slot, this.#kv.size, this.#kv.nStream, "moveStores", () => {});
    return ids && ids.nTok === slot.idxs.length ? [] : null;
  }
}
