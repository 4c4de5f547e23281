/**
 * The candidate array samplers work on: llama.cpp's `llama_token_data_array`
 * kept as a struct of arrays (ids, logits, probabilities) with its `sorted`
 * and `selected` fields. Sorting is lazy and partial: only as many of the
 * best candidates as a sampler needs are ordered, found through a logit
 * histogram first (llama.cpp's bucket pre-pass) so a 150k vocabulary costs a
 * linear scan plus a sort of a few hundred entries.
 *
 * @module
 */

/** Candidate tokens with logits and probabilities (llama_token_data_array). */
export class TokenCandidates {
  /** Token ids. */
  ids: Int32Array;
  /** Logits (float32, as llama.cpp keeps them). */
  logits: Float32Array;
  /** Probabilities, where a sampler has computed them. */
  probs: Float32Array;
  /** Number of live candidates (a prefix of the arrays). */
  size = 0;
  /** Whether the live candidates are in descending logit order. */
  sorted = false;
  /** Index of the chosen candidate, or -1. */
  /** The `selected` field. */
  selected: number = -1;
  #bits: Uint32Array;

  /** Allocates room for `capacity` candidates. */
  constructor(capacity: number) {
    this.ids = new Int32Array(capacity);
    this.logits = new Float32Array(capacity);
    this.probs = new Float32Array(capacity);
    this.#bits = new Uint32Array(this.logits.buffer);
  }

  /** Capacity in candidates. */
  get capacity(): number {
    return this.ids.length;
  }

  /** Fills with every token of `logits` in id order (probabilities 0, unsorted). */
  load(logits: Float32Array): this {
    if (logits.length > this.capacity) {
      throw new RangeError(`candidates: ${logits.length} logits exceed capacity ${this.capacity}`);
    }
    const n = logits.length;
    for (let i = 0; i < n; i++) this.ids[i] = i;
    this.logits.set(logits);
    this.probs.fill(0, 0, n);
    this.size = n;
    this.sorted = false;
    this.selected = -1;
    return this;
  }

  /** The chosen token id (throws when nothing was selected). */
  selectedToken(): number {
    if (this.selected < 0 || this.selected >= this.size) {
      throw new Error("candidates: no token selected (check the sampler chain ends in a selector)");
    }
    return this.ids[this.selected];
  }

  /**
   * Positions of the `k` best candidates, best first, without changing the
   * array. Ties keep position order.
   */
  topOrder(k: number): Int32Array {
    const n = this.size;
    k = Math.max(0, Math.min(k, n));
    if (k === 0) return new Int32Array(0);
    const lg = this.logits;
    // Histogram pre-pass: only buckets that together hold >= k entries are sorted.
    let pick: Int32Array;
    if (k < n && n > 1024) {
      const NB = 128, scale = NB / 20, inter = 10 * scale;
      const bucket = new Uint8Array(n);
      const histo = new Int32Array(NB);
      for (let i = 0; i < n; i++) {
        let b = Math.trunc(scale * lg[i] + inter);
        b = b < 0 || b !== b ? 0 : b > NB - 1 ? NB - 1 : b;
        bucket[i] = b;
        histo[b]++;
      }
      let have = 0, ib = NB - 1;
      for (; ib >= 0; ib--) {
        have += histo[ib];
        if (have >= k) break;
      }
      pick = new Int32Array(have);
      let j = 0;
      for (let i = 0; i < n; i++) if (bucket[i] >= ib) pick[j++] = i;
    } else {
      pick = new Int32Array(n);
      for (let i = 0; i < n; i++) pick[i] = i;
    }
    const m = pick.length;
    // Native numeric sort of packed keys: descending logit, then position.
    const keys = new Float64Array(m);
    const bits = this.#bits;
    for (let j = 0; j < m; j++) {
      const b = bits[pick[j]];
      const u = (b & 0x80000000) ? (~b >>> 0) : (b | 0x80000000) >>> 0;
      keys[j] = (0xffffffff - u) * 2097152 + pick[j];
    }
    keys.sort();
    const out = new Int32Array(k);
    for (let j = 0; j < k; j++) out[j] = keys[j] % 2097152;
    return out;
  }

  /** Rewrites the array as the candidates at `order` (in that order). */
  gather(order: ArrayLike<number>, n = order.length, sorted = true): void {
    const ids = this.ids.slice(0, this.size);
    const lg = this.logits.slice(0, this.size);
    const p = this.probs.slice(0, this.size);
    for (let j = 0; j < n; j++) {
      const i = order[j];
      this.ids[j] = ids[i];
      this.logits[j] = lg[i];
      this.probs[j] = p[i];
    }
    this.size = n;
    this.sorted = sorted;
  }

  /** Keeps the k best candidates, sorted (llama.cpp's partial sort in place). */
  sortTop(k: number): void {
    k = Math.min(k, this.size);
    this.gather(this.topOrder(k), k, true);
  }

  /** Copies the live part of another candidate array. */
  copyFrom(o: TokenCandidates): void {
    this.ids.set(o.ids.subarray(0, o.size));
    this.logits.set(o.logits.subarray(0, o.size));
    this.probs.set(o.probs.subarray(0, o.size));
    this.size = o.size;
    this.sorted = o.sorted;
    this.selected = o.selected;
  }
}

const f = Math.fround;

/** float32 expf. */
export function expf(x: number): number {
  return f(Math.exp(x));
}

/** float32 logf. */
export function logf(x: number): number {
  return f(Math.log(x));
}

/**
 * llama.cpp's softmax over the candidates in float32: optionally sorts first,
 * subtracts the max logit, sums exponentials in array order.
 */
export function softmax(c: TokenCandidates, doSort: boolean): void {
  if (c.size <= 0) throw new Error("softmax: no candidates");
  if (doSort && !c.sorted) c.sortTop(c.size);
  const n = c.size, lg = c.logits, p = c.probs;
  let max = lg[0];
  if (!c.sorted) { for (let i = 1; i < n; i++) if (lg[i] > max) max = lg[i]; }
  let sum = 0;
  for (let i = 0; i < n; i++) {
    const e = expf(f(lg[i] - max));
    p[i] = e;
    sum = f(sum + e);
  }
  for (let i = 0; i < n; i++) p[i] = f(p[i] / sum);
}
