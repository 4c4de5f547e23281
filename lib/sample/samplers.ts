/**
 * llama.cpp's samplers (src/llama-sampler.cpp) over {@link TokenCandidates},
 * with the same float32 arithmetic, truncation rules and random draws, so a
 * chain of them keeps the same candidates and picks the same token.
 *
 * @module
 */
import { expf, logf, softmax, type TokenCandidates } from "./candidates.ts";
import { discreteDraw, Mt19937 } from "./rng.ts";

const f = Math.fround;

/** One step of a sampler chain (llama_sampler_i). */
export interface Sampler {
  /** Name as llama.cpp prints it. */
  readonly name: string;
  /** Transforms the candidates (may truncate, reorder, select). */
  apply(c: TokenCandidates): void;
  /** Observes the token that was finally chosen. */
  accept?(token: number): void;
  /** Returns to the freshly constructed state. */
  reset?(): void;
}

/** llama.cpp's LLAMA_DEFAULT_SEED: draw a random seed. */
export const DEFAULT_SEED = 0xffffffff;

function resolveSeed(seed: number): number {
  if (seed >>> 0 !== DEFAULT_SEED) return seed >>> 0;
  return crypto.getRandomValues(new Uint32Array(1))[0];
}

function log2f(x: number): number {
  return f(Math.log2(x));
}

function powf(a: number, b: number): number {
  return f(Math.pow(a, b));
}

/** C's float → int conversion as x86 does it (out of range gives INT_MIN). */
function toInt(x: number): number {
  return Number.isFinite(x) && Math.abs(x) < 2147483648 ? Math.trunc(x) : -2147483648;
}

/** Adds fixed biases to chosen tokens (llama_sampler_init_logit_bias). */
export class LogitBiasSampler implements Sampler {
  readonly name = "logit-bias";
  #bias: { token: number; bias: number }[];

  /** `bias`: [token, bias] pairs; -Infinity bans a token. */
  constructor(bias: Iterable<[number, number]>) {
    this.#bias = [...bias].map(([token, b]) => ({ token, bias: f(b) }));
  }

  apply(c: TokenCandidates): void {
    const rest: { token: number; bias: number }[] = [];
    // Fast path for an untouched array where position == id, as llama.cpp does.
    for (const lb of this.#bias) {
      if (lb.token >= 0 && c.size > lb.token && c.ids[lb.token] === lb.token) {
        c.logits[lb.token] = f(c.logits[lb.token] + lb.bias);
      } else rest.push(lb);
    }
    if (rest.length === 0) return;
    for (let i = 0; i < c.size; i++) {
      for (const lb of rest) {
        if (c.ids[i] === lb.token) {
          c.logits[i] = f(c.logits[i] + lb.bias);
          break;
        }
      }
    }
  }
}

/** Options of {@link PenaltiesSampler}. */
export interface PenaltyOptions {
  /** How many recent tokens count (0 disables, -1 is not special here). */
  lastN: number;
  /** Repetition penalty (1 = off). */
  repeat?: number;
  /** Frequency penalty (0 = off). */
  frequency?: number;
  /** Presence penalty (0 = off). */
  presence?: number;
}

/** Repeat / frequency / presence penalties over the last N accepted tokens. */
export class PenaltiesSampler implements Sampler {
  readonly name = "penalties";
  /** The `lastN` setting. */
  readonly lastN: number;
  /** The `repeat` setting. */
  readonly repeat: number;
  /** The `frequency` setting. */
  readonly frequency: number;
  /** The `presence` setting. */
  readonly presence: number;
  #ring: Int32Array;
  #first = 0;
  #count = 0;
  #counts = new Map<number, number>();

  /** Creates the sampler; inactive when lastN is 0 or all penalties are neutral. */
  constructor(o: PenaltyOptions) {
    this.lastN = Math.max(0, o.lastN | 0);
    this.repeat = f(o.repeat ?? 1);
    this.frequency = f(o.frequency ?? 0);
    this.presence = f(o.presence ?? 0);
    this.#ring = new Int32Array(Math.max(1, this.lastN));
  }

  /** Whether applying changes nothing. */
  get disabled(): boolean {
    return this.lastN === 0 ||
      (this.repeat === 1 && this.frequency === 0 && this.presence === 0);
  }

  accept(token: number): void {
    if (this.lastN === 0) return;
    this.#counts.set(token, (this.#counts.get(token) ?? 0) + 1);
    const cap = this.lastN;
    if (this.#count >= cap) {
      const old = this.#ring[this.#first];
      const n = this.#counts.get(old)! - 1;
      if (n === 0) this.#counts.delete(old);
      else this.#counts.set(old, n);
      this.#ring[this.#first] = token;
      this.#first = (this.#first + 1) % cap;
    } else {
      this.#ring[(this.#first + this.#count) % cap] = token;
      this.#count++;
    }
  }

