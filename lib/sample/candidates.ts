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

/** Positions travel in the low 21 bits of a float64 sort key. */
const POS_BITS = 2097152;
const MAX_CAPACITY = POS_BITS;
/** Up to this many winners, one pass with a small heap beats any sort. */
const HEAP_MAX_K = 256;
const NB = 128;
const BUCKET_SCALE = NB / 20;
const BUCKET_INTER = 10 * BUCKET_SCALE;

let identity = new Int32Array(0);

/** 0, 1, 2, ... n-1, shared so `load` is a memcpy rather than a loop. */
function identityOf(n: number): Int32Array {
  if (identity.length < n) {
    identity = new Int32Array(Math.max(n, identity.length * 2));
    for (let i = 0; i < identity.length; i++) identity[i] = i;
  }
  return identity.subarray(0, n);
}

/**
 * Maps float32 bits to a uint32 that orders like the float (-NaN lowest,
 * -0 just below +0, +NaN highest), so ties and signed zeros get one fixed
 * order in every selection path.
 */
function orderBits(b: number): number {
  return (b & 0x80000000) ? (~b >>> 0) : (b | 0x80000000) >>> 0;
}

/** The same order as a signed int32, from the bits read as int32 (orderBits - 2^31). */
function sortable(b: number): number {
  return b ^ ((b >> 31) & 0x7fffffff);
}

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
  selected: number = -1;
  #bits: Uint32Array;
  #ibits: Int32Array;
  // Scratch reused across tokens so a step allocates nothing.
  #keys: Float64Array;
  #bucket: Uint8Array;
  #order: Int32Array;
  #tmpIds: Int32Array;
  #tmpLogits: Float32Array;
  #tmpProbs: Float32Array;
  #heapV = new Int32Array(HEAP_MAX_K);
  #heapP = new Int32Array(HEAP_MAX_K);
  #histo = new Int32Array(NB);
  #start = new Int32Array(NB);
  #fill = new Int32Array(NB);

  /** Allocates room for `capacity` candidates (at most 2^21). */
  constructor(capacity: number) {
    if (!(capacity >= 0 && capacity <= MAX_CAPACITY)) {
      throw new RangeError(`candidates: capacity ${capacity} outside 0..${MAX_CAPACITY}`);
    }
    this.ids = new Int32Array(capacity);
    this.logits = new Float32Array(capacity);
    this.probs = new Float32Array(capacity);
    this.#bits = new Uint32Array(this.logits.buffer);
    this.#ibits = new Int32Array(this.logits.buffer);
    this.#keys = new Float64Array(capacity);
    this.#bucket = new Uint8Array(capacity);
    this.#order = new Int32Array(capacity);
    this.#tmpIds = new Int32Array(capacity);
    this.#tmpLogits = new Float32Array(capacity);
    this.#tmpProbs = new Float32Array(capacity);
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
    this.ids.set(identityOf(n));
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
   * array. Ties keep position order. Written into `out` when given (it must
   * hold k entries), else into a new array.
   */
  topOrder(k: number, out?: Int32Array): Int32Array {
    const n = this.size;
    k = Math.max(0, Math.min(k, n));
    const dst = out ? out.subarray(0, k) : new Int32Array(k);
    if (dst.length < k) throw new RangeError(`candidates: order buffer holds ${dst.length} < ${k}`);
    if (k === 0) return dst;
    if (k <= HEAP_MAX_K && k < n) this.#heapTop(k, dst);
    else this.#bucketTop(k, dst);
    return dst;
  }

  /**
   * One pass keeping the k best in a heap whose root is the worst of them:
   * sortable logit bits and positions in two int32 arrays (a smaller value,
   * or an equal one further on, is worse, so the earlier of two ties wins).
   * Each entry is first compared against the root's value: equal bits lose
   * to it too (it came earlier), so most entries cost one integer
   * comparison. The winners come out of the heap worst first, into dst
   * from its end. (Float64 keys packing both cost a float modulo per
   * insertion and a float sort: the default chain over 4096 logits took
   * twice as long.)
   */
  #heapTop(k: number, dst: Int32Array): void {
    const n = this.size, ib = this.#ibits, hv = this.#heapV, hp = this.#heapP;
    for (let i = 0; i < k; i++) {
      hv[i] = sortable(ib[i]);
      hp[i] = i;
    }
    for (let i = (k >> 1) - 1; i >= 0; i--) siftDown(hv, hp, i, k);
    let ts = hv[0];
    for (let i = k; i < n; i++) {
      const b = ib[i];
      const v = b ^ ((b >> 31) & 0x7fffffff);
      if (v <= ts) continue;
      hv[0] = v;
      hp[0] = i;
      siftDown(hv, hp, 0, k);
      ts = hv[0];
    }
    for (let m = k; m > 0; m--) {
      dst[m - 1] = hp[0];
      hv[0] = hv[m - 1];
      hp[0] = hp[m - 1];
      siftDown(hv, hp, 0, m - 1);
    }
  }

  /**
   * llama.cpp's bucket pass: a logit histogram picks the top buckets that
   * hold at least k entries, they are scattered in bucket order and each
   * bucket is sorted on its own.
   */
  #bucketTop(k: number, dst: Int32Array): void {
    const n = this.size, lg = this.logits, bits = this.#bits, keys = this.#keys;
    if (n <= 1024) {
      for (let i = 0; i < n; i++) keys[i] = (0xffffffff - orderBits(bits[i])) * POS_BITS + i;
      const all = keys.subarray(0, n);
      all.sort();
      for (let j = 0; j < k; j++) dst[j] = all[j] % POS_BITS;
      return;
    }
    const bucket = this.#bucket;
    const histo = this.#histo, start = this.#start, fill = this.#fill;
    histo.fill(0);
    for (let i = 0; i < n; i++) {
      const x = lg[i];
      let b: number;
      if (x !== x) b = bits[i] & 0x80000000 ? 0 : NB - 1;
      else {
        b = Math.trunc(BUCKET_SCALE * x + BUCKET_INTER);
        b = b < 0 ? 0 : b > NB - 1 ? NB - 1 : b;
      }
      bucket[i] = b;
      histo[b]++;
    }
    let have = 0, ib = NB - 1;
    for (; ib >= 0; ib--) {
      have += histo[ib];
      if (have >= k) break;
    }
    // start[b]: first slot of bucket b, best bucket first.
    let at = 0;
    for (let b = NB - 1; b >= ib; b--) {
      start[b] = fill[b] = at;
      at += histo[b];
    }
    for (let i = 0; i < n; i++) {
      const b = bucket[i];
      if (b >= ib) keys[fill[b]++] = (0xffffffff - orderBits(bits[i])) * POS_BITS + i;
    }
    for (let b = NB - 1; b >= ib; b--) {
      if (start[b] >= k) break;
      if (histo[b] > 1) keys.subarray(start[b], start[b] + histo[b]).sort();
    }
    for (let j = 0; j < k; j++) dst[j] = keys[j] % POS_BITS;
  }

  /** Rewrites the array as the candidates at `order` (in that order). */
  gather(order: ArrayLike<number>, n = order.length, sorted = true): void {
    const ids = this.ids, lg = this.logits, p = this.probs;
    const ti = this.#tmpIds, tl = this.#tmpLogits, tp = this.#tmpProbs;
    for (let j = 0; j < n; j++) {
      const i = order[j];
      ti[j] = ids[i];
      tl[j] = lg[i];
      tp[j] = p[i];
    }
    ids.set(ti.subarray(0, n));
    lg.set(tl.subarray(0, n));
    p.set(tp.subarray(0, n));
    this.size = n;
    this.sorted = sorted;
  }

  /** Keeps the k best candidates, sorted (llama.cpp's partial sort in place). */
  sortTop(k: number): void {
    k = Math.min(k, this.size);
    this.gather(this.topOrder(k, this.#order), k, true);
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

/**
 * Restores the heap below `i` in entries [0, n): each entry no worse than
 * its children (worse: a smaller value, or an equal one at a later position).
 */
function siftDown(hv: Int32Array, hp: Int32Array, i: number, n: number): void {
  const v = hv[i], p = hp[i];
  for (;;) {
    let c = 2 * i + 1;
    if (c >= n) break;
    if (c + 1 < n && (hv[c + 1] < hv[c] || (hv[c + 1] === hv[c] && hp[c + 1] > hp[c]))) c++;
    if (hv[c] > v || (hv[c] === v && hp[c] < p)) break;
    hv[i] = hv[c];
    hp[i] = hp[c];
    i = c;
  }
  hv[i] = v;
  hp[i] = p;
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
