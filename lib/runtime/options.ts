/**
 * Checks of the options {@link Context.create} and {@link Context.decode}
 * take, run at the top of each so that a bad value is an
 * {@link OptionError} naming it instead of a silent default (`kvType:
 * "q8_0"` built as f16) or a failure deep inside the graph. Model.load's
 * checks are lib/model/options.ts: a model does not depend on the runtime.
 *
 * @module
 */
import { checkTokenIds, OptionChecker, show } from "../options.ts";
import { backendNames, hasBackend } from "../backend/registry.ts";
import { MAX_THREADS } from "../../ffi/symbols.ts";
import type { Context, ContextOptions } from "./context.ts";
import type { HParams } from "../model/hparams.ts";
import { MAX_SEQ } from "../kv/cells.ts";

/** The KV cache types contexts build. */
export const KV_TYPES = ["f16", "f32"] as const;

const CONTEXT_KEYS = [
  "nCtx",
  "nBatch",
  "nUbatch",
  "nSeqMax",
  "embeddings",
  "threads",
  "kvType",
  "backend",
  "backends",
  "layerSplit",
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
  c.bool("embeddings", o.embeddings);
  c.int("threads", o.threads, 1, MAX_THREADS);
  if (o.kvType !== undefined && !(KV_TYPES as readonly unknown[]).includes(o.kvType)) {
    // q8_0/q4_0 caches need a non-transposed V, i.e. flash attention, which
    // the graph does not have yet; building them as f16 would hide that.
    c.fail(
      "kvType",
      o.kvType,
      `"f16", "f32" (quantized KV caches need flash attention, not implemented)`,
    );
  }
  const b = o.backend as unknown;
  if (b !== undefined && b !== "cpu" && b !== "ref") {
    const split = typeof b === "object" && b !== null && !Array.isArray(b) &&
      Object.keys(b).length === 1 && "cpuLayers" in b;
    const k = split ? (b as { cpuLayers: unknown }).cpuLayers : undefined;
    if (!split || typeof k !== "number" || !Number.isInteger(k) || k < 0 || k > hp.nLayer) {
      c.fail("backend", b, `"cpu", "ref" or { cpuLayers: 0..${hp.nLayer} }`);
    }
  }
  checkBackends(c, hp, o);
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
  opts: { allLogits?: boolean; signal?: AbortSignal } | undefined,
): void {
  const c = new OptionChecker("Context.decode");
  c.object(opts, ["allLogits", "signal"]);
  c.bool("allLogits", opts?.allLogits);
  if (opts?.signal !== undefined && !(opts.signal instanceof AbortSignal)) {
    c.fail("signal", opts.signal, "an AbortSignal");
  }
  checkTokenIds("Context.decode", tokens, ctx.model.hparams.nVocab);
}
