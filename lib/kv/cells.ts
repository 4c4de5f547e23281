/**
 * Cell metadata of the KV cache (llama.cpp's llama_kv_cells): per cell a
 * position (-1 = empty), the set of sequences that see it, and the
 * accumulated position shift not yet applied to the stored keys.
 *
 * A decode step asks for each sequence's last position and the extent of
 * used cells several times; rather than scanning every cell each time (a
 * 32k-cell context would pay that per token), the bounds are kept up to
 * date as cells change (as llama.cpp's seq_pos maps are) and recounted
 * only after the bound itself was removed. Cells that change are also
 * recorded for {@link KvCells.changedSince} (the incremental mask).
 *
 * @module
 */

/** Most sequences a cell can belong to (LLAMA_MAX_SEQ). */
export const MAX_SEQ = 256;
const WORDS = MAX_SEQ / 32;
// Changed cells remembered for changedSince (a decode step changes a few).
const LOG_CAP = 1024;

/** Thrown for an invalid sequence id or cell index. */
export class KvError extends Error {
  /** Creates the error. */
  constructor(message: string) {
    super(message);
    this.name = "KvError";
  }
}

/** Check a sequence id. */
export function checkSeq(s: number, nSeqMax = MAX_SEQ): void {
  if (!Number.isInteger(s) || s < 0 || s >= nSeqMax) {
    throw new KvError(`sequence id ${s} outside [0, ${nSeqMax})`);
  }
}

/** Cells of one KV stream. */
export class KvCells {
  /** Number of cells. */
  readonly size: number;
  /** Position of each cell, -1 when empty. */
  readonly pos: Int32Array;
  /** Shift accumulated since the last {@link resetShift}. */
  readonly shift: Int32Array;
  #seq: Uint32Array;
  #used = 0;
  #hasShift = false;
  // Per sequence: smallest and largest position (-1: none), valid while
  // #boundsOk[s]; a removal of the bound itself clears the flag.
  #pmin = new Int32Array(MAX_SEQ).fill(-1);
  #pmax = new Int32Array(MAX_SEQ).fill(-1);
  #boundsOk = new Uint8Array(MAX_SEQ).fill(1);
  // Last used cell + 1, valid while #maxOk.
  #maxP1 = 0;
  #maxOk = true;
  // Change log: cells changed at each epoch (see changedSince).
  #epoch = 0;
  #log = new Int32Array(LOG_CAP);
  #logLen = 0;
  // Changes before this epoch are no longer in the log.
  #logFrom = 0;

  /** `size` empty cells. */
  constructor(size: number) {
    if (!Number.isInteger(size) || size <= 0) throw new KvError(`bad cell count ${size}`);
    this.size = size;
    this.pos = new Int32Array(size).fill(-1);
    this.shift = new Int32Array(size);
    this.#seq = new Uint32Array(size * WORDS);
  }

  /** Empty every cell. */
  reset(): void {
    this.pos.fill(-1);
    this.shift.fill(0);
    this.#seq.fill(0);
    this.#used = 0;
    this.#hasShift = false;
    this.#pmin.fill(-1);
    this.#pmax.fill(-1);
    this.#boundsOk.fill(1);
    this.#maxP1 = 0;
    this.#maxOk = true;
    this.#changedAll();
  }

  /**
   * A mark of the cells' state now, for {@link changedSince}. Every change
   * to a cell (position, sequences, emptied or filled) moves it on.
   */
  get epoch(): number {
    return this.#epoch;
  }

  /**
   * The cells changed since `epoch` (a value of {@link epoch}), possibly
   * with repeats; null when that is not known any more (too many changes
   * since, or the whole cache was reset): then any cell may have changed.
   */
  changedSince(epoch: number): Int32Array | null {
    if (epoch < this.#logFrom || epoch > this.#epoch) return null;
    // Entries are appended one per change, so epoch e's change is at e - logFrom.
    return this.#log.subarray(epoch - this.#logFrom, this.#logLen);
  }

  #changed(i: number): void {
    if (this.#logLen === LOG_CAP) {
      // Full: forget the log (changedSince answers null for older epochs).
      this.#logLen = 0;
      this.#logFrom = this.#epoch;
    }
    this.#log[this.#logLen++] = i;
    this.#epoch++;
  }

