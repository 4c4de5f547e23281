/**
 * The random source of llama.cpp's samplers: `std::mt19937` and the two
 * libstdc++ distributions built on it (`uniform_real_distribution<double>` and
 * `discrete_distribution<int>`), reproduced draw for draw so a seeded chain
 * picks the same tokens as llama.cpp.
 *
 * @module
 */

const N = 624;
const M = 397;

/** The 32-bit Mersenne Twister, bit-identical to `std::mt19937`. */
export class Mt19937 {
  #mt = new Uint32Array(N);
  #i = N;

  /** Seeds like `std::mt19937(seed)`. */
  constructor(seed = 5489) {
    this.seed(seed);
  }

  /** Re-seeds like `std::mt19937::seed`. */
  seed(seed: number): void {
    const mt = this.#mt;
    mt[0] = seed >>> 0;
    for (let i = 1; i < N; i++) {
      const prev = mt[i - 1] ^ (mt[i - 1] >>> 30);
      // 1812433253 * prev mod 2^32, split so the product stays exact in doubles.
      mt[i] = (((((prev & 0xffff0000) >>> 16) * 1812433253) << 16) +
        (prev & 0x0000ffff) * 1812433253 + i) >>> 0;
    }
    this.#i = N;
  }

  /** Copies the full generator state from another instance. */
  copyFrom(other: Mt19937): void {
    this.#mt.set(other.#mt);
    this.#i = other.#i;
  }

  /**
   * The full generator state: the 624 words then the position in them, so
   * {@link Mt19937.setState} continues the exact draw sequence.
   */
  getState(): Uint32Array {
    const out = new Uint32Array(N + 1);
    out.set(this.#mt);
    out[N] = this.#i;
    return out;
  }

  /** Restores a state from {@link Mt19937.getState}; throws RangeError on a malformed one. */
  setState(state: ArrayLike<number>): void {
    const why = Mt19937.checkState(state);
    if (why) throw new RangeError(`mt19937 state: ${why}`);
    for (let k = 0; k < N; k++) this.#mt[k] = state[k];
    this.#i = state[N];
  }

  /** Why `state` is not a {@link Mt19937.getState} result, or null when it is usable. */
  static checkState(state: ArrayLike<number>): string | null {
    if (state.length !== N + 1) return `${state.length} words, expected ${N + 1}`;
    for (let k = 0; k < N; k++) {
      const w = state[k];
      if (!Number.isInteger(w) || w < 0 || w > 0xffffffff) return `word ${k} is ${w}`;
    }
    const i = state[N];
    if (!Number.isInteger(i) || i < 0 || i > N) return `position ${i} outside [0, ${N}]`;
    return null;
  }

  #twist(): void {
    const mt = this.#mt;
    for (let k = 0; k < N; k++) {
      const y = (mt[k] & 0x80000000) | (mt[(k + 1) % N] & 0x7fffffff);
      mt[k] = mt[(k + M) % N] ^ (y >>> 1) ^ ((y & 1) ? 0x9908b0df : 0);
    }
    this.#i = 0;
  }

  /** Next 32-bit output. */
  next(): number {
    if (this.#i >= N) this.#twist();
    let y = this.#mt[this.#i++];
    y ^= y >>> 11;
    y ^= (y << 7) & 0x9d2c5680;
    y ^= (y << 15) & 0xefc60000;
    y ^= y >>> 18;
    return y >>> 0;
  }

  /**
   * `std::generate_canonical<double, 53>` as libstdc++ writes it: two 32-bit
   * draws combined as (a + b·2^32) / 2^64, clamped below 1.
   */
  canonical(): number {
    const a = this.next();
    const b = this.next();
    const r = (a + b * 4294967296) / 18446744073709551616;
    return r >= 1 ? 1 - 2 ** -53 : r;
  }
}

/**
 * `std::discrete_distribution<int>(weights)(rng)` from libstdc++: weights are
 * normalized in doubles, cumulated, the last set to exactly 1, then the first
 * cumulative value not below a canonical draw wins. Fewer than two weights
 * return 0 without drawing.
 */
export function discreteDraw(weights: ArrayLike<number>, n: number, rng: Mt19937): number {
  if (n < 2) return 0;
  let sum = 0;
  for (let i = 0; i < n; i++) sum += weights[i];
  const cp = new Float64Array(n);
  let acc = 0;
  for (let i = 0; i < n; i++) {
    acc += weights[i] / sum;
    cp[i] = acc;
  }
  cp[n - 1] = 1;
  const u = rng.canonical();
  let lo = 0, hi = n;
  while (lo < hi) {
    const mid = (lo + hi) >>> 1;
    if (cp[mid] < u) lo = mid + 1;
    else hi = mid;
  }
  return lo;
}
