/**
 * Typed access to llama.cpp's samplers and grammar matcher through
 * oracle_sample.c. Sampler chains are described by {@link OracleSamplerSpec}
 * objects and flattened into the float spec array the shim reads.
 *
 * @module
 */
import { cstr, openOracle, type OracleModel } from "./oracle.ts";

const SYMBOLS = {
  ors_chain_new: { parameters: ["buffer", "i32", "i32"], result: "pointer" },
  ors_chain_free: { parameters: ["pointer"], result: "void" },
  ors_chain_accept: { parameters: ["pointer", "i32"], result: "void" },
  ors_chain_reset: { parameters: ["pointer"], result: "void" },
  ors_chain_apply: {
    parameters: ["pointer", "buffer", "i32", "buffer", "buffer", "buffer", "buffer"],
    result: "i32",
  },
  ors_chain_bench: { parameters: ["pointer", "buffer", "i32", "i32"], result: "f64" },
  ors_grammar_new: { parameters: ["buffer", "buffer"], result: "pointer" },
  ors_grammar_free: { parameters: ["pointer"], result: "void" },
  ors_grammar_match: { parameters: ["buffer", "buffer", "buffer", "i32"], result: "i32" },
  ors_grammar_sampler_new: { parameters: ["pointer", "buffer", "buffer"], result: "pointer" },
  ors_sampler_free: { parameters: ["pointer"], result: "void" },
  ors_sampler_accept: { parameters: ["pointer", "i32"], result: "void" },
  ors_grammar_sampler_allowed: { parameters: ["pointer", "i32", "buffer"], result: "i32" },
  ors_grammar_sampler_bench: { parameters: ["pointer", "i32", "i32"], result: "f64" },
  ors_vocab_is_eog: { parameters: ["pointer", "i32"], result: "i32" },
} as const satisfies Deno.ForeignLibraryInterface;

type Lib = Deno.DynamicLibrary<typeof SYMBOLS>;
let lib: Lib | null = null;

async function open(): Promise<Lib> {
  lib ??= await openOracle(SYMBOLS);
  return lib;
}

/** One llama.cpp sampler, as passed to `llama_sampler_init_*`. */
export type OracleSamplerSpec =
  | { kind: "logit_bias"; bias: [number, number][] }
  | { kind: "penalties"; lastN: number; repeat: number; freq: number; present: number }
  | { kind: "top_k"; k: number }
  | { kind: "typical"; p: number; minKeep: number }
  | { kind: "top_p"; p: number; minKeep: number }
  | { kind: "min_p"; p: number; minKeep: number }
  | { kind: "temp"; t: number }
  | { kind: "temp_ext"; t: number; delta: number; exponent: number }
  | { kind: "mirostat"; seed: number; tau: number; eta: number; m: number }
  | { kind: "mirostat_v2"; seed: number; tau: number; eta: number }
  | { kind: "greedy" }
  | { kind: "dist"; seed: number };

function flatten(specs: OracleSamplerSpec[]): Float32Array<ArrayBuffer> {
  const out: number[] = [];
  const push = (kind: number, ...p: number[]) => out.push(kind, p.length, ...p);
  for (const s of specs) {
    switch (s.kind) {
      case "logit_bias":
        push(1, ...s.bias.flat());
        break;
      case "penalties":
        push(2, s.lastN, s.repeat, s.freq, s.present);
        break;
      case "top_k":
        push(3, s.k);
        break;
      case "typical":
        push(4, s.p, s.minKeep);
        break;
      case "top_p":
        push(5, s.p, s.minKeep);
        break;
      case "min_p":
        push(6, s.p, s.minKeep);
        break;
      case "temp":
        push(7, s.t);
        break;
      case "temp_ext":
        push(8, s.t, s.delta, s.exponent);
        break;
      case "mirostat":
        push(9, s.seed, s.tau, s.eta, s.m);
        break;
      case "mirostat_v2":
        push(10, s.seed, s.tau, s.eta);
        break;
      case "greedy":
        push(11);
        break;
      case "dist":
        push(12, s.seed);
        break;
    }
  }
  // Seeds travel as floats: keep them below 2^24 so they arrive exact.
  return Float32Array.from(out);
}

