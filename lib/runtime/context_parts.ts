/**
 * What `Context.create` assembles before the context exists: its resolved
 * sizes and the memory, backends and scheduler made for them. Types only;
 * the context is ./context.ts.
 *
 * @module
 */
import type { Backend } from "../backend/types.ts";
import type { KvCache } from "../kv/cache.ts";
import type { RecurrentMemory } from "../kv/recurrent.ts";
import type { ModelUse } from "../model/model.ts";
import type { Scheduler } from "../sched/scheduler.ts";
import type { BackendChoice } from "./backends.ts";
import type { KvType } from "./options.ts";

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
