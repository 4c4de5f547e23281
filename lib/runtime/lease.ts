/**
 * Exclusive use of a context: what {@link Context.acquire} returns.
 *
 * @module
 */
import type { BatchDecodeOptions, Context, ContextDecodeOptions, DecodeResult } from "./context.ts";
import type { BatchInput } from "./batch_input.ts";
import { ContextError } from "./errors.ts";

/**
 * Exclusive use of a context, from {@link Context.acquire} until disposed:
 * its decodes and cache edits run without waiting, and every other caller
 * of the context waits (decode) or is refused (clear, truncate, seq*).
 */
export class ContextLease implements Disposable {
  /** The context held. */
  readonly context: Context;
  #ops: LeaseOps | null;

  /** Made by {@link Context.acquire}. */
  constructor(context: Context, ops: LeaseOps) {
    this.context = context;
    this.#ops = ops;
  }

  #live(): LeaseOps {
    if (!this.#ops) throw new ContextError("the context lease was released");
    return this.#ops;
  }

  /** {@link Context.decode} without queueing (one at a time per lease). */
  decode(tokens: ArrayLike<number>, opts: ContextDecodeOptions = {}): Promise<DecodeResult> {
    try {
      return this.#live().decode(tokens, opts);
    } catch (e) {
      return Promise.reject(e);
    }
  }

  /** {@link Context.decodeBatch} without queueing. */
  decodeBatch(batch: BatchInput, opts: BatchDecodeOptions = {}): Promise<DecodeResult> {
    try {
      return this.#live().decodeBatch(batch, opts);
    } catch (e) {
      return Promise.reject(e);
    }
  }

  /** {@link Context.clear} for the holder. */
  clear(): void {
    this.#live().memory.clear();
  }

  /** {@link Context.truncate} for the holder. */
  truncate(pos: number): void {
    this.#live().truncate(pos);
  }

  /** {@link Context.seqRm} for the holder. */
  seqRm(seq: number, p0 = -1, p1 = -1): boolean {
    return this.#live().memory.seqRm(seq, p0, p1);
  }

  /** {@link Context.seqCp} for the holder. */
  seqCp(src: number, dst: number, p0 = -1, p1 = -1): void {
    this.#live().memory.seqCp(src, dst, p0, p1);
  }

  /** {@link Context.seqKeep} for the holder. */
  seqKeep(seq: number): void {
    this.#live().memory.seqKeep(seq);
  }

  /** {@link Context.seqAdd} for the holder. */
  seqAdd(seq: number, p0: number, p1: number, delta: number): void {
    this.#live().memory.seqAdd(seq, p0, p1, delta);
  }

  /** {@link Context.seqDiv} for the holder. */
  seqDiv(seq: number, p0: number, p1: number, d: number): void {
    this.#live().memory.seqDiv(seq, p0, p1, d);
  }

  /** {@link Context.seqPosMin}. */
  seqPosMin(seq: number): number {
    return this.#live().memory.seqPosMin(seq);
  }

  /** {@link Context.seqPosMax}. */
  seqPosMax(seq: number): number {
    return this.#live().memory.seqPosMax(seq);
  }

  /** Lets the next caller have the context. */
  [Symbol.dispose](): void {
    const ops = this.#ops;
    this.#ops = null;
    ops?.release();
  }
}

/** The cache edits of a context (llama_memory_*), run without waiting. */
export interface MemoryOps {
  /** Empties the cache. */
  clear(): void;
  /** llama_memory_seq_rm. */
  seqRm(seq: number, p0?: number, p1?: number): boolean;
  /** llama_memory_seq_cp. */
  seqCp(src: number, dst: number, p0?: number, p1?: number): void;
  /** llama_memory_seq_keep. */
  seqKeep(seq: number): void;
  /** llama_memory_seq_add. */
  seqAdd(seq: number, p0: number, p1: number, delta: number): void;
  /** llama_memory_seq_div. */
  seqDiv(seq: number, p0: number, p1: number, d: number): void;
  /** llama_memory_seq_pos_min. */
  seqPosMin(seq: number): number;
  /** llama_memory_seq_pos_max. */
  seqPosMax(seq: number): number;
}

/** What a lease does, bound to its context. */
export interface LeaseOps {
  /** Decodes tokens of sequence 0 now. */
  decode(tokens: ArrayLike<number>, opts: ContextDecodeOptions): Promise<DecodeResult>;
  /** Decodes a batch now. */
  decodeBatch(batch: BatchInput, opts: BatchDecodeOptions): Promise<DecodeResult>;
  /** The cache edits. */
  memory: MemoryOps;
  /** Truncates sequence 0 now. */
  truncate(pos: number): void;
  /** Releases the lock. */
  release(): void;
}
