/**
 * Text generation: prompt → tokens → decode loop → sampler chain → text, as
 * an async iterator of tokens with timings, cancellable by AbortSignal.
 * Classifier-free guidance runs a second context on the negative prompt and
 * feeds both contexts the same generated tokens.
 *
 * @module
 */
import { type JsonSchema, jsonSchemaToGrammar } from "../grammar/json_schema.ts";
import { applyCfg } from "../sample/cfg.ts";
import {
  type SamplerChain,
  samplerChainFromOptions,
  type SamplingOptions,
} from "../sample/chain.ts";
import { validateGenerateOptions } from "../sample/options.ts";
import { StreamDecoder } from "../tokenizer/mod.ts";
import { OptionError } from "../options.ts";
import { Context, ContextError, type ContextOptions } from "./context.ts";
import { choiceOptions } from "./backends.ts";

/** Options of {@link generate}. */
export interface GenerateOptions
  extends Omit<SamplingOptions, "nVocab" | "grammar" | "pieces" | "eogTokens"> {
  /** Tokens to generate at most (default 128; -1 or Infinity: until end of generation or a full context). */
  maxTokens?: number;
  /** Add BOS/EOS as the model asks when tokenizing the prompt (default true). */
  addSpecial?: boolean;
  /** Turn special-token text in the prompt into the special tokens (default false). */
  parseSpecial?: boolean;
  /** GBNF grammar the output must follow. */
  grammar?: string;
  /** JSON schema the output must validate against (converted to GBNF). */
  jsonSchema?: JsonSchema;
  /** Classifier-free guidance: negative prompt and scale (1 = off; > 1 pushes away). */
  cfg?: { negativePrompt: string; scale: number };
  /** Stop at end-of-generation tokens (default true). */
  stopAtEog?: boolean;
  /** Render control tokens as text (default false). */
  special?: boolean;
  /** Cancels generation between tokens (and aborts a running decode). */
  signal?: AbortSignal;
}

/** One generated token. */
export interface GeneratedToken {
  /** Token id; -1 for a final flush of text held back as partial UTF-8. */
  readonly id: number;
  /** Text this token completes (may be "" while a UTF-8 sequence is partial). */
  readonly text: string;
}

/** Timings of a generation. */
export interface GenerateTimings {
  /** Prompt tokens evaluated. */
  readonly promptTokens: number;
  /** Tokens generated. */
  readonly genTokens: number;
  /** Prompt tokens per second. */
  readonly promptTps: number;
  /** Generated tokens per second (decode of the sampled tokens). */
  readonly genTps: number;
}

/** Result of a completed generation. */
export interface GenerateResult {
  /** Generated token ids. */
  readonly tokens: number[];
  /** Generated text. */
  readonly text: string;
  /** Speeds. */
  readonly timings: GenerateTimings;
  /** Why it stopped. */
  readonly stopReason: "eog" | "length" | "context";
}

/** Builds the sampler chain `opts` describe for `ctx`'s model. */
export function samplerFor(ctx: Context, opts: GenerateOptions = {}): SamplerChain {
  validateGenerateOptions(opts, "samplerFor");
  const tok = ctx.model.tokenizer;
  let grammar = opts.grammar;
  if (opts.jsonSchema !== undefined) grammar = jsonSchemaToGrammar(opts.jsonSchema);
  const eog: number[] = [];
  for (let i = 0; i < tok.nVocab; i++) if (tok.isEog(i)) eog.push(i);
  return samplerChainFromOptions({
    ...opts,
    nVocab: ctx.model.hparams.nVocab,
    nCtx: ctx.nCtx,
    grammar,
    pieces: grammar ? (id) => tok.pieceBytes(id, { special: false }) : undefined,
    eogTokens: eog,
  });
}

/**
 * Generates from `prompt`, yielding each token as it is sampled; the
 * iterator's return value is the {@link GenerateResult}. The context's cache
 * is cleared first. The generation holds the context from its first step
 * until it finishes (or the iterator is returned): a second generation or
 * decode on the same context waits for it rather than mixing into it.
 */
