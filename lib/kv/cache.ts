/**
 * The KV cache (llama.cpp's llama_kv_cache): cell bookkeeping, slot
 * search, the attention mask, sequence edits, K-shift and the per-layer K/V
 * storage. One stream (kv_unified: every sequence in one pool of cells), or
 * one stream per sequence (kv_unified = false: sequence s lives in stream s,
 * a pool of `size` cells of its own, laid out after stream s-1's in every
 * layer's K and V). A multi-stream cache keeps one single-stream KvCache per
 * stream over its slice of the storage and routes each operation to the
 * stream of its sequence. The graph side (K/V
 * tensors, views and store copies) lives in ./tensors.ts, the mask in
 * ./mask.ts; KvCache delegates to them. There is no defragmentation:
 * llama.cpp no longer does it (defrag_thold is deprecated and ignored), and
 * cells must be placed as llama.cpp places them for bit-identical logits
 * (attention sums over cells in cell order).
 * Head counts and sizes are parameters; nothing here knows a particular model.
 *
 * @module
 */
import type { BufferRef } from "../ggml/memory.ts";
import { bufferClear, bufferSet } from "../ggml/memory.ts";
import type { Graph } from "../graph/graph.ts";
import type { Tensor } from "../graph/tensor.ts";
import { GGMLType, rowSize } from "../ggml/types.ts";
import type { Ubatch } from "./batch.ts";
import { checkSeq, KvCells, KvError } from "./cells.ts";
import { isMaskedSwa, SwaType } from "./swa.ts";
import { fillKqMask, type MaskOptions } from "./mask.ts";
import { KvTensors } from "./tensors.ts";
import { LayerStorage } from "./layers.ts";
import { copyStream, streamBlocks } from "./streams.ts";
import { type KvCacheOptions, type SlotInfo, type SlotUndo, windowPadOf } from "./cache_types.ts";

export { isMaskedSwa, SwaType } from "./swa.ts";
export type { MaskOptions } from "./mask.ts";
export type { KvCacheOptions, SlotInfo, SlotUndo } from "./cache_types.ts";

export { N_KV_PAD } from "./cache_types.ts";

type Regions = (il: number) => { k: BufferRef; v: BufferRef } | undefined;

/** The KV cache. */
export class KvCache implements Disposable {
  /** Cell metadata (with streams, stream 0's: see {@link stream}). */
  readonly cells: KvCells;
  /** Where the next slot search starts (with streams, each stream has its own). */
  head = 0;
  /** Number of cells (per stream). */
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
  /** Extra window padding (llama.cpp's n_pad). */
  readonly nPad: number;
  /** The window's padding besides nPad (256 by default; see KvOptions.windowPad). */
  readonly windowPad: number;
  /** Sliding window size. */
  readonly nSwa: number;
  /** Sliding window kind. */
  readonly swaType: SwaType;
  /** KV streams (1: unified). */
  readonly nStream: number;
  #storage: LayerStorage | null = null;
  #regions: Regions;
  // One single-stream cache per stream (nStream > 1), over slices of #storage.
  #streams: KvCache[] | null = null;
  #tensors = new KvTensors(this);

