/**
 * llama.cpp with many sequences (the shim in oracle_batch.c): a context of
 * `nSeqMax` sequences over one unified KV pool (kv_unified, flash attention
 * off), general batches (positions, sequence ids and output flags per
 * token) and the llama_memory_seq_* operations, as the oracle of our
 * multi-sequence context.
 *
 * @module
 */
import { openOracle, type OracleModel } from "./oracle.ts";

const SYMBOLS = {
  ob_ctx_new: {
    parameters: ["pointer", "i32", "i32", "i32", "i32", "i32", "i32", "i32"],
    result: "pointer",
  },
  ob_ctx_new_fa: {
    parameters: ["pointer", "i32", "i32", "i32", "i32", "i32", "i32", "i32"],
    result: "pointer",
  },
  ob_ctx_new_ex: {
    parameters: ["pointer", "i32", "i32", "i32", "i32", "i32", "i32", "i32", "i32", "i32"],
    result: "pointer",
  },
  ob_n_ctx: { parameters: ["pointer"], result: "i32" },
  ob_decode: {
    parameters: ["pointer", "i32", "buffer", "buffer", "buffer", "buffer", "buffer"],
    result: "i32",
  },
  ob_logits: { parameters: ["pointer", "i32", "buffer", "i32"], result: "i32" },
  ob_seq_rm: { parameters: ["pointer", "i32", "i32", "i32"], result: "i32" },
  ob_seq_cp: { parameters: ["pointer", "i32", "i32", "i32", "i32"], result: "void" },
  ob_seq_keep: { parameters: ["pointer", "i32"], result: "void" },
  ob_seq_add: { parameters: ["pointer", "i32", "i32", "i32", "i32"], result: "void" },
  ob_seq_div: { parameters: ["pointer", "i32", "i32", "i32", "i32"], result: "void" },
  ob_seq_pos_min: { parameters: ["pointer", "i32"], result: "i32" },
  ob_seq_pos_max: { parameters: ["pointer", "i32"], result: "i32" },
  ob_clear: { parameters: ["pointer"], result: "void" },
  or_ctx_free: { parameters: ["pointer"], result: "void" },
} as const satisfies Deno.ForeignLibraryInterface;

type Symbols = Deno.DynamicLibrary<typeof SYMBOLS>["symbols"];
let lib: Deno.DynamicLibrary<typeof SYMBOLS> | null = null;

/** Options of {@link OracleBatchContext.create}. */
export interface OracleBatchOptions {
  /** Context size (llama.cpp pads it to a multiple of 256). Default 256. */
  nCtx?: number;
  /** Most tokens one decode may hold (n_batch). Default 256. */
  nBatch?: number;
  /** Micro-batch size (n_ubatch). Default nBatch. */
  nUbatch?: number;
  /** Sequences (n_seq_max). Default 1. */
  nSeqMax?: number;
  /** Threads. Default 1 (see OracleModel.context). */
  threads?: number;
  /** ggml type id of the K cache. Default 1 (F16). */
  typeK?: number;
  /** ggml type id of the V cache. Default 1 (F16). */
  typeV?: number;
  /** Flash attention on (needed for a quantized V cache). Default false. */
  flashAttn?: boolean;
  /** kv_unified: one KV pool (true, the default) or one stream per sequence. */
  kvUnified?: boolean;
}

/** A general batch, as llama_batch holds it. */
export interface OracleBatch {
  /** Token ids. */
  tokens: readonly number[];
  /** Positions; default: each token continues its first sequence (llama.cpp's rule). */
  pos?: readonly number[];
  /** Sequence id(s) per token; default all in sequence 0. */
  seqIds?: ReadonlyArray<number | readonly number[]>;
  /** Output flags per token; default only the last token. */
  logits?: ReadonlyArray<boolean | number>;
}

/** What {@link OracleBatchContext.decode} returned. */
export interface OracleDecodeResult {
  /** llama_decode's code: 0 ok, 1 no KV slot for the batch, negative on errors. */
  rc: number;
  /** Batch indices of the output tokens, ascending (also when rc != 0). */
  outputIds: number[];
  /** Logits of each output, in outputIds order (empty when rc != 0). */
  logits: Float32Array[];
}

/** A llama.cpp context with `nSeqMax` sequences in one unified KV pool. */
export class OracleBatchContext implements Disposable {
  #s: Symbols;
  #ctx: Deno.PointerObject;
  /** Vocabulary size (the length of a logits row). */
  readonly nVocab: number;
  /** KV cells: nCtx as llama.cpp padded it. */
  readonly nCtx: number;
  /** Sequences. */
  readonly nSeqMax: number;

  private constructor(s: Symbols, ctx: Deno.PointerObject, nVocab: number, nSeqMax: number) {
    this.#s = s;
    this.#ctx = ctx;
    this.nVocab = nVocab;
    this.nCtx = s.ob_n_ctx(ctx);
    this.nSeqMax = nSeqMax;
  }

