/**
 * Embeddings as llama.cpp's `llama-embedding` computes them: inputs packed
 * into batches as separate sequences (batch_add_seq), every token an
 * output, the final hidden states pooled per sequence (build_pooling:
 * NONE, MEAN, CLS, LAST) and normalized (common_embd_normalize).
 *
 * Pooling runs here on the per-token rows a context returns, rather than
 * in the graph: the same sums llama.cpp's pooling graph takes, and a
 * sequence's rows are pooled whole even when its batch spans several
 * micro-batches (llama.cpp pools each micro-batch on its own).
 *
 * @module
 */
import { OptionChecker, OptionError } from "../options.ts";
import type { Model } from "../model/model.ts";
import type { Context } from "./context.ts";
import type { ContextLease } from "./lease.ts";
import { ContextError } from "./errors.ts";

/**
 * How the hidden states of one input become its embedding: `"none"` keeps
 * one row per token, `"mean"` averages them, `"cls"` takes the first
 * token's row, `"last"` the last token's (llama.cpp's LLAMA_POOLING_TYPE_*).
 */
export type Pooling = "none" | "mean" | "cls" | "last";

/** The pooling types {@link embed} accepts. */
export const POOLINGS: readonly Pooling[] = ["none", "mean", "cls", "last"];

// llama_pooling_type values as `<arch>.pooling_type` stores them (4 is RANK).
const FILE_POOLING: Readonly<Record<number, Pooling>> = {
  0: "none",
  1: "mean",
  2: "cls",
  3: "last",
};

/** Options of {@link embed}. */
export interface EmbedOptions {
  /**
   * Pooling; default: the model's `<arch>.pooling_type` (llama.cpp's
   * choice when none is asked for), `"none"` when the file has none.
   */
  pooling?: Pooling;
  /**
   * Normalization of each output row, llama-embedding's `--embd-normalize`:
   * -1 none, 0 max-absolute scaled to the int16 range (±32760), 1 taxicab,
   * 2 euclidean (default), p > 2 the p-norm.
   */
  normalize?: number;
  /** Add BOS/EOS (CLS/SEP) as the model asks when tokenizing strings. Default true. */
  addSpecial?: boolean;
  /** Recognise control tokens spelled in strings. Default true, as llama-embedding. */
  parseSpecial?: boolean;
  /** Cancels the work; the promise rejects with the signal's reason. */
  signal?: AbortSignal;
}

const EMBED_KEYS = ["pooling", "normalize", "addSpecial", "parseSpecial", "signal"] as const;

/**
 * The pooling llama.cpp applies to `model` when none is asked for: the
 * file's `<arch>.pooling_type`, or `"none"` without one. A RANK (4) or
 * unknown value throws {@link OptionError} naming the key.
 */
export function defaultPooling(model: Model): Pooling {
  const h = model.file.header;
  const key = `${h.string("general.architecture")}.pooling_type`;
  if (!h.get(key)) return "none";
  const v = h.number(key);
  const p = FILE_POOLING[v];
  if (!p) {
    const what = v === 4 ? "RANK, a reranker's head" : "unknown";
    throw new OptionError(
      "embed",
      "pooling",
      undefined,
      `${POOLINGS.map((x) => JSON.stringify(x)).join(", ")}; the default, ` +
        `${model.file.paths[0]}'s ${key} = ${v} (${what}), is not supported`,
    );
  }
  return p;
}

/**
 * common_embd_normalize (llama.cpp common/common.cpp) of one row into a new
 * array, with its arithmetic: float squares summed in double, a float scale.
 * `norm`: -1 none, 0 max-absolute to the int16 range, 2 euclidean,
 * anything else the p-norm with p = norm (1: taxicab).
 */
export function normalizeEmbedding(v: ArrayLike<number>, norm: number): Float32Array {
  const n = v.length;
  let sum = 0;
  if (norm === -1) {
    sum = 1;
  } else if (norm === 0) {
    for (let i = 0; i < n; i++) sum = Math.max(sum, Math.abs(v[i]));
    sum /= 32760;
  } else if (norm === 2) {
    for (let i = 0; i < n; i++) sum += Math.fround(v[i] * v[i]);
    sum = Math.sqrt(sum);
  } else {
    for (let i = 0; i < n; i++) sum += Math.abs(v[i]) ** norm;
    sum = sum ** (1 / norm);
  }
  const scale = sum > 0 ? Math.fround(1 / sum) : 0;
  const out = new Float32Array(n);
  // A product of two floats is exact in double, so the store rounds once, as C's float multiply.
  for (let i = 0; i < n; i++) out[i] = v[i] * scale;
  return out;
}

