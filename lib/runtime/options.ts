/**
 * Checks of the options {@link Context.create} and {@link Context.decode}
 * take, run at the top of each so that a bad value is an
 * {@link OptionError} naming it instead of a silent default (`kvType:
 * "q4_0"` built as f16) or a failure deep inside the graph. Model.load's
 * checks are lib/model/options.ts: a model does not depend on the runtime.
 *
 * @module
 */
import { checkTokenIds, OptionChecker, show } from "../options.ts";
import { backendNames, hasBackend } from "../backend/registry.ts";
import { MAX_THREADS } from "../../ffi/symbols.ts";
import type { Context } from "./context.ts";
import type { HParams } from "../model/hparams.ts";
import type { Model } from "../model/model.ts";
import { MAX_SEQ } from "../kv/cells.ts";

/** Options of {@link Context.create}. */
export interface ContextOptions {
  /** Cache cells (rounded up to 256); default: the model's training context, at most 4096. */
  nCtx?: number;
  /**
   * Most tokens one {@link Context.decodeBatch} call may hold (llama.cpp's
   * n_batch); {@link Context.decode} cuts longer inputs into such chunks.
   * Default 512.
   */
  nBatch?: number;
  /**
   * Most tokens per graph evaluation (llama.cpp's n_ubatch), at most
   * nBatch; default nBatch. For an encoder (bert, no cache) also the longest
   * input, with nCtx and the model's training context: its whole input is
   * one graph.
   */
  nUbatch?: number;
  /**
   * Sequences (ids 0..nSeqMax-1) sharing the one cache of nCtx cells
   * (llama.cpp's n_seq_max with kv_unified). Default 1, at most 256.
   */
  nSeqMax?: number;
  /**
   * One KV pool for all sequences (true, the default: every token of a
   * batch attends over the cells of every sequence, masked), or one KV
   * stream per sequence (false, llama.cpp's kv_unified = false): each
   * sequence gets nCtx / nSeqMax cells (rounded up to 256; nCtx becomes
   * that times nSeqMax), and a batch of several sequences attends stream by
   * stream. Tokens shared by several sequences, and copies of part of a
   * sequence into another, then need a unified cache.
   */
  kvUnified?: boolean;
  /**
   * With one KV stream per sequence (kvUnified false): whether one
   * micro-batch may take sequences whose ids have gaps (a server's idle
   * slots), attention then running once per run of consecutive streams.
   * Default false: llama.cpp's split_equal, which starts a new micro-batch
   * at each gap, so that logits match llama.cpp's bit for bit (a token's
   * sums round differently in a larger matrix product).
   */
  kvStreamGaps?: boolean;
  /**
   * Output final hidden states (after the output norm, llama.cpp's
   * `result_norm`) instead of logits, in {@link DecodeResult.embeddings}.
   * Encoders (bert) always do. Default false.
   */
  embeddings?: boolean;
  /**
   * Threads each compute runs on. CPU backend: default the physical cores.
   * WebAssembly backend: default 1; more run on workers where the runtime
   * can share memory with them (Deno; a cross-origin isolated page), and
   * are refused, naming why, elsewhere.
   *
   * @example Two WebAssembly threads (no `--allow-ffi` needed)
   * ```ts ignore
   * const ctx = await Context.create(model, { backend: "wasm", threads: 2 });
   * ```
   */
  threads?: number;
  /**
   * KV cache element type (K and V). Default "f16" (llama.cpp's default).
   * "q8_0" needs {@link ContextOptions.flashAttn} (llama.cpp stores a
   * quantized V cache only with flash attention) and head sizes that are
   * multiples of 32; with head sizes divisible by 64 the cache holds keys
   * and values times a Walsh-Hadamard matrix, as llama.cpp's.
   */
  kvType?: "f16" | "f32" | "q8_0";
  /**
   * Attention as one flash-attention op (llama.cpp's flash_attn_type
   * enabled: ggml_flash_attn_ext over a non-transposed V cache, F16 mask)
   * instead of kq mul_mat, soft_max and kqv mul_mat. The logits follow
   * llama.cpp with flash attention on, which rounds differently from off.
   * Default false.
   */
  flashAttn?: boolean;
  /**
   * The arithmetic of flash attention. "default": ggml-cpu's, bit for bit
   * (V accumulated in f16, rounded at every cache cell). "f32": the nodes
   * carry GGML_PREC_F32, and the CPU backend's one-token steps over 32 or
   * more cells (also each sequence's of a batch with one KV stream per
   * sequence, bit for bit as alone) take a kernel that accumulates in f32
   * in its own order —
   * faster (2-5x for the attention of a 1.1B model on Zen 4, from 32 to 2048
   * cells), and no longer llama.cpp's bits
   * (kernels/PARITY.md section 31). Over a `kvType: "q8_0"` cache the
   * kernel takes int8 dot products at AVX-512 with VNNI (section 32). Where
   * no such kernel exists for the CPU, the cache type or the head size, the
   * default arithmetic runs. Needs
   * {@link ContextOptions.flashAttn}. Default "default".
   *
   * @example A long chat, decoded faster at depth
   * ```ts ignore
   * const ctx = await Context.create(model, { flashAttn: true, flashAttnPrecision: "f32" });
   * ```
   */
  flashAttnPrecision?: "default" | "f32";
  /**
   * The matrix products' float order. "default": llama.cpp's (the same
   * logits, bit for bit, as its CPU variant our kernels follow). "fast":
   * where a kernel with a faster order exists, it runs instead: today Q8_0
   * weights on x86 CPUs with AVX2 or AVX-512 VNNI, repacked 16 rows at a
   * time at the first compute (each block's products summed exactly, one
   * rounding per block; kernels/PARITY.md section 34): 1.1B Q8_0 prompts
   * about 2x faster on Zen 4. The products differ from llama.cpp's in the
   * last bits, and once that flips the rounding of one Q8_0 activation the
   * logits part by up to a few 1e-2 (as far from exact arithmetic as
   * llama.cpp's). Where no such kernel exists (other weight types, other
   * CPUs and backends) the default order runs. Default "default".
   *
   * @example A faster prompt on a Q8_0 model
   * ```ts ignore
   * const ctx = await Context.create(model, { matmulOrder: "fast" });
   * ```
   */
  matmulOrder?: "default" | "fast";
  /**
   * Where layers run: "cpu" (native kernels), "ref" (pure TypeScript),
   * "wasm" (the native kernels compiled to WebAssembly: no FFI needed, one
   * thread, the CPU backend's scalar-level results), or
   * `{ cpuLayers: k }` — layers below k on the CPU backend, the rest (and
   * the output head) on the reference backend, with copies between them.
   * Shorthands for {@link ContextOptions.backends}: `["cpu"]`, `["ref"]`,
   * `["wasm"]` and `["cpu", "ref"]` with `layerSplit: [k]`. Default "cpu",
   * or "wasm" where FFI is unavailable (no `--allow-ffi`, no `Deno.dlopen`).
   */
  backend?: "cpu" | "ref" | "wasm" | { cpuLayers: number };
  /**
   * The backends by registry name ("cpu", "ref"), highest priority first,
   * each once; not together with {@link ContextOptions.backend}. Without
   * {@link ContextOptions.layerSplit} the first runs every layer and the
   * others only ops it cannot run.
   */
  backends?: readonly string[];
  /**
   * With {@link ContextOptions.backends}: layers run by each backend but the
   * last, in order (`[3]`: layers 0..2 on `backends[0]`); the last runs the
   * rest and the output head.
   */
  layerSplit?: readonly number[];
  /**
   * Layers offloaded to the CUDA backend (llama.cpp's n_gpu_layers): 0 (the
   * default) runs on the CPU only, k > 0 runs the last k layers and the
   * output head on the GPU, -1 all of them. Not together with
   * {@link ContextOptions.backend} or {@link ContextOptions.backends}. With
   * no usable device, Context.create fails with a one-line error naming the
   * CUDA library, the driver call and its error.
   */
  nGpuLayers?: number;
  /**
   * Debugging: intermediate tensors to keep and copy into
   * {@link Context.lastTaps} after each graph run, by llama.cpp's callback
   * names ("attn_norm-0", "Kcur-2", "kq_soft_max-1", "l_out-5",
   * "result_norm", "result_output", ...). Off by default.
   */
  debugTaps?: readonly string[];
}

