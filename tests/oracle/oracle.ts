/**
 * Typed access to llama.cpp (the oracle) through the shim in oracle.c.
 * Tests call `await loadOracle()` once; the first call installs and builds
 * what is missing (see setup.ts).
 *
 * Other oracle shims (tokenizer, sampler, gguf, ...) live beside this file as
 * `oracle_*.c`; they are linked into the same liboracle.so and reached with
 * `openOracle(symbols)`.
 *
 * @module
 */
import { ensureOracle, ORACLE_BIN } from "./setup.ts";

const enc = new TextEncoder();
const dec = new TextDecoder();

/** A NUL-terminated C string for FFI. */
export function cstr(s: string): Uint8Array<ArrayBuffer> {
  const b = enc.encode(s);
  const out = new Uint8Array(b.length + 1);
  out.set(b);
  return out;
}

const BASE = {
  or_init: { parameters: ["buffer", "i32"], result: "i32" },
  or_model_load: { parameters: ["buffer", "i32"], result: "pointer" },
  or_model_free: { parameters: ["pointer"], result: "void" },
  or_meta_count: { parameters: ["pointer"], result: "i32" },
  or_meta_key: { parameters: ["pointer", "i32", "buffer", "i32"], result: "i32" },
  or_meta_val: { parameters: ["pointer", "i32", "buffer", "i32"], result: "i32" },
  or_n_vocab: { parameters: ["pointer"], result: "i32" },
  or_bos: { parameters: ["pointer"], result: "i32" },
  or_eos: { parameters: ["pointer"], result: "i32" },
  or_tokenize: {
    parameters: ["pointer", "buffer", "i32", "i32", "i32", "buffer", "i32"],
    result: "i32",
  },
  or_detokenize: {
    parameters: ["pointer", "buffer", "i32", "buffer", "i32", "i32", "i32"],
    result: "i32",
  },
  or_token_to_piece: {
    parameters: ["pointer", "i32", "buffer", "i32", "i32", "i32"],
    result: "i32",
  },
  or_ctx_new: { parameters: ["pointer", "i32", "i32", "i32", "i32"], result: "pointer" },
  or_ctx_free: { parameters: ["pointer"], result: "void" },
  or_ctx_clear: { parameters: ["pointer"], result: "void" },
  or_decode: { parameters: ["pointer", "buffer", "i32", "i32", "i32"], result: "i32" },
  or_logits: { parameters: ["pointer", "i32", "buffer", "i32"], result: "i32" },
  or_quantize: { parameters: ["buffer", "buffer", "i32", "i32"], result: "i32" },
} as const satisfies Deno.ForeignLibraryInterface;

let base: Deno.DynamicLibrary<typeof BASE> | null = null;

/** Opens the shim library with extra symbols declared by another oracle_*.c file. */
export async function openOracle<S extends Deno.ForeignLibraryInterface>(
  symbols: S,
): Promise<Deno.DynamicLibrary<S>> {
  const path = await ensureOracle();
  await loadOracle();
  return Deno.dlopen(path, symbols);
}

/** llama.cpp's `llama_ftype` values used by tests. */
export const LlamaFtype = { F32: 0, F16: 1, Q4_0: 2, Q4_1: 3, Q8_0: 7, Q5_0: 8, Q5_1: 9 } as const;

/** A model loaded by llama.cpp. */
export class OracleModel implements Disposable {
  #lib: Deno.DynamicLibrary<typeof BASE>;
  /** The llama_model pointer (for other oracle shims). */
  readonly ptr: Deno.PointerObject;
  /** Vocabulary size. */
  readonly nVocab: number;

  constructor(lib: Deno.DynamicLibrary<typeof BASE>, ptr: Deno.PointerObject) {
    this.#lib = lib;
    this.ptr = ptr;
    this.nVocab = lib.symbols.or_n_vocab(ptr);
  }