  #changedAll(): void {
    this.#epoch++;
    this.#logLen = 0;
    this.#logFrom = this.#epoch;
  }

  // (s, p) enters the cells: widen s's bounds.
  #addBound(s: number, p: number): void {
    if (!this.#boundsOk[s]) return;
    if (this.#pmax[s] < 0) {
      this.#pmin[s] = this.#pmax[s] = p;
    } else {
      if (p < this.#pmin[s]) this.#pmin[s] = p;
      if (p > this.#pmax[s]) this.#pmax[s] = p;
    }
  }

  // (s, p) leaves the cells: a bound removed must be recounted.
  #dropBound(s: number, p: number): void {
    if (this.#boundsOk[s] && (p === this.#pmin[s] || p === this.#pmax[s])) {
      this.#boundsOk[s] = 0;
    }
  }

  // Every sequence of used cell i gains or loses its position.
  #eachSeq(i: number, add: boolean): void {
    const p = this.pos[i];
    for (let w = 0; w < WORDS; w++) {
      let x = this.#seq[i * WORDS + w];
      while (x) {
        const b = 31 - Math.clz32(x & -x);
        x &= x - 1;
        if (add) this.#addBound(w * 32 + b, p);
        else this.#dropBound(w * 32 + b, p);
      }
    }
  }

  // Cell i became used. #maxP1 stays an upper bound of the used cells even
  // while it is not exact, so a recount can start from it.
  #filled(i: number): void {
    if (i + 1 > this.#maxP1) this.#maxP1 = i + 1;
  }

  // Cell i became empty.
  #emptied(i: number): void {
    if (this.#maxOk && i + 1 === this.#maxP1) this.#maxOk = false;
  }

  /** Forget pending shifts (after the K-shift graph ran). */
  resetShift(): void {
    this.#hasShift = false;
    this.shift.fill(0);
  }

  /** Whether some position changed since the last {@link resetShift}. */
  get hasShift(): boolean {
    return this.#hasShift;
  }

  /** Number of non-empty cells. */
  get used(): number {
    return this.#used;
  }

  /** Index of the first used cell, 0 when none. */
  usedMin(): number {
    for (let i = 0; i < this.size; i++) if (this.pos[i] !== -1) return i;
    return 0;
  }

  /** Index of the last used cell + 1, 0 when none. */
  usedMaxP1(): number {
    if (!this.#maxOk) {
      let i = this.#maxP1 - 1; // nothing was used above the stale bound
      while (i >= 0 && this.pos[i] === -1) i--;
      this.#maxP1 = i + 1;
      this.#maxOk = true;
    }
    return this.#maxP1;
  }

  /** Whether cell i is empty. */
  isEmpty(i: number): boolean {
    return this.pos[i] === -1;
  }

  /** Empty a used cell. */
  rm(i: number): void {
    this.#clear(i);
  }

  #clear(i: number): void {
    if (this.pos[i] !== -1) {
      this.#used--;
      this.#eachSeq(i, false);
      this.#emptied(i);
    }
    this.pos[i] = -1;
    this.shift[i] = 0;
    this.#seq.fill(0, i * WORDS, i * WORDS + WORDS);
    this.#changed(i);
  }

  /** Drop seq `s` from cell i; true when the cell became empty. */
  seqRm(i: number, s: number): boolean {
    if (this.seqHas(i, s) && this.pos[i] !== -1) this.#dropBound(s, this.pos[i]);
    this.#seq[i * WORDS + (s >> 5)] &= ~(1 << (s & 31));
    this.#changed(i);
    if (this.seqCount(i) === 0) {
      this.#clear(i);
      return true;
    }
    return false;
  }

  /** Keep only seq `s` in cell i; true when a used cell became empty. */
  seqKeep(i: number, s: number): boolean {
    if (this.seqHas(i, s)) {
      if (this.seqCount(i) === 1) return false;
      if (this.pos[i] !== -1) this.#eachSeq(i, false);
      this.#seq.fill(0, i * WORDS, i * WORDS + WORDS);
      this.seqAdd(i, s);
      return false;
    }
    if (this.seqCount(i) > 0) {
      this.#clear(i);
      return true;
    }
    return false;
  }

  /** Number of sequences in cell i. */
  seqCount(i: number): number {
    let n = 0;
    for (let w = 0; w < WORDS; w++) {
      let x = this.#seq[i * WORDS + w];
      while (x) {
        x &= x - 1;
        n++;
      }
    }
    return n;
  }

  /** Whether cell i belongs to seq `s`. */
  seqHas(i: number, s: number): boolean {
    return (this.#seq[i * WORDS + (s >> 5)] & (1 << (s & 31))) !== 0;
  }

  /** Add seq `s` to cell i. */
  seqAdd(i: number, s: number): void {
    this.#seq[i * WORDS + (s >> 5)] |= 1 << (s & 31);
    if (this.pos[i] !== -1) this.#addBound(s, this.pos[i]);
    this.#changed(i);
  }

  /** The sequences of cell i, ascending. */
  seqs(i: number): number[] {
    const out: number[] = [];
    for (let s = 0; s < MAX_SEQ; s++) if (this.seqHas(i, s)) out.push(s);
    return out;
  }

  /** The lowest sequence id of cell i (-1 when none). */
  seqGet(i: number): number {
    for (let s = 0; s < MAX_SEQ; s++) if (this.seqHas(i, s)) return s;
    return -1;
  }

  /** Smallest position of seq `s`, -1 when absent. */
  seqPosMin(s: number): number {
    if (!this.#boundsOk[s]) this.#recount(s);
    return this.#pmin[s];
  }

  /** Largest position of seq `s`, -1 when absent. */
  seqPosMax(s: number): number {
    if (!this.#boundsOk[s]) this.#recount(s);
    return this.#pmax[s];
  }

  #recount(s: number): void {
    let lo = -1, hi = -1;
    const word = s >> 5, bit = 1 << (s & 31);
    for (let i = 0; i < this.size; i++) {
      const p = this.pos[i];
      if (p === -1 || (this.#seq[i * WORDS + word] & bit) === 0) continue;
      if (lo < 0 || p < lo) lo = p;
      if (p > hi) hi = p;
    }
    this.#pmin[s] = lo;
    this.#pmax[s] = hi;
    this.#boundsOk[s] = 1;
  }

  /** Whether cell i is used with a position in [p0, p1). */
  posIn(i: number, p0: number, p1: number): boolean {
    return this.pos[i] >= p0 && this.pos[i] < p1;
  }

  /** Give an empty cell a position (sequences are added after). */
  posSet(i: number, p: number): void {
    if (this.pos[i] !== -1) throw new KvError(`cell ${i} is not empty`);
    if (!Number.isInteger(p) || p < 0) throw new KvError(`bad position ${p}`);
    this.pos[i] = p;
    this.#used++;
    this.#eachSeq(i, true);
    this.#filled(i);
    this.#changed(i);
  }

  /** pos += d; true when the position went negative and the cell was freed. */
  posAdd(i: number, d: number): boolean {
    this.#eachSeq(i, false);
    this.pos[i] += d;
    this.shift[i] += d;
    this.#hasShift = true;
    if (this.pos[i] < 0) {
      this.pos[i] = 0; // so #clear counts it as used (its bounds are already dropped)
      this.#seq.fill(0, i * WORDS, i * WORDS + WORDS);
      this.#clear(i);
      return true;
    }
    this.#eachSeq(i, true);
    this.#changed(i);
    return false;
  }

  /** pos = floor(pos / d), recording the change as a shift. */
  posDiv(i: number, d: number): void {
    this.#eachSeq(i, false);
    const old = this.pos[i];
    this.pos[i] = Math.trunc(old / d);
    this.shift[i] += old - this.pos[i];
    this.#hasShift = true;
    this.#eachSeq(i, true);
    this.#changed(i);
  }

  /** Copy of the state of cells `idxs` (to undo a trial placement). */
  save(idxs: readonly number[]): CellsSnapshot {
    return {
      idxs: [...idxs],
      pos: idxs.map((i) => this.pos[i]),
      shift: idxs.map((i) => this.shift[i]),
      seq: idxs.map((i) => this.#seq.slice(i * WORDS, i * WORDS + WORDS)),
    };
  }

  /** Put back cells saved with {@link save}. */
  restore(snap: CellsSnapshot): void {
    snap.idxs.forEach((i, j) => {
      if (this.pos[i] !== -1) {
        this.#used--;
        this.#eachSeq(i, false);
        this.#emptied(i);
      }
      this.pos[i] = snap.pos[j];
      this.shift[i] = snap.shift[j];
      this.#seq.set(snap.seq[j], i * WORDS);
      if (snap.pos[j] !== -1) {
        this.#used++;
        this.#eachSeq(i, true);
        this.#filled(i);
      }
      this.#changed(i);
    });
  }

  /** Move cell `from` (used) into `to` (empty), for defragmentation. */
  move(from: number, to: number): void {
    if (this.pos[to] !== -1 || this.pos[from] === -1) {
      throw new KvError(`cannot move cell ${from} to ${to}`);
    }
    this.pos[to] = this.pos[from];
    this.shift[to] = this.shift[from];
    this.#seq.copyWithin(to * WORDS, from * WORDS, from * WORDS + WORDS);
    this.#used++;
    this.#eachSeq(to, true);
    this.#filled(to);
    this.#changed(to);
    this.#clear(from);
  }
}

/** Saved state of some cells. */
export interface CellsSnapshot {
  /** Cells saved. */
  readonly idxs: number[];
  /** Their positions. */
  readonly pos: number[];
  /** Their pending shifts. */
  readonly shift: number[];
  /** Their sequence bit sets. */
  readonly seq: Uint32Array[];
}
