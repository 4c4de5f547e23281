/**
 * Sequences: one conversation or request each, over a context's shared
 * cache (in the spirit of node-llama-cpp's LlamaContextSequence). A
 * sequence knows the tokens it has evaluated; evaluations of different
 * sequences that wait at the same time are merged into one batch, so their
 * tokens go through the same graphs (continuous batching).
 *
 * @module
 */
import { checkTokenIds, OptionChecker } from "../options.ts";
import type { Context, DecodeResult } from "./context.ts";
import { checkInto, outputRows, outputsLogits } from "./options.ts";
import type { ContextLease } from "./lease.ts";
import { ContextDisposedError, ContextError } from "./errors.ts";

/** Options of {@link Sequence.evaluate}. */
export interface EvaluateOptions {
  /** Outputs for every token, not only the last. */
  allLogits?: boolean;
  /**
   * Cancels the evaluation; it rejects with the signal's reason and the
   * sequence is as it was before the call.
   */
  signal?: AbortSignal;
  /**
   * The last token's logits are written into this array (nVocab floats)
   * instead of a new one, as `Context.decode`'s `into`: a generation
   * loop's steps then allocate no rows. Not with `allLogits`, nor in
   * embeddings mode.
   */
  into?: Float32Array;
}

/**
 * One sequence of a context: made by {@link Context.sequence}, freed (its
 * cells and id) by dispose.
 *
 * @example Two chats sharing a context
 * ```ts ignore
 * using ctx = await Context.create(model, { nSeqMax: 2 });
 * using a = ctx.sequence(), b = ctx.sequence();
 * const [ra, rb] = await Promise.all([a.evaluate(promptA), b.evaluate(promptB)]);
 * ```
 */
export class Sequence implements Disposable {
  /** The context whose cache holds this sequence. */
  readonly context: Context;
  /** Its sequence id in the context (0..nSeqMax-1). */
  readonly id: number;
  #tokens: number[] = [];
  #queue: SequenceQueue;
  #release: () => void;
  #disposed = false;

  /** Made by {@link Context.sequence}. */
  constructor(context: Context, id: number, queue: SequenceQueue, release: () => void) {
    this.context = context;
    this.id = id;
    this.#queue = queue;
    this.#release = release;
  }

  /** The tokens evaluated so far, in position order (position i holds tokens[i]). */
  get tokens(): readonly number[] {
    return this.#tokens;
  }

  /** Tokens cached for this sequence: the next position. */
  get nPast(): number {
    return this.#tokens.length;
  }

  /**
   * Counters of the shared batches of this sequence's context: decodes run
   * and the sequences and tokens they carried (continuous batching at work:
   * sequences per decode near the number generating at once).
   */
  get batchStats(): Readonly<BatchStats> {
    return this.#queue.stats;
  }

  /** Whether the sequence was disposed. */
  get disposed(): boolean {
    return this.#disposed;
  }

  #assertLive(what: string): void {
    if (this.#disposed) throw new ContextError(`${what}: sequence ${this.id} is disposed`);
    if (this.context.disposed) {
      throw new ContextDisposedError(`${what}: ${this.context.label} is disposed`);
    }
  }

  /**
   * Evaluates `tokens` after what the sequence holds and returns the logits
   * (or hidden states, in embeddings mode) of its last token, or of every
   * token with `allLogits`. Evaluations of other sequences waiting at the
   * same time share the batch.
   */
  evaluate(tokens: ArrayLike<number>, opts: EvaluateOptions = {}): Promise<DecodeResult> {
    try {
      this.#assertLive("evaluate");
      const c = new OptionChecker("Sequence.evaluate");
      c.object(opts, ["allLogits", "signal", "into"]);
      c.bool("allLogits", opts.allLogits);
      if (opts.signal !== undefined && !(opts.signal instanceof AbortSignal)) {
        c.fail("signal", opts.signal, "an AbortSignal");
      }
      if (opts.into !== undefined) {
        if (opts.allLogits) c.fail("into", "with allLogits", "one row: without allLogits");
        checkInto(c, this.context, opts.into);
      }
      checkTokenIds("Sequence.evaluate", tokens, this.context.model.hparams.nVocab);
      if (tokens.length === 0) throw new ContextError("evaluate: no tokens");
      const n = tokens.length;
      if (this.nPast + n > this.context.nCtxSeq) {
        throw new ContextError(
          `evaluate: sequence ${this.id} holds ${this.nPast} tokens; ${n} more exceed ` +
            `the context of ${this.context.nCtxSeq}`,
        );
      }
      opts.signal?.throwIfAborted();
      return this.#queue.submit(this, Int32Array.from(tokens), opts);
    } catch (e) {
      return Promise.reject(e);
    }
  }

