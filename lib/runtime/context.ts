/**
 * A context: one model's KV cache, its scheduler over backends and the
 * decode loop of llama_decode (batch → micro-batches → slot → graph →
 * logits). One sequence for now; the cache and batches are multi-sequence
 * shaped so parallel sequences extend this rather than replace it.
 *
 * Lifetimes: a context runs one decode at a time (later calls wait their
 * turn, see {@link Context.acquire}); disposing it while a decode runs
 * cancels the kernels and frees the native memory once they have returned;
 * the model it reads refuses to be disposed while it is open.
 *
 * @module
 */
import type { Backend } from "../backend/types.ts";
import type { Graph } from "../graph/graph.ts";
import type { Tensor } from "../graph/tensor.ts";
import { GGMLType } from "../ggml/types.ts";
import { BatchSplitter, type Ubatch } from "../kv/batch.ts";
import { KvCache, N_KV_PAD, type SlotInfo, type SlotUndo } from "../kv/cache.ts";
import { attachToModel, type Model, type ModelUse } from "../model/model.ts";
import type { ArchGraph } from "../model/arch/types.ts";
import { buildGraph, encoderMask } from "./graphs.ts";
import { Scheduler } from "../sched/scheduler.ts";
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
export { ContextLease, type LeaseOps } from "./lease.ts";
import { FifoLock } from "./lock.ts";
import { validateContextOptions, validateDecode } from "./options.ts";
import { dryBackend, memoryShortfall } from "./sizing.ts";

/** Options of {@link Context.create}. */
export interface ContextOptions {
  /** Cache cells (rounded up to 256); default: the model's training context, at most 4096. */
  nCtx?: number;
  /**
   * Most tokens per graph evaluation (prompt chunk). Default 512. For an
   * encoder (bert, no cache) also the longest input, with nCtx and the
   * model's training context: its whole input is one graph.
   */
  nBatch?: number;
  /** CPU threads; default: physical cores. */
  threads?: number;
  /** KV cache element type. Default "f16" (llama.cpp's default). */
  kvType?: "f16" | "f32";
  /**
   * Where layers run: "cpu" (native kernels), "ref" (pure TypeScript), or
   * `{ cpuLayers: k }` — layers below k on the CPU backend, the rest (and
   * the output head) on the reference backend, with copies between them.
   * Shorthands for {@link ContextOptions.backends}: `["cpu"]`, `["ref"]`
   * and `["cpu", "ref"]` with `layerSplit: [k]`.
   */
  backend?: "cpu" | "ref" | { cpuLayers: number };
  /**
   * The backends by registry name ("cpu", "ref"), highest priority first,
   * each once; not together with {@link ContextOptions.backend}. Without
   * {@link ContextOptions.layerSplit} the first runs every layer and the
   * others only ops it cannot run.
   */
  backends?: readonly string[];
  /**
   * With {@link ContextOptions.backends}: layers run by each backend but the
   * last, in order (`[3]`: layers 0..2 on `backends[0]`); the last runs the
   * rest and the output head.
   */
  layerSplit?: readonly number[];
  /**
   * Debugging: intermediate tensors to keep and copy into
   * {@link Context.lastTaps} after each graph run, by llama.cpp's callback
   * names ("attn_norm-0", "Kcur-2", "kq_soft_max-1", "l_out-5",
   * "result_norm", "result_output", ...). Off by default.
   */
  debugTaps?: readonly string[];
}

/**
 * The output rows that were asked for, in batch order: logits [nVocab] for
 * decoders, hidden states [nEmbd] for encoders (whose `logits` is empty).
 */
export interface DecodeResult {
  /** Logits per output row (decoders). */
  readonly logits: Float32Array[];
  /** Final hidden state per output row (encoders such as bert), unpooled. */
  readonly embeddings?: Float32Array[];
}

/** Options of {@link Context.decode}. */
export interface ContextDecodeOptions {
  /** Logits of every token, not only the last. */
  allLogits?: boolean;
  /**
   * Cancels the decode, while it waits for the context or while the kernels
   * run (they stop within a node or row chunk); it then rejects with the
   * signal's reason and the cache is as it was before the call.
   */
  signal?: AbortSignal;
}

interface Parts {
  o: { nCtx: number; nBatch: number; threads?: number; kvType: "f16" | "f32" };
  choice: BackendChoice;
  backends: Backend[];
  kv: KvCache | null;
  sched: Scheduler;
  taps: ReadonlySet<string> | undefined;
  use: ModelUse;
}

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
 */