  /** All metadata as llama.cpp prints it (`llama_model_meta_*`: values as strings). */
  metadata(): Map<string, string> {
    const s = this.#lib.symbols;
    const out = new Map<string, string>();
    const n = s.or_meta_count(this.ptr);
    for (let i = 0; i < n; i++) {
      out.set(
        this.#str((b, l) => s.or_meta_key(this.ptr, i, b, l)),
        this.#str((b, l) => s.or_meta_val(this.ptr, i, b, l)),
      );
    }
    return out;
  }

  #str(f: (buf: Uint8Array<ArrayBuffer>, len: number) => number): string {
    let buf = new Uint8Array(256);
    let n = f(buf, buf.length);
    if (n >= buf.length) {
      buf = new Uint8Array(n + 1);
      n = f(buf, buf.length);
    }
    return n < 0 ? "" : dec.decode(buf.subarray(0, n));
  }

  /** llama_tokenize. */
  tokenize(text: string, opts: { addSpecial?: boolean; parseSpecial?: boolean } = {}): number[] {
    const bytes = enc.encode(text);
    const s = this.#lib.symbols;
    let out = new Int32Array(bytes.length + 8);
    let n = s.or_tokenize(
      this.ptr,
      bytes,
      bytes.length,
      opts.addSpecial ? 1 : 0,
      opts.parseSpecial ? 1 : 0,
      out,
      out.length,
    );
    if (n < 0) {
      out = new Int32Array(-n);
      n = s.or_tokenize(
        this.ptr,
        bytes,
        bytes.length,
        opts.addSpecial ? 1 : 0,
        opts.parseSpecial ? 1 : 0,
        out,
        out.length,
      );
    }
    return [...out.subarray(0, n)];
  }

  /** llama_detokenize, as raw bytes (the text may hold partial UTF-8). */
  detokenizeBytes(
    ids: number[],
    opts: { removeSpecial?: boolean; unparseSpecial?: boolean } = {},
  ): Uint8Array {
    const toks = Int32Array.from(ids);
    const s = this.#lib.symbols;
    let out = new Uint8Array(ids.length * 16 + 16);
    let n = s.or_detokenize(
      this.ptr,
      toks,
      toks.length,
      out,
      out.length,
      opts.removeSpecial ? 1 : 0,
      opts.unparseSpecial ? 1 : 0,
    );
    if (n < 0) {
      out = new Uint8Array(-n);
      n = s.or_detokenize(
        this.ptr,
        toks,
        toks.length,
        out,
        out.length,
        opts.removeSpecial ? 1 : 0,
        opts.unparseSpecial ? 1 : 0,
      );
    }
    return out.slice(0, n);
  }

  /** llama_token_to_piece, as raw bytes. */
  pieceBytes(id: number, opts: { lstrip?: number; special?: boolean } = {}): Uint8Array {
    const out = new Uint8Array(256);
    const n = this.#lib.symbols.or_token_to_piece(
      this.ptr,
      id,
      out,
      out.length,
      opts.lstrip ?? 0,
      opts.special ? 1 : 0,
    );
    return out.slice(0, Math.max(0, n));
  }

  /** BOS and EOS ids. */
  get bos(): number {
    return this.#lib.symbols.or_bos(this.ptr);
  }
  /** EOS id. */
  get eos(): number {
    return this.#lib.symbols.or_eos(this.ptr);
  }

  /** A context for decoding (flash attention off, one sequence). */
  context(
    opts: { nCtx?: number; nBatch?: number; threads?: number; kvType?: number } = {},
  ): OracleContext {
    const p = this.#lib.symbols.or_ctx_new(
      this.ptr,
      opts.nCtx ?? 256,
      opts.nBatch ?? 256,
      opts.threads ?? 2,
      opts.kvType ?? 1,
    );
    if (!p) throw new Error("oracle: llama_init_from_model failed");
    return new OracleContext(this.#lib, p, this.nVocab);
  }

  [Symbol.dispose](): void {
    this.#lib.symbols.or_model_free(this.ptr);
  }
}

