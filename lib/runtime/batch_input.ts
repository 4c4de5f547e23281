/**
 * The batch a caller hands to {@link Context.decodeBatch} (llama_batch in
 * the shape of plain arrays), checked field by field before any work so a
 * bad value is an {@link OptionError} naming it, and the checks of the
 * sequence edits' arguments (seqRm, seqCp, ...).
 *
 * @module
 */
import { checkTokenIds, OptionError } from "../options.ts";
import { ContextError } from "./errors.ts";
import type { Batch } from "../kv/batch.ts";

/**
 * Input of one {@link Context.decodeBatch} call, like llama.cpp's
 * `llama_batch`: tokens with, optionally, their positions, the sequences
 * each belongs to and which of them produce outputs.
 *
 * @example Two sequences in one batch, an output at the end of each
 * ```ts ignore
 * await ctx.decodeBatch({
 *   tokens: [1, 15, 27, 1, 99],
 *   seqIds: [0, 0, 0, 1, 1],
 *   logits: [false, false, true, false, true],
 * });
 * ```
 */
export interface BatchInput {
  /** Token ids (or give `embd`). */
  readonly tokens?: ArrayLike<number>;
  /**
   * Input embeddings [nEmbd × nTokens] (token-major) in place of token ids,
   * as llama_batch's `embd`: e.g. vectors from another model.
   */
  readonly embd?: Float32Array;
  /** Position of each token; default: each sequence continues after what the cache holds. */
  readonly pos?: ArrayLike<number>;
  /**
   * Sequence id(s) of each token (several: the token is shared by those
   * sequences, like a common prompt); default: every token in sequence 0.
   */
  readonly seqIds?: ReadonlyArray<number | readonly number[]>;
  /** Which tokens produce an output row; default: only the last token. */
  readonly logits?: ArrayLike<boolean | number>;
}

const INT32_MAX = 2 ** 31 - 1;
const KEYS = ["tokens", "embd", "pos", "seqIds", "logits"];

function isList(v: unknown): v is ArrayLike<unknown> {
  return v !== null && typeof v === "object" &&
    typeof (v as ArrayLike<unknown>).length === "number";
}

/** Checks `b` against the model and context and returns it as the KV layer's {@link Batch}. */
export function batchFromInput(
  where: string,
  b: BatchInput,
  o: { nVocab: number; nEmbd: number; nSeqMax: number },
): Batch {
  if (b === null || typeof b !== "object") throw new OptionError(where, "batch", b, "an object");
  for (const k of Object.keys(b)) {
    if (!KEYS.includes(k)) throw new OptionError(where, k, (b as never)[k], `one of ${KEYS}`);
  }
  if ((b.tokens === undefined) === (b.embd === undefined)) {
    throw new OptionError(where, "tokens", b.tokens, "token ids or embd (one of them)");
  }
  let n: number;
  const out: { -readonly [K in keyof Batch]: Batch[K] } = {};
  if (b.tokens !== undefined) {
    checkTokenIds(where, b.tokens, o.nVocab);
    n = b.tokens.length;
    out.token = Int32Array.from(b.tokens);
  } else {
    const e = b.embd;
    if (!(e instanceof Float32Array) || e.length === 0 || e.length % o.nEmbd !== 0) {
      throw new OptionError(where, "embd", e, `a Float32Array of nTokens × ${o.nEmbd} values`);
    }
    const bad = e.findIndex((v) => !Number.isFinite(v));
    if (bad >= 0) throw new OptionError(where, `embd[${bad}]`, e[bad], "a finite number");
    n = e.length / o.nEmbd;
    out.embd = e.slice();
  }
  if (n === 0) throw new OptionError(where, "tokens", b.tokens, "at least one token");
  const sameLength = (name: string, v: unknown): ArrayLike<unknown> => {
    if (!isList(v) || v.length !== n) {
      throw new OptionError(where, name, v, `an array of ${n} values, one per token`);
    }
    return v;
  };
  if (b.pos !== undefined) {
    const pos = sameLength("pos", b.pos);
    for (let i = 0; i < n; i++) {
      const p = pos[i];
      if (typeof p !== "number" || !Number.isInteger(p) || p < 0 || p > INT32_MAX) {
        throw new OptionError(where, `pos[${i}]`, p, `an integer position in 0..${INT32_MAX}`);
      }
    }
    out.pos = Int32Array.from(pos as ArrayLike<number>);
  }
  if (b.seqIds !== undefined) {
    const ids = sameLength("seqIds", b.seqIds);
    const seqId: number[][] = new Array(n);
    for (let i = 0; i < n; i++) {
      const s = ids[i];
      // One id per token (the common case, and every token of the sequence
      // queue's batches): checked without building a list and a Set.
      if (typeof s === "number") {
        checkSeqId(where, `seqIds[${i}]`, s, o.nSeqMax);
        seqId[i] = [s];
        continue;
      }
      const list = s;
      if (!Array.isArray(list) || list.length === 0) {
        throw new OptionError(
          where,
          `seqIds[${i}]`,
          s,
          "a sequence id or a non-empty array of them",
        );
      }
      for (const id of list) checkSeqId(where, `seqIds[${i}]`, id, o.nSeqMax);
      if (new Set(list).size !== list.length) {
        throw new OptionError(where, `seqIds[${i}]`, s, "each sequence id once");
      }
      seqId[i] = [...list] as number[];
    }
    out.seqId = seqId;
  }
  if (b.logits !== undefined) {
    const f = sameLength("logits", b.logits);
    for (let i = 0; i < n; i++) {
      const v = f[i];
      if (v !== true && v !== false && v !== 0 && v !== 1) {
        throw new OptionError(where, `logits[${i}]`, v, "true/false (or 1/0)");
      }
    }
    out.logits = Uint8Array.from(f as ArrayLike<number>, (v) => (v ? 1 : 0));
  }
  return out;
}

