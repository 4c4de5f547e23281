/**
 * The unified KV cache (llama.cpp's llama_kv_cache with one stream): cell
 * bookkeeping, slot search, the attention mask, sequence edits, K-shift and
 * and the per-layer K/V storage. The graph side (K/V
 * tensors, views and store copies) lives in ./tensors.ts, the mask in
 * ./mask.ts; KvCache delegates to them. There is no defragmentation:
 * llama.cpp no longer does it (defrag_thold is deprecated and ignored), and
 * cells must be placed as llama.cpp places them for bit-identical logits
 * (attention sums over cells in cell order).
 * Head counts and sizes are parameters; nothing here knows a particular model.
 *
 * @module
 */
import type { BufferAllocator, BufferRef } from "../ggml/memory.ts";
import { bufferClear } from "../ggml/memory.ts";
import type { Graph } from "../graph/graph.ts";
import type { Tensor } from "../graph/tensor.ts";
import { GGMLType, rowSize } from "../ggml/types.ts";
import type { Ubatch } from "./batch.ts";
import { type CellsSnapshot, checkSeq, KvCells, KvError } from "./cells.ts";
import { isMaskedSwa, SwaType } from "./swa.ts";
import { fillKqMask, type MaskOptions } from "./mask.ts";
import { KvTensors } from "./tensors.ts";
import { LayerStorage } from "./layers.ts";

export { isMaskedSwa, SwaType } from "./swa.ts";
export type { MaskOptions } from "./mask.ts";

/** llama.cpp pads the attended window to a multiple of this (get_n_kv). */
export const N_KV_PAD = 256;

/** Options of {@link KvCache}. */
export interface KvCacheOptions {
  /** Number of cells (the context size). */
  size: number;
  /** Layers with a cache: a count (0..n-1). */
  nLayer: number;
  /** KV heads (GQA groups). */
  nHeadKv: number;
  /** Key width per head. */
  nEmbdHeadK: number;
  /** Value width per head. */
  nEmbdHeadV: number;
  /** Default F16. */
  typeK?: number;
  /** Default F16. */
  typeV?: number;
  /** Store V transposed (llama.cpp without flash attention). Default true. */
  vTrans?: boolean;
  /** Highest sequence id + 1. Default 1. */
  nSeqMax?: number;
  /** Extra padding of the window (llama.cpp's n_pad, 1 by default; 256 always applies). */
  nPad?: number;
  /** Sliding window size (0: none). */
  nSwa?: number;
  /** Sliding window kind. Default NONE. */
  swaType?: SwaType;
  /** Where each layer's K and V live: one backend or one per layer. */
  backend: BufferAllocator | ((layer: number) => BufferAllocator);
}

/** Cells chosen for the tokens of a ubatch, in token order. */
export interface SlotInfo {
  /** Cell index per token. */
  readonly idxs: readonly number[];
}

/** Cell state saved by {@link KvCache.saveSlot}. */
export interface SlotUndo {
  /** The slot's cells before applyUbatch. */
  readonly snap: CellsSnapshot;
  /** The slot search head before applyUbatch. */
  readonly head: number;
}

/** The KV cache. */
export class KvCache implements Disposable {
  /** Cell metadata. */
  readonly cells: KvCells;
  /** Where the next slot search starts. */
  head = 0;
  /** Number of cells. */
  readonly size: number;
  /** Layers with storage. */
  readonly nLayer: number;
  /** KV heads. */
  readonly nHeadKv: number;
  /** Key width per head. */
  readonly nEmbdHeadK: number;
  /** Value width per head. */
  readonly nEmbdHeadV: number;
  /** ggml type of K. */
  readonly typeK: number;
  /** ggml type of V. */
  readonly typeV: number;
  /** V stored transposed. */
  readonly vTrans: boolean;
  /** Highest sequence id + 1. */
  readonly nSeqMax: number;
  /** Window padding (256 always applies). */
  readonly nPad: number;
  /** Sliding window size. */
  readonly nSwa: number;
  /** Sliding window kind. */
  readonly swaType: SwaType;
  #storage: LayerStorage;
  #tensors = new KvTensors(this);