export class Context implements Disposable, AsyncDisposable {
  /** The model this context runs. */
  readonly model: Model;
  /** Cache cells. */
  readonly nCtx: number;
  /** Most tokens per graph evaluation. */
  readonly nBatch: number;
  /** CPU threads asked for (undefined: physical cores). */
  readonly threads: number | undefined;
  /** KV cache element type. */
  readonly kvType: "f16" | "f32";
  /** The backend choice this context was created with (`backend`, or `backends` and `layerSplit`). */
  readonly backendChoice: BackendChoice;
  /** "Context #N (nCtx …, backend)": how errors name this context. */
  readonly label: string;
  // null for architectures without memory (encoders).
  #kv: KvCache | null;
  #sched: Scheduler;
  #backends: Backend[];
  #use: ModelUse;
  #splitter = new BatchSplitter();
  #mask = new Float32Array(0);
  #taps: ReadonlySet<string> | undefined;
  // The graph of the last step and its shape key, while the scheduler's plan is that graph's.
  #last: { key: string; g: Graph; io: ArchGraph } | null = null;
  #lock = new FifoLock();
  // The decode running now (the kernels may be reading native memory).
  #running: Promise<unknown> | null = null;
  // Aborted by dispose: cancels the running decode.
  #closer = new AbortController();
  #state: "open" | "closing" | "freed" = "open";
  #freed = Promise.withResolvers<void>();
  /** Values of {@link ContextOptions.debugTaps} from the last graph run (ggml element order). */
  readonly lastTaps: Map<string, Float32Array> = new Map();

  private constructor(model: Model, label: string, p: Parts) {
    this.model = model;
    this.label = label;
    this.threads = p.o.threads;
    this.kvType = p.o.kvType;
    this.backendChoice = p.choice;
    this.nCtx = p.o.nCtx;
    this.nBatch = p.o.nBatch;
    this.#backends = p.backends;
    this.#kv = p.kv;
    this.#sched = p.sched;
    this.#taps = p.taps;
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
    const want = options.nCtx ?? Math.min(hp.nCtxTrain, 4096);
    if (!Number.isInteger(want) || want <= 0) {
      throw new ContextError(`nCtx must be a positive integer, got ${want}`);
    }
    const nCtx = Math.ceil(want / N_KV_PAD) * N_KV_PAD;
    const nBatch = options.nBatch ?? 512;
    if (!Number.isInteger(nBatch) || nBatch <= 0) {
      throw new ContextError(`nBatch must be a positive integer, got ${nBatch}`);
    }
    const choice = backendChoice(options);
    const o = {
      nCtx,
      nBatch,
      threads: options.threads,
      kvType: options.kvType ?? "f16",
    } as const;
    const id = nextId++;
    const label = `Context #${id} (nCtx ${nCtx}, ${choiceLabel(choice)})`;
    // Freed in reverse order if any step below throws.
    using stack = new DisposableStack();
    const creating = {}; // stands for the context in the model's list until it exists
    const use = attachToModel(model, creating, label);
    stack.defer(() => {
      use.closing();
      use.freed();
    });
    // The choice is data: registry names in order and a layer split.
    const plan = backendPlan(choice);
    const backends = await openBackends(plan, options.threads, stack);
    const assign = layerAssignment(plan, backends);
    const hasKv = model.arch.memory === "kv";
    const newKv = (pick: (layer: number) => Backend) =>
      !hasKv ? null : new KvCache({
        size: nCtx,
        nLayer: hp.nLayer,
        nHeadKv: hp.nHeadKv,
        nEmbdHeadK: hp.headDimK,
        nEmbdHeadV: hp.headDimV,
        typeK: o.kvType === "f32" ? GGMLType.F32 : GGMLType.F16,
        typeV: o.kvType === "f32" ? GGMLType.F32 : GGMLType.F16,
        backend: pick,
      });
    const names = (layer: number) => assign(layer).name;
    const schedOpts = { assign: (node: Tensor) => names(node.layer < 0 ? hp.nLayer : node.layer) };
    const taps = options.debugTaps?.length ? new Set(options.debugTaps) : undefined;
    // Worst case: a full batch attending the whole cache (or, without a
    // cache, the whole batch).
    const n = Math.min(nBatch, nCtx);
    const worst = (kv: KvCache | null) =>
      buildGraph(model, kv, taps, {
        nTokens: n,
        nOutputs: n,
        nKv: kv ? nCtx : n,
        slot: kv ? { idxs: Array.from({ length: n }, (_, i) => i) } : null,
      }).g;
    // Measured first with stand-ins that allocate nothing: a context too big
    // for this machine fails here, before gigabytes are zero-filled (or the
    // kernel's OOM killer ends the process).
    const dry = new Map(backends.map((b) => [b, dryBackend(b)]));
    const kvDry = newKv((layer) => dry.get(assign(layer))!);
    const arenas = new Scheduler([...dry.values()], schedOpts).measure(worst(kvDry));
    const short = memoryShortfall(
      kvDry?.totalBytes ?? 0,
      [...arenas.values()].reduce((a, b) => a + b, 0),
    );
    if (short) throw new ContextError(`${label} ${short}; use a smaller nCtx or nBatch`);
    const kv = newKv(assign);
    if (kv) stack.use(kv);
    const sched = stack.use(new Scheduler(backends, schedOpts));
    sched.reserve(worst(kv));
    const ctx = new Context(model, label, { o, choice, backends, kv, sched, taps, use });
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
    return this.#kv ? this.#kv.seqPosMax(0) + 1 : 0;
  }