  /** Allocate the per-layer K/V storage (zero-filled) and empty cells. */
  constructor(o: KvCacheOptions, regions?: Regions) {
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
    this.windowPad = windowPadOf(o);
    this.nSwa = o.nSwa ?? 0;
    this.swaType = o.swaType ?? SwaType.NONE;
    if (this.size % this.nPad !== 0) {
      throw new KvError(`KvCache: size ${this.size} not a multiple of nPad ${this.nPad}`);
    }
    if (this.vTrans && this.typeV !== GGMLType.F16 && this.typeV !== GGMLType.F32) {
      throw new KvError("KvCache: a transposed V cache must be F16 or F32");
    }
    this.nStream = o.nStream ?? 1;
    if (this.nStream !== 1 && this.nStream !== this.nSeqMax) {
      throw new KvError(`KvCache: nStream ${this.nStream} must be 1 or nSeqMax ${this.nSeqMax}`);
    }
    this.cells = new KvCells(this.size);
    const rk = rowSize(this.typeK, this.nEmbdKGqa) * this.size;
    const rv = rowSize(this.typeV, this.nEmbdVGqa) * this.size;
    if (regions) {
      this.#regions = regions;
    } else {
      const st = new LayerStorage(this.nLayer, o.backend, rk * this.nStream, rv * this.nStream);
      this.#storage = st;
      this.#regions = (il) => {
        const l = st.layer(il);
        return l && { k: l.a, v: l.b };
      };
    }
    if (this.nStream > 1) {
      const one = { ...o, nStream: 1 };
      const at = (r: BufferRef, d: number) => ({ buffer: r.buffer, offset: r.offset + d });
      this.#streams = Array.from({ length: this.nStream }, (_, s) =>
        new KvCache(one, (il) => {
          const l = this.#regions(il);
          return l && { k: at(l.k, s * rk), v: at(l.v, s * rv) };
        }));
      // Stream 0's cells are `cells` (what single-stream code reads).
      this.cells = this.#streams[0].cells;
    }
  }

  /**
   * Stream s as a single-stream cache over its slice of the storage (the
   * cache itself when unified): what state files and tests read per stream.
   */
  stream(s: number): KvCache {
    if (!this.#streams) {
      if (s !== 0) throw new KvError(`KvCache: no stream ${s} in a unified cache`);
      return this;
    }
    const c = this.#streams[s];
    if (!c) throw new KvError(`KvCache: stream ${s} outside [0, ${this.nStream})`);
    return c;
  }

  /** The stream of sequence `seq` (llama.cpp's seq_to_stream). */
  seqStream(seq: number): number {
    checkSeq(seq, this.nSeqMax);
    return this.#streams ? seq : 0;
  }

  /** Used cells, all streams. */
  get used(): number {
    return this.#streams ? this.#streams.reduce((n, c) => n + c.cells.used, 0) : this.cells.used;
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
    return this.#storage?.totalBytes ?? 0;
  }

  /** Where layer il's K and V bytes start (stream 0's, then the others'). */
  storage(il: number): { k: BufferRef; v: BufferRef } {
    const l = this.#regions(il);
    if (!l) throw new KvError(`KvCache: no layer ${il}`);
    return l;
  }

  /** Free the storage. */
  [Symbol.dispose](): void {
    this.#storage?.[Symbol.dispose]();
  }

  // ---- sequences -------------------------------------------------------

  /** Empty all cells; with `data`, zero the K/V bytes too. */
  clear(data = false): void {
    this.cells.reset();
    this.head = 0;
    for (const c of this.#streams ?? []) c.clear();
    // Through the buffer's own clear: the cache may live in device memory.
    if (data && this.#storage) { for (const b of this.#storage.buffers) bufferClear(b, 0); }
    if (data && !this.#storage) this.#zeroRegions();
  }

  // A stream's slice of the storage, zeroed (a stream cleared with its data).
  #zeroRegions(): void {
    const k = rowSize(this.typeK, this.nEmbdKGqa) * this.size;
    const v = rowSize(this.typeV, this.nEmbdVGqa) * this.size;
    for (let il = 0; il < this.nLayer; il++) {
      const l = this.storage(il);
      bufferSet(l.k.buffer, l.k.offset, new Uint8Array(k));
      bufferSet(l.v.buffer, l.v.offset, new Uint8Array(v));
    }
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
    if (this.#streams) {
      if (seq !== -1) return this.#streams[seq].seqRm(seq, p0, p1);
      for (const c of this.#streams) c.seqRm(-1, p0, p1);
      return true;
    }
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
    if (this.#streams) return this.#copyStream(src, dst, p0, p1);
    [p0, p1] = this.#range(p0, p1);
    const c = this.cells;
    for (let i = 0; i < this.size; i++) {
      if (c.posIn(i, p0, p1) && c.seqHas(i, src)) c.seqAdd(i, dst);
    }
  }

  /**
   * Drop every sequence but `seq`. With streams, as llama.cpp: only `seq`'s
   * own stream is looked at (which holds no other sequence), so nothing changes.
   */
  seqKeep(seq: number): void {
    checkSeq(seq, this.nSeqMax);
    if (this.#streams) return this.#streams[seq].seqKeep(seq);
    let freed = this.size;
    for (let i = 0; i < this.size; i++) {
      if (this.cells.seqKeep(i, seq) && freed === this.size) freed = i;
    }
    this.#lowerHead(freed);
  }

  /** Add `shift` to positions [p0, p1) of `seq` (cells going negative are freed). */
  seqAdd(seq: number, p0: number, p1: number, shift: number): void {
    checkSeq(seq, this.nSeqMax);
    if (this.#streams) return this.#streams[seq].seqAdd(seq, p0, p1, shift);
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
    if (this.#streams) return this.#streams[seq].seqDiv(seq, p0, p1, d);
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
    return this.stream(this.seqStream(seq)).cells.seqPosMin(seq);
  }

  /** Largest position of `seq` in the cache, -1 when absent. */
  seqPosMax(seq: number): number {
    checkSeq(seq, this.nSeqMax);
    return this.stream(this.seqStream(seq)).cells.seqPosMax(seq);
  }

  // llama_kv_cache::seq_cp across streams (see ./streams.ts).
  #copyStream(src: number, dst: number, p0: number, p1: number): void {
    copyStream(this.#streams![src], this.#streams![dst], src, dst, p0, p1);
  }

  // ---- slots -------------------------------------------------------------

  /**
   * Cells for the tokens of `ub` (llama_kv_cache::find_slot), without
   * changing anything; null when the cache is full. `cont` requires one run.
   */
  findSlot(ub: Ubatch, cont = false): SlotInfo | null {
    if (!this.#streams) {
      const idxs = this.#search(ub.nTokens, cont);
      return idxs && { idxs };
    }
    // One block of tokens per sequence, sequences consecutive (split_equal, sequential).
    const nSeqs = ub.nSeqsUnq;
    if (nSeqs === 0 || ub.nTokens % nSeqs !== 0) {
      throw new KvError(
        `findSlot: ${ub.nTokens} tokens are not split evenly over ${nSeqs} streams`,
      );
    }
    const nTps = ub.nTokens / nSeqs;
    const idxs: number[] = [], strm: number[] = [];
    for (let k = 0; k < nSeqs; k++) {
      const s = ub.seqIdUnq[k];
      if (ub.seqId[k * nTps].length !== 1 || ub.seqId[k * nTps][0] !== s) {
        throw new KvError(`findSlot: tokens of sequence ${s} are not block ${k} of the ubatch`);
      }
      const got = this.#streams[s].#search(nTps, cont);
      if (!got) return null;
      for (const i of got) idxs.push(i), strm.push(s);
    }
    const s0 = ub.seqIdUnq[0], s1 = ub.seqIdUnq[nSeqs - 1];
    if (s1 - s0 + 1 === nSeqs) return { idxs, strm, s0, ns: nSeqs };
    // Gaps between the streams (ContextOptions.kvStreamGaps): runs of consecutive ones.
    const runs: Array<[number, number]> = [];
    for (const s of ub.seqIdUnq) {
      const r = runs[runs.length - 1];
      if (r && r[0] + r[1] === s) r[1]++;
      else runs.push([s, 1]);
    }
    return { idxs, strm, s0, ns: nSeqs, runs };
  }

  #search(n: number, cont: boolean): number[] | null {
    const c = this.cells;
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
    return idxs;
  }

  /** Occupy the slot with the ubatch's tokens (llama_kv_cache::apply_ubatch). */
  applyUbatch(slot: SlotInfo, ub: Ubatch): void {
    if (slot.idxs.length !== ub.nTokens) {
      throw new KvError(`applyUbatch: ${slot.idxs.length} cells for ${ub.nTokens} tokens`);
    }
    if (!this.#streams) return this.#apply(slot.idxs, ub, 0);
    // Each stream's block of tokens, then each stream's purge (apply_ubatch).
    for (const [s, t0, n] of streamBlocks(slot)) {
      this.#streams[s].#apply(slot.idxs.slice(t0, t0 + n), ub, t0);
    }
  }

  // Tokens [t0, t0 + idxs.length) of ub into cells idxs of this stream.
  #apply(idxs: readonly number[], ub: Ubatch, t0: number): void {
    const c = this.cells;
    const maxRm = new Map<number, number>();
    idxs.forEach((i, k) => {
      const t = t0 + k;
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
    this.head = idxs[idxs.length - 1] + 1;
  }

  /** What {@link applyUbatch} is about to change for `slot`, for {@link undo}. */
  saveSlot(slot: SlotInfo): SlotUndo {
    if (!this.#streams) {
      return { parts: [{ stream: 0, snap: this.cells.save(slot.idxs), head: this.head }] };
    }
    return {
      parts: streamBlocks(slot).map(([s, t0, n]) => {
        const c = this.#streams![s];
        return { stream: s, snap: c.cells.save(slot.idxs.slice(t0, t0 + n)), head: c.head };
      }),
    };
  }

  /**
   * Puts back the cells and head saved before each applyUbatch (oldest
   * first in `saved`; undone newest first), as if those ubatches never ran.
   */
  undo(saved: readonly SlotUndo[]): void {
    for (let k = saved.length - 1; k >= 0; k--) {
      for (const p of saved[k].parts) {
        const c = this.stream(p.stream);
        c.cells.restore(p.snap);
        c.head = p.head;
      }
    }
  }

  /** Find slots for all ubatches as if applied in turn, then undo; null if one does not fit. */
  prepare(ubatches: readonly Ubatch[]): SlotInfo[] | null {
    const undo: SlotUndo[] = [];
    const out: SlotInfo[] = [];
    const heads: number[][] = [];
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
      heads.push(this.#streams?.map((c) => c.head) ?? []);
      this.applyUbatch(s, ub);
    }
    this.undo(undo);
    // llama_kv_cache::prepare puts back the head of the slot's j-th stream
    // from v_heads_old[j], the head of stream j (sic), newest slot first; it
    // shows when a decode finds no room after placing some micro-batches
    // (on success the real placements set every head they touch again).
    for (let k = heads.length - 1; k >= 0 && this.#streams; k--) {
      streamBlocks(out[k]).forEach(([st], j) => (this.#streams![st].head = heads[k][j]));
    }
    return ok ? out : null;
  }

  /**
   * Cells attention looks at: used extent padded to windowPad (at least one
   * pad), at most size; with streams, the most of the slot's streams.
   */
  nKv(slot?: SlotInfo | null): number {
    if (this.#streams) {
      let n = 0;
      for (const [s0, ns] of slot?.runs ?? [[slot?.s0 ?? 0, slot?.ns ?? this.nStream]]) {
        for (let s = s0; s < s0 + ns; s++) n = Math.max(n, this.#streams[s].nKv());
      }
      return n;
    }
    const pad = Math.max(this.nPad, this.windowPad);
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
    fillKqMask(this.#streams ? this.cellsOf : this.cells, this, ub, nKv, out, o);
  }

  /** The cells of sequence `seq`'s stream. */
  readonly cellsOf = (seq: number): KvCells => this.stream(this.seqStream(seq)).cells;

  // ---- K-shift -----------------------------------------------------------

  /** Whether positions changed and keys need re-rotation. */
  get hasShift(): boolean {
    return this.#streams ? this.#streams.some((c) => c.hasShift) : this.cells.hasShift;
  }

  /** Per-cell position deltas (I32 [size], 0 for empty cells): the rope positions of the shift graph. */
  shiftInput(): Int32Array {
    if (this.#streams) {
      const out = new Int32Array(this.size * this.nStream);
      this.#streams.forEach((c, s) => out.set(c.shiftInput(), s * this.size));
      return out;
    }
    const c = this.cells;
    return Int32Array.from(c.pos, (p, i) => (p === -1 ? 0 : c.shift[i]));
  }

  /** Mark the shift as applied (after the shift graph ran). */
  resetShift(): void {
    this.cells.resetShift();
    for (const c of this.#streams ?? []) c.resetShift();
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
  kView(g: Graph, il: number, nKv: number, s0 = 0, ns = 1): Tensor {
    return this.#tensors.kView(g, il, nKv, s0, ns);
  }

  /**
   * Values of the first nKv cells: [nKv, headDimV, nHeadKv] when transposed
   * (kqv = mulMat(v, kq)), else [headDimV, nKv, nHeadKv].
   */
  vView(g: Graph, il: number, nKv: number, s0 = 0, ns = 1): Tensor {
    return this.#tensors.vView(g, il, nKv, s0, ns);
  }

  /** Rotated part of every cached key: [nRot, nHeadKv, size], for an in-place rope by {@link shiftInput}. */
  kShiftView(g: Graph, il: number, nRot: number): Tensor {
    return this.#tensors.kShiftView(g, il, nRot);
  }

  /**
   * The set_rows node storing kCur's token rows into the slot's cells
   * (expanded into g); write {@link storeInputs} before each run.
   */
  storeK(g: Graph, il: number, kCur: Tensor, slot: SlotInfo): Tensor[] {
    return this.#tensors.storeK(g, il, kCur, slot);
  }

  /** The set_rows node storing vCur's token rows (one element per row when vTrans). */
  storeV(g: Graph, il: number, vCur: Tensor, slot: SlotInfo): Tensor[] {
    return this.#tensors.storeV(g, il, vCur, slot);
  }

  /**
   * The row-id inputs of the stores in `g` with their values for `slot`
   * (llama.cpp's k_idxs / v_idxs): set them before every run of `g`.
   */
  storeInputs(g: Graph, slot: SlotInfo): Array<[Tensor, Int32Array]> {
    return this.#tensors.storeInputs(g, slot);
  }

  /**
   * Whether the stores that {@link storeK}/{@link storeV} put into `g` can
   * serve `slot` (as many tokens), so a graph built and planned for one
   * decode step serves the next one of the same shape (llama.cpp's graph
   * reuse): the nodes the scheduler must update (none: the cells are the
   * inputs of {@link storeInputs}), else null (build a new graph).
   */
  moveStores(g: Graph, slot: SlotInfo): Tensor[] | null {
    return this.#tensors.moveStores(g, slot);
  }
}
