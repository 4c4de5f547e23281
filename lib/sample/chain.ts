/**
 * The sampler chain and its construction from user options, following
 * llama.cpp's common/sampling.cpp: logit bias, then penalties, top-k,
 * typical, top-p, min-p, temperature and a seeded draw (or temperature and
 * mirostat); an optional grammar checked the way common_sampler_sample does
 * (sample first, and only if the grammar rejects the token, constrain the
 * full vocabulary and sample again).
 *
 * @module
 */
import { TokenCandidates } from "./candidates.ts";
import {
  DEFAULT_SEED,
  DistSampler,
  LogitBiasSampler,
  MinPSampler,
  MirostatSampler,
  MirostatV2Sampler,
  PenaltiesSampler,
  type Sampler,
  TempExtSampler,
  TempSampler,
  TopKSampler,
  TopPSampler,
  TypicalSampler,
} from "./samplers.ts";
import { GrammarSampler, type GrammarVocabIndex } from "./grammar.ts";
import { GrammarMatchError } from "../grammar/errors.ts";
import { SamplingError, validateSamplingOptions } from "./options.ts";
import { Mt19937 } from "./rng.ts";

/** What a chain needs from a grammar constraint (GrammarSampler implements it). */
export interface GrammarConstraint {
  /** Sets disallowed candidates to -inf. */
  apply(c: TokenCandidates): void;
  /** Whether one token is allowed now. */
  allows(token: number): boolean;
  /** Advances by the chosen token. */
  accept(token: number): void;
  /** Back to the start. */
  reset(): void;
}

/** Options of {@link SamplerChain}. */
export interface SamplerChainOptions {
  /** Grammar constraint consulted around the chain. */
  grammar?: GrammarConstraint;
  /** Apply the grammar before the chain every time (llama.cpp's grammar_first). */
  grammarFirst?: boolean;
}

/** A composable chain of samplers ending in a selector (dist, greedy or mirostat). */
export class SamplerChain {
  /** The `samplers` setting. */
  readonly samplers: Sampler[];
  /** The `grammar` setting. */
  readonly grammar?: GrammarConstraint;
  /** The `grammarFirst` setting. */
  readonly grammarFirst: boolean;
  #cands: TokenCandidates | null = null;

  /** Builds a chain; the samplers run in array order. */
  constructor(samplers: Sampler[], opts: SamplerChainOptions = {}) {
    this.samplers = samplers;
    this.grammar = opts.grammar;
    this.grammarFirst = opts.grammarFirst ?? false;
  }

  /** The candidate array as the last `sample` left it. */
  get candidates(): TokenCandidates {
    if (!this.#cands) throw new Error("sampler chain: nothing sampled yet");
    return this.#cands;
  }

  #load(logits: Float32Array): TokenCandidates {
    if (!this.#cands || this.#cands.capacity < logits.length) {
      this.#cands = new TokenCandidates(logits.length);
    }
    return this.#cands.load(logits);
  }

  /** Runs only the samplers (no grammar) on prepared candidates. */
  applyTo(c: TokenCandidates): void {
    for (const s of this.samplers) s.apply(c);
  }

  /** Picks the next token from a row of logits (does not accept it). */
  sample(logits: Float32Array): number {
    let c = this.#load(logits);
    const g = this.grammar;
    if (g && this.grammarFirst) applyGrammar(g, c);
    this.applyTo(c);
    const id = picked(c, g && this.grammarFirst ? "grammar" : "logit-bias");
    if (!g || this.grammarFirst || g.allows(id)) return id;
    c = this.#load(logits);
    applyGrammar(g, c);
    this.applyTo(c);
    return picked(c, "grammar");
  }

  /**
   * Records a token in every stateful sampler and, unless `acceptGrammar` is
   * false (prompt tokens, as llama.cpp's common_sampler_accept does), in the
   * grammar.
   */
  accept(token: number, acceptGrammar = true): void {
    if (acceptGrammar) this.grammar?.accept(token);
    for (const s of this.samplers) s.accept?.(token);
  }

  /** Resets every sampler (seeds re-applied) and the grammar. */
  reset(): void {
    this.grammar?.reset();
    for (const s of this.samplers) s.reset?.();
  }

  /**
   * The random state of the chain: per sampler, in order, its name, its
   * mt19937 state (dist, mirostat) and its running `mu` (mirostat). With
   * {@link SamplerChain.setState} a seeded chain continues the same draws,
   * e.g. after a saved context is loaded. Token histories (penalties) and
   * the grammar are not included: they follow the tokens, re-accept those.
   */
  getState(): SamplerChainState {
    return {
      samplers: this.samplers.map((s) => {
        const o = s as { rng?: unknown; mu?: unknown };
        return {
          name: s.name,
          ...(o.rng instanceof Mt19937 ? { rng: o.rng.getState() } : {}),
          ...(typeof o.mu === "number" ? { mu: o.mu } : {}),
        };
      }),
    };
  }

