/**
 * Cell metadata of the KV cache (llama.cpp's llama_kv_cells): per cell a
 * position (-1 = empty), the set of sequences that see it, and the
 * accumulated position shift not yet applied to the stored keys.
 *
 * @module
 */

/** Most sequences a cell can belong to (LLAMA_MAX_SEQ). */
export const MAX_SEQ = 256;
const WORDS = MAX_SEQ / 32;

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
    for (let i = this.size - 1; i >= 0; i--) if (this.pos[i] !== -1) return i + 1;
    return 0;
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
    if (this.pos[i] !== -1) this.#used--;
    this.pos[i] = -1;
    this.shift[i] = 0;
    this.#seq.fill(0, i * WORDS, i * WORDS + WORDS);
  }

  /** Drop seq `s` from cell i; true when the cell became empty. */
  seqRm(i: number, s: number): boolean {
    this.#seq[i * WORDS + (s >> 5)] &= ~(1 << (s & 31));
    if (this.seqCount(i) === 0) {
      this.#clear(i);
      return true;
    }
    return false;
  }

  /** Keep only seq `s` in cell i; true when a used cell became empty. */
  seqKeep(i: number, s: number): boolean {
    if (this.seqHas(i, s)) {
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
    let m = -1;
    for (let i = 0; i < this.size; i++) {
      if (this.pos[i] !== -1 && this.seqHas(i, s) && (m < 0 || this.pos[i] < m)) m = this.pos[i];
    }
    return m;
  }

  /** Largest position of seq `s`, -1 when absent. */
  seqPosMax(s: number): number {
    let m = -1;
    for (let i = 0; i < this.size; i++) if (this.pos[i] > m && this.seqHas(i, s)) m = this.pos[i];
    return m;
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
  }

  /** pos += d; true when the position went negative and the cell was freed. */
  posAdd(i: number, d: number): boolean {
    this.pos[i] += d;
    this.shift[i] += d;
    this.#hasShift = true;
    if (this.pos[i] < 0) {
      this.pos[i] = 0; // so #clear counts it as used
      this.#clear(i);
      return true;
    }
    return false;
  }

  /** pos = floor(pos / d), recording the change as a shift. */
  posDiv(i: number, d: number): void {
    const old = this.pos[i];
    this.pos[i] = Math.trunc(old / d);
    this.shift[i] += old - this.pos[i];
    this.#hasShift = true;
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
      if (this.pos[i] !== -1) this.#used--;
      if (snap.pos[j] !== -1) this.#used++;
      this.pos[i] = snap.pos[j];
      this.shift[i] = snap.shift[j];
      this.#seq.set(snap.seq[j], i * WORDS);
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