  apply(c: TokenCandidates): void {
    if (this.disabled) return;
    const counts = this.#counts;
    if (counts.size === 0) {
      c.sorted = false;
      return;
    }
    // A fresh array holds token t at position t (ids are unique), so the
    // last-N tokens can be visited directly instead of scanning the vocabulary.
    let direct = true;
    for (const t of counts.keys()) {
      if (!(t >= 0 && t < c.size && c.ids[t] === t)) {
        direct = false;
        break;
      }
    }
    if (direct) {
      for (const [t, n] of counts) this.#penalize(c, t, n);
    } else {
      for (let i = 0; i < c.size; i++) {
        const n = counts.get(c.ids[i]);
        if (n !== undefined) this.#penalize(c, i, n);
      }
    }
    c.sorted = false;
  }

  #penalize(c: TokenCandidates, i: number, n: number): void {
    let l = c.logits[i];
    l = l <= 0 ? f(l * this.repeat) : f(l / this.repeat);
    c.logits[i] = f(l - f(f(n * this.frequency) + this.presence));
  }

  reset(): void {
    this.#first = 0;
    this.#count = 0;
    this.#counts.clear();
  }
}

/** Keeps the k most likely candidates (k <= 0: no-op). */
export class TopKSampler implements Sampler {
  readonly name = "top-k";
  /** Creates the sampler. */
  constructor(readonly k: number) {}
  apply(c: TokenCandidates): void {
    topK(c, this.k);
  }
}

/** llama.cpp's top-k step, shared with mirostat. */
export function topK(c: TokenCandidates, k: number): void {
  if (k <= 0) return;
  k = Math.min(k, c.size);
  if (!c.sorted) c.sortTop(k);
  c.size = k;
}

/** Locally typical sampling (llama_sampler_init_typical). */
export class TypicalSampler implements Sampler {
  readonly name = "typical";
  /** The `p` setting. */
  readonly p: number;
  /** Creates the sampler; p >= 1 is a no-op. */
  constructor(p: number, readonly minKeep = 1) {
    this.p = f(p);
  }
  apply(c: TokenCandidates): void {
    if (this.p >= 1) return;
    softmax(c, true);
    const n = c.size, p = c.probs;
    let entropy = 0;
    for (let i = 0; i < n; i++) entropy = f(entropy + f(-p[i] * logf(p[i])));
    const shifted = new Float32Array(n);
    for (let i = 0; i < n; i++) shifted[i] = Math.abs(f(-logf(p[i]) - entropy));
    const idx = Array.from({ length: n }, (_, i) => i).sort((a, b) => shifted[a] - shifted[b]);
    let cum = 0, last = n;
    for (let i = 0; i < n; i++) {
      cum = f(cum + p[idx[i]]);
      if (cum > this.p && (this.minKeep === 0 || i >= this.minKeep - 1)) {
        last = i + 1;
        break;
      }
    }
    c.gather(idx, last, false);
  }
}

