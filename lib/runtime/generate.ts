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
import { type StepLogprobs, stepLogprobs } from "../sample/logprobs.ts";
import { StreamDecoder } from "../tokenizer/mod.ts";
import { OptionError } from "../options.ts";
import { Context, ContextError, type ContextOptions } from "./context.ts";
import { choiceOptions } from "./backends.ts";
import { noContextShift, Sequence } from "./sequence.ts";

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
  /**
   * When the sequence fills the context, keep the first `nKeep` tokens
   * (after BOS), discard `nDiscard` (default: half of the rest) and go on,
   * the cached keys moved down (llama-server's context shift). Off by
   * default: generation then stops with stopReason "context".
   */
  contextShift?: boolean | { nKeep?: number; nDiscard?: number };
  /**
   * Report each token's log-probability and this many most likely
   * alternatives (0: the token's only): the log-softmax of the model's
   * logits at that step, before guidance and samplers (llama-server's
   * default, not its post-sampling probabilities).
   */
  logprobs?: number;
}

/** One generated token. */
export interface GeneratedToken {
  /** Token id; -1 for a final flush of text held back as partial UTF-8. */
  readonly id: number;
  /** Text this token completes (may be "" while a UTF-8 sequence is partial). */
  readonly text: string;
  /** Its log-probability and the top alternatives, when `logprobs` was asked. */
  readonly logprobs?: StepLogprobs;
}

