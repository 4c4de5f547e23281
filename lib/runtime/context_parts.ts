/**
 * What `Context.create` assembles before the context exists: its resolved
 * sizes (resolveShape) and the memory, backends and scheduler made for
 * them. The context is ./context.ts.
 *
 * @module
 */
import type { Backend } from "../backend/types.ts";
import { type KvCache, N_KV_PAD } from "../kv/cache.ts";
import type { RecurrentMemory } from "../kv/recurrent.ts";
import type { Model, ModelUse } from "../model/model.ts";
import type { Scheduler } from "../sched/scheduler.ts";
import type { BackendChoice } from "./backends.ts";
import { ContextError } from "./errors.ts";
import type { ContextOptions, KvType } from "./options.ts";

/** A context's resolved sizes and switches. */
export interface Shape {
  nCtx: number;
  nBatch: number;
  nUbatch: number;
  nSeqMax: number;
  /** Cells per KV stream: nCtx (unified) or nCtx / nSeqMax. */
  nCtxSeq: number;
  embeddings: boolean;
  threads?: number;
  kvType: KvType;
  flashAttn: boolean;
  /** {@link ContextOptions.flashAttnPrecision} is "f32". */
  flashAttnF32: boolean;
  /** {@link ContextOptions.kvStreamGaps}. */
  kvStreamGaps: boolean;
}

/** The shape of a context of `model` from validated `options`: llama.cpp's sizes and defaults. */
export function resolveShape(model: Model, options: ContextOptions): Shape {
  const hp = model.hparams;
  const want = options.nCtx ?? Math.min(hp.nCtxTrain, 4096);
  if (!Number.isInteger(want) || want <= 0) {
    throw new ContextError(`nCtx must be a positive integer, got ${want}`);
  }
  const pad = (n: number) => Math.ceil(n / N_KV_PAD) * N_KV_PAD;
  const nSeqMax = options.nSeqMax ?? 1;
  // llama_context: n_ctx padded to 256; without a unified cache each
  // sequence's stream gets n_ctx / n_seq_max cells, padded to 256 too.
  let nCtx = pad(want);
  const nCtxSeq = options.kvUnified === false ? pad(Math.floor(nCtx / nSeqMax)) : nCtx;
  if (nCtxSeq === 0) throw new ContextError(`nCtx ${nCtx} gives no cells per sequence`);
  if (options.kvUnified === false) nCtx = nCtxSeq * nSeqMax;
  const nBatch = options.nBatch ?? 512;
  const nUbatch = options.nUbatch ?? nBatch;
  if (nUbatch > nBatch) {
    throw new ContextError(`nUbatch ${nUbatch} exceeds nBatch ${nBatch}`);
  }
  return {
    nCtx,
    nBatch,
    nUbatch,
    nSeqMax,
    nCtxSeq,
    embeddings: (options.embeddings ?? false) || model.arch.output === "embeddings",
    threads: options.threads,
    kvType: options.kvType ?? "f16",
    flashAttn: options.flashAttn ?? false,
    flashAttnF32: options.flashAttnPrecision === "f32",
    kvStreamGaps: options.kvStreamGaps ?? false,
  };
}

/** Everything a new context owns. */
export interface Parts {
  o: Shape;
  choice: BackendChoice;
  backends: Backend[];
  kv: KvCache | null;
  rs: RecurrentMemory | null;
  sched: Scheduler;
  taps: ReadonlySet<string> | undefined;
  use: ModelUse;
}