/** Nucleus sampling (llama_sampler_init_top_p). */
export class TopPSampler implements Sampler {
  readonly name = "top-p";
  /** The `p` setting. */
  readonly p: number;
  #order = new Int32Array(0);
  /** Creates the sampler; p >= 1 is a no-op. */
  constructor(p: number, readonly minKeep = 1) {
    this.p = f(p);
  }
  apply(c: TokenCandidates): void {
    if (this.p >= 1) return;
    softmax(c, false);
    const n = c.size;
    // Probabilities are of the full set; only the head needs ordering, and
    // 256 entries usually suffice before the mass reaches p.
    let order: Int32Array | null = null;
    let k = n;
    if (!c.sorted) {
      if (this.#order.length < n) this.#order = new Int32Array(c.capacity);
      k = n > 1024 ? Math.min(256, n) : n;
      order = c.topOrder(k, this.#order);
    }
    let cum = 0, last = n;
    const p = c.probs;
    for (let i = 0; i < n; i++) {
      cum = f(cum + p[order ? order[i] : i]);
      if (cum >= this.p && i + 1 >= this.minKeep) {
        last = i + 1;
        break;
      }
      if (order && i === k - 1) {
        k = n;
        order = c.topOrder(n, this.#order);
      }
    }
    if (order) c.gather(order, last, true);
    else c.size = last;
  }
}

/** Keeps candidates with p >= p_min · p_max (llama_sampler_init_min_p). */
export class MinPSampler implements Sampler {
  readonly name = "min-p";
  /** The `p` setting. */
  readonly p: number;
  /** Creates the sampler; p <= 0 is a no-op. */
  constructor(p: number, readonly minKeep = 1) {
    this.p = f(p);
  }
  apply(c: TokenCandidates): void {
    if (this.p <= 0 || c.size === 0) return;
    const lg = c.logits;
    if (!c.sorted) {
      let max = -3.4028234663852886e38;
      for (let i = 0; i < c.size; i++) if (lg[i] > max) max = lg[i];
      const min = f(max + logf(this.p));
      let m = 0;
      for (let i = 0; i < c.size; i++) if (lg[i] >= min) m++;
      if (m > 0 && m >= this.minKeep) {
        let j = 0;
        for (let i = 0; i < c.size; i++) {
          if (lg[i] >= min) {
            c.ids[j] = c.ids[i];
            lg[j] = lg[i];
            c.probs[j] = c.probs[i];
            j++;
          }
        }
        c.size = m;
        return;
      }
      c.sortTop(c.size);
    }
    const min = f(lg[0] + logf(this.p));
    let i = 1;
    for (; i < c.size; i++) if (lg[i] < min && i >= this.minKeep) break;
    c.size = i;
  }
}

/** Divides logits by the temperature; t <= 0 keeps only the best logit finite. */
export function applyTemperature(c: TokenCandidates, t: number): void {
  if (c.size === 0) return;
  const lg = c.logits;
  if (t <= 0) {
    let maxI = 0, maxL = lg[0];
    for (let i = 1; i < c.size; i++) {
      if (lg[i] > maxL) {
        lg[maxI] = -Infinity;
        maxI = i;
        maxL = lg[i];
      } else lg[i] = -Infinity;
    }
    return;
  }
  for (let i = 0; i < c.size; i++) lg[i] = f(lg[i] / t);
}

/** Temperature (llama_sampler_init_temp). */
export class TempSampler implements Sampler {
  readonly name = "temp";
  /** The `t` setting. */
  readonly t: number;
  /** Creates the sampler. */
  constructor(t: number) {
    this.t = f(t);
  }
  apply(c: TokenCandidates): void {
    applyTemperature(c, this.t);
  }
}

/** Entropy-driven dynamic temperature (llama_sampler_init_temp_ext). */
export class TempExtSampler implements Sampler {
  readonly name = "temp-ext";
  /** The `t` setting. */
  readonly t: number;
  /** The `delta` setting. */
  readonly delta: number;
  /** The `exponent` setting. */
  readonly exponent: number;
  /** Plain temperature when delta <= 0. */
  constructor(t: number, delta = 0, exponent = 1) {
    this.t = f(t);
    this.delta = f(delta);
    this.exponent = f(exponent);
  }
  apply(c: TokenCandidates): void {
    if (!(this.delta > 0)) return applyTemperature(c, this.t);
    const minT = Math.max(0, f(this.t - this.delta)), maxT = f(this.t + this.delta);
    if (c.size <= 1) return;
    const maxEntropy = f(-logf(f(1 / c.size)));
    softmax(c, true);
    let entropy = 0;
    for (let i = 0; i < c.size; i++) {
      const p = c.probs[i];
      if (p > 0) entropy = f(entropy - f(p * logf(p)));
    }
    const norm = f(entropy / maxEntropy);
    const dyn = f(minT + f(f(maxT - minT) * powf(norm, this.exponent)));
    applyTemperature(c, dyn);
    const max = c.logits[0];
    let sum = 0;
    for (let i = 0; i < c.size; i++) {
      const p = Math.exp(c.logits[i] - max);
      c.probs[i] = p;
      sum += p;
    }
    for (let i = 0; i < c.size; i++) c.probs[i] = f(c.probs[i] / sum);
  }
}

/** Picks the highest logit (first on ties). */
export class GreedySampler implements Sampler {
  readonly name = "greedy";
  apply(c: TokenCandidates): void {
    let s = 0;
    for (let i = 1; i < c.size; i++) if (c.logits[i] > c.logits[s]) s = i;
    c.selected = c.size > 0 ? s : -1;
  }
}

/** Draws from the softmax of the candidates with a seeded mt19937 (llama_sampler_init_dist). */
export class DistSampler implements Sampler {
  readonly name = "dist";
  /** The `seed` setting. */
  readonly seed: number;
  #seedCur: number;
  /** The `rng` setting. */
  readonly rng: Mt19937;

  /** Creates the sampler; DEFAULT_SEED draws a random seed. */
  constructor(seed: number = DEFAULT_SEED) {
    this.seed = seed >>> 0;
    this.#seedCur = resolveSeed(this.seed);
    this.rng = new Mt19937(this.#seedCur);
  }

  /** The seed actually in use. */
  get seedInUse(): number {
    return this.#seedCur;
  }

  apply(c: TokenCandidates): void {
    if (c.size === 0) {
      c.selected = -1;
      return;
    }
    c.selected = 0;
    if (c.size === 1) {
      this.rng.canonical();
      c.probs[0] = 1;
      return;
    }
    const n = c.size, lg = c.logits, p = c.probs;
    let max = lg[0];
    if (!c.sorted) { for (let i = 1; i < n; i++) if (lg[i] > max) max = lg[i]; }
    let sum = 0;
    for (let i = 0; i < n; i++) {
      const e = expf(f(lg[i] - max));
      p[i] = e;
      sum += e;
    }
    const target = sum * this.rng.canonical();
    let run = 0, found = false;
    for (let i = 0; i < n; i++) {
      if (!found) {
        run += p[i];
        if (run >= target) {
          c.selected = i;
          found = true;
        }
      }
      p[i] = f(p[i] / sum);
    }
    if (!found) c.selected = n - 1;
  }

  reset(): void {
    this.#seedCur = resolveSeed(this.seed);
    this.rng.seed(this.#seedCur);
  }
}

/** Options shared by the mirostat samplers. */
export interface MirostatOptions {
  /** Seed of the draw (DEFAULT_SEED: random). */
  seed?: number;
  /** Target surprise (cross-entropy) in bits. */
  tau: number;
  /** Learning rate. */
  eta: number;
}

/** Mirostat 1.0 (llama_sampler_init_mirostat), replacing truncation and dist. */
export class MirostatSampler implements Sampler {
  readonly name = "mirostat";
  /** The `tau` setting. */
  readonly tau: number;
  /** The `eta` setting. */
  readonly eta: number;
  /** The `seed` setting. */
  readonly seed: number;
  /** Current maximum surprise. */
  mu: number;
  /** The `rng` setting. */
  readonly rng: Mt19937;

  /** `m`: how many top tokens estimate the Zipf exponent (llama.cpp uses 100). */
  constructor(readonly nVocab: number, o: MirostatOptions, readonly m = 100) {
    this.tau = f(o.tau);
    this.eta = f(o.eta);
    this.seed = (o.seed ?? DEFAULT_SEED) >>> 0;
    this.mu = f(2 * this.tau);
    this.rng = new Mt19937(resolveSeed(this.seed));
  }

  apply(c: TokenCandidates): void {
    softmax(c, true);
    const p = c.probs;
    let sumTiBi = 0, sumTiSq = 0;
    for (let i = 0; i < this.m - 1 && i < c.size - 1; i++) {
      const ti = logf(f(f(i + 2) / f(i + 1)));
      const bi = logf(f(p[i] / p[i + 1]));
      sumTiBi = f(sumTiBi + f(ti * bi));
      sumTiSq = f(sumTiSq + f(ti * ti));
    }
    const sHat = f(sumTiBi / sumTiSq);
    const eps = f(sHat - 1);
    const k = powf(
      f(f(eps * powf(2, this.mu)) / f(1 - powf(f(this.nVocab), -eps))),
      f(1 / sHat),
    );
    topK(c, Math.max(toInt(k), 1));
    softmax(c, true);
    const idx = discreteDraw(c.probs, c.size, this.rng);
    c.selected = idx;
    const e = f(-log2f(c.probs[idx]) - this.tau);
    this.mu = f(this.mu - f(this.eta * e));
  }

  reset(): void {
    this.mu = f(2 * this.tau);
    this.rng.seed(resolveSeed(this.seed));
  }
}

/** Mirostat 2.0 (llama_sampler_init_mirostat_v2). */
export class MirostatV2Sampler implements Sampler {
  readonly name = "mirostat-v2";
  /** The `tau` setting. */
  readonly tau: number;
  /** The `eta` setting. */
  readonly eta: number;
  /** The `seed` setting. */
  readonly seed: number;
  /** Current maximum surprise. */
  mu: number;
  /** The `rng` setting. */
  readonly rng: Mt19937;

  /** Creates the sampler. */
  constructor(o: MirostatOptions) {
    this.tau = f(o.tau);
    this.eta = f(o.eta);
    this.seed = (o.seed ?? DEFAULT_SEED) >>> 0;
    this.mu = f(2 * this.tau);
    this.rng = new Mt19937(resolveSeed(this.seed));
  }

  apply(c: TokenCandidates): void {
    softmax(c, true);
    let n = 0;
    while (n < c.size && !(-log2f(c.probs[n]) > this.mu)) n++;
    c.size = Math.max(1, n);
    softmax(c, true);
    const idx = discreteDraw(c.probs, c.size, this.rng);
    c.selected = idx;
    const e = f(-log2f(c.probs[idx]) - this.tau);
    this.mu = f(this.mu - f(this.eta * e));
  }

  reset(): void {
    this.mu = f(2 * this.tau);
    this.rng.seed(resolveSeed(this.seed));
  }
}
