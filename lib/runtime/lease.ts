/**
 * Exclusive use of a context: what {@link Context.acquire} returns.
 *
 * @module
 */
import type { Context, ContextDecodeOptions, DecodeResult } from "./context.ts";
import { ContextError } from "./errors.ts";

/**
 * Exclusive use of a context, from {@link Context.acquire} until disposed:
 * its decode, clear and truncate run without waiting, and every other caller
 * of the context waits (decode) or is refused (clear, truncate).
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

  /** {@link Context.clear} for the holder. */
  clear(): void {
    this.#live().clear();
  }

  /** {@link Context.truncate} for the holder. */
  truncate(pos: number): void {
    this.#live().truncate(pos);
  }

  /** Lets the next caller have the context. */
  [Symbol.dispose](): void {
    const ops = this.#ops;
    this.#ops = null;
    ops?.release();
  }
}

/** What a lease does, bound to its context. */
export interface LeaseOps {
  /** Decodes now. */
  decode(tokens: ArrayLike<number>, opts: ContextDecodeOptions): Promise<DecodeResult>;
  /** Clears now. */
  clear(): void;
  /** Truncates now. */
  truncate(pos: number): void;
  /** Releases the lock. */
  release(): void;
}
