/**
 * llama.cpp's unpooled hidden states (the shim in oracle_embd.c): a context
 * with embeddings enabled and pooling NONE, read with
 * llama_get_embeddings_ith. The oracle of encoder architectures (bert),
 * whose output is a hidden state per token rather than logits.
 *
 * {@link OraclePooledContext}: llama-embedding's way (examples/embedding):
 * a pooling type, several sequences per batch over a unified cache, pooled
 * rows from llama_get_embeddings_seq; and {@link oracleNormalize}, its
 * common_embd_normalize.
 *
 * @module
 */
import { openOracle, type OracleModel } from "./oracle.ts";

const SYMBOLS = {
  oe_ctx_new: { parameters: ["pointer", "i32", "i32", "i32"], result: "pointer" },
  oe_ctx_new_fa: { parameters: ["pointer", "i32", "i32", "i32"], result: "pointer" },
  oe_n_embd: { parameters: ["pointer"], result: "i32" },
  oe_decode: { parameters: ["pointer", "buffer", "i32"], result: "i32" },
  oe_embd: { parameters: ["pointer", "i32", "buffer", "i32"], result: "i32" },
  or_ctx_free: { parameters: ["pointer"], result: "void" },
  oe_ctx_new_pooled: {
    parameters: ["pointer", "i32", "i32", "i32", "i32", "i32", "i32"],
    result: "pointer",
  },
  oe_pooling: { parameters: ["pointer"], result: "i32" },
  oe_clear: { parameters: ["pointer"], result: "void" },
  oe_decode_seqs: { parameters: ["pointer", "buffer", "buffer", "buffer", "i32"], result: "i32" },
  oe_embd_seq: { parameters: ["pointer", "i32", "buffer", "i32"], result: "i32" },
  oe_normalize: { parameters: ["buffer", "buffer", "i32", "i32"], result: "void" },
} as const satisfies Deno.ForeignLibraryInterface;

let lib: Deno.DynamicLibrary<typeof SYMBOLS> | null = null;

/** Options of {@link OracleEmbdContext.create}. */
export interface OracleEmbdOptions {
  /** Context size. Default 256. */
  nCtx?: number;
  /** Batch and micro-batch size: the longest input. Default 256. */
  nBatch?: number;
  /** Threads. Default 1 (see OracleModel.context). */
  threads?: number;
  /** Flash attention on. Default false. */
  flashAttn?: boolean;
}

/** A llama.cpp context (embeddings on, pooling NONE, flash attention off unless asked, one sequence). */
export class OracleEmbdContext implements Disposable {
  #s: Deno.DynamicLibrary<typeof SYMBOLS>["symbols"];
  #ctx: Deno.PointerObject;
  /** Width of a hidden state. */
  readonly nEmbd: number;

  private constructor(
    s: Deno.DynamicLibrary<typeof SYMBOLS>["symbols"],
    ctx: Deno.PointerObject,
    nEmbd: number,
  ) {
    this.#s = s;
    this.#ctx = ctx;
    this.nEmbd = nEmbd;
  }

  /** Creates an embeddings context for `model`. */
  static async create(
    model: OracleModel,
    opts: OracleEmbdOptions = {},
  ): Promise<OracleEmbdContext> {
    lib ??= await openOracle(SYMBOLS);
    const s = lib.symbols;
    const ctx = (opts.flashAttn ? s.oe_ctx_new_fa : s.oe_ctx_new)(
      model.ptr,
      opts.nCtx ?? 256,
      opts.nBatch ?? 256,
      opts.threads ?? 1,
    );
    if (!ctx) throw new Error("oracle_embd: llama_init_from_model failed");
    return new OracleEmbdContext(s, ctx, s.oe_n_embd(model.ptr));
  }