  /** Creates a context for `model` (kv_unified, flash attention off unless `flashAttn`). */
  static async create(
    model: OracleModel,
    opts: OracleBatchOptions = {},
  ): Promise<OracleBatchContext> {
    lib ??= await openOracle(SYMBOLS);
    const s = lib.symbols;
    const nBatch = opts.nBatch ?? 256;
    const nSeqMax = opts.nSeqMax ?? 1;
    const ctx = s.ob_ctx_new_ex(
      model.ptr,
      opts.nCtx ?? 256,
      nBatch,
      opts.nUbatch ?? nBatch,
      nSeqMax,
      opts.threads ?? 1,
      opts.typeK ?? 1,
      opts.typeV ?? 1,
      opts.flashAttn ? 1 : 0,
      opts.kvUnified === false ? 0 : 1,
    );
    if (!ctx) throw new Error("oracle_batch: llama_init_from_model failed");
    return new OracleBatchContext(s, ctx, model.nVocab, nSeqMax);
  }

  /**
   * llama_decode of `batch`; returns its code and, when it succeeded, the
   * logits of every output token (llama_get_logits_ith); a single output's
   * into `into` when given (a benchmark's loop then allocates no logits).
   */
  decode(batch: OracleBatch, into?: Float32Array): OracleDecodeResult {
    const n = batch.tokens.length;
    const seqs = Array.from({ length: n }, (_, i) => {
      const s = batch.seqIds?.[i] ?? 0;
      return typeof s === "number" ? [s] : [...s];
    });
    const pos = batch.pos ? [...batch.pos] : this.#defaultPos(seqs);
    const flags = Uint8Array.from(
      { length: n },
      (_, i) => (batch.logits ? Number(batch.logits[i]) : Number(i === n - 1)) ? 1 : 0,
    );
    const rc = this.#s.ob_decode(
      this.#ctx,
      n,
      Int32Array.from(batch.tokens),
      Int32Array.from(pos),
      Int32Array.from(seqs, (s) => s.length),
      Int32Array.from(seqs.flat()),
      flags,
    );
    const outputIds = [...flags.keys()].filter((i) => flags[i]);
    const one = into && outputIds.length === 1;
    return {
      rc,
      outputIds,
      logits: rc !== 0
        ? []
        : one
        ? [this.logits(outputIds[0], into)]
        : outputIds.map((i) => this.logits(i)),
    };
  }

  /** llama.cpp's positions for a batch without them (llama_batch_allocr::init). */
  #defaultPos(seqs: number[][]): number[] {
    const next = new Map<number, number>();
    const at = (s: number) => next.get(s) ?? this.seqPosMax(s) + 1;
    return seqs.map((ids) => {
      const p = at(ids[0]);
      for (const s of ids) next.set(s, p + 1);
      return p;
    });
  }

  /** Logits of batch index `i` of the last decode (llama_get_logits_ith), into `out` when given. */
  logits(i: number, out: Float32Array = new Float32Array(this.nVocab)): Float32Array {
    if (out.length !== this.nVocab) {
      throw new RangeError(`oracle_batch: out has ${out.length} values, not ${this.nVocab}`);
    }
    if (this.#s.ob_logits(this.#ctx, i, out, out.length) !== 0) {
      throw new Error(`oracle_batch: no logits for batch index ${i}`);
    }
    return out;
  }

  /** llama_memory_seq_rm (seq -1: every sequence; p0/p1 -1: open ends). */
  seqRm(seq: number, p0 = -1, p1 = -1): boolean {
    return this.#s.ob_seq_rm(this.#ctx, seq, p0, p1) !== 0;
  }

  /** llama_memory_seq_cp. */
  seqCp(src: number, dst: number, p0 = -1, p1 = -1): void {
    this.#s.ob_seq_cp(this.#ctx, src, dst, p0, p1);
  }

  /** llama_memory_seq_keep. */
  seqKeep(seq: number): void {
    this.#s.ob_seq_keep(this.#ctx, seq);
  }

  /** llama_memory_seq_add (the K-shift runs at the next decode). */
  seqAdd(seq: number, p0: number, p1: number, delta: number): void {
    this.#s.ob_seq_add(this.#ctx, seq, p0, p1, delta);
  }

  /** llama_memory_seq_div. */
  seqDiv(seq: number, p0: number, p1: number, d: number): void {
    this.#s.ob_seq_div(this.#ctx, seq, p0, p1, d);
  }

  /** llama_memory_seq_pos_min (-1 when empty). */
  seqPosMin(seq: number): number {
    return this.#s.ob_seq_pos_min(this.#ctx, seq);
  }

  /** llama_memory_seq_pos_max (-1 when empty). */
  seqPosMax(seq: number): number {
    return this.#s.ob_seq_pos_max(this.#ctx, seq);
  }

  /** llama_memory_clear (data too). */
  clear(): void {
    this.#s.ob_clear(this.#ctx);
  }

  [Symbol.dispose](): void {
    this.#s.or_ctx_free(this.#ctx);
  }
}
