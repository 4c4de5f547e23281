/**
 * State cells of recurrent models (Mamba): one cell per sequence slot
 * (`size = nSeqMax`), each sequence's current state in its `tail` cell, and
 * `src` naming the cell a state is copied from before the next step
 * (copy-on-write when sequences fork). Modelled on llama.cpp's
 * llama_memory_recurrent.
 *
 * Scope today: the bookkeeping the Mamba graph needs (tails, sources,
 * whole-sequence edits, a simplified slot search). llama.cpp's per-token
 * rollback snapshots (partial seq_rm within n_rs_seq) are not implemented:
 * partial removal is refused, as llama.cpp does without snapshots.
 *
 * @module
 */
import type { Ubatch } from "./batch.ts";
import { checkSeq, KvError } from "./cells.ts";

/** One state cell. */
export interface RecurrentCell {
  /** Position of the last token folded into the state, -1 when empty. */
  pos: number;
  /** Cell whose state this one starts from at the next step (-1: none / fresh). */
  src: number;
  /** Like src, consumed once when the step's inputs are set. */
  src0: number;
  /** For cell i: the cell holding sequence i's state (-1: none). */
  tail: number;
  /** Sequences sharing this state. */
  seqId: Set<number>;
}

/** Per-sequence recurrent state bookkeeping. */
export class RecurrentState {
  /** The cells (size = nSeqMax). */
  readonly cells: RecurrentCell[];
  /** Where the slot search starts. */
  head = 0;
  /** Cells in use. */
  used = 0;

  /** `nSeqMax` empty cells. */
  constructor(readonly nSeqMax: number) {
    if (!Number.isInteger(nSeqMax) || nSeqMax <= 0) throw new KvError(`bad nSeqMax ${nSeqMax}`);
    this.cells = Array.from(
      { length: nSeqMax },
      () => ({ pos: -1, src: -1, src0: -1, tail: -1, seqId: new Set() }),
    );
  }

  /** Empty every cell. */
  clear(): void {
    for (const c of this.cells) {
      Object.assign(c, { pos: -1, src: -1, src0: -1, tail: -1, seqId: new Set() });
    }
    this.head = 0;
    this.used = 0;
  }

  #free(i: number): void {
    const c = this.cells[i];
    if (c.seqId.size === 0 && c.pos !== -1) {
      c.pos = -1;
      c.src = -1;
      this.used--;
    }
  }

  /**
   * Remove [p0, p1) of `seq` (-1 bounds open). A recurrent state cannot
   * forget its last tokens, so a range cutting into a state returns false.
   */
  seqRm(seq: number, p0 = -1, p1 = -1): boolean {
    checkSeq(seq, this.nSeqMax);
    if (p0 < 0) p0 = 0;
    if (p1 < 0) p1 = Number.MAX_SAFE_INTEGER;
    const tail = this.cells[seq].tail;
    if (tail >= 0) {
      const c = this.cells[tail];
      if (p0 > 0 && p0 <= c.pos && p1 > c.pos) return false;
      if (p0 <= c.pos && c.pos < p1) {
        c.seqId.delete(seq);
        this.cells[seq].tail = -1;
        this.#free(tail);
      }
    }
    return true;
  }

  /** `dst` continues from `src`'s state (shared until either diverges). */
  seqCp(src: number, dst: number): void {
    checkSeq(src, this.nSeqMax), checkSeq(dst, this.nSeqMax);
    if (src === dst) return;
    this.seqRm(dst);
    const tail = this.cells[src].tail;
    if (tail < 0) return;
    this.cells[tail].seqId.add(dst);
    this.cells[dst].tail = tail;
  }

  /** Drop every sequence but `seq`. */
  seqKeep(seq: number): void {
    checkSeq(seq, this.nSeqMax);
    for (let s = 0; s < this.nSeqMax; s++) if (s !== seq) this.seqRm(s);
  }

  /** Position of `seq`'s state, -1 when absent (min and max coincide). */
  seqPosMax(seq: number): number {
    checkSeq(seq, this.nSeqMax);
    const t = this.cells[seq].tail;
    return t < 0 ? -1 : this.cells[t].pos;
  }

  /** Same as {@link seqPosMax}: a state covers one position. */
  seqPosMin(seq: number): number {
    return this.seqPosMax(seq);
  }

  /**
   * Give each sequence of `ub` (split_equal: one sequence per set) a cell:
   * its own tail if it holds it alone, else a free cell whose `src` is the
   * shared tail (copy-on-write). Returns the cell per sequence set, or null.
   * Simplified relative to llama.cpp (no contiguity reordering).
   */
  findSlot(ub: Ubatch): number[] | null {
    const out: number[] = [];
    for (let s = 0; s < ub.nSeqs; s++) {
      const t0 = s * ub.nSeqTokens;
      const seqs = ub.seqId[t0];
      if (seqs.length !== 1) {
        throw new KvError("recurrent: a token in several sequences needs split_equal sets");
      }
      const seq = seqs[0];
      checkSeq(seq, this.nSeqMax);
      const tail = this.cells[seq].tail;
      let cell = tail;
      if (tail < 0 || this.cells[tail].seqId.size > 1) {
        cell = this.cells.findIndex((c, i) => c.pos === -1 && !out.includes(i));
        if (cell < 0) return null;
        const c = this.cells[cell];
        c.src = tail >= 0 ? tail : cell;
        if (tail >= 0) this.cells[tail].seqId.delete(seq);
        c.seqId = new Set([seq]);
        this.cells[seq].tail = cell;
        this.used++;
      } else this.cells[cell].src = cell;
      this.cells[cell].src0 = this.cells[cell].src;
      this.cells[cell].pos = ub.pos[t0 + ub.nSeqTokens - 1];
      out.push(cell);
    }
    this.head = out.length ? out[0] : this.head;
    return out;
  }
}
