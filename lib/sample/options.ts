/**
 * Checks of the sampling and generation options, run at the top of
 * {@link samplerChainFromOptions} and {@link generate}: a NaN top-k, a NaN
 * CFG scale or an +∞ logit bias is an {@link OptionError} naming the option,
 * not a chain that silently repeats token 0. Also the error for a sampling
 * step that has no finite candidate left (every token banned by biases or
 * by the grammar).
 *
 * @module
 */
import { OptionChecker } from "../options.ts";

/**
 * A sampling step found no token with a finite logit: logit biases or the
 * grammar (or both) ruled out the whole vocabulary, so any pick would be
 * arbitrary. `reason` says which constraint emptied the candidates.
 *
 * @example
 * ```ts
 * import { samplerChainFromOptions, SamplingError } from "@llm-edge/llm-edge";
 *
 * const chain = samplerChainFromOptions({
 *   nVocab: 2,
 *   logitBias: [[0, -Infinity], [1, -Infinity]],
 * });
 * try {
 *   chain.sample(new Float32Array([1, 2]));
 * } catch (e) {
 *   if (e instanceof SamplingError) console.error(e.reason); // "logit-bias"
 * }
 * ```
 */
export class SamplingError extends Error {
  /** The constraint that left no candidate. */
  readonly reason: "grammar" | "logit-bias";
  /** Creates the error. */
  constructor(reason: "grammar" | "logit-bias", message: string, options?: ErrorOptions) {
    super(message, options);
    this.name = "SamplingError";
    this.reason = reason;
  }
}

const SEED_MAX = 0xffffffff;

/** Keys of SamplingOptions (the chain's own options). */
export const SAMPLING_KEYS = [
  "nVocab",
  "temperature",
  "dynatempRange",
  "dynatempExponent",
  "topK",
  "topP",
  "minP",
  "typicalP",
  "minKeep",
  "repeatPenalty",
  "repeatLastN",
  "nCtx",
  "frequencyPenalty",
  "presencePenalty",
  "penalizeNewline",
  "newlineToken",
  "mirostat",
  "mirostatTau",
  "mirostatEta",
  "seed",
  "logitBias",
  "ignoreEos",
  "grammar",
  "pieces",
  "eogTokens",
  "grammarIndex",
] as const;

/** What generate() adds to the sampling options. */
export const GENERATE_KEYS = [
  ...SAMPLING_KEYS.filter((k) => !["nVocab", "grammar", "pieces", "eogTokens"].includes(k)),
  "maxTokens",
  "addSpecial",
  "parseSpecial",
  "grammar",
  "jsonSchema",
  "cfg",
  "stopAtEog",
  "special",
  "signal",
  "contextShift",
  "logprobs",
] as const;

/**
 * Throws an OptionError for the first invalid sampling option of `o`
 * (`where` names the entry point). Unknown keys are not checked here: the
 * chain is built from a spread of generate()'s options.
 */
export function validateSamplingOptions(
  o: Record<string, unknown>,
  where = "samplerChainFromOptions",
): void {
  const c = new OptionChecker(where);
  if (o === null || typeof o !== "object") c.fail("options", o, "an object");
  const nVocab = o.nVocab;
  if (where === "samplerChainFromOptions" || nVocab !== undefined) {
    c.int("nVocab", nVocab ?? NaN, 1, 2 ** 31 - 1);
  }
  const maxId = typeof nVocab === "number" ? nVocab - 1 : Number.MAX_SAFE_INTEGER;
  // temperature < 0 is llama.cpp's greedy-with-probabilities: any finite value.
  c.num("temperature", o.temperature);
  c.num("dynatempRange", o.dynatempRange, 0);
  c.num("dynatempExponent", o.dynatempExponent, 0);
  // top-k <= 0 is "off" in llama.cpp, so every integer is meaningful.
  c.int("topK", o.topK, -(2 ** 31), 2 ** 31 - 1);
  c.num("topP", o.topP, 0, 1);
  c.num("minP", o.minP, 0, 1);
  c.num("typicalP", o.typicalP, 0, 1);
  c.int("minKeep", o.minKeep, 0);
  c.above("repeatPenalty", o.repeatPenalty, 0);
  c.int("repeatLastN", o.repeatLastN, -1);
  c.int("nCtx", o.nCtx, 1);
  c.num("frequencyPenalty", o.frequencyPenalty);
  c.num("presencePenalty", o.presencePenalty);
  c.bool("penalizeNewline", o.penalizeNewline);
  c.int("newlineToken", o.newlineToken, 0, maxId);
  c.oneOf("mirostat", o.mirostat, [0, 1, 2]);
  c.num("mirostatTau", o.mirostatTau, 0);
  c.num("mirostatEta", o.mirostatEta, 0);
  // -1 is llama.cpp's LLAMA_DEFAULT_SEED spelled as a signed int: random.
  c.int("seed", o.seed, -1, SEED_MAX);
  c.bool("ignoreEos", o.ignoreEos);
  if (o.grammar !== undefined && typeof o.grammar !== "string") {
    const g = o.grammar as Record<string, unknown>;
    if (typeof g !== "object" || g === null || typeof g.apply !== "function") {
      c.fail("grammar", o.grammar, "GBNF text or a GrammarConstraint");
    }
  }
  c.fn("pieces", o.pieces);
  if (o.logitBias !== undefined) checkBias(c, o.logitBias, maxId);
  if (o.eogTokens !== undefined) {
    let i = 0;
    for (const t of o.eogTokens as Iterable<unknown>) c.int(`eogTokens[${i++}]`, t, 0, maxId);
  }
}