/**
 * The output rows that were asked for, in batch order: logits [nVocab] for
 * decoders, hidden states [nEmbd] for encoders and contexts in embeddings
 * mode (whose `logits` is empty).
 */
export interface DecodeResult {
  /** Logits per output row (decoders). */
  readonly logits: Float32Array[];
  /** Final hidden state per output row (encoders, embeddings mode), unpooled. */
  readonly embeddings?: Float32Array[];
  /** The batch index of each output row, ascending. */
  readonly outputIds: number[];
}

/** Options of {@link Context.decodeBatch}. */
export interface BatchDecodeOptions {
  /** Cancels the decode, as in {@link ContextDecodeOptions.signal}. */
  signal?: AbortSignal;
  /**
   * The output rows, one after another, are written into this array (at
   * least outputs x nVocab floats) and returned as views of it, instead of
   * new arrays: as {@link ContextDecodeOptions.into}, for a batch (sixteen
   * rows of a 32,000-token vocabulary are 2 MiB per step). The next decode
   * into it overwrites them. Not for a context whose outputs are embeddings.
   */
  into?: Float32Array;
}

/** Options of {@link Context.decode}. */
export interface ContextDecodeOptions {
  /** Logits of every token, not only the last. */
  allLogits?: boolean;
  /**
   * The last token's logits are written into this array (nVocab floats),
   * which the result then holds as its only row, instead of a new array
   * each call: a loop that samples each step and drops the row allocates
   * nothing per token (a 32,000-token vocabulary's row is 128 KiB, and a
   * new one per step grew a 1.1B model's generation by ~28 MiB over 256
   * tokens). The caller owns it; the next decode into it overwrites it.
   * Not with `allLogits`, nor for a context whose outputs are embeddings.
   *
   * @example
   * ```ts
   * const row = new Float32Array(model.hparams.nVocab);
   * for (const id of [5, 6, 7]) await ctx.decode([id], { into: row });
   * ```
   */
  into?: Float32Array;
  /**
   * Cancels the decode, while it waits for the context or while the kernels
   * run (they stop within a node or row chunk); it then rejects with the
   * signal's reason and the cache is as it was before the call.
   */
  signal?: AbortSignal;
}