  /**
   * Removes the tokens at positions [p0, p1) and moves the later ones down
   * by p1 - p0 (their keys are re-rotated before the next decode), so that
   * positions stay 0..nPast-1 — the context shift of a long chat.
   */
  async erase(p0: number, p1: number, signal?: AbortSignal): Promise<void> {
    this.#assertLive("erase");
    const n = this.nPast;
    if (!Number.isInteger(p0) || !Number.isInteger(p1) || p0 < 0 || p1 < p0 || p1 > n) {
      throw new ContextError(
        `erase: need 0 <= p0 <= p1 <= ${n} (the tokens held), got ${p0}, ${p1}`,
      );
    }
    if (p0 === p1) return;
    if (this.context.recurrentMemory) throw noContextShift(this.context, "erase");
    await this.#edit(signal, (lease) => {
      lease.seqRm(this.id, p0, p1);
      if (p1 < this.#tokens.length) lease.seqAdd(this.id, p1, -1, p0 - p1);
      this.#tokens.splice(p0, p1 - p0);
    });
  }

  /**
   * Drops the tokens at positions >= pos (to re-prompt from there). A
   * recurrent model's state (Mamba) cannot be rewound: the sequence is then
   * cleared, and {@link tokens} tells what it still holds (nothing).
   */
  async truncate(pos: number, signal?: AbortSignal): Promise<void> {
    this.#assertLive("truncate");
    if (!Number.isInteger(pos) || pos < 0) {
      throw new ContextError(`truncate: position must be a non-negative integer, got ${pos}`);
    }
    if (pos >= this.nPast) return;
    await this.#edit(signal, (lease) => {
      if (lease.seqRm(this.id, pos, -1)) this.#tokens.length = pos;
      else {
        lease.seqRm(this.id, -1, -1);
        this.#tokens = [];
      }
    });
  }

  /** Forgets every token of this sequence. */
  async clear(signal?: AbortSignal): Promise<void> {
    this.#assertLive("clear");
    await this.#edit(signal, (lease) => {
      lease.seqRm(this.id, -1, -1);
      this.#tokens = [];
    });
  }

  /**
   * A new sequence holding the same tokens; it shares their cells (no keys
   * or values are copied) until either diverges.
   */
  async fork(signal?: AbortSignal): Promise<Sequence> {
    this.#assertLive("fork");
    const other = this.context.sequence();
    try {
      await this.#edit(signal, (lease) => {
        lease.seqCp(this.id, other.id, -1, -1);
        other.#tokens = [...this.#tokens];
      });
    } catch (e) {
      other[Symbol.dispose]();
      throw e;
    }
    return other;
  }

  async #edit(signal: AbortSignal | undefined, f: (lease: ContextLease) => void): Promise<void> {
    // The queue first: evaluations already submitted are not overtaken.
    await this.#queue.idle(this);
    using lease = await this.context.acquire(signal);
    this.#assertLive("edit");
    f(lease);
  }

  /**
   * Appends tokens an evaluation decoded.
   * @internal
   */
  accept(tokens: ArrayLike<number>): void {
    for (let i = 0; i < tokens.length; i++) this.#tokens.push(tokens[i]);
  }

  /**
   * Sets the token list after a state load put this sequence's cells back.
   * @internal
   */
  replaceTokens(tokens: readonly number[]): void {
    this.#tokens = [...tokens];
  }

  /**
   * Forgets the tokens from `n` on (a failed evaluation was rolled back).
   * @internal
   */
  truncateTokens(n: number): void {
    this.#tokens.length = Math.min(this.#tokens.length, n);
  }

  /** Frees the sequence's cells (once no decode uses the context) and its id. */
  [Symbol.dispose](): void {
    if (this.#disposed) return;
    this.#disposed = true;
    const reason = new ContextError(`sequence ${this.id} was disposed`);
    this.#queue.drop(this, reason);
    const ctx = this.context;
    if (ctx.disposed) {
      this.#release();
      return;
    }
    // The id is given back only after its cells are free, so a new sequence
    // never starts with this one's tokens.
    ctx.acquire().then((lease) => {
      try {
        if (!ctx.disposed) lease.seqRm(this.id, -1, -1);
      } finally {
        lease[Symbol.dispose]();
        this.#release();
      }
    }, () => this.#release()); // the context was disposed meanwhile: nothing to free
  }
}

/** The longest a round waits for the sequences the last one finished (ms). */
const GATHER_MS = 0.5;

/** Counters of a context's shared batches ({@link Sequence.batchStats}). */
export interface BatchStats {
  /** Decodes run for sequences. */
  decodes: number;
  /** Sequences they carried, summed (a sequence counts once per decode). */
  sequences: number;
  /** Tokens they carried, summed. */
  tokens: number;
}

// One evaluation request: its tokens go out in one or more rounds.
interface Request {
  seq: Sequence;
  tokens: Int32Array;
  sent: number;
  start: number; // the sequence's length before the request
  busy: boolean; // in the batch being decoded
  all: boolean;
  signal?: AbortSignal;
  into?: Float32Array;
  logits: Float32Array[];
  embeddings: Float32Array[];
  outputIds: number[];
  done: PromiseWithResolvers<DecodeResult>;
}

interface Span {
  r: Request;
  from: number; // index in the batch
  n: number;
}

/**
 * Merges the evaluations of a context's sequences into shared batches of
 * at most nBatch tokens: requests with the fewest tokens left go first (a
 * generation step does not wait behind a long prompt), a long prompt goes
 * in chunks.
 * @internal
 */
export class SequenceQueue {
  /** Decodes run, and the sequences and tokens they carried. */
  readonly stats: BatchStats = { decodes: 0, sequences: 0, tokens: 0 };
  #ctx: Context;
  #pending: Request[] = [];
  #pump: Promise<void> | null = null;
  // Sequences whose evaluation the last round finished: a generation loop
  // submits its next token soon after (sampling runs between rounds).
  #expect = new Set<Sequence>();
  #gate: (() => void) | null = null;
  // Every batch's logits land here (decodeBatch's into), then each row is
  // copied to its request's own array: no batch-sized array per step.
  #rows = new Float32Array(0);

  /** A queue for `ctx`. */
  constructor(ctx: Context) {
    this.#ctx = ctx;
  }

  /** Queues an evaluation of `tokens` for `seq`. */
  submit(seq: Sequence, tokens: Int32Array, o: EvaluateOptions): Promise<DecodeResult> {
    const r: Request = {
      seq,
      tokens,
      sent: 0,
      start: seq.nPast,
      busy: false,
      all: o.allLogits ?? false,
      signal: o.signal,
      into: o.into,
      logits: [],
      embeddings: [],
      outputIds: [],
      done: Promise.withResolvers<DecodeResult>(),
    };
    this.#pending.push(r);
    if (this.#expect.delete(seq) && this.#expect.size === 0) this.#gate?.();
    // Cancelled while waiting for its first round: out of the queue at once.
    // The listener goes when the request settles: a generation passes the
    // same signal for every token, and each listener would keep its request
    // (and logits) alive until the signal dies.
    const signal = o.signal;
    if (signal) {
      const onAbort = () => {
        if (r.sent === 0 && !r.busy && this.#pending.includes(r)) {
          this.#fail(r, signal.reason, null);
        }
      };
      signal.addEventListener("abort", onAbort, { once: true });
      r.done.promise.then(
        () => signal.removeEventListener("abort", onAbort),
        () => signal.removeEventListener("abort", onAbort),
      );
    }
    this.#kick();
    return r.done.promise;
  }

  // Starts the pump unless it runs. A request submitted after the pump's
  // loop saw the queue empty but before its `finally` ran would otherwise be
  // left waiting forever: the pump starts again when requests remain.
  #kick(): void {
    this.#pump ??= this.#run().finally(() => {
      this.#pump = null;
      if (this.#pending.length) this.#kick();
    });
  }

  /** Resolves when no request of `seq` is pending. */
  async idle(seq: Sequence): Promise<void> {
    while (this.#pending.some((r) => r.seq === seq) && this.#pump) await this.#pump;
  }

  /** Rejects the pending requests of `seq` (disposed). */
  drop(seq: Sequence, reason: Error): void {
    if (this.#expect.delete(seq) && this.#expect.size === 0) this.#gate?.();
    for (const r of this.#pending) if (r.seq === seq) this.#fail(r, reason, null);
    this.#pending = this.#pending.filter((r) => r.seq !== seq);
  }

  /** Rejects every pending request (the context was disposed). */
  failAll(reason: Error): void {
    for (const r of this.#pending) r.done.reject(reason);
    this.#pending = [];
  }

  // Waits until every sequence the last round finished has submitted again,
  // or GATHER_MS has passed, turning the event loop with setImmediate
  // meanwhile: without it, the sequences whose samplers run first start a
  // round on their own and the rest wait for the next one, halving the
  // batch (continuous batching then degrades into alternating half
  // batches). One macrotask was not always enough: a resubmission may come
  // a few event-loop turns later (seen: a stream and a chunked prompt that
  // never shared a decode). setImmediate, not setTimeout(0): a timer costs
  // a millisecond or more per round.
  async #gather(): Promise<void> {
    if (this.#expect.size === 0) return;
    const until = performance.now() + GATHER_MS;
    await new Promise<void>((resolve) => {
      let cancel = nextTurn(tick);
      function tick() {
        if (performance.now() >= until) done();
        else cancel = nextTurn(tick);
      }
      function done() {
        cancel();
        resolve();
      }
      this.#gate = done;
    });
    this.#gate = null;
    this.#expect.clear();
  }

  async #run(): Promise<void> {
    while (this.#pending.length) {
      let lease: ContextLease;
      try {
        lease = await this.#ctx.acquire();
      } catch (e) {
        this.failAll(e as Error);
        return;
      }
      try {
        await this.#round(lease);
      } finally {
        lease[Symbol.dispose]();
      }
      await this.#gather();
    }
  }

  // One batch: the next chunk of as many requests as fit nBatch.
  async #round(lease: ContextLease): Promise<void> {
    for (const r of [...this.#pending]) {
      if (r.signal?.aborted) this.#fail(r, r.signal.reason, lease);
    }
    // One request per sequence per round (the oldest): a sequence's tokens stay in order.
    const seen = new Set<Sequence>();
    const first = this.#pending.filter((r) => !seen.has(r.seq) && seen.add(r.seq));
    const order = first.sort((a, b) => (a.tokens.length - a.sent) - (b.tokens.length - b.sent));
    let budget = this.#ctx.nBatch;
    const spans: Span[] = [];
    let at = 0;
    for (const r of order) {
      const n = Math.min(budget, r.tokens.length - r.sent);
      if (n <= 0) break;
      spans.push({ r, from: at, n });
      at += n;
      budget -= n;
    }
    if (!spans.length) return;
    this.stats.decodes++;
    this.stats.sequences += spans.length;
    this.stats.tokens += at;
    try {
      await this.#decode(lease, spans);
    } catch (e) {
      if (spans.length === 1 || this.#ctx.disposed) {
        for (const s of spans) this.#fail(s.r, e, lease);
        return;
      }
      // Something in the shared batch did not fit: each request on its own
      // (the failed batch was undone), so only the ones that fail are rejected.
      for (const s of spans) {
        await this.#decode(lease, [s]).catch((e) => this.#fail(s.r, e, lease));
      }
    }
  }

  async #decode(lease: ContextLease, spans: Span[]): Promise<void> {
    // One KV stream per sequence: in sequence order, so that split_equal
    // (sequential) puts consecutive sequences into one micro-batch.
    if (!this.#ctx.kvUnified) spans.sort((a, b) => a.r.seq.id - b.r.seq.id);
    const n = spans.reduce((a, s) => a + s.n, 0);
    const tokens = new Int32Array(n);
    const seqIds = new Array<number>(n);
    const logits = new Uint8Array(n);
    let at = 0;
    for (const s of spans) {
      const { r } = s;
      if (r.sent === 0) r.start = r.seq.nPast;
      tokens.set(r.tokens.subarray(r.sent, r.sent + s.n), at);
      seqIds.fill(r.seq.id, at, at + s.n);
      if (r.all) logits.fill(1, at, at + s.n);
      else if (r.sent + s.n === r.tokens.length) logits[at + s.n - 1] = 1;
      s.from = at;
      at += s.n;
    }
    // A lone request can be cancelled inside the kernels; in a shared batch
    // the others' tokens go on and the cancelled one is rolled back after.
    const signal = spans.length === 1 ? spans[0].r.signal : undefined;
    for (const s of spans) s.r.busy = true;
    const into = this.#into(logits);
    let res: DecodeResult;
    try {
      res = await lease.decodeBatch({ tokens, seqIds, logits }, { signal, into });
    } finally {
      for (const s of spans) s.r.busy = false;
    }
    const rows = res.logits.length ? res.logits : res.embeddings ?? [];
    res.outputIds.forEach((i, k) => {
      const s = spans.find((s) => i >= s.from && i < s.from + s.n)!;
      const row = rows[k];
      if (!res.logits.length) s.r.embeddings.push(row);
      // A row in the shared buffer is the next batch's too: copied out.
      else if (into) {
        const own = s.r.into && !s.r.all ? s.r.into : null;
        own?.set(row);
        s.r.logits.push(own ?? row.slice());
      } else s.r.logits.push(row);
      s.r.outputIds.push(s.r.sent + i - s.from);
    });
    for (const s of spans) {
      const { r } = s;
      // An encoder keeps nothing between calls: its sequences stay empty.
      if (this.#ctx.hasMemory) r.seq.accept(r.tokens.subarray(r.sent, r.sent + s.n));
      r.sent += s.n;
      if (r.signal?.aborted) {
        this.#fail(r, r.signal.reason, lease);
      } else if (r.sent === r.tokens.length) {
        this.#pending = this.#pending.filter((x) => x !== r);
        if (!this.#pending.some((x) => x.seq === r.seq)) this.#expect.add(r.seq);
        r.done.resolve({
          logits: r.logits,
          embeddings: r.embeddings.length ? r.embeddings : undefined,
          outputIds: r.outputIds,
        });
      }
    }
  }

  // The shared buffer for a batch with these output flags (grown, never
  // shrunk); none in embeddings mode, whose rows are hidden states.
  #into(flags: Uint8Array): Float32Array | undefined {
    const ctx = this.#ctx;
    if (!outputsLogits(ctx)) return undefined;
    const need = outputRows(flags) * ctx.model.hparams.nVocab;
    if (this.#rows.length < need) {
      this.#rows = new Float32Array(Math.max(need, 2 * this.#rows.length));
    }
    return this.#rows;
  }

  // Rejects r and removes what it had decoded, so the sequence is as before it.
  #fail(r: Request, reason: unknown, lease: ContextLease | null): void {
    this.#pending = this.#pending.filter((x) => x !== r);
    if (r.sent > 0 && lease && !this.#ctx.disposed) {
      // A recurrent state cannot lose its last tokens: the sequence is cleared.
      const partial = lease.seqRm(r.seq.id, r.start, -1);
      if (!partial) lease.seqRm(r.seq.id, -1, -1);
      r.seq.truncateTokens(partial ? r.start : 0);
    }
    r.done.reject(reason);
  }
}

/**
 * The error of a context shift (erasing tokens from the middle) on a
 * recurrent model: its state folds every token in and cannot forget some.
 * @internal
 */
export function noContextShift(ctx: Context, what: string): ContextError {
  return new ContextError(
    `${what}: ${ctx.model.hparams.arch} keeps a recurrent state, which cannot forget ` +
      `tokens: context shift is not possible (clear the sequence and evaluate again)`,
  );
}

type Immediate = (f: () => void) => unknown;
const immediate = (globalThis as { setImmediate?: Immediate }).setImmediate;
const clearImmediateFn = (globalThis as { clearImmediate?: (t: unknown) => void }).clearImmediate;

/**
 * Runs `f` on the event loop's next turn and returns its cancel: Deno's and
 * Node's setImmediate, or in a browser (no setImmediate, and no node:timers
 * to import) a MessageChannel message; never a timer, which is clamped to a
 * millisecond or more.
 */
function nextTurn(f: () => void): () => void {
  if (immediate && clearImmediateFn) {
    const t = immediate(f);
    return () => clearImmediateFn(t);
  }
  const ch = new MessageChannel();
  let live = true;
  ch.port1.onmessage = () => {
    ch.port1.close();
    if (live) f();
  };
  ch.port2.postMessage(null);
  return () => {
    live = false;
    ch.port1.close();
  };
}