/** What one llama.cpp chain application left in the candidate array. */
export interface OracleApplied {
  ids: Int32Array;
  logits: Float32Array;
  probs: Float32Array;
  selected: number;
  sorted: boolean;
}

/** A llama.cpp sampler chain. */
export class OracleChain implements Disposable {
  #lib: Lib;
  #ptr: Deno.PointerObject;
  #nVocab: number;

  constructor(lib: Lib, ptr: Deno.PointerObject, nVocab: number) {
    this.#lib = lib;
    this.#ptr = ptr;
    this.#nVocab = nVocab;
  }

  /** Applies the chain to the candidates {i, logits[i]}. */
  apply(logits: Float32Array): OracleApplied {
    if (logits.length !== this.#nVocab) throw new RangeError("oracle chain: logits length");
    const n = logits.length;
    const ids = new Int32Array(n), lg = new Float32Array(n), p = new Float32Array(n);
    const meta = new Int32Array(2);
    const size = this.#lib.symbols.ors_chain_apply(
      this.#ptr,
      logits as Float32Array<ArrayBuffer>,
      n,
      ids,
      lg,
      p,
      meta,
    );
    if (size < 0) throw new Error("oracle chain: apply failed");
    return {
      ids: ids.slice(0, size),
      logits: lg.slice(0, size),
      probs: p.slice(0, size),
      selected: meta[0],
      sorted: meta[1] === 1,
    };
  }

  /** llama_sampler_accept. */
  accept(token: number): void {
    this.#lib.symbols.ors_chain_accept(this.#ptr, token);
  }

  /** llama_sampler_reset. */
  reset(): void {
    this.#lib.symbols.ors_chain_reset(this.#ptr);
  }

  /** Mean nanoseconds per application over `reps` runs. */
  bench(logits: Float32Array, reps: number): number {
    return this.#lib.symbols.ors_chain_bench(
      this.#ptr,
      logits as Float32Array<ArrayBuffer>,
      logits.length,
      reps,
    );
  }

  [Symbol.dispose](): void {
    this.#lib.symbols.ors_chain_free(this.#ptr);
  }
}

/** A llama.cpp grammar sampler bound to a model's vocabulary. */
export class OracleGrammarSampler implements Disposable {
  #lib: Lib;
  #ptr: Deno.PointerObject;
  #nVocab: number;

  constructor(lib: Lib, ptr: Deno.PointerObject, nVocab: number) {
    this.#lib = lib;
    this.#ptr = ptr;
    this.#nVocab = nVocab;
  }

