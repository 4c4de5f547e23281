/**
 * A context: one model's KV cache, its scheduler over backends and the
 * decode loop of llama_decode (batch → micro-batches → slot → graph →
 * logits). `nSeqMax` sequences share one unified cache (llama.cpp's
 * `kv_unified`), or each has a stream of its own (`kvUnified: false`); a
 * batch may hold tokens of several of them, decoded in one graph, and the sequence edits (seqRm, seqCp, seqKeep, seqAdd, seqDiv) act
 * on the cache between decodes, a K-shift re-rotating moved keys before the
 * next one.
 *
 * Lifetimes: a context runs one decode at a time (later calls wait their
 * turn, see {@link Context.acquire}); disposing it while a decode runs
 * cancels the kernels and frees the native memory once they have returned;
 * the model it reads refuses to be disposed while it is open.
 *
 * @module
 */
import type { Backend } from "../backend/types.ts";
import type { KvCache } from "../kv/cache.ts";
import type { RecurrentMemory } from "../kv/recurrent.ts";
import { attachToModel, type Model, type ModelUse } from "../model/model.ts";
import { Decoder } from "./decoder.ts";
import { allocateMemory } from "./memories.ts";
import { batchFromInput, type BatchInput, checkEncoderInput, encoderSpan } from "./batch_input.ts";
import { memoryOps } from "./memory.ts";
import type { Batch } from "../kv/batch.ts";
import { Sequence, SequenceQueue } from "./sequence.ts";
import type { Scheduler } from "../sched/scheduler.ts";
import {
  type BackendChoice,
  backendChoice,
  backendPlan,
  choiceLabel,
  layerAssignment,
  openBackends,
} from "./backends.ts";
import { ContextBusyError, ContextDisposedError, ContextError } from "./errors.ts";
import { ContextLease } from "./lease.ts";

export { ContextBusyError, ContextDisposedError, ContextError } from "./errors.ts";
export { ContextLease, type LeaseOps, type MemoryOps } from "./lease.ts";
export type { BatchInput } from "./batch_input.ts";
import { FifoLock } from "./lock.ts";
import {
  type BatchDecodeOptions,
  checkInto,
  type ContextDecodeOptions,
  type ContextOptions,
  type DecodeResult,
  outputRows,
  validateContextOptions,
  validateDecode,
} from "./options.ts";

export type {
  BatchDecodeOptions,
  ContextDecodeOptions,
  ContextOptions,
  DecodeResult,
  KvType,
} from "./options.ts";
import { OptionChecker } from "../options.ts";
import type { MemoryOps } from "./lease.ts";
import { type Parts, resolveShape } from "./context_parts.ts";

/** What a forgotten context's finalizer frees: nothing here refers to the context. */
interface Leftovers {
  backends: Backend[];
  use: ModelUse;
}

const forgotten = new FinalizationRegistry<Leftovers>(({ backends, use }) => {
  // Backends own every native allocation (cache, arenas, thread pool).
  for (const b of backends) b[Symbol.dispose]();
  use.closing();
  use.freed();
});

let nextId = 1;

/**
 * A model's inference state. Dispose it to free the cache and arenas; if a
 * decode is running, it is cancelled and the memory freed when the kernels
 * return (`await using` waits for that). A context forgotten without
 * dispose is freed when garbage-collected.
 *
 * @example Two sequences decoded in one batch
 * ```ts ignore
 * using ctx = await Context.create(model, { nSeqMax: 2 });
 * const r = await ctx.decodeBatch({
 *   tokens: [1, 15, 27, 1, 99],
 *   seqIds: [0, 0, 0, 1, 1],
 *   logits: [0, 0, 1, 0, 1],
 * });
 * r.logits; // [logits after token 2 of seq 0, logits after token 4 of seq 1]
 * ```
 */
