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
import assert from "node:assert/strict";
import { join } from "node:path";
import { loadLibrary } from "../../ffi/library.ts";
import { SimdLevel } from "../../ffi/symbols.ts";
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
  or_init: { parameters: ["buffer", "i32", "buffer"], result: "i32" },
  or_cpu_variant: { parameters: ["buffer", "i32"], result: "i32" },
  or_variant_score: { parameters: ["buffer"], result: "i32" },
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

  /**
   * A context for decoding (flash attention off, one sequence). One thread
   * by default: ggml's threads busy-wait between ops, so on a loaded host a
   * second oracle thread makes every graph wait for a preempted spinner,
   * while results do not depend on the thread count (each output element
   * is computed by one thread in a fixed order).
   */
  context(
    opts: { nCtx?: number; nBatch?: number; threads?: number; kvType?: number } = {},
  ): OracleContext {
    const p = this.#lib.symbols.or_ctx_new(
      this.ptr,
      opts.nCtx ?? 256,
      opts.nBatch ?? 256,
      opts.threads ?? 1,
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
   * position (allLogits) or of the last one only, that one into `into` when
   * given (a benchmark's loop allocates nothing per token: 16 KiB of new
   * logits per tolstoy-6m step grew the process by 20 MiB over 2,500 steps).
   */
  decode(tokens: number[], allLogits = false, into?: Float32Array): Float32Array[] {
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
    if (into && into.length !== this.#nVocab) {
      throw new RangeError(`oracle: into has ${into.length} values, not ${this.#nVocab}`);
    }
    return rows.map((i) => {
      const out = into && !allLogits ? into : new Float32Array(this.#nVocab);
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

/**
 * The near-tie rule of every greedy comparison with llama.cpp: tokens are
 * compared up to the first step where llama.cpp's own top-2 logit gap is
 * below NEAR_TIE (there, a last-bit difference in summation order may pick
 * either token, and the continuations may part); logits are compared at
 * every step up to there. Both engines see the same tokens up to that
 * step, so the comparison stays meaningful. Only llama.cpp's gap counts:
 * the expectation comes from the oracle alone.
 */
export const NEAR_TIE = 0.01;

/** Index of the first step whose llama.cpp top-2 gap is below {@link NEAR_TIE}, or gaps.length. */
export function nearTieStep(gaps: readonly number[]): number {
  const i = gaps.findIndex((g) => g < NEAR_TIE);
  return i < 0 ? gaps.length : i;
}

/** Largest |a[i] - b[i]|. */
export function maxAbsDiff(a: Float32Array, b: Float32Array): number {
  assert.equal(a.length, b.length);
  let m = 0;
  for (let i = 0; i < a.length; i++) m = Math.max(m, Math.abs(a[i] - b[i]));
  return m;
}

/** What {@link assertGreedyMatch} checked. */
export interface GreedyMatch {
  /** Steps compared: {@link nearTieStep} of llama.cpp's gaps. */
  readonly upto: number;
  /** Largest logit difference over those steps (0 when no logits were given). */
  readonly worst: number;
  /** First step where the tokens differ, anywhere in the run, or -1. */
  readonly firstDifferent: number;
}

/**
 * Asserts {@link NEAR_TIE}'s rule for a greedy run of ours against
 * llama.cpp's (`want` from {@link OracleContext.greedy}): the same token at
 * every step before llama.cpp's first near-tie, and, when both runs carry
 * logits and `tol` is given, logits within `tol` at each of those steps.
 */
export function assertGreedyMatch(
  label: string,
  want: { tokens: readonly number[]; gaps: readonly number[]; logits?: readonly Float32Array[] },
  got: { tokens: readonly number[]; logits?: readonly Float32Array[] },
  tol?: number,
): GreedyMatch {
  const upto = nearTieStep(want.gaps);
  let worst = 0;
  for (let s = 0; s < upto; s++) {
    assert.equal(
      got.tokens[s],
      want.tokens[s],
      `${label}: step ${s}: ours ${got.tokens[s]}, llama.cpp ${want.tokens[s]} ` +
        `(llama.cpp's top-2 gap ${want.gaps[s]}, not a near-tie)`,
    );
    if (tol !== undefined && want.logits && got.logits) {
      const d = maxAbsDiff(got.logits[s], want.logits[s]);
      worst = Math.max(worst, d);
      assert.ok(d <= tol, `${label}: step ${s}: logits differ by ${d} (tolerance ${tol})`);
    }
  }
  const firstDifferent = want.tokens.findIndex((t, i) => t !== got.tokens[i]);
  return { upto, worst, firstDifferent };
}

/**
 * Environment variable that makes the oracle load one CPU variant (e.g.
 * "haswell"), or "best": the variant ggml itself picks, even one our kernels
 * do not follow (the benchmarks, which compare speed, not bits).
 */
export const ORACLE_CPU_ENV = "LLM_EDGE_ORACLE_CPU";

/** The llama.cpp CPU backend variant the oracle loaded. */
export interface OracleCpu {
  /** Variant name: "icelake", "haswell", "x64", ... (libggml-cpu-<name>.so). */
  readonly name: string;
  /** Features the variant was built for (ggml_backend_get_features: "AVX2" → "1", ...). */
  readonly features: ReadonlyMap<string, string>;
  /** Whether ORACLE_CPU_ENV chose it (else ggml picked the best one this CPU runs). */
  readonly forced: boolean;
  /**
   * Our SIMD level whose kernels follow this variant's operation order:
   * SimdLevel.AVX512 for AVX-512 variants, AVX2 for haswell/alderlake,
   * SCALAR for x64; SCALAR too (closest, not exact) for sse42, sandybridge,
   * ivybridge and piledriver.
   */
  readonly simdLevel: number;
  /**
   * Whether our kernels at simdLevel are meant to give this variant's bits
   * (op-by-op parity applies); false: only the tolerance tests apply.
   * kernels/PARITY.md §12 says which variants were checked on hardware.
   */
  readonly exact: boolean;
  /** Why exact is false, or "". */
  readonly reason: string;
}

/** How a variant maps onto our kernels (see {@link OracleCpu}). */
export function variantLevel(
  name: string,
  features: ReadonlyMap<string, string>,
): { simdLevel: number; exact: boolean; reason: string } {
  const on = (f: string) => features.get(f) === "1";
  if (on("AMX_INT8")) {
    // AMX buffers take Q4_0/Q4_1/Q8_0/K-quant weights to kernels whose
    // order we have not followed; F32/F16 would still match.
    return {
      simdLevel: SimdLevel.AVX512,
      exact: false,
      reason: `llama.cpp's ${name} variant runs AMX kernels we do not follow`,
    };
  }
  if (on("AVX512")) return { simdLevel: SimdLevel.AVX512, exact: true, reason: "" };
  if (on("AVX2") && on("FMA") && on("F16C")) {
    return { simdLevel: SimdLevel.AVX2, exact: true, reason: "" };
  }
  if (!["SSE3", "SSSE3", "AVX", "F16C", "FMA"].some(on)) {
    // x64: plain C plus SSE2 (ggml_v_expf), the order our scalar level follows
    return { simdLevel: SimdLevel.SCALAR, exact: true, reason: "" };
  }
  return {
    simdLevel: SimdLevel.SCALAR,
    exact: false,
    reason: `llama.cpp's ${name} variant (SSE3/AVX without AVX2+FMA+F16C) has no ` +
      `bit-identical counterpart among our SIMD levels; tolerance tests only`,
  };
}

let cpu: OracleCpu | null = null;

/** The CPU variant the oracle loaded (loads the oracle first). */
export async function oracleCpu(): Promise<OracleCpu> {
  await loadOracle();
  return cpu!;
}

/**
 * ggml_backend_score of libggml-cpu-`name`.so: > 0 when this CPU can run the
 * variant, 0 when it cannot, -1 when there is no such file. Does not load it
 * as the oracle's backend.
 */
export async function variantScore(name: string): Promise<number> {
  await loadOracle();
  return base!.symbols.or_variant_score(cstr(join(ORACLE_BIN, `libggml-cpu-${name}.so`)));
}

/**
 * llama.cpp's x86 CPU builds and the SIMD level of ours that follows each
 * one's operation order (kernels/PARITY.md §12).
 */
export const CPU_VARIANTS = [
  { variant: "icelake", level: SimdLevel.AVX512, name: "AVX512" },
  { variant: "haswell", level: SimdLevel.AVX2, name: "AVX2" },
  { variant: "x64", level: SimdLevel.SCALAR, name: "SCALAR" },
] as const;

/**
 * Why llama.cpp's `variant` build cannot be compared with our kernels at
 * `level` on this machine ("" when it can): the build is missing, this CPU
 * cannot run it, or our library lacks that level here. Leaves our library
 * at the oracle's level.
 */
export async function variantUnavailable(
  variant: string,
  level: number,
  lib: { symbols: { le_set_simd_level(level: number): number } },
): Promise<string> {
  const score = await variantScore(variant);
  if (score < 0) return "no such library";
  if (score === 0) return "this CPU cannot run it";
  const set = lib.symbols.le_set_simd_level(level);
  lib.symbols.le_set_simd_level((await loadOracle()).cpu.simdLevel);
  return set === level ? "" : "our kernels lack that SIMD level here";
}

/** The oracle library. */
export interface Oracle {
  /** Loads a GGUF with llama.cpp. */
  load(path: string, opts?: { vocabOnly?: boolean }): OracleModel;
  /** llama_model_quantize (ftype from LlamaFtype). */
  quantize(input: string, output: string, ftype: number, threads?: number): void;
  /** The CPU variant llama.cpp runs. */
  readonly cpu: OracleCpu;
}

function readCpu(lib: Deno.DynamicLibrary<typeof BASE>, forced: boolean): OracleCpu {
  const buf = new Uint8Array(1024);
  const n = lib.symbols.or_cpu_variant(buf, buf.length);
  if (n < 0) throw new Error("oracle: no CPU backend loaded");
  const [name, list = ""] = dec.decode(buf.subarray(0, n)).split("\t");
  const features = new Map<string, string>();
  for (const kv of list.split(";")) {
    const eq = kv.indexOf("=");
    if (eq > 0) features.set(kv.slice(0, eq), kv.slice(eq + 1));
  }
  return { name, features, forced, ...variantLevel(name, features) };
}

/**
 * Variants ggml may pick whose operation order none of our SIMD levels
 * follows (see {@link variantLevel}): pre-AVX2 builds and AMX.
 */
const UNFOLLOWED_VARIANTS = ["sse42", "sandybridge", "ivybridge", "piledriver", "sapphirerapids"];

/**
 * "" (let ggml load its best variant) when ggml's pick is one our kernels
 * follow; otherwise the best-scoring variant this CPU runs that they do
 * follow (x64 runs on every x86-64 CPU), so the parity tests compare like
 * with like on every machine instead of failing on an order we never
 * claimed. LLM_EDGE_ORACLE_CPU still selects any variant explicitly.
 */
function followedVariant(lib: Deno.DynamicLibrary<typeof BASE>): string {
  const scored: { name: string; score: number }[] = [];
  for (const e of Deno.readDirSync(ORACLE_BIN)) {
    const m = /^libggml-cpu-([a-z0-9_]+)\.so$/.exec(e.name);
    if (!m) continue;
    const score = lib.symbols.or_variant_score(cstr(join(ORACLE_BIN, e.name)));
    if (score > 0) scored.push({ name: m[1], score });
  }
  scored.sort((a, b) => b.score - a.score);
  if (scored.length === 0 || !UNFOLLOWED_VARIANTS.includes(scored[0].name)) return "";
  const pick = scored.find((v) => !UNFOLLOWED_VARIANTS.includes(v.name));
  if (!pick) return "";
  console.error(
    `oracle: llama.cpp would load its ${scored[0].name} variant here, whose order our ` +
      `kernels do not follow; comparing with its ${pick.name} variant instead ` +
      `(${ORACLE_CPU_ENV}=${scored[0].name} forces the other)`,
  );
  return pick.name;
}

/**
 * Installs (if needed) and opens llama.cpp; safe to call many times.
 *
 * llama.cpp loads the best CPU variant this machine runs, or only the one
 * named by the LLM_EDGE_ORACLE_CPU environment variable (e.g. "haswell" on
 * an AVX-512 host; "best": ggml's own pick). Every call also puts our kernels at the SIMD level that
 * follows that variant's operation order ({@link OracleCpu.simdLevel}), so
 * each comparison pairs matching orders even after a test changed the level.
 */
export async function loadOracle(): Promise<Oracle> {
  if (!base) {
    const path = await ensureOracle();
    const lib = Deno.dlopen(path, BASE);
    const forced = Deno.env.get(ORACLE_CPU_ENV) ?? "";
    if (forced && !/^[a-z0-9_.]+$/.test(forced)) {
      throw new Error(`oracle: ${ORACLE_CPU_ENV}=${forced} is not a variant name`);
    }
    const variant = forced === "best" ? "" : forced || followedVariant(lib);
    const rc = lib.symbols.or_init(
      cstr(ORACLE_BIN),
      Deno.env.get("ORACLE_VERBOSE") ? 1 : 0,
      cstr(variant),
    );
    if (rc === -2) {
      throw new Error(
        `oracle: ${
          forced ? `${ORACLE_CPU_ENV}=` : ""
        }${variant}: ${ORACLE_BIN}/libggml-cpu-${variant}.so ` +
          `is missing or this CPU cannot run it`,
      );
    }
    if (rc !== 0) throw new Error(`oracle: no ggml backend found in ${ORACLE_BIN}`);
    cpu = readCpu(lib, forced !== "");
    base = lib;
    const set = (await loadLibrary()).symbols.le_set_simd_level(cpu.simdLevel);
    if (set !== cpu.simdLevel) {
      cpu = {
        ...cpu,
        simdLevel: set,
        exact: false,
        reason: `our kernels cannot run SIMD level ${cpu.simdLevel} on this CPU`,
      };
    }
  }
  const lib = base;
  (await loadLibrary()).symbols.le_set_simd_level(cpu!.simdLevel);
  return {
    cpu: cpu!,
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
