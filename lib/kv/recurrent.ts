/**
 * The state memory of recurrent models (Mamba), llama.cpp's
 * llama_memory_recurrent without rollback snapshots (n_rs_seq = 0, its
 * default): `size = nSeqMax` cells, each holding one whole state per layer
 * (a conv state of nEmbdR floats and an ssm state of nEmbdS floats). Cell
 * `i`'s `tail` names the cell holding sequence i's state; a cell's `src`
 * names the cell its state is copied from before the next step, which makes
 * `seqCp` copy-on-write: forked sequences share one cell until one of them
 * advances. `findSlot` gathers a micro-batch's states into contiguous cells
 * [head, head + n) (swapping cells as llama.cpp does), so the graph reads
 * and writes them as one block; `sCopy` tells it where each comes from.
 *
 * A state cannot forget its last tokens: removing part of a sequence's
 * range returns false, as llama.cpp does.
 *
 * @module
 */
import type { BufferAllocator, BufferRef } from "../ggml/memory.ts";
import { bufferClear } from "../ggml/memory.ts";
import type { Graph } from "../graph/graph.ts";
import type { Tensor } from "../graph/tensor.ts";
import { GGMLType } from "../ggml/types.ts";
import type { Ubatch } from "./batch.ts";
import { KvError } from "./cells.ts";
import { LayerStorage } from "./layers.ts";

/** One state cell (llama.cpp's mem_cell). */
export interface RecurrentCell {
  /** Position of the last token folded into the state, -1 when empty. */
  pos: number;
  /** Cell this one's state is copied from at the next step (-1: none, a fresh state). */
  src: number;
  /** The source staged for the graph inputs by the last findSlot. */
  src0: number;
  /** For cell i: the cell holding sequence i's state (-1: none). */
  tail: number;
  /** Sequences sharing this state. */
  seqId: Set<number>;
}

/** Options of {@link RecurrentMemory}. */
export interface RecurrentMemoryOptions {
  /** Cells = highest sequence id + 1. */
  nSeqMax: number;
  /** Layers with states. */
  nLayer: number;
  /** Floats of one conv state (llama.cpp's n_embd_r). */
  nEmbdR: number;
  /** Floats of one ssm state (n_embd_s). */
  nEmbdS: number;
  /** Where each layer's states live: one backend or one per layer; omit for bookkeeping only. */
  backend?: BufferAllocator | ((layer: number) => BufferAllocator);
}

/** The memory of a recurrent model; see the module doc. */
export class RecurrentMemory implements Disposable {
  /** The cells (size = nSeqMax). */
  cells: RecurrentCell[];
  /** First cell of the last slot (where the search starts). */
  head = 0;
  /** Cells of the last slot. */
  n = 0;
  /** Non-empty cells. */
  used = 0;
  /** A cell of the last slot no cell copies from, zeroed to be the fresh state (-1: none). */
  rsZ = -1;
  /** Number of cells. */
  readonly size: number;
  /** Highest sequence id + 1. */
  readonly nSeqMax: number;
  /** Layers with states. */
  readonly nLayer: number;
  /** Floats per conv state. */
  readonly nEmbdR: number;
  /** Floats per ssm state. */
  readonly nEmbdS: number;
  #storage: LayerStorage | null = null;
  #ext = new WeakMap<Graph, Map<string, Tensor>>();

