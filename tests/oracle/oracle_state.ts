/**
 * llama.cpp's sequence state (the shim in oracle_state.c): contexts with
 * several sequences over one unified cache, llama_state_seq_get_data and
 * llama_state_seq_set_data, and the logits of a decode in any sequence.
 *
 * @module
 */
import { openOracle, type OracleModel } from "./oracle.ts";

const SYMBOLS = {
  ost_ctx_new: { parameters: ["pointer", "i32", "i32", "i32"], result: "pointer" },
  ost_decode: { parameters: ["pointer", "buffer", "i32", "i32", "i32"], result: "i32" },
  ost_seq_rm: { parameters: ["pointer", "i32", "i32", "i32"], result: "i32" },
  ost_seq_get: { parameters: ["pointer", "i32", "buffer", "i64"], result: "i64" },
  ost_seq_set: { parameters: ["pointer", "buffer", "i64", "i32"], result: "i64" },
  or_logits: { parameters: ["pointer", "i32", "buffer", "i32"], result: "i32" },
  or_ctx_free: { parameters: ["pointer"], result: "void" },
} as const satisfies Deno.ForeignLibraryInterface;

let lib: Deno.DynamicLibrary<typeof SYMBOLS> | null = null;

/** A llama.cpp context of nSeqMax sequences (unified cache, F16, flash attention off). */
export class OracleStateContext implements Disposable {
  #s: Deno.DynamicLibrary<typeof SYMBOLS>["symbols"];
  #ctx: Deno.PointerObject;
  #nVocab: number;
  #next = new Map<number, number>();

  private constructor(
    s: Deno.DynamicLibrary<typeof SYMBOLS>["symbols"],
    ctx: Deno.PointerObject,
    nVocab: number,
  ) {
    this.#s = s;
    this.#ctx = ctx;
    this.#nVocab = nVocab;
  }

  /** Creates a context for `model`. */
  static async create(
    model: OracleModel,
    o: { nCtx: number; nSeqMax: number; threads?: number },
  ): Promise<OracleStateContext> {
    lib ??= await openOracle(SYMBOLS);
    const ctx = lib.symbols.ost_ctx_new(model.ptr, o.nCtx, o.nSeqMax, o.threads ?? 1);
    if (!ctx) throw new Error("oracle_state: llama_init_from_model failed");
    return new OracleStateContext(lib.symbols, ctx, model.nVocab);
  }

  /** Decodes `tokens` after what `seq` holds; the last token's logits. */
  decode(tokens: readonly number[], seq: number): Float32Array {
    const pos0 = this.#next.get(seq) ?? 0;
    const rc = this.#s.ost_decode(this.#ctx, Int32Array.from(tokens), tokens.length, seq, pos0);
    if (rc !== 0) throw new Error(`oracle_state: llama_decode returned ${rc}`);
    this.#next.set(seq, pos0 + tokens.length);
    const out = new Float32Array(this.#nVocab);
    if (this.#s.or_logits(this.#ctx, -1, out, out.length) !== 0) {
      throw new Error("oracle_state: no logits");
    }
    return out;
  }

  /** llama_memory_seq_rm of [p0, p1) (positions after p1 keep their numbers). */
  seqRm(seq: number, p0: number, p1: number): void {
    if (!this.#s.ost_seq_rm(this.#ctx, seq, p0, p1)) throw new Error("oracle_state: seq_rm failed");
  }

  /** llama_state_seq_get_data of `seq`. */
  seqGet(seq: number): Uint8Array {
    const n = Number(this.#s.ost_seq_get(this.#ctx, seq, null, 0n));
    const out = new Uint8Array(n);
    const got = Number(this.#s.ost_seq_get(this.#ctx, seq, out, BigInt(n)));
    if (got !== n) throw new Error(`oracle_state: seq_get wrote ${got} of ${n} bytes`);
    return out;
  }

  /** llama_state_seq_set_data into `dst`; `next` is dst's next position afterwards. */
  seqSet(bytes: Uint8Array, dst: number, next: number): void {
    const n = Number(
      this.#s.ost_seq_set(this.#ctx, bytes as Uint8Array<ArrayBuffer>, BigInt(bytes.length), dst),
    );
    if (n === 0) throw new Error("oracle_state: llama_state_seq_set_data failed");
    this.#next.set(dst, next);
  }

  [Symbol.dispose](): void {
    this.#s.or_ctx_free(this.#ctx);
  }
}