  /** Which token ids the grammar allows now (1) or rejects (0). */
  allowed(): Uint8Array {
    const out = new Uint8Array(this.#nVocab);
    this.#lib.symbols.ors_grammar_sampler_allowed(this.#ptr, this.#nVocab, out);
    return out;
  }

  /** Advances the grammar by a token (must be allowed). */
  accept(token: number): void {
    if (token < 0 || token >= this.#nVocab) throw new RangeError("oracle grammar: token id");
    this.#lib.symbols.ors_sampler_accept(this.#ptr, token);
  }

  /** Mean nanoseconds of one apply over the whole vocabulary. */
  bench(reps: number): number {
    return this.#lib.symbols.ors_grammar_sampler_bench(this.#ptr, this.#nVocab, reps);
  }

  [Symbol.dispose](): void {
    this.#lib.symbols.ors_sampler_free(this.#ptr);
  }
}

/** llama.cpp's samplers and grammar. */
export interface OracleSampling {
  /** A chain of samplers (llama_sampler_chain_init + chain_add). */
  chain(specs: OracleSamplerSpec[], nVocab: number): OracleChain;
  /** Whether llama.cpp builds the grammar (parse + root + left recursion checks). */
  grammarBuilds(grammar: string, root?: string): boolean;
  /** Feeds `text` code point by code point; true iff all accepted and the grammar can end. */
  grammarMatches(grammar: string, text: string, root?: string): boolean;
  /** llama_sampler_init_grammar over a model's vocabulary. */
  grammarSampler(model: OracleModel, grammar: string, root?: string): OracleGrammarSampler;
  /** The end-of-generation token ids of a model's vocabulary (llama_vocab_is_eog). */
  eogTokens(model: OracleModel): Set<number>;
}

/** Opens the sampling oracle. */
export async function loadSamplingOracle(): Promise<OracleSampling> {
  const l = await open();
  const s = l.symbols;
  return {
    chain(specs, nVocab) {
      const spec = flatten(specs);
      const p = s.ors_chain_new(spec, spec.length, nVocab);
      if (!p) throw new Error("oracle: could not build sampler chain");
      return new OracleChain(l, p, nVocab);
    },
    grammarBuilds(grammar, root = "root") {
      const p = s.ors_grammar_new(cstr(grammar), cstr(root));
      if (!p) return false;
      s.ors_grammar_free(p);
      return true;
    },
    grammarMatches(grammar, text, root = "root") {
      const cps = Uint32Array.from([...text].map((c) => c.codePointAt(0)!));
      const rc = s.ors_grammar_match(cstr(grammar), cstr(root), cps, cps.length);
      if (rc < 0) throw new Error("oracle: grammar does not build");
      return rc === 1;
    },
    grammarSampler(model, grammar, root = "root") {
      const p = s.ors_grammar_sampler_new(model.ptr, cstr(grammar), cstr(root));
      if (!p) throw new Error("oracle: grammar sampler failed to build");
      return new OracleGrammarSampler(l, p, model.nVocab);
    },
    eogTokens(model) {
      const out = new Set<number>();
      for (let i = 0; i < model.nVocab; i++) if (s.ors_vocab_is_eog(model.ptr, i)) out.add(i);
      return out;
    },
  };
}

/** Ours vs llama.cpp, nanoseconds per token. */
export interface CostPair {
  /** This library. */
  ours: number;
  /** llama.cpp (oracle libllama.so). */
  llamaCpp: number;
}

/** Per-token sampling cost, ours vs llama.cpp (nanoseconds). */
export interface SamplingCost {
  /** Vocabulary size used. */
  nVocab: number;
  /** Default chain (penalties, top-k 40, top-p 0.95, min-p 0.05, temp 0.8, dist). */
  chain: CostPair;
  /** The same chain after 64 accepted tokens, so the penalties have work to do. */
  chainWithHistory: CostPair;
  /** The default chain on a 152k vocabulary (qwen2-sized), with history. */
  chainLarge: CostPair & { nVocab: number };
  /** json.gbnf filter over the whole vocabulary, at the start of a JSON value. */
  grammar: CostPair;
}

function lcgLogits(n: number): Float32Array {
  const logits = new Float32Array(n);
  let a = 12345;
  for (let i = 0; i < n; i++) {
    a = (Math.imul(a, 1103515245) + 12345) >>> 0;
    logits[i] = (a / 4294967296) * 10 - 5;
  }
  return logits;
}

const DEFAULT_SPECS: OracleSamplerSpec[] = [
  { kind: "penalties", lastN: 64, repeat: 1.1, freq: 0, present: 0 },
  { kind: "top_k", k: 40 },
  { kind: "top_p", p: 0.95, minKeep: 0 },
  { kind: "min_p", p: 0.05, minKeep: 0 },
  { kind: "temp_ext", t: 0.8, delta: 0, exponent: 1 },
  { kind: "dist", seed: 1 },
];

/**
 * Default chain cost, ours vs llama.cpp, measured in alternating rounds
 * (the minimum of each side is kept, so a busy machine hurts both alike).
 */
async function chainCost(
  sampling: OracleSampling,
  n: number,
  history: number,
  reps: number,
  rounds: number,
): Promise<CostPair> {
  const { samplerChainFromOptions } = await import("../../lib/sample/chain.ts");
  const { measureChainCost } = await import("../../bench/sample.ts");
  const logits = lcgLogits(n);
  const ours = samplerChainFromOptions({ nVocab: n, seed: 1, repeatPenalty: 1.1 });
  using ref = sampling.chain(DEFAULT_SPECS, n);
  for (let i = 0; i < history; i++) {
    const t = (i * 7919 + 13) % n;
    ours.accept(t);
    ref.accept(t);
  }
  let best = { ours: Infinity, llamaCpp: Infinity };
  for (let r = 0; r < rounds; r++) {
    best = {
      ours: Math.min(best.ours, measureChainCost(ours, logits, reps)),
      llamaCpp: Math.min(best.llamaCpp, ref.bench(logits, reps)),
    };
  }
  return best;
}

/**
 * Measures the sampler chain and the grammar filter on a 32k vocabulary
 * (llama-2-tiny-random by default), ours vs llama.cpp, for `deno task bench`.
 */
export async function compareSamplingCost(opts: {
  modelPath?: string;
  grammarPath?: string;
  reps?: number;
  rounds?: number;
} = {}): Promise<SamplingCost> {
  const { loadOracle } = await import("./oracle.ts");
  const { GrammarSampler } = await import("../../lib/sample/grammar.ts");
  const { measureGrammarCost } = await import("../../bench/sample.ts");
  const root = new URL("../../", import.meta.url);
  const modelPath = opts.modelPath ??
    new URL("../shared/fixtures/models/llama-2-tiny-random.gguf", root).pathname;
  const grammarPath = opts.grammarPath ??
    new URL("../shared/fixtures/grammars/json.gbnf", root).pathname;
  const reps = opts.reps ?? 30;
  const rounds = opts.rounds ?? 5;
  const sampling = await loadSamplingOracle();
  using model = (await loadOracle()).load(modelPath, { vocabOnly: true });
  const n = model.nVocab;
  const chain = await chainCost(sampling, n, 0, reps, rounds);
  const chainWithHistory = await chainCost(sampling, n, 64, reps, rounds);
  const nLarge = 152064;
  const chainLarge = { nVocab: nLarge, ...await chainCost(sampling, nLarge, 64, reps, rounds) };
  const gbnf = Deno.readTextFileSync(grammarPath);
  const g = new GrammarSampler(gbnf, {
    nVocab: n,
    pieces: (i) => model.pieceBytes(i, { special: true }),
    eogTokens: sampling.eogTokens(model),
  });
  using gref = sampling.grammarSampler(model, gbnf);
  const grammar = {
    ours: measureGrammarCost(g, [], reps),
    llamaCpp: gref.bench(Math.min(reps, 10)),
  };
  return { nVocab: n, chain, chainWithHistory, chainLarge, grammar };
}

if (import.meta.main) {
  const c = await compareSamplingCost();
  const us = (p: CostPair) =>
    `ours ${(p.ours / 1000).toFixed(1).padStart(7)} µs   llama.cpp ${
      (p.llamaCpp / 1000).toFixed(1).padStart(7)
    } µs`;
  console.log(`default chain, ${c.nVocab} vocab              ${us(c.chain)}`);
  console.log(`default chain, ${c.nVocab} vocab, 64 history  ${us(c.chainWithHistory)}`);
  console.log(`default chain, ${c.chainLarge.nVocab} vocab, 64 history ${us(c.chainLarge)}`);
  console.log(`json grammar, ${c.nVocab} vocab               ${us(c.grammar)}`);
}
