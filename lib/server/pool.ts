/**
 * The slots of a server: one {@link Sequence} each, on one context. A
 * request waits for a free slot (its AbortSignal ends the wait), takes the
 * free one whose cache shares the longest prefix with its prompt (so a
 * follow-up chat turn reuses its earlier turns), and gives it back when done.
 * Beyond `maxQueue` waiting requests, a request is refused (503).
 *
 * @module
 */
import type { BatchStats, Sequence } from "../runtime/sequence.ts";
import { ApiError } from "./errors.ts";

/** A pool of sequences handed out one request at a time. */
export class SlotPool {
  readonly #seqs: Sequence[];
  readonly #free: Set<Sequence>;
  readonly #waiters: { resolve: () => void }[] = [];

  readonly #maxQueue: number;

  /** A pool over `seqs` (all free); at most `maxQueue` requests wait. */
  constructor(seqs: Sequence[], maxQueue = Infinity) {
    this.#seqs = seqs;
    this.#maxQueue = maxQueue;
    this.#free = new Set(seqs);
  }

  /** Slots in all. */
  get size(): number {
    return this.#seqs.length;
  }

  /** Slots free now. */
  get free(): number {
    return this.#free.size;
  }

  /** Counters of the decodes the slots share. */
  get batchStats(): Readonly<BatchStats> {
    return this.#seqs[0].batchStats;
  }

  /** Requests waiting for a slot. */
  get queued(): number {
    return this.#waiters.length;
  }

  /** A free slot, the one caching the longest prefix of `prompt`; waits while none is free. */
  async acquire(prompt: readonly number[], signal?: AbortSignal): Promise<Sequence> {
    while (this.#free.size === 0) {
      signal?.throwIfAborted();
      if (this.#waiters.length >= this.#maxQueue) {
        throw new ApiError(503, `all ${this.#seqs.length} slots are busy and the queue is full`, {
          type: "unavailable_error",
          code: "server_busy",
          headers: { "Retry-After": "1" },
        });
      }
      await new Promise<void>((resolve, reject) => {
        const w = { resolve };
        const onAbort = () => {
          const i = this.#waiters.indexOf(w);
          if (i >= 0) this.#waiters.splice(i, 1);
          reject(signal!.reason);
        };
        w.resolve = () => {
          signal?.removeEventListener("abort", onAbort);
          resolve();
        };
        signal?.addEventListener("abort", onAbort, { once: true });
        this.#waiters.push(w);
      });
    }
    signal?.throwIfAborted();
    let best: Sequence | null = null, bestLen = -1;
    for (const s of this.#free) {
      const t = s.tokens;
      let n = 0;
      while (n < t.length && n < prompt.length && t[n] === prompt[n]) n++;
      if (n > bestLen) [best, bestLen] = [s, n];
    }
    this.#free.delete(best!);
    return best!;
  }

  /** Gives `seq` back and wakes the first waiter. */
  release(seq: Sequence): void {
    if (!this.#seqs.includes(seq) || this.#free.has(seq)) return;
    this.#free.add(seq);
    this.#waiters.shift()?.resolve();
  }

  /** Disposes every sequence. */
  dispose(): void {
    for (const s of this.#seqs) s[Symbol.dispose]();
  }
}