  /** Forgets everything cached. Throws {@link ContextBusyError} while a decode holds the context. */
  clear(): void {
    this.#assertFree("clear");
    this.#kv?.clear();
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
    this.#kv?.seqRm(0, pos, -1);
  }

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
      clear: () => {
        this.#assertOpen("clear");
        this.#kv?.clear();
      },
      truncate: (pos) => {
        this.#assertOpen("truncate");
        this.#truncate(pos);
      },
      release,
    });
  }

  /**
   * Evaluates `tokens` after what the cache holds and returns logits of the
   * last token, or of every token with `allLogits`. Waits while another
   * decode or generation holds the context. On failure or abort the cache
   * is left as it was before the call.
   */
  async decode(tokens: ArrayLike<number>, opts: ContextDecodeOptions = {}): Promise<DecodeResult> {
    using lease = await this.acquire(opts.signal);
    return await lease.decode(tokens, opts);
  }

  #decodeNow(tokens: ArrayLike<number>, opts: ContextDecodeOptions): Promise<DecodeResult> {
    this.#assertOpen("decode");
    // The one check of tokens and options: decode() and leases both end here.
    validateDecode(this, tokens, opts);
    if (this.#running) {
      throw new ContextBusyError(`decode: ${this.label} is already decoding for this lease`);
    }
    const n = tokens.length;
    if (n === 0) throw new ContextError("decode: no tokens");
    // validateDecode checked every id is an integer in 0..nVocab-1, so the
    // get_rows indices the kernels read are exact.
    const ids = Int32Array.from(tokens);
    if (!this.#kv) this.#checkEncoderInput(n);
    if (this.nPast + n > this.nCtx) {
      throw new ContextError(
        `decode: ${this.nPast} cached + ${n} new tokens exceed the context of ${this.nCtx}`,
      );
    }
    const signal = opts.signal
      ? AbortSignal.any([opts.signal, this.#closer.signal])
      : this.#closer.signal;
    const run = this.#decodeAll(ids, opts.allLogits ?? false, signal);
    this.#running = run;
    const clear = () => {
      this.#running = null;
    };
    run.then(clear, clear);
    return run;
  }

  /**
   * An encoder (no cache) evaluates its whole input in one graph, as
   * llama.cpp's encode does (non-causal attention cannot be split into
   * micro-batches; llama.cpp asserts n_ubatch >= n_tokens), so the input
   * must fit nBatch, nCtx and the positions the model was trained on.
   */
  #checkEncoderInput(n: number): void {
    const { nCtxTrain } = this.model.hparams;
    const max = Math.min(this.nBatch, this.nCtx, nCtxTrain);
    if (n > max) {
      throw new ContextError(
        `decode: ${n} tokens exceed the ${max} this encoder context evaluates at once ` +
          `(nBatch ${this.nBatch}, nCtx ${this.nCtx}, training context ${nCtxTrain}): ` +
          `its attention spans the whole input, which is never split`,
      );
    }
  }

  async #decodeAll(ids: Int32Array, all: boolean, signal: AbortSignal): Promise<DecodeResult> {
    const n = ids.length;
    const logitsFlags = new Uint8Array(n);
    // Encoders compute every row, as llama.cpp's encode does whatever the
    // output flags, so the rows returned have the bits of llama.cpp's.
    if (all || !this.#kv) logitsFlags.fill(1);
    else logitsFlags[n - 1] = 1;
    this.#splitter.init({ token: ids, logits: logitsFlags }, {
      nVocab: this.model.hparams.nVocab,
      memory: this.#kv ?? undefined,
    });
    this.#splitter.splitReset();
    const out: Float32Array[] = [];
    const kv = this.#kv;
    if (!kv) {
      // No cache (encoders): every token attends to the whole input, so it
      // is evaluated in one graph.
      const ub = this.#splitter.splitSimple(n);
      out.push(...await this.#decodeUbatch(ub!, null, signal));
      return { logits: [], embeddings: all ? out : [out[n - 1]] };
    }
    const undo: SlotUndo[] = [];
    try {
      for (
        let ub = this.#splitter.splitSimple(this.nBatch);
        ub;
        ub = this.#splitter.splitSimple(this.nBatch)
      ) {
        signal.throwIfAborted();
        const slot = kv.findSlot(ub);
        if (!slot) {
          throw new ContextError(`decode: no room for ${ub.nTokens} tokens in the KV cache`);
        }
        undo.push(kv.saveSlot(slot));
        kv.applyUbatch(slot, ub);
        out.push(...await this.#decodeUbatch(ub, slot, signal));
      }
    } catch (e) {
      // The whole call is undone, completed micro-batches included, so the
      // caller can retry it: the cells go back to what they were, and the
      // keys and values written into them are masked out until overwritten.
      if (this.#state === "open") kv.undo(undo);
      throw e;
    }
    return { logits: out };
  }

  async #decodeUbatch(
    ub: Ubatch,
    slot: SlotInfo | null,
    signal: AbortSignal,
  ): Promise<Float32Array[]> {
    const kv = this.#kv;
    const nKv = kv ? kv.nKv() : ub.nTokens;
    const outRows: number[] = [];
    ub.output.forEach((f, i) => f && outRows.push(i));
    const sched = this.#sched;
    // A step shaped like the last one reuses its graph, plan and encoded
    // nodes; only the inputs and the cells the keys and values land in change.
    const key = `${ub.nTokens}/${outRows.length}/${nKv}`;
    let last = this.#last?.key === key ? this.#last : null;
    // Without a cache a graph of the same shape is reused as it is.
    const moved = last && kv && slot ? kv.moveStores(last.g, slot) : null;
    if (moved) {
      sched.update(moved);
    } else if (!last || kv) {
      last = null;
      this.#last = null; // until the new plan is in place
      const { g, io } = buildGraph(this.model, kv, this.#taps, {
        nTokens: ub.nTokens,
        nOutputs: outRows.length,
        nKv,
        slot,
      });
      sched.alloc(g);
      last = this.#last = { key, g, io };
    }
    const io = last!.io;
    sched.setInput(io.tokens, ub.token!);
    if (io.pos) sched.setInput(io.pos, ub.pos);
    if (this.#mask.length !== nKv * ub.nTokens) this.#mask = new Float32Array(nKv * ub.nTokens);
    // Without a cache, non-causal whatever attention.causal says: llama.cpp's
    // encode (which llama_decode runs for such models) always is.
    if (kv) kv.fillMask(ub, nKv, this.#mask);
    else encoderMask(ub, false, this.#mask);
    sched.setInput(io.mask, this.#mask);
    if (io.outIds) sched.setInput(io.outIds, Int32Array.from(outRows));
    await sched.compute(signal);
    signal.throwIfAborted(); // the flag may have come after the last node
    this.lastTaps.clear();
    for (const [name, t] of io.taps) this.lastTaps.set(name, sched.read(t));
    if (!io.output) return [];
    const all = sched.read(io.output); // a copy the caller may keep
    if (outRows.length === 1) return [all];
    const width = io.output.ne[0];
    return outRows.map((_, r) => all.subarray(r * width, (r + 1) * width));
  }

  #free(): void {
    if (this.#state === "freed") return;
    this.#state = "freed";
    forgotten.unregister(this);
    this.#last = null;
    this.#sched[Symbol.dispose]();
    this.#kv?.[Symbol.dispose]();
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
