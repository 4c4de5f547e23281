/**
 * The KQ attention mask of a micro-batch over the cache cells, with
 * llama.cpp's rules (causality, per-sequence isolation, sliding window,
 * optional ALiBi distances).
 *
 * @module
 */
import type { Ubatch } from "./batch.ts";
import { type KvCells, KvError } from "./cells.ts";
import { f32ToFp16 } from "../ggml/half.ts";
import { isMaskedSwa, SwaType } from "./swa.ts";

/** Options of {@link KvCache.fillMask}. */
export interface MaskOptions {
  /** Causal attention (default true). */
  causal?: boolean;
  /** ALiBi: store -|p0 - p1| instead of 0 for visible cells. */
  alibi?: boolean;
}

/** The window facts of a cache the mask depends on. */
export interface MaskWindow {
  /** Number of cells. */
  readonly size: number;
  /** Sliding window size (0: none). */
  readonly nSwa: number;
  /** Sliding window kind. */
  readonly swaType: SwaType;
}

/**
 * Fill the KQ mask [nKv, nTokens] (row per token): 0 where token t may
 * attend cell j (cell holds t's first sequence at a position <= t's,
 * inside the SWA window), -inf elsewhere. F32 (Float32Array) or F16 bits
 * (Uint16Array).
 */
export function fillKqMask(
  cells: KvCells | ((seq: number) => KvCells),
  window: MaskWindow,
  ub: Ubatch,
  nKv: number,
  out: Float32Array | Uint16Array,
  o: MaskOptions = {},
): void {
  if (out.length !== nKv * ub.nTokens) {
    throw new KvError(`fillMask: need ${nKv * ub.nTokens} values, got ${out.length}`);
  }
  if (nKv > window.size) throw new KvError(`fillMask: nKv ${nKv} > size ${window.size}`);
  const causal = o.causal ?? true;
  const half = out instanceof Uint16Array;
  const drop = half ? 0xfc00 : -Infinity;
  for (let t = 0; t < ub.nTokens; t++) {
    const s = ub.seqId[t][0];
    // With one stream per sequence, each token's row covers its own stream's cells.
    const c = typeof cells === "function" ? cells(s) : cells;
    const p1 = ub.pos[t];
    const row = t * nKv;
    for (let j = 0; j < nKv; j++) {
      const p0 = c.pos[j];
      let v: number = drop;
      if (
        p0 !== -1 && c.seqHas(j, s) && !(causal && p0 > p1) &&
        !(window.swaType !== SwaType.NONE && isMaskedSwa(window.nSwa, window.swaType, p0, p1))
      ) {
        const a = o.alibi ? -Math.abs(p0 - p1) : 0;
        v = half ? f32ToFp16(a) : a;
      }
      out[row + j] = v;
    }
  }
}

/**
 * The KQ mask of one-token steps, kept between steps: the rows of a step
 * differ from the last one's only at cells that changed since (the cell the
 * last token went to, cells removed or shifted), so those are the cells
 * rewritten, not the whole window. Anything else (several tokens, another
 * window width or sequence, a sliding window, changes no longer logged)
 * fills the whole mask as {@link fillKqMask} does; the values are the same
 * either way.
 */
export class KqMask {
  #out: Float32Array | Uint16Array = new Float32Array(0);
  #cells: KvCells | null = null;
  // What the buffer holds: the mask of a one-token step of sequence #seq at
  // position #pos over #nKv cells as they were at #epoch, when the
  // sequence's highest position was #seqMax. #nKv -1: nothing reusable.
  #nKv = -1;
  #seq = -1;
  #pos = -1;
  #seqMax = -1;
  #epoch = -1;
  #written = 0;

  /** Mask values the last {@link fill} wrote (all of them, or the changed cells'). */
  get lastWritten(): number {
    return this.#written;
  }

  /** Forget the kept mask (the next {@link fill} writes every value). */
  reset(): void {
    this.#nKv = -1;
  }

  /**
   * The mask of `ub` over the first nKv cells of `c` (causal, no ALiBi),
   * F16 bits with `half`; the array is reused by the next call. With `c` a
   * function (the cells of each sequence's stream) the whole mask is filled.
   */
  fill(
    c: KvCells | ((seq: number) => KvCells),
    window: MaskWindow,
    ub: Ubatch,
    nKv: number,
    half: boolean,
  ): Float32Array | Uint16Array {
    const n = nKv * ub.nTokens;
    if (this.#out.length !== n || (this.#out instanceof Uint16Array) !== half) {
      this.#out = half ? new Uint16Array(n) : new Float32Array(n);
      this.#nKv = -1;
    }
    const out = this.#out;
    const one = ub.nTokens === 1 && window.swaType === SwaType.NONE && typeof c !== "function";
    const s = ub.seqId[0][0], p = ub.pos[0];
    const changed = one && this.#nKv === nKv && this.#cells === c && this.#seq === s
      ? c.changedSince(this.#epoch)
      : null;
    // A cell of the sequence that did not change is visible to the new row
    // as to the old one unless its position lies between the two rows'
    // positions: none can, when every such position was at most the old
    // row's then and is at most the new row's now.
    if (changed && typeof c !== "function" && this.#seqMax <= this.#pos && c.seqPosMax(s) <= p) {
      const drop = half ? 0xfc00 : -Infinity;
      let w = 0;
      for (let k = 0; k < changed.length; k++) {
        const j = changed[k];
        if (j >= nKv) continue;
        const p0 = c.pos[j];
        out[j] = p0 !== -1 && p0 <= p && c.seqHas(j, s) ? 0 : drop;
        w++;
      }
      this.#written = w;
    } else {
      fillKqMask(c, window, ub, nKv, out);
      this.#written = n;
    }
    if (one && typeof c !== "function") {
      this.#cells = c;
      this.#nKv = nKv;
      this.#seq = s;
      this.#pos = p;
      this.#seqMax = c.seqPosMax(s);
      this.#epoch = c.epoch;
    } else {
      this.#nKv = -1;
    }
    return out;
  }
}
