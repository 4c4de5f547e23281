/**
 * llama.cpp's unpooled hidden states (the shim in oracle_embd.c): a context
 * with embeddings enabled and pooling NONE, read with
 * llama_get_embeddings_ith. The oracle of encoder architectures (bert),
 * whose output is a hidden state per token rather than logits.
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