  /**
   * Why `state` does not fit this chain (another sampler list, a malformed
   * generator state), or null when {@link SamplerChain.setState} takes it.
   */
  checkState(state: SamplerChainState): string | null {
    const got = state.samplers;
    if (got.length !== this.samplers.length) {
      return `${got.length} samplers in the state, ${this.samplers.length} in the chain`;
    }
    for (let k = 0; k < got.length; k++) {
      const s = this.samplers[k] as Sampler & { rng?: unknown; mu?: unknown };
      const g = got[k];
      if (g.name !== s.name) return `sampler ${k} is "${g.name}" in the state, "${s.name}" here`;
      if ((g.rng !== undefined) !== (s.rng instanceof Mt19937)) {
        return `sampler ${k} (${s.name}): random state ${g.rng ? "present" : "missing"}`;
      }
      const why = g.rng ? Mt19937.checkState(g.rng) : null;
      if (why) return `sampler ${k} (${s.name}): ${why}`;
      if ((g.mu !== undefined) !== (typeof s.mu === "number")) {
        return `sampler ${k} (${s.name}): mu ${g.mu === undefined ? "missing" : "present"}`;
      }
      if (g.mu !== undefined && !Number.isFinite(g.mu)) {
        return `sampler ${k} (${s.name}): mu ${g.mu}`;
      }
    }
    return null;
  }

  /** Restores {@link SamplerChain.getState}; throws RangeError (changing nothing) when it does not fit. */
  setState(state: SamplerChainState): void {
    const why = this.checkState(state);
    if (why) throw new RangeError(`sampler state: ${why}`);
    state.samplers.forEach((g, k) => {
      const s = this.samplers[k] as { rng?: Mt19937; mu?: number };
      if (g.rng) s.rng!.setState(g.rng);
      if (g.mu !== undefined) s.mu = g.mu;
    });
  }
}

/** The random state of a {@link SamplerChain} ({@link SamplerChain.getState}). */
export interface SamplerChainState {
  /** Per sampler, in chain order. */
  readonly samplers: ReadonlyArray<{
    /** The sampler's name. */
    readonly name: string;
    /** Its mt19937 state (625 words), for samplers that draw. */
    readonly rng?: Uint32Array;
    /** Its running surprise target (mirostat). */
    readonly mu?: number;
  }>;
}

/**
 * The selected token, unless its logit is -inf: every selector prefers a
 * finite logit, so that means the biases or the grammar banned every
 * candidate and the pick is arbitrary (llama.cpp would repeat one token).
 */
/**
 * The grammar's filter, with its dead end reported as the chain reports
 * every other one: a SamplingError (reason "grammar"), the original as cause.
 */
function applyGrammar(g: GrammarConstraint, c: TokenCandidates): void {
  try {
    g.apply(c);
  } catch (e) {
    if (e instanceof GrammarMatchError) {
      throw new SamplingError("grammar", `sample: ${e.message}`, { cause: e });
    }
    throw e;
  }
}

function picked(c: TokenCandidates, reason: "grammar" | "logit-bias"): number {
  const id = c.selectedToken();
  if (c.logits[c.selected] === -Infinity) {
    throw new SamplingError(
      reason,
      reason === "grammar"
        ? "sample: the grammar admits no token here (with the logit biases applied)"
        : "sample: the logit biases leave no token with a finite logit",
    );
  }
  return id;
}