/** Timings of a generation. */
export interface GenerateTimings {
  /** Prompt tokens evaluated. */
  readonly promptTokens: number;
  /** Prompt tokens reused from the sequence's cache (not evaluated again). */
  readonly reusedTokens: number;
  /** Context shifts done. */
  readonly shifts: number;
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

// A tokenizer's end-of-generation tokens: a scan of the vocabulary, once
// (a server builds a chain per request).
const EOG = new WeakMap<object, number[]>();

/** Builds the sampler chain `opts` describe for `ctx`'s model. */
export function samplerFor(ctx: Context, opts: GenerateOptions = {}): SamplerChain {
  validateGenerateOptions(opts, "samplerFor");
  const tok = ctx.model.tokenizer;
  let grammar = opts.grammar;
  if (opts.jsonSchema !== undefined) grammar = jsonSchemaToGrammar(opts.jsonSchema);
  let eog = EOG.get(tok);
  if (!eog) {
    eog = [];
    for (let i = 0; i < tok.nVocab; i++) if (tok.isEog(i)) eog.push(i);
    EOG.set(tok, eog);
  }
  return samplerChainFromOptions({
    ...opts,
    nVocab: ctx.model.hparams.nVocab,
    nCtx: ctx.nCtx,
    grammar,
    pieces: grammar ? (id) => tok.pieceBytes(id, { special: false }) : undefined,
    eogTokens: eog,
  });
}

/** What a generation decodes into: a context's sequence 0, or a {@link Sequence}. */
interface Target {
  /** Tokens cached before the prompt (reused). */
  reused: number;
  /** Tokens cached now. */
  nPast(): number;
  /** Logits of the last of `ids`, evaluated after the cache. */
  eval(ids: ArrayLike<number>): Promise<Float32Array>;
  /** Removes [p0, p1) and moves the rest down (context shift). */
  erase(p0: number, p1: number): Promise<void>;
  /** Ends the generation. */
  close(): void;
}

// A context's sequence 0, held (leased) for the whole generation; started afresh.
async function contextTarget(ctx: Context, signal?: AbortSignal): Promise<Target> {
  const lease = await ctx.acquire(signal);
  try {
    if (ctx.seqHeld(0)) {
      throw new ContextError(
        `generate: sequence 0 of ${ctx.label} is held by a Sequence object; generate on that sequence`,
      );
    }
    lease.seqRm(0, -1, -1); // sequence 0 only: other sequences keep their cells
  } catch (e) {
    lease[Symbol.dispose]();
    throw e;
  }
  // One row for the whole generation: each step's logits are sampled (and
  // copied where logprobs keep them) before the next decode overwrites it.
  const into = new Float32Array(ctx.model.hparams.nVocab);
  return {
    reused: 0,
    nPast: () => lease.seqPosMax(0) + 1,
    eval: async (ids) => (await lease.decode(ids, { signal, into })).logits[0],
    erase: (p0, p1) => {
      lease.seqRm(0, p0, p1);
      lease.seqAdd(0, p1, -1, p0 - p1);
      return Promise.resolve();
    },
    close: () => lease[Symbol.dispose](),
  };
}

// A sequence keeps its cache: a prompt sharing a prefix with what it holds
// evaluates only the rest (llama-server's cache_prompt); other sequences'
// evaluations share the batches.
async function sequenceTarget(seq: Sequence, prompt: number[], signal?: AbortSignal) {
  const held = seq.tokens;
  let same = 0;
  while (same < held.length && same < prompt.length && held[same] === prompt[same]) same++;
  // The last prompt token is evaluated again when all is cached: its logits are needed.
  if (same === prompt.length && same > 0) same--;
  await seq.truncate(same, signal);
  const into = new Float32Array(seq.context.model.hparams.nVocab); // as contextTarget's
  const t: Target = {
    // A recurrent sequence that diverged was cleared: everything is evaluated.
    reused: seq.tokens.length,
    nPast: () => seq.nPast,
    eval: async (ids) => (await seq.evaluate(ids, { signal, into })).logits[0],
    erase: (p0, p1) => seq.erase(p0, p1, signal),
    close() {},
  };
  return t;
}

/**
 * Generates from `prompt`, yielding each token as it is sampled; the
 * iterator's return value is the {@link GenerateResult}.
 *
 * On a {@link Context} it uses sequence 0, cleared first, and holds the
 * context from its first step until it finishes (or the iterator is
 * returned): a second generation or decode on the same context waits for
 * it rather than mixing into it. On a {@link Sequence} it keeps what the
 * sequence holds: a prompt that starts with the sequence's tokens (the
 * next turn of a chat) evaluates only the new ones, and generations on
 * other sequences of the context run at the same time, in shared batches.
 *
 * A prompt longer than the context is an error naming both lengths. When
 * the sequence fills the context, generation stops (stopReason "context")
 * unless `contextShift` asks to discard older tokens and go on.
 *
 * @example A chat turn on a sequence: the earlier turns are not evaluated again
 * ```ts ignore
 * using seq = ctx.sequence();
 * const first = await generateText(seq, "Q: Who is Natasha?\nA:");
 * const next = await generateText(seq, "Q: Who is Natasha?\nA:" + first.text + "\nQ: And Pierre?\nA:");
 * next.timings.reusedTokens; // the first turn's tokens
 * ```
 */
export async function* generate(
  target: Context | Sequence,
  prompt: string,
  opts: GenerateOptions = {},
): AsyncGenerator<GeneratedToken, GenerateResult, undefined> {
  if (typeof prompt !== "string") throw new OptionError("generate", "prompt", prompt, "a string");
  validateGenerateOptions(opts);
  const seq = target instanceof Sequence ? target : null;
  const ctx = seq ? seq.context : target as Context;
  if (!(ctx instanceof Context)) {
    throw new OptionError("generate", "target", target, "a Context or a Sequence");
  }
  if (ctx.model.arch.output !== "logits" || ctx.embeddings) {
    // An encoder's decode returns hidden states: there is nothing to sample.
    const what = ctx.model.arch.output === "logits"
      ? `runs in an embeddings context, which outputs hidden states`
      : `is a ${ctx.model.hparams.arch} model, which outputs hidden states`;
    throw new ContextError(
      `generate: ${ctx.model.file.header.path} ${what} (embeddings), not next-token logits: ` +
        `it cannot generate text`,
    );
  }
  const tok = ctx.model.tokenizer;
  // -1 is llama.cpp's "until end of generation or a full context".
  const maxTokens = opts.maxTokens === -1 ? Infinity : opts.maxTokens ?? 128;
  const chain = samplerFor(ctx, opts);
  const stream = new StreamDecoder(tok, { special: opts.special });
  const encode = (text: string) =>
    tok.encode(text, { addSpecial: opts.addSpecial ?? true, parseSpecial: opts.parseSpecial });
  const promptIds = encode(prompt);
  if (promptIds.length === 0) throw new RangeError("generate: the prompt has no tokens");
  if (promptIds.length > ctx.nCtxSeq) {
    throw new ContextError(
      `generate: the prompt has ${promptIds.length} tokens; the context holds ${ctx.nCtxSeq}`,
    );
  }
  const shift = shiftRule(opts, ctx, tok.encode("", { addSpecial: opts.addSpecial ?? true }));
  if (shift && ctx.recurrentMemory) throw noContextShift(ctx, "generate");
  // Penalties look at the prompt; the grammar constrains only the output.
  for (const id of promptIds) chain.accept(id, false);

  const main = seq
    ? await sequenceTarget(seq, promptIds, opts.signal)
    : await contextTarget(ctx, opts.signal);
  let guide: Target | null = null;
  let guideOwner: Context | Sequence | null = null;
  try {
    const t0 = performance.now();
    const guided = opts.cfg && opts.cfg.scale !== 1;
    // The negative prompt runs beside the prompt: in a second context for a
    // context, in a second sequence (sharing the batches) for a sequence.
    if (guided) {
      guideOwner = seq ? ctx.sequence() : await Context.create(ctx.model, contextOptionsOf(ctx));
      guide = guideOwner instanceof Sequence
        ? await sequenceTarget(guideOwner, [], opts.signal)
        : await contextTarget(guideOwner, opts.signal);
    }
    const neg = guided ? encode(opts.cfg!.negativePrompt) : [];
    let [logits, guideLogits] = await Promise.all([
      main.eval(promptIds.slice(main.reused)),
      guide ? guide.eval(neg) : null,
    ]);
    const t1 = performance.now();
    const tokens: number[] = [];
    let text = "";
    let stopReason: GenerateResult["stopReason"] = "length";
    let shifts = 0;
    while (tokens.length < maxTokens) {
      opts.signal?.throwIfAborted();
      // The model's distribution, before guidance and samplers change the logits.
      const raw = opts.logprobs !== undefined ? logits.slice() : null;
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
      yield raw ? { id, text: piece, logprobs: stepLogprobs(raw, id, opts.logprobs!) } : {
        id,
        text: piece,
      };
      if (tokens.length >= maxTokens) break;
      // Without shifting, every cell is used; with it, llama-server's rule:
      // shift when the next token would fill the context.
      let full = false;
      for (const t of guide ? [main, guide] : [main]) {
        if (!shift) full ||= t.nPast() + 1 > ctx.nCtxSeq;
        else if (t.nPast() + 1 >= ctx.nCtxSeq) {
          await t.erase(...shift(t.nPast()));
          shifts++;
        }
      }
      if (full) {
        stopReason = "context";
        break;
      }
      [logits, guideLogits] = await Promise.all([
        main.eval([id]),
        guide ? guide.eval([id]) : null,
      ]);
    }
    const tail = stream.flush();
    if (tail) {
      text += tail;
      yield { id: -1, text: tail };
    }
    const t2 = performance.now();
    const evaluated = promptIds.length - main.reused;
    return {
      tokens,
      text,
      stopReason,
      timings: {
        promptTokens: evaluated,
        reusedTokens: main.reused,
        shifts,
        genTokens: tokens.length,
        promptTps: evaluated / ((t1 - t0) / 1000),
        genTps: tokens.length / Math.max(1e-9, (t2 - t1) / 1000),
      },
    };
  } finally {
    main.close();
    guide?.close();
    guideOwner?.[Symbol.dispose]();
  }
}

/**
 * llama-server's context shift (server_context::pre_decode): keep nKeep
 * tokens (plus BOS when the tokenizer adds one; at most nCtx - 4), discard
 * nDiscard or half of what is left after them, clamped to leave one.
 * Returns the range [nKeep, nKeep + nDiscard) to erase, or null when off.
 */
function shiftRule(
  opts: GenerateOptions,
  ctx: Context,
  specialOnly: number[],
): ((nPast: number) => [number, number]) | null {
  const o = opts.contextShift;
  if (!o) return null;
  const cfg = o === true ? {} : o;
  const bos = specialOnly.length > 0 ? 1 : 0;
  return (nPast) => {
    const nKeep = Math.min(ctx.nCtxSeq - 4, (cfg.nKeep ?? 0) + bos);
    const nLeft = nPast - nKeep;
    let nDiscard = cfg.nDiscard ? cfg.nDiscard : Math.trunc(nLeft / 2);
    nDiscard = Math.min(Math.max(nDiscard, 0), Math.max(0, nLeft - 1));
    return [nKeep, nKeep + nDiscard];
  };
}

/** Runs {@link generate} to the end and returns its result. */
export async function generateText(
  ctx: Context | Sequence,
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
  ctx: Context | Sequence,
  prompt: string,
  opts: GenerateOptions = {},
): ReadableStream<string> {
  const it = generate(ctx, prompt, opts);
  return new ReadableStream<string>({
    // A token may have no text of its own (a partial UTF-8 sequence, a
    // held-back stop prefix); the stream calls pull again only after an
    // enqueue, so keep going until one happens or the generation ends.
    async pull(controller) {
      for (;;) {
        const r = await it.next();
        if (r.done) return controller.close();
        if (r.value.text) return controller.enqueue(r.value.text);
      }
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
    nUbatch: ctx.nUbatch,
    threads: ctx.threads,
    kvType: ctx.kvType,
    ...choiceOptions(ctx.backendChoice),
  };
}
