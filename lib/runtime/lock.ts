/**
 * A first-in first-out asynchronous lock: what keeps one context to one
 * decode (or one generation) at a time. Waiters are served in call order; a
 * waiter whose AbortSignal fires leaves the queue; {@link FifoLock.failAll}
 * rejects every waiter (the owner is being disposed).
 *
 * @module
 */

interface Waiter {
  grant(): void;
  fail(reason: unknown): void;
}

/** A FIFO mutex; {@link FifoLock.acquire} resolves to the function that releases it. */
export class FifoLock {
  #held = false;
  #waiters: Waiter[] = [];

  /** Whether someone holds the lock. */
  get held(): boolean {
    return this.#held;
  }

  /** Callers waiting for the lock. */
  get waiting(): number {
    return this.#waiters.length;
  }

  /**
   * Resolves once every earlier caller has released the lock, with the
   * release function (calling it twice is harmless). Rejects with the
   * signal's reason if `signal` aborts first.
   */
  acquire(signal?: AbortSignal): Promise<() => void> {
    if (signal?.aborted) return Promise.reject(signal.reason);
    if (!this.#held) {
      this.#held = true;
      return Promise.resolve(this.#releaser());
    }
    return new Promise((resolve, reject) => {
      const onAbort = () => {
        const i = this.#waiters.indexOf(w);
        if (i >= 0) this.#waiters.splice(i, 1);
        reject(signal!.reason);
      };
      const w: Waiter = {
        grant: () => {
          signal?.removeEventListener("abort", onAbort);
          resolve(this.#releaser());
        },
        fail: (reason) => {
          signal?.removeEventListener("abort", onAbort);
          reject(reason);
        },
      };
      signal?.addEventListener("abort", onAbort, { once: true });
      this.#waiters.push(w);
    });
  }

  /** Rejects every waiter with `reason`; the holder keeps the lock until it releases. */
  failAll(reason: unknown): void {
    for (const w of this.#waiters.splice(0)) w.fail(reason);
  }

  #releaser(): () => void {
    let done = false;
    return () => {
      if (done) return;
      done = true;
      const next = this.#waiters.shift();
      if (next) next.grant(); // the lock passes on without being free in between
      else this.#held = false;
    };
  }
}