/**
 * Pools one sequence's rows (in position order) as llama.cpp's
 * build_pooling: MEAN the average over every row, CLS the first row, LAST
 * the last. `"none"` is not a pooling of rows to one; it throws.
 */
export function poolRows(
  rows: readonly Float32Array[],
  pooling: Exclude<Pooling, "none">,
): Float32Array {
  if (rows.length === 0) throw new RangeError("poolRows: no rows");
  if (pooling === "cls") return rows[0].slice();
  if (pooling === "last") return rows[rows.length - 1].slice();
  const width = rows[0].length;
  const sum = new Float64Array(width);
  for (const r of rows) for (let e = 0; e < width; e++) sum[e] += r[e];
  // llama.cpp multiplies by a float 1/n (inp_mean) inside the sum.
  const div = Math.fround(1 / rows.length);
  const out = new Float32Array(width);
  for (let e = 0; e < width; e++) out[e] = sum[e] * div;
  return out;
}

/** Checks embed's options; returns them resolved. */
function checkOptions(
  ctx: Context,
  inputs: unknown,
  opts: EmbedOptions,
): { pooling: Pooling; normalize: number } {
  const c = new OptionChecker("embed");
  c.object(opts, EMBED_KEYS);
  c.oneOf("pooling", opts.pooling, POOLINGS);
  // llama-embedding's flag is an int; p < -1 is no norm at all.
  c.int("normalize", opts.normalize, -1, 1_000_000);
  c.bool("addSpecial", opts.addSpecial);
  c.bool("parseSpecial", opts.parseSpecial);
  if (opts.signal !== undefined && !(opts.signal instanceof AbortSignal)) {
    c.fail("signal", opts.signal, "an AbortSignal");
  }
  if (!Array.isArray(inputs)) c.fail("inputs", inputs, "an array of strings or token-id arrays");
  return {
    pooling: opts.pooling ?? defaultPooling(ctx.model),
    normalize: opts.normalize ?? 2,
  };
}

/** Tokens of each input: strings tokenized, token arrays checked. */
function tokenizeInputs(
  ctx: Context,
  inputs: readonly (string | ArrayLike<number>)[],
  opts: EmbedOptions,
): Int32Array[] {
  const nVocab = ctx.model.hparams.nVocab;
  return inputs.map((x, k) => {
    let ids: ArrayLike<number>;
    if (typeof x === "string") {
      ids = ctx.model.tokenizer.encode(x, {
        addSpecial: opts.addSpecial ?? true,
        parseSpecial: opts.parseSpecial ?? true,
      });
    } else if (x !== null && typeof x === "object" && typeof x.length === "number") {
      ids = x;
      for (let i = 0; i < ids.length; i++) {
        const t = ids[i];
        if (typeof t !== "number" || !Number.isInteger(t) || t < 0 || t >= nVocab) {
          throw new OptionError("embed", `inputs[${k}][${i}]`, t, `a token id in 0..${nVocab - 1}`);
        }
      }
    } else {
      throw new OptionError("embed", `inputs[${k}]`, x, "a string or an array of token ids");
    }
    if (ids.length === 0) {
      throw new OptionError("embed", `inputs[${k}]`, x, "an input of at least one token");
    }
    return Int32Array.from(ids);
  });
}

/**
 * Embeddings of `inputs` (strings, tokenized as llama-embedding does, or
 * token-id arrays), as llama.cpp's `llama-embedding` computes them: one
 * row per input when pooled, or, with pooling `"none"`, one row per token
 * of every input in order; each row normalized.
 *
 * Inputs are packed into batches as sequences 0, 1, ... while they fit
 * (nSeqMax sequences; nBatch tokens and the cache for decoders, nUbatch
 * tokens and the training context for encoders), and the context's cache
 * is cleared before each batch: embed holds the context for the whole call
 * and leaves its cache empty, so it refuses a decoder's context while a
 * {@link Context.sequence} object is alive. A decoder (llama family) needs
 * a context created with `embeddings: true`.
 *
 * @example
 * ```ts ignore
 * using model = await Model.load("bge-small.gguf");
 * using ctx = await Context.create(model, { nSeqMax: 8 });
 * const [a, b] = await embed(ctx, ["a cat", "a dog"]);
 * ```
 */