export class Context implements Disposable, AsyncDisposable {
  /** The model this context runs. */
  readonly model: Model;
  /** Cache cells, all sequences (and streams) together. */
  readonly nCtx: number;
  /**
   * Cells one sequence can use: nCtx with a unified cache, nCtx / nSeqMax
   * with one stream per sequence (llama.cpp's n_ctx_seq).
   */
  readonly nCtxSeq: number;
  /** One KV pool for all sequences, or one stream each ({@link ContextOptions.kvUnified}). */
  readonly kvUnified: boolean;
  /** Most tokens per {@link decodeBatch} call. */
  readonly nBatch: number;
  /** Most tokens per graph evaluation. */
  readonly nUbatch: number;
  /** Sequence ids are 0..nSeqMax-1. */
  readonly nSeqMax: number;
  /** Whether outputs are hidden states (embeddings mode, or an encoder). */
  readonly embeddings: boolean;
  /** CPU threads asked for (undefined: physical cores). */
  readonly threads: number | undefined;
  /** KV cache element type. */
  readonly kvType: "f16" | "f32" | "q8_0";
  /** Whether attention is one flash-attention op ({@link ContextOptions.flashAttn}). */
  readonly flashAttn: boolean;
  /** The backend choice this context was created with (`backend`, or `backends` and `layerSplit`). */
  readonly backendChoice: BackendChoice;
  /** "Context #N (nCtx …, backend)": how errors name this context. */
  readonly label: string;
  // null for architectures without a KV cache (encoders, recurrent models).
  #kv: KvCache | null;
  // The states of a recurrent model (Mamba), else null.
  #rs: RecurrentMemory | null;
  #sched: Scheduler;
  #backends: Backend[];
  #use: ModelUse;
  #decoder: Decoder;
  #lock = new FifoLock();
  // The decode running now (the kernels may be reading native memory).
  #running: Promise<unknown> | null = null;
  // Aborted by dispose: cancels the running decode.
  #closer = new AbortController();
  // Caller signals joined with the closer's (see #withCloser); weak: dies with the caller's.
  readonly #joined = new WeakMap<AbortSignal, AbortSignal>();
  #state: "open" | "closing" | "freed" = "open";
  #freed = Promise.withResolvers<void>();
  // Sequence objects by id (null: free).
  #owners: (Sequence | null)[];
  #queue: SequenceQueue | null = null;
  /** Values of {@link ContextOptions.debugTaps} from the last graph run (ggml element order). */
  get lastTaps(): Map<string, Float32Array> {
    return this.#decoder.lastTaps;
  }