  /** Allocate the per-layer K/V storage (zero-filled) and empty cells. */
  constructor(o: KvCacheOptions) {
    for (const k of ["size", "nLayer", "nHeadKv", "nEmbdHeadK", "nEmbdHeadV"] as const) {
      if (!Number.isInteger(o[k]) || o[k] <= 0) throw new KvError(`KvCache: bad ${k} ${o[k]}`);
    }
    this.size = o.size;
    this.nLayer = o.nLayer;
    this.nHeadKv = o.nHeadKv;
    this.nEmbdHeadK = o.nEmbdHeadK;
    this.nEmbdHeadV = o.nEmbdHeadV;
    this.typeK = o.typeK ?? GGMLType.F16;
    this.typeV = o.typeV ?? GGMLType.F16;
    this.vTrans = o.vTrans ?? true;
    this.nSeqMax = o.nSeqMax ?? 1;
    this.nPad = o.nPad ?? 1;
    this.nSwa = o.nSwa ?? 0;
    this.swaType = o.swaType ?? SwaType.NONE;
    if (this.size % this.nPad !== 0) {
      throw new KvError(`KvCache: size ${this.size} not a multiple of nPad ${this.nPad}`);
    }
    if (this.vTrans && this.typeV !== GGMLType.F16 && this.typeV !== GGMLType.F32) {
      throw new KvError("KvCache: a transposed V cache must be F16 or F32");
    }
    this.cells = new KvCells(this.size);
    this.#storage = new LayerStorage(
      this.nLayer,
      o.backend,
      rowSize(this.typeK, this.nEmbdKGqa) * this.size,
      rowSize(this.typeV, this.nEmbdVGqa) * this.size,
    );
  }

  /** Key width of all heads. */
  get nEmbdKGqa(): number {
    return this.nEmbdHeadK * this.nHeadKv;
  }

  /** Value width of all heads. */
  get nEmbdVGqa(): number {
    return this.nEmbdHeadV * this.nHeadKv;
  }

  /** Bytes of K and V storage in all layers. */
  get totalBytes(): number {
    return this.#storage.totalBytes;
  }

  /** Where layer il's K and V bytes start. */
  storage(il: number): { k: BufferRef; v: BufferRef } {
    const l = this.#storage.layer(il);
    if (!l) throw new KvError(`KvCache: no layer ${il}`);
    return { k: l.a, v: l.b };
  }

  /** Free the storage. */
  [Symbol.dispose](): void {
    this.#storage[Symbol.dispose]();
  }

  // ---- sequences -------------------------------------------------------

  /** Empty all cells; with `data`, zero the K/V bytes too. */
  clear(data = false): void {
    this.cells.reset();
    this.head = 0;
    // Through the buffer's own clear: the cache may live in device memory.
    if (data) { for (const b of this.#storage.buffers) bufferClear(b, 0); }
  }

  #range(p0: number, p1: number): [number, number] {
    return [p0 < 0 ? 0 : p0, p1 < 0 ? Number.MAX_SAFE_INTEGER : p1];
  }

  #lowerHead(freed: number): void {
    if (freed !== this.size && freed < this.head) this.head = freed;
  }

  /** Remove positions [p0, p1) of `seq` (-1: any sequence); negative bounds mean open. */
  seqRm(seq: number, p0 = -1, p1 = -1): boolean {
    if (seq !== -1) checkSeq(seq, this.nSeqMax);
    [p0, p1] = this.#range(p0, p1);
    const c = this.cells;
    let freed = this.size;
    for (let i = 0; i < this.size; i++) {
      if (!c.posIn(i, p0, p1)) continue;
      if (seq === -1) {
        c.rm(i);
        if (freed === this.size) freed = i;
      } else if (c.seqHas(i, seq) && c.seqRm(i, seq) && freed === this.size) freed = i;
    }
    this.#lowerHead(freed);
    return true;
  }

  /** Let `dst` also see the cells of `src` in [p0, p1). */
  seqCp(src: number, dst: number, p0 = -1, p1 = -1): void {
    checkSeq(src, this.nSeqMax), checkSeq(dst, this.nSeqMax);
    if (src === dst) return;
    [p0, p1] = this.#range(p0, p1);
    const c = this.cells;
    for (let i = 0; i < this.size; i++) {
      if (c.posIn(i, p0, p1) && c.seqHas(i, src)) c.seqAdd(i, dst);
    }
  }

  /** Drop every sequence but `seq`. */
  seqKeep(seq: number): void {
    checkSeq(seq, this.nSeqMax);
    let freed = this.size;
    for (let i = 0; i < this.size; i++) {
      if (this.cells.seqKeep(i, seq) && freed === this.size) freed = i;
    }
    this.#lowerHead(freed);
  }

  /** Add `shift` to positions [p0, p1) of `seq` (cells going negative are freed). */
  seqAdd(seq: number, p0: number, p1: number, shift: number): void {
    checkSeq(seq, this.nSeqMax);
    if (shift === 0) return;
    [p0, p1] = this.#range(p0, p1);
    if (p0 === p1) return;
    const c = this.cells;
    let freed = this.size;
    for (let i = 0; i < this.size; i++) {
      if (c.posIn(i, p0, p1) && c.seqHas(i, seq) && c.posAdd(i, shift) && freed === this.size) {
        freed = i;
      }
    }
    this.head = freed !== this.size ? freed : 0;
  }

  /** Divide positions [p0, p1) of `seq` by d (self-extend). */
  seqDiv(seq: number, p0: number, p1: number, d: number): void {
    checkSeq(seq, this.nSeqMax);
    if (!Number.isInteger(d) || d <= 0) throw new KvError(`seqDiv: bad divisor ${d}`);
    if (d === 1) return;
    [p0, p1] = this.#range(p0, p1);
    if (p0 === p1) return;
    const c = this.cells;
    for (let i = 0; i < this.size; i++) if (c.posIn(i, p0, p1) && c.seqHas(i, seq)) c.posDiv(i, d);
  }

  /** Smallest position of `seq` in the cache, -1 when absent. */
  seqPosMin(seq: number): number {
    checkSeq(seq, this.nSeqMax);
    return this.cells.seqPosMin(seq);
  }

  /** Largest position of `seq` in the cache, -1 when absent. */
  seqPosMax(seq: number): number {
    checkSeq(seq, this.nSeqMax);
    return this.cells.seqPosMax(seq);
  }

  // ---- slots -------------------------------------------------------------

  /**
   * Cells for the tokens of `ub` (llama_kv_cache::find_slot), without
   * changing anything; null when the cache is full. `cont` requires one run.
   */
  findSlot(ub: Ubatch, cont = false): SlotInfo | null {
    const c = this.cells;
    const n = ub.nTokens;
    if (n > this.size) return null;
    let head = this.head;
    // plenty of free cells before head: restart from 0 to fill holes
    if (head > c.used + 2 * n) head = 0;
    const idxs: number[] = [];
    const nTest = cont ? n : 1;
    let tested = 0;
    while (true) {
      if (head + nTest > this.size) {
        tested += this.size - head;
        head = 0;
        continue;
      }
      for (let k = 0; k < nTest; k++) {
        const i = head++;
        tested++;
        let ok = c.isEmpty(i);
        if (!ok && c.seqCount(i) === 1) {
          const s = c.seqGet(i);
          ok = isMaskedSwa(this.nSwa, this.swaType, c.pos[i], c.seqPosMax(s) + 1);
        }
        if (ok) idxs.push(i);
        else if (cont) break;
      }
      if (idxs.length === n) break;
      if (cont) idxs.length = 0;
      if (tested >= this.size) return null;
    }
    return { idxs };
  }

  /** Occupy the slot with the ubatch's tokens (llama_kv_cache::apply_ubatch). */
  applyUbatch(slot: SlotInfo, ub: Ubatch): void {
    if (slot.idxs.length !== ub.nTokens) {
      throw new KvError(`applyUbatch: ${slot.idxs.length} cells for ${ub.nTokens} tokens`);
    }
    const c = this.cells;
    const maxRm = new Map<number, number>();
    slot.idxs.forEach((i, t) => {
      if (!c.isEmpty(i)) {
        const s = c.seqGet(i);
        maxRm.set(s, Math.max(maxRm.get(s) ?? -1, c.pos[i]));
        c.rm(i);
      }
      c.posSet(i, ub.pos[t]);
      for (const s of ub.seqId[t]) {
        checkSeq(s, this.nSeqMax);
        c.seqAdd(i, s);
      }
    });
    // keep each sequence gap-free: drop what lies below an overwritten (SWA) cell
    for (const [s, pmax] of maxRm) {
      const pmin = c.seqPosMin(s);
      if (pmin >= 0 && pmin <= pmax) this.seqRm(s, pmin, pmax + 1);
    }
    this.head = slot.idxs[slot.idxs.length - 1] + 1;
  }

  /** What {@link applyUbatch} is about to change for `slot`, for {@link undo}. */
  saveSlot(slot: SlotInfo): SlotUndo {
    return { snap: this.cells.save(slot.idxs), head: this.head };
  }

  /**
   * Puts back the cells and head saved before each applyUbatch (oldest
   * first in `saved`; undone newest first), as if those ubatches never ran.
   */
  undo(saved: readonly SlotUndo[]): void {
    for (let k = saved.length - 1; k >= 0; k--) {
      this.cells.restore(saved[k].snap);
      this.head = saved[k].head;
    }
  }

  /** Find slots for all ubatches as if applied in turn, then undo; null if one does not fit. */
  prepare(ubatches: readonly Ubatch[]): SlotInfo[] | null {
    const undo: SlotUndo[] = [];
    const out: SlotInfo[] = [];
    let ok = true;
    for (let k = 0; k < ubatches.length; k++) {
      const ub = ubatches[k];
      const s = this.findSlot(ub);
      if (!s) {
        ok = false;
        break;
      }
      out.push(s);
      // The last slot is placed for no later search to see (a decode step
      // has one ubatch: nothing to place and undo).
      if (k === ubatches.length - 1) break;
      undo.push(this.saveSlot(s));
      this.applyUbatch(s, ub);
    }
    this.undo(undo);
    return ok ? out : null;
  }

  /** Cells attention looks at: used extent padded to 256 (at least 256), at most size. */
  nKv(): number {
    const pad = Math.max(this.nPad, N_KV_PAD);
    const used = Math.ceil(this.cells.usedMaxP1() / pad) * pad;
    return Math.min(this.size, Math.max(pad, used));
  }

  // ---- mask --------------------------------------------------------------

  /**
   * Fill the KQ mask [nKv, nTokens] (row per token): 0 where token t may
   * attend cell j (cell holds t's first sequence at a position <= t's,
   * inside the SWA window), -inf elsewhere. F32 (Float32Array) or F16 bits
   * (Uint16Array).
   */
  fillMask(ub: Ubatch, nKv: number, out: Float32Array | Uint16Array, o: MaskOptions = {}): void {
    fillKqMask(this.cells, this, ub, nKv, out, o);
  }

  // ---- K-shift -----------------------------------------------------------

  /** Whether positions changed and keys need re-rotation. */
  get hasShift(): boolean {
    return this.cells.hasShift;
  }

  /** Per-cell position deltas (I32 [size], 0 for empty cells): the rope positions of the shift graph. */
  shiftInput(): Int32Array {
    const c = this.cells;
    return Int32Array.from(c.pos, (p, i) => (p === -1 ? 0 : c.shift[i]));
  }

  /** Mark the shift as applied (after the shift graph ran). */
  resetShift(): void {
    this.cells.resetShift();
  }

  // ---- graph tensors -----------------------------------------------------

  /** Whole K of layer il as a graph external: [nEmbdKGqa, size]. */
  kTensor(g: Graph, il: number): Tensor {
    return this.#tensors.kTensor(g, il);
  }

  /** Whole V of layer il: [size, nEmbdVGqa] when transposed, else [nEmbdVGqa, size]. */
  vTensor(g: Graph, il: number): Tensor {
    return this.#tensors.vTensor(g, il);
  }

  /** Keys of the first nKv cells: [headDimK, nKv, nHeadKv] (q·k via mulMat(k, q)). */
  kView(g: Graph, il: number, nKv: number): Tensor {
    return this.#tensors.kView(g, il, nKv);
  }

  /**
   * Values of the first nKv cells: [nKv, headDimV, nHeadKv] when transposed
   * (kqv = mulMat(v, kq)), else [headDimV, nKv, nHeadKv].
   */
  vView(g: Graph, il: number, nKv: number): Tensor {
    return this.#tensors.vView(g, il, nKv);
  }

  /** Rotated part of every cached key: [nRot, nHeadKv, size], for an in-place rope by {@link shiftInput}. */
  kShiftView(g: Graph, il: number, nRot: number): Tensor {
    return this.#tensors.kShiftView(g, il, nRot);
  }

  /** Copy nodes storing kCur's token rows into the slot's cells (expanded into g, in order). */
  storeK(g: Graph, il: number, kCur: Tensor, slot: SlotInfo): Tensor[] {
    return this.#tensors.storeK(g, il, kCur, slot);
  }

  /** Copy nodes storing vCur's token rows (transposed when vTrans). */
  storeV(g: Graph, il: number, vCur: Tensor, slot: SlotInfo): Tensor[] {
    return this.#tensors.storeV(g, il, vCur, slot);
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
    return this.#tensors.moveStores(g, slot);
  }
}
