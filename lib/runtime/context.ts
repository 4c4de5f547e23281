/**
 * A context: one model's KV cache, its scheduler over backends and the
 * decode loop of llama_decode (batch → micro-batches → slot → graph →
 * logits). One sequence for now; the cache and batches are multi-sequence
 * shaped so parallel sequences extend this rather than replace it.
 *
 * @module
 */
import { CpuBackend } from "../backend/cpu.ts";
import { ReferenceBackend } from "../backend/reference.ts";
import type { Backend } from "../backend/types.ts";
import { Graph } from "../graph/graph.ts";
import { GGMLType } from "../gguf/types.ts";
import { BatchSplitter, type Ubatch } from "../kv/batch.ts";
import { KvCache, N_KV_PAD } from "../kv/cache.ts";
import { buildLlamaGraph, type LlamaGraph } from "../model/llama.ts";
import type { Model } from "../model/model.ts";
import { WeightLeaves } from "../model/weights.ts";
import { Scheduler } from "../sched/scheduler.ts";
import { validateContextOptions, validateDecode } from "./options.ts";

/** Options of {@link Context.create}. */
export interface ContextOptions {
  /** Cache cells (rounded up to 256); default: the model's training context, at most 4096. */
  nCtx?: number;
  /** Most tokens per graph evaluation (prompt chunk). Default 512. */
  nBatch?: number;
  /** CPU threads; default: physical cores. */
  threads?: number;
  /** KV cache element type. Default "f16" (llama.cpp's default). */
  kvType?: "f16" | "f32";
  /**
   * Where layers run: "cpu" (native kernels), "ref" (pure TypeScript), or
   * `{ cpuLayers: k }` — layers below k on the CPU backend, the rest (and
   * the output head) on the reference backend, with copies between them.
   */
  backend?: "cpu" | "ref" | { cpuLayers: number };
  /**
   * Debugging: intermediate tensors to keep and copy into
   * {@link Context.lastTaps} after each graph run, by llama.cpp's callback
   * names ("attn_norm-0", "Kcur-2", "kq_soft_max-1", "l_out-5",
   * "result_norm", "result_output", ...). Off by default.
   */
  debugTaps?: readonly string[];
}

/** Thrown for invalid decode input (tokens, positions, context overflow). */
export class ContextError extends Error {
  /** Creates the error. */
  constructor(message: string) {
    super(message);
    this.name = "ContextError";
  }
}

/** Logits of the rows that asked for them, row-major [nOutputs][nVocab]. */
export interface DecodeResult {
  /** Logits per output row, in batch order. */
  readonly logits: Float32Array[];
}

/** A model's inference state. Dispose it to free the cache and arenas. */
export class Context implements Disposable {
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
  /** The backend choice this context was created with. */
  readonly backendChoice: NonNullable<ContextOptions["backend"]>;
  #kv: KvCache;
  #sched: Scheduler;
  #backends: Backend[];
  #splitter = new BatchSplitter();
  #mask = new Float32Array(0);
  #taps: ReadonlySet<string> | undefined;
  // The graph of the last step and its shape key, while the scheduler's plan is that graph's.
  #last: { key: string; g: Graph; io: LlamaGraph } | null = null;
  /** Values of {@link ContextOptions.debugTaps} from the last graph run (ggml element order). */
  readonly lastTaps: Map<string, Float32Array> = new Map();