  /** Evaluates `tokens` (positions 0..n-1) and returns every token's final hidden state. */
  encode(tokens: readonly number[]): Float32Array[] {
    const s = this.#s;
    const rc = s.oe_decode(this.#ctx, Int32Array.from(tokens), tokens.length);
    if (rc !== 0) throw new Error(`oracle_embd: llama_decode returned ${rc}`);
    return tokens.map((_, i) => {
      const out = new Float32Array(this.nEmbd);
      if (s.oe_embd(this.#ctx, i, out, out.length) !== 0) {
        throw new Error(`oracle_embd: no hidden state for row ${i}`);
      }
      return out;
    });
  }

  [Symbol.dispose](): void {
    this.#s.or_ctx_free(this.#ctx);
  }
}

/** llama.cpp's pooling types (enum llama_pooling_type). */
export const LlamaPooling = {
  UNSPECIFIED: -1,
  NONE: 0,
  MEAN: 1,
  CLS: 2,
  LAST: 3,
  RANK: 4,
} as const;

/** Options of {@link OraclePooledContext.create}. */
export interface OraclePooledOptions {
  /** Pooling type ({@link LlamaPooling}); default UNSPECIFIED: the model's `<arch>.pooling_type`. */
  pooling?: number;
  /** Context size. Default 256. */
  nCtx?: number;
  /** Batch size. Default 256. */
  nBatch?: number;
  /** Micro-batch size. Default nBatch (a sequence's pooled row spans one micro-batch). */
  nUbatch?: number;
  /** Sequences. Default 8. It must divide nUbatch (llama.cpp's reserve graph of MEAN asserts). */
  nSeqMax?: number;
  /** Threads. Default 1. */
  threads?: number;
}

/**
 * A llama.cpp context as llama-embedding makes it: embeddings on, a pooling
 * type, n_seq_max sequences over a unified cache, flash attention off.
 */
export class OraclePooledContext implements Disposable {
  #s: Deno.DynamicLibrary<typeof SYMBOLS>["symbols"];
  #ctx: Deno.PointerObject;
  /** Width of a hidden state. */
  readonly nEmbd: number;
  /** The pooling the context applies (llama_pooling_type: the model's when unspecified). */
  readonly pooling: number;

  private constructor(
    s: Deno.DynamicLibrary<typeof SYMBOLS>["symbols"],
    ctx: Deno.PointerObject,
    nEmbd: number,
  ) {
    this.#s = s;
    this.#ctx = ctx;
    this.nEmbd = nEmbd;
    this.pooling = s.oe_pooling(ctx);
  }

  /** Creates a pooled embeddings context for `model`. */
  static async create(
    model: OracleModel,
    opts: OraclePooledOptions = {},
  ): Promise<OraclePooledContext> {
    lib ??= await openOracle(SYMBOLS);
    const s = lib.symbols;
    const nBatch = opts.nBatch ?? 256;
    const ctx = s.oe_ctx_new_pooled(
      model.ptr,
      opts.nCtx ?? 256,
      nBatch,
      opts.nUbatch ?? nBatch,
      opts.nSeqMax ?? 8,
      opts.threads ?? 1,
      opts.pooling ?? LlamaPooling.UNSPECIFIED,
    );
    if (!ctx) throw new Error("oracle_embd: llama_init_from_model failed (pooled)");
    return new OraclePooledContext(s, ctx, s.oe_n_embd(model.ptr));
  }

  /**
   * llama-embedding's batch_decode for one batch: clears the cache, puts
   * input k at positions 0..n-1 of sequence k, decodes every token as an
   * output, and returns one row per input (pooled, llama_get_embeddings_seq)
   * or, with pooling NONE, one row per token of each input
   * (llama_get_embeddings_ith), unnormalized.
   */
  embedBatch(inputs: readonly (readonly number[])[]): Float32Array[][] {
    const s = this.#s;
    const toks: number[] = [], pos: number[] = [], seq: number[] = [];
    inputs.forEach((ids, k) =>
      ids.forEach((t, i) => {
        toks.push(t);
        pos.push(i);
        seq.push(k);
      })
    );
    s.oe_clear(this.#ctx);
    const rc = s.oe_decode_seqs(
      this.#ctx,
      Int32Array.from(toks),
      Int32Array.from(pos),
      Int32Array.from(seq),
      toks.length,
    );
    if (rc !== 0) throw new Error(`oracle_embd: llama_decode returned ${rc}`);
    const row = (f: (out: Float32Array) => number, what: string) => {
      const out = new Float32Array(this.nEmbd);
      if (f(out) !== 0) throw new Error(`oracle_embd: no embedding for ${what}`);
      return out;
    };
    if (this.pooling === LlamaPooling.NONE) {
      let i = 0;
      return inputs.map((ids) =>
        ids.map(() => {
          const r = i++;
          return row((o) => s.oe_embd(this.#ctx, r, o, o.length), `row ${r}`);
        })
      );
    }
    return inputs.map((_, k) => [row((o) => s.oe_embd_seq(this.#ctx, k, o, o.length), `seq ${k}`)]);
  }

  [Symbol.dispose](): void {
    this.#s.or_ctx_free(this.#ctx);
  }
}

/** common_embd_normalize (llama-embedding's --embd-normalize), run in C by the shim. */
export async function oracleNormalize(v: Float32Array, norm: number): Promise<Float32Array> {
  lib ??= await openOracle(SYMBOLS);
  const out = new Float32Array(v.length);
  lib.symbols.oe_normalize(new Float32Array(v), out, v.length, norm);
  return out;
}