  private constructor(model: Model, label: string, p: Parts) {
    this.model = model;
    this.label = label;
    this.threads = p.o.threads;
    this.kvType = p.o.kvType;
    this.flashAttn = p.o.flashAttn;
    this.backendChoice = p.choice;
    this.nCtx = p.o.nCtx;
    this.nCtxSeq = p.o.nCtxSeq;
    this.kvUnified = p.o.nCtxSeq === p.o.nCtx;
    this.nBatch = p.o.nBatch;
    this.nUbatch = p.o.nUbatch;
    this.nSeqMax = p.o.nSeqMax;
    this.embeddings = p.o.embeddings;
    this.#owners = new Array(p.o.nSeqMax).fill(null);
    this.#backends = p.backends;
    this.#kv = p.kv;
    this.#rs = p.rs;
    this.#sched = p.sched;
    this.#decoder = new Decoder({
      model,
      kv: p.kv,
      rs: p.rs,
      sched: p.sched,
      taps: p.taps,
      nUbatch: p.o.nUbatch,
      nSeqMax: p.o.nSeqMax,
      embeddings: p.o.embeddings,
      flashAttn: p.o.flashAttn,
      flashAttnF32: p.o.flashAttnF32,
      kvStreamGaps: p.o.kvStreamGaps,
      closer: this.#closer.signal,
      isOpen: () => this.#state === "open",
    });
    this.#use = p.use;
    forgotten.register(this, { backends: p.backends, use: p.use }, this);
  }

  /**
   * Creates a context for `model`. Failure-atomic: when any step fails
   * (an allocation too large, a disposed model), everything allocated before
   * it is freed and nothing stays registered with the model.
   */
  static async create(model: Model, options: ContextOptions = {}): Promise<Context> {
    validateContextOptions(model.hparams, options);
    const hp = model.hparams;
    const o = resolveShape(model, options);
    const choice = backendChoice(options, model.file.native);
    const id = nextId++;
    const label = `Context #${id} (nCtx ${o.nCtx}, ${choiceLabel(choice)})`;
    // Freed in reverse order if any step below throws.
    using stack = new DisposableStack();
    const creating = {}; // stands for the context in the model's list until it exists
    const use = attachToModel(model, creating, label);
    stack.defer(() => {
      use.closing();
      use.freed();
    });
    // The choice is data: registry names in order and a layer split.
    const plan = backendPlan(choice, hp.nLayer);
    const backends = await openBackends(
      plan,
      { threads: options.threads, matmulOrder: options.matmulOrder },
      stack,
    );
    const assign = layerAssignment(plan, backends);
    const taps = options.debugTaps?.length ? new Set(options.debugTaps) : undefined;
    const { kv, rs, sched } = allocateMemory(model, o, { backends, assign, taps, label, stack });
    const ctx = new Context(model, label, { o, choice, backends, kv, rs, sched, taps, use });
    // Weakly, so that a forgotten context is still collected and finalized.
    use.own(ctx);
    stack.move();
    return ctx;
  }

  /** Whether {@link Context[Symbol.dispose]} was called. */
  get disposed(): boolean {
    return this.#state !== "open";
  }

  /** Whether a decode or generation holds the context now. */
  get busy(): boolean {
    return this.#lock.held;
  }

  /**
   * The KV cache (null for encoders), for the state files.
   * @internal
   */
  get kvCache(): KvCache | null {
    return this.#kv;
  }

  /**
   * The recurrent state memory (null unless the model is recurrent), for the state files.
   * @internal
   */
  get recurrentMemory(): RecurrentMemory | null {
    return this.#rs;
  }

  /**
   * Whether decodes leave something behind (a KV cache or recurrent
   * states): false for encoders.
   * @internal
   */
  get hasMemory(): boolean {
    return this.#kv !== null || this.#rs !== null;
  }

  #assertOpen(what: string): void {
    if (this.#state !== "open") {
      throw new ContextDisposedError(`${what}: ${this.label} is disposed`);
    }
  }

  #assertFree(what: string): void {
    this.#assertOpen(what);
    if (this.#lock.held) {
      throw new ContextBusyError(
        `${what}: ${this.label} is in use by a decode or generation; await it first`,
      );
    }
  }

  /** Tokens currently in the cache for sequence 0 (the next position). */
  get nPast(): number {
    // Without a cache every decode starts afresh.
    const m = this.#kv ?? this.#rs;
    return m ? m.seqPosMax(0) + 1 : 0;
  }

  /**
   * A new {@link Sequence} on a free sequence id (the lowest). Throws
   * {@link ContextError} when all nSeqMax ids are held. Sequence 0 is also
   * what {@link decode} and `generate(ctx, …)` use: they refuse while a
   * Sequence object holds it.
   */
  sequence(): Sequence {
    this.#assertOpen("sequence");
    const id = this.#owners.indexOf(null);
    if (id < 0) {
      throw new ContextError(
        `sequence: all ${this.nSeqMax} sequences of ${this.label} are in use ` +
          `(create the context with a larger nSeqMax, or dispose a sequence)`,
      );
    }
    this.#queue ??= new SequenceQueue(this);
    const seq = new Sequence(this, id, this.#queue, () => {
      if (this.#owners[id] === seq) this.#owners[id] = null;
    });
    this.#owners[id] = seq;
    return seq;
  }

  /**
   * Whether a Sequence object holds sequence id `id`.
   * @internal
   */
  seqHeld(id: number): boolean {
    return this.#owners[id] != null;
  }

  #assertSeq0Free(what: string): void {
    if (this.#owners[0]) {
      throw new ContextError(
        `${what}: sequence 0 of ${this.label} is held by a Sequence object; use that sequence`,
      );
    }
  }

  /** Forgets everything cached. Throws {@link ContextBusyError} while a decode holds the context. */
  clear(): void {
    this.#assertFree("clear");
    this.#memory.clear();
  }

  /** Drops cached positions >= pos of sequence 0 (to rewind or re-prompt). */
  truncate(pos: number): void {
    this.#assertFree("truncate");
    this.#truncate(pos);
  }

  #truncate(pos: number): void {
    if (!Number.isInteger(pos) || pos < 0) {
      throw new ContextError(`truncate: position must be a non-negative integer, got ${pos}`);
    }
    if (this.#rs && !this.#rs.seqRm(0, pos, -1)) {
      throw new ContextError(
        `truncate: ${this.model.hparams.arch} keeps a recurrent state, which cannot be ` +
          `rewound to position ${pos}; clear the context and evaluate the tokens again`,
      );
    }
    this.#kv?.seqRm(0, pos, -1);
  }

  /**
   * Removes positions [p0, p1) of sequence `seq` (-1: of every sequence)
   * from the cache, as llama_memory_seq_rm; negative bounds are open.
   * Returns true when removed: a KV cache can always remove a range; a
   * recurrent model's state cannot lose its last tokens, so a range cutting
   * into it returns false and removes nothing (as llama.cpp). Throws
   * {@link ContextBusyError} while a decode holds the context (a lease has
   * the same method).
   */
  seqRm(seq: number, p0 = -1, p1 = -1): boolean {
    this.#assertFree("seqRm");
    return this.#memory.seqRm(seq, p0, p1);
  }

  /** Lets `dst` share the cells of `src` in [p0, p1) (llama_memory_seq_cp): no copy of keys or values. */
  seqCp(src: number, dst: number, p0 = -1, p1 = -1): void {
    this.#assertFree("seqCp");
    this.#memory.seqCp(src, dst, p0, p1);
  }

  /** Removes every sequence but `seq` (llama_memory_seq_keep). */
  seqKeep(seq: number): void {
    this.#assertFree("seqKeep");
    this.#memory.seqKeep(seq);
  }

  /**
   * Adds `delta` to the positions [p0, p1) of `seq` (llama_memory_seq_add);
   * cells moved below 0 are removed. The cached keys are rotated to their
   * new positions (K-shift) before the next decode.
   */
  seqAdd(seq: number, p0: number, p1: number, delta: number): void {
    this.#assertFree("seqAdd");
    this.#memory.seqAdd(seq, p0, p1, delta);
  }

  /** Divides the positions [p0, p1) of `seq` by `d` (llama_memory_seq_div; self-extend), with a K-shift. */
  seqDiv(seq: number, p0: number, p1: number, d: number): void {
    this.#assertFree("seqDiv");
    this.#memory.seqDiv(seq, p0, p1, d);
  }

  /** The smallest cached position of `seq`, -1 when it has none. */
  seqPosMin(seq: number): number {
    this.#assertOpen("seqPosMin");
    return this.#memory.seqPosMin(seq);
  }

  /** The largest cached position of `seq`, -1 when it has none. */
  seqPosMax(seq: number): number {
    this.#assertOpen("seqPosMax");
    return this.#memory.seqPosMax(seq);
  }

  // The cache edits, checked; callers have made sure no decode runs.
  #memory: MemoryOps = memoryOps({
    kv: () => this.#kv,
    rs: () => this.#rs,
    nSeqMax: () => this.nSeqMax,
    arch: () => this.model,
    assertOpen: (what) => this.#assertOpen(what),
  });

  /**
   * Waits for the context (callers are served in call order) and returns a
   * lease for exclusive use; dispose the lease to pass the context on.
   * {@link generate} holds one for a whole generation, so two generations
   * on one context run one after the other.
   */
  async acquire(signal?: AbortSignal): Promise<ContextLease> {
    this.#assertOpen("acquire");
    const release = await this.#lock.acquire(signal);
    if (this.#state !== "open") {
      release();
      this.#assertOpen("acquire");
    }
    return new ContextLease(this, {
      decode: (tokens, opts) => this.#decodeNow(tokens, opts),
      decodeBatch: (batch, opts) => this.#decodeBatchNow(batch, opts),
      memory: this.#memory,
      truncate: (pos) => {
        this.#assertOpen("truncate");
        this.#truncate(pos);
      },
      release,
    });
  }

  /**
   * Evaluates `tokens` in sequence 0 after what the cache holds and returns
   * logits of the last token, or of every token with `allLogits`. Inputs
   * longer than nBatch are decoded in nBatch chunks. Waits while another
   * decode or generation holds the context. On failure or abort the cache
   * is left as it was before the call.
   */
  async decode(tokens: ArrayLike<number>, opts: ContextDecodeOptions = {}): Promise<DecodeResult> {
    using lease = await this.acquire(opts.signal);
    return await lease.decode(tokens, opts);
  }

  /**
   * Decodes one batch (at most nBatch tokens; several sequences may share
   * it and are evaluated in the same graphs) and returns the output rows
   * asked for, in batch order. Waits while another decode holds the
   * context. A batch the cache has no room for is refused before any work
   * ({@link ContextError}); on failure or abort the cache is as before.
   */
  async decodeBatch(batch: BatchInput, opts: BatchDecodeOptions = {}): Promise<DecodeResult> {
    using lease = await this.acquire(opts.signal);
    return await lease.decodeBatch(batch, opts);
  }

  #decodeNow(tokens: ArrayLike<number>, opts: ContextDecodeOptions): Promise<DecodeResult> {
    this.#assertOpen("decode");
    // The one check of tokens and options: decode() and leases both end here.
    validateDecode(this, tokens, opts);
    this.#assertSeq0Free("decode");
    const n = tokens.length;
    if (n === 0) throw new ContextError("decode: no tokens");
    // validateDecode checked every id is an integer in 0..nVocab-1, so the
    // get_rows indices the kernels read are exact.
    const ids = new Int32Array(n); // a plain loop: Int32Array.from iterates (slow before the JIT warms)
    for (let i = 0; i < n; i++) ids[i] = tokens[i];
    if (!this.hasMemory) checkEncoderInput(this, n);
    else if (this.nPast + n > this.nCtxSeq) {
      throw new ContextError(
        `decode: ${this.nPast} cached + ${n} new tokens exceed the context of ${this.nCtxSeq}`,
      );
    }
    const all = opts.allLogits ?? false;
    // Chunks of nBatch tokens, as llama.cpp's callers cut a long prompt.
    const parts: Batch[] = [];
    for (let i = 0; i < n; i += this.nBatch) {
      const token = ids.subarray(i, Math.min(n, i + this.nBatch));
      const logits = new Uint8Array(token.length);
      if (all) logits.fill(1);
      else if (i + token.length === n) logits[token.length - 1] = 1;
      parts.push({ token, logits });
    }
    return this.#start(parts, opts.signal, opts.into);
  }

  #decodeBatchNow(batch: BatchInput, opts: BatchDecodeOptions): Promise<DecodeResult> {
    this.#assertOpen("decodeBatch");
    const c = new OptionChecker("Context.decodeBatch");
    c.object(opts, ["signal", "into"]);
    if (opts?.signal !== undefined && !(opts.signal instanceof AbortSignal)) {
      c.fail("signal", opts.signal, "an AbortSignal");
    }
    const b = batchFromInput("Context.decodeBatch", batch, {
      nVocab: this.model.hparams.nVocab,
      nEmbd: this.model.hparams.nEmbd,
      nSeqMax: this.nSeqMax,
    });
    const n = b.token ? b.token.length : b.embd!.length / this.model.hparams.nEmbd;
    if (n > this.nBatch) {
      throw new ContextError(`decodeBatch: ${n} tokens exceed nBatch ${this.nBatch}`);
    }
    if (!this.hasMemory) checkEncoderInput(this, n, encoderSpan(b));
    if (opts?.into !== undefined) checkInto(c, this, opts.into, outputRows(b.logits));
    return this.#start([b], opts?.signal, opts?.into);
  }

  #start(
    parts: Batch[],
    callerSignal: AbortSignal | undefined,
    into?: Float32Array,
  ): Promise<DecodeResult> {
    if (this.#running) {
      throw new ContextBusyError(`decode: ${this.label} is already decoding for this lease`);
    }
    const signal = callerSignal ? this.#withCloser(callerSignal) : this.#closer.signal;
    const run = this.#kv
      ? this.#decoder.decode(this.#kv, parts, signal, into)
      : this.#rs
      ? this.#decoder.decodeRecurrent(this.#rs, parts, signal, into)
      : this.#decoder.encode(parts[0], signal);
    this.#running = run;
    const clear = () => {
      this.#running = null;
    };
    run.then(clear, clear);
    return run;
  }

  // The caller's signal joined with dispose's, made once per caller signal:
  // a generation passes the same signal for every token, and a dependent
  // signal per step (with its listeners) costs more than a small model's step.
  #withCloser(callerSignal: AbortSignal): AbortSignal {
    let s = this.#joined.get(callerSignal);
    if (!s) {
      s = AbortSignal.any([callerSignal, this.#closer.signal]);
      this.#joined.set(callerSignal, s);
    }
    return s;
  }

  #free(): void {
    if (this.#state === "freed") return;
    this.#state = "freed";
    forgotten.unregister(this);
    this.#decoder.reset();
    this.#sched[Symbol.dispose]();
    this.#kv?.[Symbol.dispose]();
    this.#rs?.[Symbol.dispose]();
    for (const b of this.#backends) b[Symbol.dispose]();
    this.#use.freed();
    this.#freed.resolve();
  }

  /**
   * Frees the cache, arenas and backends. A decode running now is cancelled
   * (it rejects with {@link ContextDisposedError}) and the memory is freed
   * when the kernels return; decodes waiting for the context reject.
   */
  [Symbol.dispose](): void {
    if (this.#state !== "open") return;
    this.#state = "closing";
    this.#use.closing();
    const reason = new ContextDisposedError(`${this.label} was disposed`);
    this.#lock.failAll(reason);
    this.#queue?.failAll(reason);
    this.#closer.abort(reason);
    if (this.#running) {
      const free = () => this.#free();
      this.#running.then(free, free);
    } else {
      this.#free();
    }
  }

  /** Like {@link Context[Symbol.dispose]}, then waits until the native memory is freed. */
  async [Symbol.asyncDispose](): Promise<void> {
    this[Symbol.dispose]();
    await this.#freed.promise;
  }
}