export async function embed(
  ctx: Context,
  inputs: readonly (string | ArrayLike<number>)[],
  opts: EmbedOptions = {},
): Promise<Float32Array[]> {
  const { pooling, normalize } = checkOptions(ctx, inputs, opts);
  const encoder = ctx.model.arch.output === "embeddings";
  if (!encoder && !ctx.embeddings) {
    throw new ContextError(
      `embed: ${ctx.label} outputs logits: ${ctx.model.hparams.arch} is a decoder, ` +
        `so create its context with embeddings: true for hidden states`,
    );
  }
  const toks = tokenizeInputs(ctx, inputs, opts);
  // A batch is one decodeBatch call. An encoder runs it as one graph
  // (nUbatch), its positions read from a table of the training context's
  // rows; a decoder's batch goes into the cache, cleared before it.
  const { nCtxTrain } = ctx.model.hparams;
  const perBatch = encoder
    ? Math.min(ctx.nUbatch, ctx.nCtx, nCtxTrain)
    : Math.min(ctx.nBatch, ctx.nCtx);
  toks.forEach((t, k) => {
    if (t.length > perBatch) {
      throw new ContextError(
        `embed: inputs[${k}] has ${t.length} tokens, more than the ${perBatch} one batch of ` +
          `${ctx.label} holds (` +
          (encoder
            ? `nUbatch ${ctx.nUbatch}, nCtx ${ctx.nCtx}, training context ${nCtxTrain})`
            : `nBatch ${ctx.nBatch}, nCtx ${ctx.nCtx})`),
      );
    }
  });
  // llama-embedding's loop: a batch is flushed when the next input would
  // overflow it or every sequence id is taken.
  const batches: number[][] = [];
  let cur: number[] = [], used = 0;
  toks.forEach((t, k) => {
    if (cur.length > 0 && (used + t.length > perBatch || cur.length >= ctx.nSeqMax)) {
      batches.push(cur);
      cur = [];
      used = 0;
    }
    cur.push(k);
    used += t.length;
  });
  if (cur.length > 0) batches.push(cur);

  const out: Float32Array[] = [];
  using lease = await ctx.acquire(opts.signal);
  if (!encoder) {
    // embed clears the whole cache, which would wipe what a Sequence holds.
    // Checked under the lease: a disposed Sequence gives its id back under one.
    for (let id = 0; id < ctx.nSeqMax; id++) {
      if (ctx.seqHeld(id)) {
        throw new ContextError(
          `embed: sequence ${id} of ${ctx.label} is held by a Sequence object, and embed ` +
            `clears the whole cache; dispose it or embed with another context`,
        );
      }
    }
  }
  try {
    for (const ks of batches) {
      out.push(...await embedBatch(lease, ks, toks, { pooling, normalize, signal: opts.signal }));
    }
  } finally {
    // Nothing of the inputs stays cached (a disposed context has no cache left to clear).
    if (!ctx.disposed) lease.clear();
  }
  return out;
}

/** One batch: input ks[s] as sequence s at positions 0.., every token an output; its rows. */
async function embedBatch(
  lease: ContextLease,
  ks: readonly number[],
  toks: readonly Int32Array[],
  o: { pooling: Pooling; normalize: number; signal?: AbortSignal },
): Promise<Float32Array[]> {
  const tokens: number[] = [], pos: number[] = [], seqIds: number[] = [];
  ks.forEach((k, s) => {
    toks[k].forEach((t, i) => {
      tokens.push(t);
      pos.push(i);
      seqIds.push(s);
    });
  });
  // llama-embedding's batch_decode clears the cache before each batch.
  lease.clear();
  const r = await lease.decodeBatch(
    { tokens, pos, seqIds, logits: new Uint8Array(tokens.length).fill(1) },
    { signal: o.signal },
  );
  const rows = r.embeddings;
  if (!rows || rows.length !== tokens.length) {
    const n = rows?.length ?? 0;
    throw new ContextError(
      `embed: ${lease.context.label} returned ${n} hidden states for ${tokens.length} tokens`,
    );
  }
  const out: Float32Array[] = [];
  let at = 0;
  for (const k of ks) {
    const mine = rows.slice(at, at + toks[k].length);
    at += toks[k].length;
    if (o.pooling === "none") {
      for (const row of mine) out.push(normalizeEmbedding(row, o.normalize));
    } else {
      out.push(normalizeEmbedding(poolRows(mine, o.pooling), o.normalize));
    }
  }
  return out;
}
