/**
 * llama.cpp contexts that record intermediate tensors (the shim in
 * oracle_debug.c installs a scheduler eval callback), for op-by-op parity
 * checks. Names are llama.cpp's callback names: "attn_norm-3", "Qcur-0",
 * "kq_soft_max-2", "kqv_out-1", "ffn_out-4", "l_out-5", "result_norm",
 * "result_output". When several nodes share a name the last one computed
 * wins (e.g. "Qcur-0" is the roped query, not the projection).
 *
 * @module
 */
import { openOracle, type OracleModel } from "./oracle.ts";

const SYMBOLS = {
  ord_new: { parameters: ["pointer", "i32", "i32", "i32"], result: "pointer" },
  ord_free: { parameters: ["pointer"], result: "void" },
  ord_ctx: { parameters: ["pointer"], result: "pointer" },
  ord_want: { parameters: ["pointer", "buffer", "i32"], result: "i32" },
  ord_reset: { parameters: ["pointer"], result: "void" },
  ord_listing: { parameters: ["pointer", "i32"], result: "void" },
  ord_names: { parameters: ["pointer", "buffer", "i32"], result: "i32" },
  ord_tap_len: { parameters: ["pointer", "i32", "buffer"], result: "i64" },
  ord_tap_copy: { parameters: ["pointer", "i32", "buffer", "i64"], result: "i64" },
  or_decode: { parameters: ["pointer", "buffer", "i32", "i32", "i32"], result: "i32" },
  or_logits: { parameters: ["pointer", "i32", "buffer", "i32"], result: "i32" },
  or_ctx_clear: { parameters: ["pointer"], result: "void" },
} as const satisfies Deno.ForeignLibraryInterface;

let lib: Deno.DynamicLibrary<typeof SYMBOLS> | null = null;

/** Options of {@link OracleTapContext.create}. */
export interface OracleTapOptions {
  /** Context size (cache cells). Default 256. */
  nCtx?: number;
  /** Threads. Default 1 (see OracleModel.context). */
  threads?: number;
  /** ggml type of the K and V cache: 1 = F16 (default), 0 = F32. */
  kvType?: number;
}

/** What one decode produced: the last row's logits and the recorded tensors. */
export interface OracleTapResult {
  /** Logits of the last token. */
  readonly logits: Float32Array;
  /** Recorded values (ggml element order) by name; absent names were not computed. */
  readonly taps: Map<string, Float32Array>;
}

/** A llama.cpp context (flash attention off, one sequence) that records named tensors. */
export class OracleTapContext implements Disposable {
  #s: Deno.DynamicLibrary<typeof SYMBOLS>["symbols"];
  #h: Deno.PointerObject;
  #ctx: Deno.PointerObject;
  #names: string[] = [];
  #nVocab: number;
  /** Next position. */
  pos = 0;

  private constructor(
    s: Deno.DynamicLibrary<typeof SYMBOLS>["symbols"],
    h: Deno.PointerObject,
    nVocab: number,
  ) {
    this.#s = s;
    this.#h = h;
    this.#ctx = s.ord_ctx(h)!;
    this.#nVocab = nVocab;
  }

  /** Creates a recording context for `model`. */
  static async create(model: OracleModel, opts: OracleTapOptions = {}): Promise<OracleTapContext> {
    lib ??= await openOracle(SYMBOLS);
    const h = lib.symbols.ord_new(model.ptr, opts.nCtx ?? 256, opts.threads ?? 1, opts.kvType ?? 1);
    if (!h) throw new Error("oracle_debug: llama_init_from_model failed");
    return new OracleTapContext(lib.symbols, h, model.nVocab);
  }

  /** Sets the tensor names to record from now on. */
  want(names: readonly string[]): void {
    const enc = new TextEncoder();
    const parts = names.map((n) => enc.encode(n));
    const buf = new Uint8Array(parts.reduce((a, p) => a + p.length + 1, 1));
    let o = 0;
    for (const p of parts) {
      buf.set(p, o);
      o += p.length + 1;
    }
    if (this.#s.ord_want(this.#h, buf, names.length) !== 0) {
      throw new Error(`oracle_debug: bad tap names (at most 256, each 1..63 bytes)`);
    }
    this.#names = [...names];
  }

  /** Clears the KV cache. */
  clear(): void {
    this.#s.or_ctx_clear(this.#ctx);
    this.pos = 0;
  }

  /** Decodes tokens after what was decoded before; logits of the last one and the taps. */
  decode(tokens: readonly number[]): OracleTapResult {
    const s = this.#s;
    s.ord_reset(this.#h);
    const rc = s.or_decode(this.#ctx, Int32Array.from(tokens), tokens.length, this.pos, 0);
    if (rc !== 0) throw new Error(`oracle_debug: llama_decode returned ${rc}`);
    this.pos += tokens.length;
    const logits = new Float32Array(this.#nVocab);
    if (s.or_logits(this.#ctx, -1, logits, logits.length) !== 0) {
      throw new Error("oracle_debug: no logits");
    }
    const taps = new Map<string, Float32Array>();
    const ne = new BigInt64Array(4);
    this.#names.forEach((name, i) => {
      const n = Number(s.ord_tap_len(this.#h, i, ne));
      if (n < 0) return;
      const out = new Float32Array(n);
      if (Number(s.ord_tap_copy(this.#h, i, out, BigInt(n))) !== n) {
        throw new Error(`oracle_debug: copy of ${name} failed`);
      }
      taps.set(name, out);
    });
    return { logits, taps };
  }

  /**
   * Decodes `tokens` listing every graph node instead of recording:
   * lines of "name, op, type, ne0,ne1,ne2,ne3" in execution order.
   */
  listNodes(tokens: readonly number[]): string[] {
    const s = this.#s;
    s.ord_reset(this.#h);
    s.ord_listing(this.#h, 1);
    try {
      const rc = s.or_decode(this.#ctx, Int32Array.from(tokens), tokens.length, this.pos, 0);
      if (rc !== 0) throw new Error(`oracle_debug: llama_decode returned ${rc}`);
      this.pos += tokens.length;
    } finally {
      s.ord_listing(this.#h, 0);
    }
    const need = s.ord_names(this.#h, null, 0);
    const buf = new Uint8Array(need);
    s.ord_names(this.#h, buf, need);
    return new TextDecoder().decode(buf.subarray(0, need - 1)).split("\n").filter((l) => l);
  }

  [Symbol.dispose](): void {
    this.#s.ord_free(this.#h);
  }
}