  private constructor(
    model: Model,
    o: Required<Omit<ContextOptions, "threads" | "debugTaps">> & { threads?: number },
    backends: Backend[],
    assign: (layer: number) => Backend,
    taps?: readonly string[],
  ) {
    this.model = model;
    this.threads = o.threads;
    this.kvType = o.kvType;
    this.backendChoice = o.backend;
    this.nCtx = o.nCtx;
    this.nBatch = o.nBatch;
    this.#backends = backends;
    this.#taps = taps?.length ? new Set(taps) : undefined;
    const hp = model.hparams;
    this.#kv = new KvCache({
      size: o.nCtx,
      nLayer: hp.nLayer,
      nHeadKv: hp.nHeadKv,
      nEmbdHeadK: hp.headDimK,
      nEmbdHeadV: hp.headDimV,
      typeK: o.kvType === "f32" ? GGMLType.F32 : GGMLType.F16,
      typeV: o.kvType === "f32" ? GGMLType.F32 : GGMLType.F16,
      backend: assign,
    });
    const names = (layer: number) => assign(layer).name;
    this.#sched = new Scheduler(backends, {
      assign: (node) => names(node.layer < 0 ? hp.nLayer : node.layer),
    });
    // Worst case once: a full batch attending the whole cache.
    const n = Math.min(o.nBatch, o.nCtx);
    const { g } = this.#build({
      nTokens: n,
      nOutputs: n,
      nKv: o.nCtx,
      slot: { idxs: Array.from({ length: n }, (_, i) => i) },
    });
    this.#sched.reserve(g);
  }

  /** Creates a context for `model`. */
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
    const kind = options.backend ?? "cpu";
    let backends: Backend[];
    let assign: (layer: number) => Backend;
    if (kind === "ref") {
      const ref = new ReferenceBackend();
      backends = [ref];
      assign = () => ref;
    } else {
      const cpu = await CpuBackend.create({ threads: options.threads });
      if (kind === "cpu") {
        backends = [cpu];
        assign = () => cpu;
      } else {
        const ref = new ReferenceBackend();
        backends = [cpu, ref];
        assign = (layer) => (layer < kind.cpuLayers ? cpu : ref);
      }
    }
    return new Context(
      model,
      { nCtx, nBatch, threads: options.threads, kvType: options.kvType ?? "f16", backend: kind },
      backends,
      assign,
      options.debugTaps,
    );
  }

  #build(step: Parameters<typeof buildLlamaGraph>[5]): { g: Graph; io: LlamaGraph } {
    const g = new Graph();
    const m = this.model;
    const io = buildLlamaGraph(
      g,
      m.hparams,
      m.weights,
      new WeightLeaves(m.file, g),
      this.#kv,
      step,
      this.#taps,
    );
    return { g, io };
  }

  /** Tokens currently in the cache for sequence 0 (the next position). */
  get nPast(): number {
    return this.#kv.seqPosMax(0) + 1;
  }

  /** Forgets everything cached. */
  clear(): void {
    this.#kv.clear();
  }

  /** Drops cached positions >= pos of sequence 0 (to rewind or re-prompt). */
  truncate(pos: number): void {
    this.#kv.seqRm(0, pos, -1);
  }

  /**
   * Evaluates `tokens` after what the cache holds and returns logits of the
   * last token, or of every token with `allLogits`.
   */
  async decode(
    tokens: ArrayLike<number>,
    opts: { allLogits?: boolean; signal?: AbortSignal } = {},
  ): Promise<DecodeResult> {
    validateDecode(this, tokens, opts);
    const n = tokens.length;
    if (n === 0) throw new ContextError("decode: no tokens");
    const hp = this.model.hparams;
    if (this.nPast + n > this.nCtx) {
      throw new ContextError(
        `decode: ${this.nPast} cached + ${n} new tokens exceed the context of ${this.nCtx}`,
      );
    }
    const logitsFlags = new Uint8Array(n);
    if (opts.allLogits) logitsFlags.fill(1);
    else logitsFlags[n - 1] = 1;
    this.#splitter.init({ token: Int32Array.from(tokens), logits: logitsFlags }, {
      nVocab: hp.nVocab,
      memory: this.#kv,
    });
    this.#splitter.splitReset();
    const out: Float32Array[] = [];
    for (
      let ub = this.#splitter.splitSimple(this.nBatch);
      ub;
      ub = this.#splitter.splitSimple(this.nBatch)
    ) {
      opts.signal?.throwIfAborted();
      out.push(...await this.#decodeUbatch(ub, opts.signal));
    }
    return { logits: out };
  }

  async #decodeUbatch(ub: Ubatch, signal?: AbortSignal): Promise<Float32Array[]> {
    const slot = this.#kv.findSlot(ub);
    if (!slot) throw new ContextError(`decode: no room for ${ub.nTokens} tokens in the KV cache`);
    this.#kv.applyUbatch(slot, ub);
    const nKv = this.#kv.nKv();
    const outRows: number[] = [];
    ub.output.forEach((f, i) => f && outRows.push(i));
    const sched = this.#sched;
    // A step shaped like the last one reuses its graph, plan and encoded
    // nodes; only the inputs and the cells the keys and values land in change.
    const key = `${ub.nTokens}/${outRows.length}/${nKv}`;
    let last = this.#last?.key === key ? this.#last : null;
    const moved = last && this.#kv.moveStores(last.g, slot);
    if (moved) {
      sched.update(moved);
    } else {
      last = null;
      this.#last = null; // until the new plan is in place
      const { g, io } = this.#build({ nTokens: ub.nTokens, nOutputs: outRows.length, nKv, slot });
      sched.alloc(g);
      last = this.#last = { key, g, io };
    }
    const io = last!.io;
    sched.setInput(io.tokens, ub.token!);
    sched.setInput(io.pos, ub.pos);
    if (this.#mask.length !== nKv * ub.nTokens) this.#mask = new Float32Array(nKv * ub.nTokens);
    this.#kv.fillMask(ub, nKv, this.#mask);
    sched.setInput(io.mask, this.#mask);
    if (io.outIds) sched.setInput(io.outIds, Int32Array.from(outRows));
    await sched.compute(signal);
    this.lastTaps.clear();
    for (const [name, t] of io.taps) this.lastTaps.set(name, sched.read(t));
    const all = sched.read(io.logits); // a copy the caller may keep
    if (outRows.length === 1) return [all];
    const nVocab = this.model.hparams.nVocab;
    return outRows.map((_, r) => all.subarray(r * nVocab, (r + 1) * nVocab));
  }

  /** Frees the cache, arenas and backends. */
  [Symbol.dispose](): void {
    this.#sched[Symbol.dispose]();
    this.#kv[Symbol.dispose]();
    for (const b of this.#backends) b[Symbol.dispose]();
  }
}