/** The KV cache types contexts build. */
export const KV_TYPES = ["f16", "f32", "q8_0"] as const;

/** A KV cache element type ({@link ContextOptions.kvType}). */
export type KvType = typeof KV_TYPES[number];

const CONTEXT_KEYS = [
  "nCtx",
  "nBatch",
  "nUbatch",
  "nSeqMax",
  "kvUnified",
  "kvStreamGaps",
  "embeddings",
  "threads",
  "kvType",
  "flashAttn",
  "flashAttnPrecision",
  "matmulOrder",
  "backend",
  "backends",
  "layerSplit",
  "nGpuLayers",
  "debugTaps",
] as const;
const INT32_MAX = 2 ** 31 - 1;

/** Throws an OptionError for the first invalid field of `o` (for a model of shape `hp`). */
export function validateContextOptions(hp: HParams, o: ContextOptions | undefined): void {
  const c = new OptionChecker("Context.create");
  c.object(o, CONTEXT_KEYS);
  if (!o) return;
  c.int("nCtx", o.nCtx, 1, INT32_MAX);
  c.int("nBatch", o.nBatch, 1, INT32_MAX);
  c.int("nUbatch", o.nUbatch, 1, INT32_MAX);
  c.int("nSeqMax", o.nSeqMax, 1, MAX_SEQ);
  c.bool("kvUnified", o.kvUnified);
  c.bool("kvStreamGaps", o.kvStreamGaps);
  c.bool("embeddings", o.embeddings);
  c.int("threads", o.threads, 1, MAX_THREADS);
  c.bool("flashAttn", o.flashAttn);
  const prec = o.flashAttnPrecision;
  if (prec !== undefined && prec !== "default" && prec !== "f32") {
    c.fail("flashAttnPrecision", prec, `"default", "f32"`);
  }
  if (prec === "f32" && o.flashAttn !== true) {
    c.fail("flashAttnPrecision", prec, `"default" ("f32" needs flashAttn: true)`);
  }
  const order = o.matmulOrder;
  if (order !== undefined && order !== "default" && order !== "fast") {
    c.fail("matmulOrder", order, `"default", "fast"`);
  }
  if (o.kvType !== undefined && !(KV_TYPES as readonly unknown[]).includes(o.kvType)) {
    // Building another type as f16 would hide the choice.
    c.fail("kvType", o.kvType, `"f16", "f32", "q8_0"`);
  }
  if (o.kvType === "q8_0") {
    // llama_init_from_model: "quantized V cache requires flash_attn to be enabled".
    if (o.flashAttn !== true) {
      c.fail("kvType", o.kvType, `"f16", "f32" (q8_0 needs flashAttn: true)`);
    }
    const dims = [hp.headDimK, hp.headDimV];
    if (dims.some((d) => d % 32 !== 0)) {
      c.fail("kvType", o.kvType, `"f16", "f32" (head sizes ${dims} are not multiples of 32)`);
    }
  }
  const b = o.backend as unknown;
  if (b !== undefined && b !== "cpu" && b !== "ref" && b !== "wasm") {
    const split = typeof b === "object" && b !== null && !Array.isArray(b) &&
      Object.keys(b).length === 1 && "cpuLayers" in b;
    const k = split ? (b as { cpuLayers: unknown }).cpuLayers : undefined;
    if (!split || typeof k !== "number" || !Number.isInteger(k) || k < 0 || k > hp.nLayer) {
      c.fail("backend", b, `"cpu", "ref", "wasm" or { cpuLayers: 0..${hp.nLayer} }`);
    }
  }
  checkBackends(c, hp, o);
  c.int("nGpuLayers", o.nGpuLayers, -1, INT32_MAX);
  if (o.nGpuLayers && (o.backend !== undefined || o.backends !== undefined)) {
    c.fail("nGpuLayers", o.nGpuLayers, "0 together with backend or backends");
  }
  if (o.debugTaps !== undefined) {
    if (!Array.isArray(o.debugTaps) || o.debugTaps.some((t) => typeof t !== "string")) {
      c.fail("debugTaps", o.debugTaps, "an array of tensor names");
    }
  }
}