/** User-facing sampling options (llama.cpp's common_params_sampling names in camelCase). */
export interface SamplingOptions {
  /** Vocabulary size. */
  nVocab: number;
  /** Temperature (default 0.8; <= 0 picks the best logit). */
  temperature?: number;
  /** Dynamic temperature range (default 0: off). */
  dynatempRange?: number;
  /** Dynamic temperature exponent (default 1). */
  dynatempExponent?: number;
  /** Top-k (default 40; <= 0 off). */
  topK?: number;
  /** Top-p (default 0.95; 1 off). */
  topP?: number;
  /** Min-p (default 0.05; 0 off). */
  minP?: number;
  /** Locally typical p (default 1: off). */
  typicalP?: number;
  /** Keep at least this many candidates in top-p/min-p/typical (default 0). */
  minKeep?: number;
  /** Repetition penalty (default 1: off). */
  repeatPenalty?: number;
  /** Penalty window (default 64; 0 off; -1 = context size, pass nCtx for it). */
  repeatLastN?: number;
  /** Context size used when repeatLastN is -1. */
  nCtx?: number;
  /** Frequency penalty (default 0). */
  frequencyPenalty?: number;
  /** Presence penalty (default 0). */
  presencePenalty?: number;
  /**
   * Penalize the newline token too (default true). This llama.cpp revision
   * has no penalize_nl switch and always penalizes it; false restores the
   * older behaviour of exempting `newlineToken`.
   */
  penalizeNewline?: boolean;
  /** Newline token id (for penalizeNewline false). */
  newlineToken?: number;
  /** Mirostat: 0 off, 1 or 2. */
  mirostat?: 0 | 1 | 2;
  /** Mirostat target entropy (default 5). */
  mirostatTau?: number;
  /** Mirostat learning rate (default 0.1). */
  mirostatEta?: number;
  /** Seed (default: random, llama.cpp's LLAMA_DEFAULT_SEED). */
  seed?: number;
  /** Logit biases: [token, bias] pairs or a map. */
  logitBias?: Iterable<[number, number]> | Map<number, number>;
  /** Ban the end-of-generation tokens (adds -inf biases for eogTokens). */
  ignoreEos?: boolean;
  /** GBNF text or a ready constraint. */
  grammar?: string | GrammarConstraint;
  /** Token piece bytes (needed for a GBNF string). */
  pieces?: (id: number) => Uint8Array;
  /** End-of-generation tokens (needed for a GBNF string and ignoreEos). */
  eogTokens?: Iterable<number>;
  /** A shared vocabulary index for grammar samplers. */
  grammarIndex?: GrammarVocabIndex;
}

/** Penalties that leave one token's logit untouched (the pre-2024 penalize_nl=false). */
class NewlineExemptPenalties implements Sampler {
  readonly name = "penalties";
  constructor(readonly inner: PenaltiesSampler, readonly nl: number) {}
  apply(c: TokenCandidates): void {
    let at = -1;
    for (let i = 0; i < c.size; i++) if (c.ids[i] === this.nl) at = i;
    const keep = at >= 0 ? c.logits[at] : 0;
    this.inner.apply(c);
    if (at >= 0) c.logits[at] = keep;
  }
  accept(t: number): void {
    this.inner.accept(t);
  }
  reset(): void {
    this.inner.reset();
  }
}

/** Builds llama.cpp's default chain from options (common_sampler_init). */
export function samplerChainFromOptions(o: SamplingOptions): SamplerChain {
  validateSamplingOptions(o as unknown as Record<string, unknown>);
  const seed = o.seed ?? DEFAULT_SEED;
  const temp = o.temperature ?? 0.8;
  const minKeep = o.minKeep ?? 0;
  const samplers: Sampler[] = [];

  const bias: [number, number][] = [...(o.logitBias ?? [])];
  if (o.ignoreEos) { for (const id of o.eogTokens ?? []) bias.push([id, -Infinity]); }
  if (bias.length) samplers.push(new LogitBiasSampler(bias));

  const mirostat = o.mirostat ?? 0;
  if (mirostat === 0) {
    let lastN = o.repeatLastN ?? 64;
    if (lastN === -1) lastN = o.nCtx ?? 0;
    const pen = new PenaltiesSampler({
      lastN,
      repeat: o.repeatPenalty ?? 1,
      frequency: o.frequencyPenalty ?? 0,
      presence: o.presencePenalty ?? 0,
    });
    const nl = o.newlineToken;
    samplers.push(
      o.penalizeNewline === false && nl !== undefined ? new NewlineExemptPenalties(pen, nl) : pen,
    );
    samplers.push(new TopKSampler(o.topK ?? 40));
    samplers.push(new TypicalSampler(o.typicalP ?? 1, minKeep));
    samplers.push(new TopPSampler(o.topP ?? 0.95, minKeep));
    samplers.push(new MinPSampler(o.minP ?? 0.05, minKeep));
    samplers.push(new TempExtSampler(temp, o.dynatempRange ?? 0, o.dynatempExponent ?? 1));
    samplers.push(new DistSampler(seed));
  } else {
    const m = { seed, tau: o.mirostatTau ?? 5, eta: o.mirostatEta ?? 0.1 };
    samplers.push(new TempSampler(temp));
    samplers.push(
      mirostat === 1 ? new MirostatSampler(o.nVocab, m, 100) : new MirostatV2Sampler(m),
    );
  }

  let grammar: GrammarConstraint | undefined;
  if (typeof o.grammar === "string") {
    if (!o.pieces) throw new TypeError("samplerChainFromOptions: a GBNF grammar needs `pieces`");
    grammar = new GrammarSampler(o.grammar, {
      nVocab: o.nVocab,
      pieces: o.pieces,
      eogTokens: o.eogTokens ?? [],
    }, { index: o.grammarIndex });
  } else grammar = o.grammar;
  return new SamplerChain(samplers, { grammar });
}