/** Throws an OptionError unless `s` is a sequence id below nSeqMax. */
export function checkSeqId(where: string, name: string, s: unknown, nSeqMax: number): void {
  if (typeof s !== "number" || !Number.isInteger(s) || s < 0 || s >= nSeqMax) {
    throw new OptionError(
      where,
      name,
      s,
      `a sequence id in 0..${nSeqMax - 1} (nSeqMax ${nSeqMax})`,
    );
  }
}

/** Throws an OptionError unless `p` is an integer position (negative: open end, as in llama.cpp). */
export function checkPos(where: string, name: string, p: unknown): void {
  if (typeof p !== "number" || !Number.isInteger(p) || Math.abs(p) > INT32_MAX) {
    throw new OptionError(where, name, p, "an integer position (negative: open end)");
  }
}

/** Throws an OptionError unless `d` is an integer in [min, INT32_MAX]. */
export function checkInt(where: string, name: string, d: unknown, min: number): void {
  if (typeof d !== "number" || !Number.isInteger(d) || d < min || Math.abs(d) > INT32_MAX) {
    throw new OptionError(where, name, d, `an integer >= ${min}`);
  }
}

/** What an encoder's input must fit (a context's sizes and its model's training context). */
export interface EncoderLimits {
  /** Tokens per graph. */
  readonly nUbatch: number;
  /** Context size. */
  readonly nCtx: number;
  /** The model (its training context bounds the positions). */
  readonly model: { readonly hparams: { readonly nCtxTrain: number } };
}

/**
 * An encoder (no cache) evaluates its whole input in one graph, as
 * llama.cpp's encode does (non-causal attention cannot be split into
 * micro-batches; llama.cpp asserts n_ubatch >= n_tokens), so the input
 * must fit nUbatch and nCtx, and each sequence the positions the model was
 * trained on.
 */
export function checkEncoderInput(c: EncoderLimits, n: number, longest = n): void {
  const { nCtxTrain } = c.model.hparams;
  const max = Math.min(c.nUbatch, c.nCtx);
  if (n > max || longest > nCtxTrain) {
    const what = n > max
      ? `${n} tokens exceed the ${max}`
      : `${longest} tokens of one sequence exceed the ${nCtxTrain} positions`;
    throw new ContextError(
      `decode: ${what} this encoder context evaluates at once ` +
        `(nUbatch ${c.nUbatch}, nCtx ${c.nCtx}, training context ${nCtxTrain}): ` +
        `its attention spans the whole input, which is never split`,
    );
  }
}

/**
 * The most positions one sequence of an encoder batch spans (positions
 * start at 0 for every sequence: nothing is cached): several short inputs
 * may share a batch longer than the training context.
 */
export function encoderSpan(b: Batch): number {
  if (b.pos) return Math.max(...b.pos) + 1;
  const count = new Map<number, number>();
  const n = b.token?.length ?? b.seqId?.length ?? 0;
  for (let i = 0; i < n; i++) {
    const s = b.seqId ? b.seqId[i][0] : 0;
    count.set(s, (count.get(s) ?? 0) + 1);
  }
  return Math.max(0, ...count.values());
}
