/**
 * The KV cache's options and the slot records its callers hold (cells chosen
 * for a ubatch, and the state saved to undo them). Types only; the cache
 * itself is ./cache.ts.
 *
 * @module
 */
import type { BufferAllocator } from "../ggml/memory.ts";
import { type CellsSnapshot, KvError } from "./cells.ts";
import type { SwaType } from "./swa.ts";

/** Options of {@link KvCache}. */
export interface KvCacheOptions {
  /** Number of cells (the context size). */
  size: number;
  /** Layers with a cache: a count (0..n-1). */
  nLayer: number;
  /** KV heads (GQA groups). */
  nHeadKv: number;
  /** Key width per head. */
  nEmbdHeadK: number;
  /** Value width per head. */
  nEmbdHeadV: number;
  /** Default F16. */
  typeK?: number;
  /** Default F16. */
  typeV?: number;
  /** Store V transposed (llama.cpp without flash attention). Default true. */
  vTrans?: boolean;
  /** Highest sequence id + 1. Default 1. */
  nSeqMax?: number;
  /** Extra padding of the window (llama.cpp's n_pad, 1 by default; windowPad applies too). */
  nPad?: number;
  /**
   * The attended window is the used extent padded to a multiple of this
   * (with nPad). Default 256, llama.cpp's. Any multiple of 64 gives the
   * same bits on the CPU kernels: the padding cells are masked, so they add
   * exact zeros to softmax sums and to KQV lanes whose places do not move
   * (64 is a whole step of every vec_dot and soft_max order); a smaller
   * window only computes fewer of them.
   */
  windowPad?: number;
  /** Sliding window size (0: none). */
  nSwa?: number;
  /** Sliding window kind. Default NONE. */
  swaType?: SwaType;
  /** Where each layer's K and V live: one backend or one per layer. */
  backend: BufferAllocator | ((layer: number) => BufferAllocator);
  /**
   * KV streams: 1 (unified, the default) or nSeqMax (one per sequence,
   * llama.cpp's kv_unified = false); `size` cells each.
   */
  nStream?: number;
}

/** Where one layer's K and V bytes start. */
/** Cells chosen for the tokens of a ubatch, in token order. */
export interface SlotInfo {
  /** Cell index per token (within the token's stream). */
  readonly idxs: readonly number[];
  /** Stream of each token (absent: all in stream 0). */
  readonly strm?: readonly number[];
  /** First stream of the slot (llama.cpp's sinfo.s0). Default 0. */
  readonly s0?: number;
  /** Streams s0.. the slot spans (s1 - s0 + 1), the ubatch's tokens split evenly. Default 1. */
  readonly ns?: number;
  /**
   * When the slot's streams have gaps (ContextOptions.kvStreamGaps): each
   * run of consecutive streams as [first, count], ascending; `ns` is then
   * the number of streams present (the ubatch's tokens split evenly over them).
   */
  readonly runs?: ReadonlyArray<readonly [number, number]>;
}

/** Cell state saved by {@link KvCache.saveSlot}. */
export interface SlotUndo {
  /** Per stream touched: the slot's cells and the search head before applyUbatch. */
  readonly parts: ReadonlyArray<{ stream: number; snap: CellsSnapshot; head: number }>;
}

/** llama.cpp pads the attended window to a multiple of this (get_n_kv). */
export const N_KV_PAD = 256;

/** `o.windowPad`, N_KV_PAD when absent, checked: a positive multiple of 64. */
export function windowPadOf(o: KvCacheOptions): number {
  const w = o.windowPad ?? N_KV_PAD;
  if (!Number.isInteger(w) || w < 64 || w % 64) {
    throw new KvError(`KvCache: windowPad ${w} must be a positive multiple of 64`);
  }
  return w;
}