  /** Empty cells and zero-filled F32 states. */
  constructor(o: RecurrentMemoryOptions) {
    for (const k of ["nSeqMax", "nLayer", "nEmbdR", "nEmbdS"] as const) {
      if (!Number.isInteger(o[k]) || o[k] <= 0) {
        throw new KvError(`RecurrentMemory: bad ${k} ${o[k]}`);
      }
    }
    this.size = this.nSeqMax = o.nSeqMax;
    this.nLayer = o.nLayer;
    this.nEmbdR = o.nEmbdR;
    this.nEmbdS = o.nEmbdS;
    this.cells = Array.from({ length: this.size }, emptyCell);
    if (!o.backend) return;
    // Backends hand out zero-filled memory (llama.cpp clears its buffer).
    this.#storage = new LayerStorage(
      this.nLayer,
      o.backend,
      4 * this.nEmbdR * this.size,
      4 * this.nEmbdS * this.size,
    );
  }

  /**
   * Runs `f` (building the worst-case graph) as if the last slot spanned
   * every cell with one of them zeroed, then puts the empty slot back.
   */
  withWorstSlot<T>(f: () => T): T {
    const saved = { head: this.head, n: this.n, rsZ: this.rsZ };
    Object.assign(this, { head: 0, n: this.size, rsZ: 0 });
    try {
      return f();
    } finally {
      Object.assign(this, saved);
    }
  }

  /** Bytes of state storage in all layers. */
  get totalBytes(): number {
    return this.#storage?.totalBytes ?? 0;
  }

  /** Where layer il's conv (r) and ssm (s) states start. */
  storage(il: number): { r: BufferRef; s: BufferRef } {
    const l = this.#storage?.layer(il);
    if (!l) throw new KvError(`RecurrentMemory: no layer ${il}`);
    return { r: l.a, s: l.b };
  }

  /** Free the storage. */
  [Symbol.dispose](): void {
    this.#storage?.[Symbol.dispose]();
  }

  #external(g: Graph, il: number, which: "r" | "s"): Tensor {
    let m = this.#ext.get(g);
    if (!m) this.#ext.set(g, m = new Map());
    const key = `${which}${il}`;
    let t = m.get(key);
    if (!t) {
      const width = which === "r" ? this.nEmbdR : this.nEmbdS;
      t = g.external(
        `cache_${which}_l${il}`,
        GGMLType.F32,
        [width, this.size],
        this.storage(il)[which],
      );
      m.set(key, t);
    }
    return t;
  }

  /** Layer il's conv states as a graph external: F32 [nEmbdR, size]. */
  rTensor(g: Graph, il: number): Tensor {
    return this.#external(g, il, "r");
  }

  /** Layer il's ssm states: F32 [nEmbdS, size]. */
  sTensor(g: Graph, il: number): Tensor {
    return this.#external(g, il, "s");
  }

  // ---- sequences -------------------------------------------------------

  /** Empty all cells; with `data`, zero the states too. */
  clear(data = false): void {
    for (const c of this.cells) Object.assign(c, emptyCell());
    this.head = 0;
    this.used = 0;
    if (data) { for (const b of this.#storage?.buffers ?? []) bufferClear(b, 0); }
  }

  /**
   * Remove [p0, p1) of `seq` (-1: every sequence; negative bounds open).
   * False when the range cuts into a state (it cannot be rewound), or, for
   * seq -1, when it is neither everything nor nothing.
   */
  seqRm(seq: number, p0 = -1, p1 = -1): boolean {
    [p0, p1] = range(p0, p1);
    let newHead = this.size;
    if (seq >= this.size) return false;
    if (seq >= 0) {
      const tail = this.cells[seq].tail;
      if (tail >= 0) {
        const c = this.cells[tail];
        if (0 < p0 && p0 <= c.pos && p1 > c.pos) return false;
        if (p0 <= c.pos && c.pos < p1) this.cells[seq].tail = -1;
      }
    } else if (p0 !== p1 && (p0 !== 0 || p1 !== Number.MAX_SAFE_INTEGER)) return false;
    for (let i = 0; i < this.size; i++) {
      const c = this.cells[i];
      if (!(c.pos >= p0 && c.pos < p1)) continue;
      if (seq < 0) c.seqId.clear();
      else if (c.seqId.has(seq)) c.seqId.delete(seq);
      else continue;
      if (c.seqId.size === 0) {
        if (c.pos >= 0) this.used--;
        c.pos = -1;
        c.src = -1;
        if (newHead === this.size) newHead = i;
      }
    }
    if (newHead !== this.size && newHead < this.head) this.head = newHead;
    return true;
  }

  /** `dst` continues from `src`'s state: both share src's cell until one advances. */
  seqCp(src: number, dst: number, _p0 = -1, _p1 = -1): void {
    if (src === dst || src < 0 || dst < 0 || src >= this.size || dst >= this.size) return;
    const ts = this.cells[src], td = this.cells[dst];
    if (td.tail >= 0) {
      const c = this.cells[td.tail];
      c.seqId.delete(dst);
      td.tail = -1;
      if (c.seqId.size === 0) {
        c.pos = -1;
        c.src = -1;
        this.used--;
      }
    }
    if (ts.tail >= 0) {
      this.cells[ts.tail].seqId.add(dst);
      td.tail = ts.tail;
    }
  }

  /** Drop every sequence but `seq`. */
  seqKeep(seq: number): void {
    let newHead = this.size;
    for (let i = 0; i < this.size; i++) {
      const c = this.cells[i];
      if (i !== seq) c.tail = -1;
      if (!c.seqId.has(seq)) {
        if (c.pos >= 0) this.used--;
        c.pos = -1;
        c.src = -1;
        c.seqId.clear();
        if (newHead === this.size) newHead = i;
      } else c.seqId = new Set([seq]);
    }
    if (newHead !== this.size && newHead < this.head) this.head = newHead;
  }

  #tailIn(seq: number, p0: number, p1: number): RecurrentCell | undefined {
    if (!(0 <= seq && seq < this.size)) return undefined;
    const t = this.cells[seq].tail;
    if (t < 0) return undefined;
    const c = this.cells[t];
    return c.seqId.has(seq) && p0 <= c.pos && c.pos < p1 ? c : undefined;
  }

  /** Moves `seq`'s position by `shift` when it lies in [p0, p1) (only the tail cell's pos changes). */
  seqAdd(seq: number, p0: number, p1: number, shift: number): void {
    if (shift === 0) return;
    [p0, p1] = range(p0, p1);
    if (p0 === p1) return;
    const c = this.#tailIn(seq, p0, p1);
    if (c) c.pos += shift;
  }

  /** Divides `seq`'s position by `d` when it lies in [p0, p1). */
  seqDiv(seq: number, p0: number, p1: number, d: number): void {
    if (d === 1) return;
    [p0, p1] = range(p0, p1);
    if (p0 === p1) return;
    const c = this.#tailIn(seq, p0, p1);
    if (c) c.pos = Math.trunc(c.pos / d);
  }

  /** Smallest position of a cell holding `seq`, -1 when none. */
  seqPosMin(seq: number): number {
    let r = Number.MAX_SAFE_INTEGER;
    for (const c of this.cells) if (c.seqId.has(seq)) r = Math.min(r, c.pos);
    return r === Number.MAX_SAFE_INTEGER ? -1 : r;
  }

  /** Largest position of a cell holding `seq`, -1 when none. */
  seqPosMax(seq: number): number {
    let r = -1;
    for (const c of this.cells) if (c.seqId.has(seq)) r = Math.max(r, c.pos);
    return r;
  }

  // ---- slots -------------------------------------------------------------

  /** A copy of the bookkeeping, for {@link restore}. */
  snapshot(): RecurrentSnapshot {
    return {
      cells: this.cells.map((c) => ({ ...c, seqId: new Set(c.seqId) })),
      head: this.head,
      n: this.n,
      used: this.used,
      rsZ: this.rsZ,
    };
  }

  /** Puts back a {@link snapshot}. */
  restore(s: RecurrentSnapshot): void {
    this.cells = s.cells.map((c) => ({ ...c, seqId: new Set(c.seqId) }));
    this.head = s.head;
    this.n = s.n;
    this.used = s.used;
    this.rsZ = s.rsZ;
  }

  /** Whether every ubatch finds a slot, placed one after another (llama_memory_recurrent::prepare); changes nothing. */
  prepare(ubatches: readonly Ubatch[]): boolean {
    const saved = this.snapshot();
    try {
      return ubatches.every((ub) => this.findSlot(ub));
    } finally {
      this.restore(saved);
    }
  }

  /**
   * Places `ub` (an equal split: nSeqs sets of nSeqTokens tokens): each
   * set's sequences get one cell, gathered at [head, head + n), each cell's
   * `src0` staged for {@link sCopy}. False when a sequence id is out of range.
   */
  findSlot(ub: Ubatch): boolean {
    const cells = this.cells;
    const size = this.size;
    const { nSeqTokens, nSeqs } = ub;
    if (!ub.equalSeqs) throw new KvError("recurrent memory: a ubatch must come from split_equal");
    if (this.head > this.used + 2 * nSeqs) this.head = 0;
    let min = size - 1, max = 0;
    for (let s = 0; s < nSeqs; s++) {
      const ids = ub.seqId[s * nSeqTokens];
      for (let j = 0; j < ids.length; j++) {
        const id = ids[j];
        if (id < 0 || id >= size) return false;
        if (j > 0) {
          // Sequences becoming shared lose their own state (llama.cpp does the same).
          const seq = cells[id];
          if (seq.tail >= 0) {
            const c = cells[seq.tail];
            c.seqId.delete(id);
            seq.tail = -1;
            if (c.seqId.size === 0) {
              c.pos = -1;
              c.src = -1;
              this.used--;
            }
          }
        }
      }
    }
    let next = this.head;
    for (let i = 0; i < size; i++) {
      if (next >= size) next -= size;
      if (cells[next].seqId.size === 0) break;
      next++;
    }
    for (let s = 0; s < nSeqs; s++) {
      const id = ub.seqId[s * nSeqTokens][0];
      const meta = cells[id];
      const owns = meta.tail >= 0 && cells[meta.tail].seqId.size === 1;
      if (!owns) {
        const empty = cells[next];
        if (empty.seqId.size !== 0) throw new KvError("recurrent memory: no empty cell");
        if (meta.tail >= 0) {
          // Copy-on-write: the new cell starts from the shared one's state.
          const orig = cells[meta.tail];
          empty.pos = orig.pos;
          empty.src = orig.src;
          orig.seqId.delete(id);
          empty.seqId.add(id);
        }
        meta.tail = next;
        if (s + 1 < nSeqs) {
          for (let j = 0; j < size; j++) {
            next++;
            if (next >= size) next -= size;
            if (cells[next].seqId.size === 0) break;
          }
        }
      }
      min = Math.min(min, meta.tail);
      max = Math.max(max, meta.tail);
    }
    // Gather the sets' cells at min.. in set order.
    for (let s = 0; s < nSeqs; s++) {
      const dstId = s + min;
      const srcId = cells[ub.seqId[s * nSeqTokens][0]].tail;
      if (dstId === srcId) continue;
      const d = cells[dstId], c = cells[srcId];
      [d.pos, c.pos] = [c.pos, d.pos];
      [d.src, c.src] = [c.src, d.src];
      [d.seqId, c.seqId] = [c.seqId, d.seqId];
      for (const x of cells) {
        if (x.tail === srcId) x.tail = dstId;
        else if (x.tail === dstId) x.tail = srcId;
      }
    }
    for (let s = 0; s < nSeqs; s++) {
      const i = s * nSeqTokens;
      const c = cells[s + min];
      c.pos = ub.pos[i + nSeqTokens - 1];
      c.seqId = new Set();
      for (const id of ub.seqId[i]) {
        c.seqId.add(id);
        cells[id].tail = s + min;
      }
    }
    // The first cell of the slot nothing copies from becomes the zeroed state.
    const refs = new Int32Array(size);
    for (const c of cells) if (c.src >= 0) refs[c.src]++;
    this.rsZ = -1;
    for (let i = min; i <= max; i++) {
      if (refs[i] === 0) {
        this.rsZ = i;
        break;
      }
    }
    for (let i = min; i <= max; i++) {
      const c = cells[i];
      if (c.src < 0) {
        if (this.rsZ < 0) throw new KvError("recurrent memory: no cell to zero");
        c.src0 = this.rsZ;
      } else c.src0 = c.src;
      c.src = i; // moved or cleared once
    }
    this.head = min;
    this.n = max - min + 1;
    this.used = cells.filter((c) => c.seqId.size > 0).length;
    return this.n >= nSeqs;
  }

  /** Source cell of each slot cell [head, head + n) (llm_graph_input_rs's s_copy). */
  sCopy(): Int32Array {
    return Int32Array.from({ length: this.n }, (_, i) => this.cells[this.head + i].src0);
  }
}

/** Bookkeeping saved by {@link RecurrentMemory.snapshot}. */
export interface RecurrentSnapshot {
  /** Cell copies. */
  readonly cells: readonly RecurrentCell[];
  /** Search head. */
  readonly head: number;
  /** Slot size. */
  readonly n: number;
  /** Used cells. */
  readonly used: number;
  /** Zeroed cell. */
  readonly rsZ: number;
}

function emptyCell(): RecurrentCell {
  return { pos: -1, src: -1, src0: -1, tail: -1, seqId: new Set() };
}

function range(p0: number, p1: number): [number, number] {
  return [p0 < 0 ? 0 : p0, p1 < 0 ? Number.MAX_SAFE_INTEGER : p1];
}