function checkBias(c: OptionChecker, bias: unknown, maxId: number): void {
  if (bias === null || typeof bias !== "object" || !(Symbol.iterator in bias)) {
    c.fail("logitBias", bias, "[token, bias] pairs or a Map");
  }
  let i = 0;
  for (const pair of bias as Iterable<unknown>) {
    if (!Array.isArray(pair) || pair.length !== 2) {
      c.fail(`logitBias[${i}]`, pair, "a [token, bias] pair");
    }
    const [t, b] = pair;
    c.int(`logitBias[${i}] token`, t, 0, maxId);
    // -Infinity bans a token; +Infinity or NaN would make every probability NaN.
    if (typeof b !== "number" || Number.isNaN(b) || b === Infinity) {
      c.fail(`logitBias[${i}] bias`, b, "a finite number or -Infinity (ban)");
    }
    i++;
  }
}

/**
 * Throws an OptionError for the first invalid {@link generate} option
 * (`where` names the entry point: generate, samplerFor).
 */
export function validateGenerateOptions(o: unknown, where = "generate"): void {
  const c = new OptionChecker(where);
  c.object(o, GENERATE_KEYS);
  if (o === undefined) return;
  const g = o as Record<string, unknown>;
  validateSamplingOptions(g, where);
  // -1 and Infinity: until end of generation or a full context (llama.cpp's -n -1).
  if (g.maxTokens !== Infinity) c.int("maxTokens", g.maxTokens, -1);
  c.bool("addSpecial", g.addSpecial);
  c.bool("parseSpecial", g.parseSpecial);
  c.bool("stopAtEog", g.stopAtEog);
  const cs = g.contextShift;
  if (cs !== undefined && typeof cs !== "boolean") {
    c.object(cs, ["nKeep", "nDiscard"], "contextShift");
    const o = cs as Record<string, unknown>;
    c.int("contextShift.nKeep", o.nKeep, 0);
    c.int("contextShift.nDiscard", o.nDiscard, 0);
  }
  c.bool("special", g.special);
  c.int("logprobs", g.logprobs, 0, 1024);
  c.str("grammar", g.grammar);
  if (g.grammar !== undefined && g.jsonSchema !== undefined) {
    c.fail("jsonSchema", g.jsonSchema, "either grammar or jsonSchema, not both");
  }
  const js = g.jsonSchema;
  if (js !== undefined && typeof js !== "boolean" && (typeof js !== "object" || js === null)) {
    c.fail("jsonSchema", js, "a JSON schema object");
  }
  if (g.cfg !== undefined) {
    c.object(g.cfg, ["negativePrompt", "scale"], "cfg");
    const cfg = g.cfg as { negativePrompt?: unknown; scale?: unknown };
    if (typeof cfg.negativePrompt !== "string") {
      c.fail("cfg.negativePrompt", cfg.negativePrompt, "a string");
    }
    c.num("cfg.scale", cfg.scale ?? NaN);
  }
  if (g.signal !== undefined && !(g.signal instanceof AbortSignal)) {
    c.fail("signal", g.signal, "an AbortSignal");
  }
}
