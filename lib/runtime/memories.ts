/**
 * What a context allocates for a model: its memory (a KV cache for
 * attention, recurrent states for Mamba, nothing for encoders) and the
 * scheduler's arenas, sized for the worst micro-batch. Everything is first
 * measured with stand-in backends that allocate nothing, so a context too
 * big for the machine fails before gigabytes are zero-filled (or the
 * kernel's OOM killer ends the process).
 *
 * @module
 */
import type { Backend } from "../backend/types.ts";
import type { Graph } from "../graph/graph.ts";
import type { Tensor } from "../graph/tensor.ts";
import { GGMLType } from "../ggml/types.ts";
import { KvCache, N_KV_PAD } from "../kv/cache.ts";
import { RecurrentMemory } from "../kv/recurrent.ts";
import type { Model } from "../model/model.ts";
import { Scheduler } from "../sched/scheduler.ts";
import { ContextError } from "./errors.ts";
import { buildGraph } from "./graphs.ts";
import { dryBackend, memoryShortfall } from "./sizing.ts";

/** The cache element type of each kvType. */
const KV_GGML_TYPE = { f16: GGMLType.F16, f32: GGMLType.F32, q8_0: GGMLType.Q8_0 } as const;

/** The context shape the memory is sized for. */
export interface MemoryShape {
  /** Cache cells. */
  readonly nCtx: number;
  /** Tokens per graph. */
  readonly nUbatch: number;
  /** Sequences. */
  readonly nSeqMax: number;
  /** Cells per KV stream: nCtx for one unified stream, else nCtx / nSeqMax (one per sequence). */
  readonly nCtxSeq?: number;
  /** Outputs are hidden states. */
  readonly embeddings: boolean;
  /** KV cache element type. */
  readonly kvType: keyof typeof KV_GGML_TYPE;
  /** Attention through FLASH_ATTN_EXT (V stored untransposed). */
  readonly flashAttn: boolean;
  /** {@link ContextOptions.flashAttnPrecision} "f32". */
  readonly flashAttnF32?: boolean;
}

/** Where things go. */
export interface MemoryPlacement {
  /** The context's backends. */
  readonly backends: Backend[];
  /** The backend of each layer. */
  readonly assign: (layer: number) => Backend;
  /** Debugging taps the graphs keep. */
  readonly taps: ReadonlySet<string> | undefined;
  /** How errors name the context. */
  readonly label: string;
  /** Frees what was allocated if a later step fails. */
  readonly stack: DisposableStack;
}

/** A context's memory and scheduler, allocated and reserved. */
export interface ContextMemory {
  /** The KV cache (attention models), else null. */
  readonly kv: KvCache | null;
  /** The recurrent states (Mamba), else null. */
  readonly rs: RecurrentMemory | null;
  /** The scheduler, its arenas reserved for the worst micro-batch. */
  readonly sched: Scheduler;
}

/** Measures, then allocates `model`'s memory and arenas for shape `o`; registered on `p.stack`. */
export function allocateMemory(model: Model, o: MemoryShape, p: MemoryPlacement): ContextMemory {
  const hp = model.hparams;
  const nCtxSeq = o.nCtxSeq ?? o.nCtx;
  // The window padded as little as every backend's kernels allow with
  // llama.cpp's bits (Backend.kvWindowPad: 64 on the CPU and wasm): a short
  // context's decode attends its used cells, not 256. Kept at llama.cpp's
  // 256 with flash attention (its split over KV chunks depends on the
  // window) and with taps (intermediates compared with llama.cpp's, shapes
  // and all).
  const windowPad = o.flashAttn || p.taps?.size
    ? undefined
    : Math.max(...p.backends.map((b) => b.kvWindowPad ?? N_KV_PAD));
  const newKv = (pick: (layer: number) => Backend) =>
    model.arch.memory !== "kv" ? null : new KvCache({
      size: nCtxSeq,
      nStream: o.nCtx / nCtxSeq,
      nLayer: hp.nLayer,
      nHeadKv: hp.nHeadKv,
      nEmbdHeadK: hp.headDimK,
      nEmbdHeadV: hp.headDimV,
      typeK: KV_GGML_TYPE[o.kvType],
      typeV: KV_GGML_TYPE[o.kvType],
      // build_attn_mha's flash path reads V untransposed (llama.cpp's v_trans = !flash_attn).
      vTrans: !o.flashAttn,
      nSeqMax: o.nSeqMax,
      windowPad,
      backend: pick,
    });
  // Recurrent models keep one state per sequence (llama.cpp sizes the
  // memory at n_seq_max cells, whatever n_ctx).
  const newRs = (pick: (layer: number) => Backend) => {
    if (model.arch.memory !== "recurrent") return null;
    const sizes = model.arch.stateSizes?.(hp);
    if (!sizes) throw new ContextError(`${hp.arch}: a recurrent architecture without state sizes`);
    return new RecurrentMemory({
      nSeqMax: o.nSeqMax,
      nLayer: hp.nLayer,
      nEmbdR: sizes.r,
      nEmbdS: sizes.s,
      backend: pick,
    });
  };
  const names = (layer: number) => p.assign(layer).name;
  const schedOpts = { assign: (node: Tensor) => names(node.layer < 0 ? hp.nLayer : node.layer) };
  // Worst case: a full micro-batch attending the whole cache (or, without
  // a cache, the whole micro-batch).
  const n = Math.min(o.nUbatch, o.nCtx);
  // (With streams: one stream's window; the tokens of several streams'
  // slots attend windows of that size each, no more in all.)
  const worst = (kv: KvCache | null, rs: RecurrentMemory | null): Graph => {
    const step = {
      nTokens: n,
      nOutputs: n,
      nKv: kv ? nCtxSeq : rs ? 1 : n,
      slot: kv ? { idxs: Array.from({ length: n }, (_, i) => i % nCtxSeq) } : null,
      embeddings: o.embeddings,
    };
    const build = () => buildGraph(model, kv, p.taps, step, rs, o.flashAttn, o.flashAttnF32).g;
    // A recurrent slot spanning every cell, one of them zeroed.
    return rs ? rs.withWorstSlot(build) : build();
  };

  const dry = new Map(p.backends.map((b) => [b, dryBackend(b)]));
  const kvDry = newKv((layer) => dry.get(p.assign(layer))!);
  const rsDry = newRs((layer) => dry.get(p.assign(layer))!);
  const arenas = new Scheduler([...dry.values()], schedOpts).measure(worst(kvDry, rsDry));
  const short = memoryShortfall(
    (kvDry?.totalBytes ?? 0) + (rsDry?.totalBytes ?? 0),
    [...arenas.values()].reduce((a, b) => a + b, 0),
  );
  if (short) throw new ContextError(`${p.label} ${short}; use a smaller nCtx or nBatch`);
  const kv = newKv(p.assign);
  if (kv) p.stack.use(kv);
  const rs = newRs(p.assign);
  if (rs) p.stack.use(rs);
  const sched = p.stack.use(new Scheduler(p.backends, schedOpts));
  sched.reserve(worst(kv, rs));
  return { kv, rs, sched };
}