/** A llama.cpp context. */
export class OracleContext implements Disposable {
  #lib: Deno.DynamicLibrary<typeof BASE>;
  #ptr: Deno.PointerObject;
  #nVocab: number;
  /** Next position. */
  pos = 0;

  constructor(lib: Deno.DynamicLibrary<typeof BASE>, ptr: Deno.PointerObject, nVocab: number) {
    this.#lib = lib;
    this.#ptr = ptr;
    this.#nVocab = nVocab;
  }

  /** Clears the KV cache. */
  clear(): void {
    this.#lib.symbols.or_ctx_clear(this.#ptr);
    this.pos = 0;
  }

  /**
   * Decodes tokens after what was decoded before; returns the logits of every
   * position (allLogits) or of the last one only.
   */
  decode(tokens: number[], allLogits = false): Float32Array[] {
    const s = this.#lib.symbols;
    const rc = s.or_decode(
      this.#ptr,
      Int32Array.from(tokens),
      tokens.length,
      this.pos,
      allLogits ? 1 : 0,
    );
    if (rc !== 0) throw new Error(`oracle: llama_decode returned ${rc}`);
    this.pos += tokens.length;
    const rows = allLogits ? tokens.map((_, i) => i) : [tokens.length - 1];
    return rows.map((i) => {
      const out = new Float32Array(this.#nVocab);
      if (s.or_logits(this.#ptr, i, out, out.length) !== 0) throw new Error("oracle: no logits");
      return out;
    });
  }

  /** Greedy continuation of `prompt` for n tokens; with each step's top-2 logit gap. */
  greedy(
    prompt: number[],
    n: number,
  ): { tokens: number[]; gaps: number[]; logits: Float32Array[] } {
    this.clear();
    let logits = this.decode(prompt)[0];
    const tokens: number[] = [];
    const gaps: number[] = [];
    const all: Float32Array[] = [];
    for (let i = 0; i < n; i++) {
      const [best, gap] = top2(logits);
      tokens.push(best);
      gaps.push(gap);
      all.push(logits);
      if (i + 1 < n) logits = this.decode([best])[0];
    }
    return { tokens, gaps, logits: all };
  }

  [Symbol.dispose](): void {
    this.#lib.symbols.or_ctx_free(this.#ptr);
  }
}

/** argmax (first on ties) and the gap between the two largest logits. */
export function top2(l: Float32Array): [number, number] {
  let b = 0;
  for (let i = 1; i < l.length; i++) if (l[i] > l[b]) b = i;
  let second = -Infinity;
  for (let i = 0; i < l.length; i++) if (i !== b && l[i] > second) second = l[i];
  return [b, l[b] - second];
}

/** The oracle library. */
export interface Oracle {
  /** Loads a GGUF with llama.cpp. */
  load(path: string, opts?: { vocabOnly?: boolean }): OracleModel;
  /** llama_model_quantize (ftype from LlamaFtype). */
  quantize(input: string, output: string, ftype: number, threads?: number): void;
}

/** Installs (if needed) and opens llama.cpp; safe to call many times. */
export async function loadOracle(): Promise<Oracle> {
  if (!base) {
    const path = await ensureOracle();
    base = Deno.dlopen(path, BASE);
    const rc = base.symbols.or_init(
      new TextEncoder().encode(ORACLE_BIN + "\0"),
      Deno.env.get("ORACLE_VERBOSE") ? 1 : 0,
    );
    if (rc !== 0) throw new Error(`oracle: no ggml backend found in ${ORACLE_BIN}`);
  }
  const lib = base;
  return {
    load(path, opts = {}) {
      const p = lib.symbols.or_model_load(cstr(path), opts.vocabOnly ? 1 : 0);
      if (!p) throw new Error(`oracle: llama.cpp could not load ${path}`);
      return new OracleModel(lib, p);
    },
    quantize(input, output, ftype, threads = 2) {
      const rc = lib.symbols.or_quantize(cstr(input), cstr(output), ftype, threads);
      if (rc !== 0) throw new Error(`oracle: llama_model_quantize returned ${rc}`);
    },
  };
}