// The general form: registered names, each once, and a layer split that fits.
function checkBackends(c: OptionChecker, hp: HParams, o: ContextOptions): void {
  const names = o.backends as unknown, split = o.layerSplit as unknown;
  if (names === undefined) {
    if (split !== undefined) c.fail("layerSplit", split, "only together with backends");
    return;
  }
  if (o.backend !== undefined) c.fail("backends", names, "either backend or backends, not both");
  const known = backendNames().map(show).join(", ");
  if (!Array.isArray(names) || names.length === 0) {
    c.fail("backends", names, `a non-empty array of backend names (${known})`);
  }
  names.forEach((n: unknown, i) => {
    if (!hasBackend(n)) c.fail(`backends[${i}]`, n, `a backend name (${known})`);
    if (names.indexOf(n) !== i) c.fail(`backends[${i}]`, n, "each backend once");
  });
  if (split === undefined) return;
  const want = names.length - 1;
  const ok = Array.isArray(split) && split.length === want &&
    split.every((k) => typeof k === "number" && Number.isInteger(k) && k >= 0) &&
    split.reduce((a: number, k: number) => a + k, 0) <= hp.nLayer;
  if (!ok) {
    c.fail(
      "layerSplit",
      split,
      `${want} layer count(s), one per backend but the last, integers >= 0 summing to 0..${hp.nLayer}`,
    );
  }
}

/** Throws an OptionError for invalid {@link Context.decode} input. */
export function validateDecode(
  ctx: Context,
  tokens: ArrayLike<number>,
  opts: ContextDecodeOptions | undefined,
): void {
  const c = new OptionChecker("Context.decode");
  c.object(opts, ["allLogits", "signal", "into"]);
  c.bool("allLogits", opts?.allLogits);
  if (opts?.signal !== undefined && !(opts.signal instanceof AbortSignal)) {
    c.fail("signal", opts.signal, "an AbortSignal");
  }
  if (opts?.into !== undefined) {
    if (opts.allLogits) c.fail("into", "with allLogits", "one row: without allLogits");
    checkInto(c, ctx, opts.into);
  }
  checkTokenIds("Context.decode", tokens, ctx.model.hparams.nVocab);
}

/** Whether `ctx` outputs logits (not hidden states): where `into` applies. */
export function outputsLogits(
  ctx: { readonly embeddings: boolean; readonly model: Model },
): boolean {
  return !ctx.embeddings && ctx.model.arch.output === "logits";
}

/**
 * Output rows of a batch with these output flags: those set (at least one
 * row's room), or the last token's alone without flags (the splitter's rule).
 */
export function outputRows(flags: ArrayLike<boolean | number> | undefined): number {
  if (!flags) return 1;
  let rows = 0;
  for (let i = 0; i < flags.length; i++) rows += flags[i] ? 1 : 0;
  return Math.max(rows, 1);
}

/**
 * An `into` option ({@link ContextDecodeOptions.into}): a Float32Array of
 * one row of logits (nVocab floats), or with `rows` (a batch's outputs) room
 * for that many rows or more, on a context that outputs logits.
 */
export function checkInto(
  c: OptionChecker,
  ctx: { readonly embeddings: boolean; readonly model: Model },
  into: unknown,
  rows?: number,
): asserts into is Float32Array {
  const nVocab = ctx.model.hparams.nVocab;
  if (!(into instanceof Float32Array)) c.fail("into", into, "a Float32Array");
  if (!outputsLogits(ctx)) {
    c.fail("into", "on an embeddings context", "a context that outputs logits");
  }
  if (rows === undefined ? into.length !== nVocab : into.length < rows * nVocab) {
    const need = rows === undefined
      ? `${nVocab} (nVocab)`
      : `${rows * nVocab} or more (${rows} rows of ${nVocab})`;
    c.fail("into", `${into.length} floats`, need);
  }
}