export async function* generate(
  ctx: Context,
  prompt: string,
  opts: GenerateOptions = {},
): AsyncGenerator<GeneratedToken, GenerateResult, undefined> {
  if (typeof prompt !== "string") throw new OptionError("generate", "prompt", prompt, "a string");
  validateGenerateOptions(opts);
  if (ctx.model.arch.output !== "logits") {
    // An encoder's decode returns hidden states: there is nothing to sample.
    throw new ContextError(
      `generate: ${ctx.model.file.header.path} is a ${ctx.model.hparams.arch} model, which ` +
        `outputs hidden states (embeddings), not next-token logits: it cannot generate text`,
    );
  }
  const tok = ctx.model.tokenizer;
  // -1 is llama.cpp's "until end of generation or a full context".
  const maxTokens = opts.maxTokens === -1 ? Infinity : opts.maxTokens ?? 128;
  const chain = samplerFor(ctx, opts);
  const stream = new StreamDecoder(tok, { special: opts.special });
  const promptIds = tok.encode(prompt, {
    addSpecial: opts.addSpecial ?? true,
    parseSpecial: opts.parseSpecial,
  });
  if (promptIds.length === 0) throw new RangeError("generate: the prompt has no tokens");
  // Penalties look at the prompt; the grammar constrains only the output.
  for (const id of promptIds) chain.accept(id, false);

  using lease = await ctx.acquire(opts.signal);
  let guide: Context | null = null;
  try {
    lease.seqRm(0, -1, -1); // sequence 0 only: other sequences keep their cells
    const t0 = performance.now();
    let logits = (await lease.decode(promptIds, { signal: opts.signal })).logits[0];
    let guideLogits: Float32Array | null = null;
    if (opts.cfg && opts.cfg.scale !== 1) {
      guide = await Context.create(ctx.model, contextOptionsOf(ctx));
      const neg = tok.encode(opts.cfg.negativePrompt, {
        addSpecial: opts.addSpecial ?? true,
        parseSpecial: opts.parseSpecial,
      });
      guideLogits = (await guide.decode(neg, { signal: opts.signal })).logits[0];
    }
    const t1 = performance.now();
    const tokens: number[] = [];
    let text = "";
    let stopReason: GenerateResult["stopReason"] = "length";
    while (tokens.length < maxTokens) {
      opts.signal?.throwIfAborted();
      if (guideLogits) applyCfg(logits, guideLogits, opts.cfg!.scale);
      const id = chain.sample(logits);
      chain.accept(id);
      if ((opts.stopAtEog ?? true) && tok.isEog(id)) {
        stopReason = "eog";
        break;
      }
      tokens.push(id);
      const piece = stream.push(id);
      text += piece;
      yield { id, text: piece };
      if (tokens.length >= maxTokens) break;
      if (ctx.nPast + 1 > ctx.nCtx || (guide && guide.nPast + 1 > guide.nCtx)) {
        stopReason = "context";
        break;
      }
      logits = (await lease.decode([id], { signal: opts.signal })).logits[0];
      if (guide) guideLogits = (await guide.decode([id], { signal: opts.signal })).logits[0];
    }
    const tail = stream.flush();
    if (tail) {
      text += tail;
      yield { id: -1, text: tail };
    }
    const t2 = performance.now();
    return {
      tokens,
      text,
      stopReason,
      timings: {
        promptTokens: promptIds.length,
        genTokens: tokens.length,
        promptTps: promptIds.length / ((t1 - t0) / 1000),
        genTps: tokens.length / Math.max(1e-9, (t2 - t1) / 1000),
      },
    };
  } finally {
    guide?.[Symbol.dispose]();
  }
}

/** Runs {@link generate} to the end and returns its result. */
export async function generateText(
  ctx: Context,
  prompt: string,
  opts: GenerateOptions = {},
): Promise<GenerateResult> {
  const it = generate(ctx, prompt, opts);
  for (;;) {
    const r = await it.next();
    if (r.done) return r.value;
  }
}

/**
 * {@link generate} as a ReadableStream of text chunks (for `Response`
 * bodies and pipes); cancelling the stream stops generation.
 */
export function generateStream(
  ctx: Context,
  prompt: string,
  opts: GenerateOptions = {},
): ReadableStream<string> {
  const it = generate(ctx, prompt, opts);
  return new ReadableStream<string>({
    async pull(controller) {
      const r = await it.next();
      if (r.done) controller.close();
      else if (r.value.text) controller.enqueue(r.value.text);
    },
    async cancel() {
      await it.return(undefined as never);
    },
  });
}

function contextOptionsOf(ctx: Context): ContextOptions {
  return {
    nCtx: ctx.nCtx,
    nBatch: ctx.nBatch,
    threads: ctx.threads,
    kvType: ctx.kvType,
    ...choiceOptions(ctx.backendChoice),
  };
}
