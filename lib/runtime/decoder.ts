/**
 * The decode loop of a context (llama_context::decode): a batch is
 * validated against the cache and cut into micro-batches, every
 * micro-batch is placed in the cache before any runs, then each is built
 * (or its last graph reused), its inputs filled and run; a pending K-shift
 * runs first. Without a cache (encoders) the whole input is one graph.
 *
 * @module
 */
import type { Graph } from "../graph/graph.ts";
import { GGMLType } from "../ggml/types.ts";
import { type Batch, BatchSplitter, type Ubatch } from "../kv/batch.ts";
import type { KvCache, SlotInfo, SlotUndo } from "../kv/cache.ts";
import { KvError } from "../kv/cells.ts";
import { KqMask } from "../kv/mask.ts";
import type { RecurrentMemory } from "../kv/recurrent.ts";
import type { ArchGraph } from "../model/arch/types.ts";
import type { Model } from "../model/model.ts";
import type { Scheduler } from "../sched/scheduler.ts";
import { buildGraph, buildShiftGraph, encoderMask } from "./graphs.ts";
import { ContextError } from "./errors.ts";

/** Output rows of a decode, in batch order (see Context's DecodeResult). */
export interface DecodeOutput {
  /** Logits per output row (decoders). */
  readonly logits: Float32Array[];
  /** Hidden states per output row (encoders, embeddings mode). */
  readonly embeddings?: Float32Array[];
  /** Batch index of each output row. */
  readonly outputIds: number[];
}

/** What a {@link Decoder} runs on. */
export interface DecoderParts {
  /** The model. */
  readonly model: Model;
  /** The cache, or null for encoders and recurrent models. */
  readonly kv: KvCache | null;
  /** The recurrent state memory, or null. */
  readonly rs?: RecurrentMemory | null;
  /** The scheduler over the context's backends. */
  readonly sched: Scheduler;
  /** Debugging taps to keep. */
  readonly taps: ReadonlySet<string> | undefined;
  /** Tokens per graph. */
  readonly nUbatch: number;
  /** Sequence ids are below this. */
  readonly nSeqMax: number;
  /** Outputs are hidden states. */
  readonly embeddings: boolean;
  /** Flash attention (architectures without a cache; with one, the cache's layout says). */
  readonly flashAttn?: boolean;
  /** Flash attention at GGML_PREC_F32 (ContextOptions.flashAttnPrecision). */
  readonly flashAttnF32?: boolean;
  /** A micro-batch may take streams with gaps (ContextOptions.kvStreamGaps). */
  readonly kvStreamGaps?: boolean;
  /** Aborted when the context is disposed. */
  readonly closer: AbortSignal;
  /** Whether the context is still open (the cache may be touched). */
  readonly isOpen: () => boolean;
}

// Graphs kept by shape key (see Decoder.#graphs).
const MAX_GRAPHS = 8;

// Output rows are cut from slabs of this many bytes: a fresh array per
// step (16 KiB of logits for a 4096-token vocabulary) costs V8 more than a
// small model's whole decode step (zeroing, external-memory accounting and
// the collections it triggers). Rows never share bytes; a row the caller
// keeps keeps its slab (at most this much) alive.
const SLAB_BYTES = 256 * 1024;

/** Output arrays carved from shared slabs (see SLAB_BYTES). */
class RowSlab {
  #slab = new Float32Array(0);
  #at = 0;

  /** A zeroed array of `n` floats no earlier call handed out. */
  take(n: number): Float32Array {
    if (4 * n > SLAB_BYTES / 4) return new Float32Array(n);
    if (this.#at + n > this.#slab.length) {
      this.#slab = new Float32Array(SLAB_BYTES / 4);
      this.#at = 0;
    }
    const row = this.#slab.subarray(this.#at, this.#at + n);
    this.#at += (n + 15) & ~15; // 64-byte aligned rows
    return row;
  }
}

/** A context's decode loop; see the module doc. */
export class Decoder {
  readonly #model: Model;
  readonly #kv: KvCache | null;
  readonly #rs: RecurrentMemory | null;
  readonly #sched: Scheduler;
  readonly #taps: ReadonlySet<string> | undefined;
  readonly #nUbatch: number;
  readonly #nSeqMax: number;
  readonly #embeddings: boolean;
  readonly #flashAttn: boolean;
  readonly #flashAttnF32: boolean;
  readonly #streamGaps: boolean;
  readonly #closer: AbortSignal;
  readonly #isOpen: () => boolean;
  #splitter = new BatchSplitter();
  readonly #rows = new RowSlab();
  readonly #oneOut = new Int32Array(1);
  // The KQ mask, kept between steps (a one-token step rewrites only changed cells).
  readonly #kqMask = new KqMask();
  // The mask of architectures without a cache (whole input, rebuilt per call).
  #mask: Float32Array | Uint16Array = new Float32Array(0);
  // The graph of the last step and its shape key, while the scheduler's plan is that graph's.
  #last: { key: string; g: Graph; io: ArchGraph } | null = null;
  // Recent graphs by shape key, oldest first: a server's decode steps
  // alternate between a few shapes (slots going idle and busy again), and
  // going back to one costs a plan switch (Scheduler.switchTo), not a build.
  #graphs = new Map<string, { key: string; g: Graph; io: ArchGraph }>();
  /** Values of the debugging taps from the last graph run (ggml element order). */
  readonly lastTaps: Map<string, Float32Array> = new Map();

  /** A decoder over `p`. */
  constructor(p: DecoderParts) {
    this.#model = p.model;
    this.#kv = p.kv;
    this.#rs = p.rs ?? null;
    this.#sched = p.sched;
    this.#taps = p.taps;
    this.#nUbatch = p.nUbatch;
    this.#nSeqMax = p.nSeqMax;
    this.#embeddings = p.embeddings;
    this.#flashAttn = p.flashAttn ?? false;
    this.#flashAttnF32 = p.flashAttnF32 ?? false;
    this.#streamGaps = p.kvStreamGaps ?? false;
    this.#closer = p.closer;
    this.#isOpen = p.isOpen;
  }

  #length(b: Batch): number {
    return b.token ? b.token.length : b.embd!.length / this.#model.hparams.nEmbd;
  }

  /** Forgets the reused graph (the scheduler is about to be freed). */
  reset(): void {
    this.#last = null;
    this.#graphs.clear();
  }

  #init(b: Batch, kv: KvCache | RecurrentMemory | null, outputAll: boolean): void {
    try {
      this.#splitter.init(b, {
        nVocab: this.#model.hparams.nVocab,
        nEmbd: this.#model.hparams.nEmbd,
        nSeqMax: this.#nSeqMax,
        memory: kv ?? undefined,
        outputAll,
      });
    } catch (e) {
      // The positions or sequence sets do not continue the cache (llama_batch_allocr::init).
      if (e instanceof KvError) throw new ContextError(`decode: ${e.message}`);
      throw e;
    }
  }

  // No cache (encoders): every token attends to the whole input, so it is
  // evaluated in one graph; llama.cpp's encode computes every row whatever
  // the output flags, so the rows returned have the bits of llama.cpp's.
  /** Evaluates an encoder's whole input (no cache) in one graph. */
  async encode(b: Batch, signal: AbortSignal): Promise<DecodeOutput> {
    const n = this.#length(b);
    const want = b.logits ? Array.from(b.logits, (f) => f !== 0) : null;
    this.#init(b, null, true);
    const ub = this.#splitter.splitSimple(n)!;
    const rows = await this.#decodeUbatch(ub, null, signal);
    const outputIds: number[] = [];
    for (let i = 0; i < n; i++) if (want ? want[i] : i === n - 1) outputIds.push(i);
    return { logits: [], embeddings: outputIds.map((i) => rows[i]), outputIds };
  }

  /**
   * Decodes `parts` (each at most nBatch tokens) into the cache, undoing
   * every placement when one fails or is aborted.
   */
  async decode(
    kv: KvCache,
    parts: Batch[],
    signal: AbortSignal,
    into?: Float32Array,
  ): Promise<DecodeOutput> {
    const out: Float32Array[] = [];
    const outputIds: number[] = [];
    const undo: SlotUndo[] = [];
    const cur = into ? { buf: into, at: 0 } : undefined;
    let offset = 0;
    try {
      for (const b of parts) {
        this.#init(b, kv, false);
        // Keys whose positions moved are re-rotated after the batch is
        // validated and before it is placed, as llama_context::decode runs
        // the memory update (a rejected batch leaves the shift pending, so
        // two seqAdds then rotate once). Not abortable: half of the layers
        // rotated would corrupt the cache.
        if (kv.hasShift) await this.#applyShift(kv);
        const ubs = this.#split(kv, b);
        // Every micro-batch is placed before any runs (llama_kv_cache::prepare).
        const slots = kv.prepare(ubs);
        if (!slots) {
          throw new ContextError(
            `decode: no room for ${this.#length(b)} tokens in the KV cache ` +
              `(${kv.used} of ${kv.size * kv.nStream} cells used)`,
          );
        }
        for (let i = 0; i < ubs.length; i++) {
          signal.throwIfAborted();
          undo.push(kv.saveSlot(slots[i]));
          kv.applyUbatch(slots[i], ubs[i]);
          out.push(...await this.#decodeUbatch(ubs[i], slots[i], signal, cur));
        }
        for (const i of this.#splitter.outIds) outputIds.push(offset + i);
        offset += this.#length(b);
      }
      // split_equal takes tokens out of batch order: llama_context puts the
      // output rows back into it.
      if (kv.nStream > 1) sortRows(outputIds, out);
    } catch (e) {
      // The whole call is undone, completed micro-batches included, so the
      // caller can retry it: the cells go back to what they were, and the
      // keys and values written into them are masked out until overwritten.
      if (this.#isOpen()) kv.undo(undo);
      throw e;
    }
    return this.#embeddings
      ? { logits: [], embeddings: out, outputIds }
      : { logits: out, outputIds };
  }

  // llama_kv_cache::init_batch: split_simple over one stream, split_equal
  // (sequential: consecutive sequence ids, as many tokens each) over streams.
  #split(kv: KvCache, b: Batch): Ubatch[] {
    const ubs: Ubatch[] = [];
    const streams = kv.nStream > 1;
    const next = () =>
      streams
        ? this.#splitter.splitEqual(this.#nUbatch, this.#streamGaps ? "ascending" : true)
        : this.#splitter.splitSimple(this.#nUbatch);
    try {
      for (let ub = next(); ub; ub = next()) ubs.push(ub);
    } catch (e) {
      // Tokens shared by several sequences (one stream per sequence holds only its own).
      if (e instanceof KvError) throw new ContextError(`decode: ${e.message} (kvUnified false)`);
      throw e;
    }
    if (this.#splitter.nUsed < this.#length(b)) {
      throw new ContextError(`decode: the batch could not be split into micro-batches`);
    }
    return ubs;
  }

  /**
   * Decodes `parts` into the recurrent memory (llama_memory_recurrent's
   * init_batch): each part is cut with split_equal (sequential), every
   * micro-batch must find a slot before any runs, then each is placed
   * (find_slot) and run. Output rows come back in batch order. A state
   * cannot be rewound, so when the call fails or is aborted after a
   * micro-batch started, the sequences advanced so far (and those whose
   * states the interrupted one was moving) are removed: the caller sees an
   * empty sequence, never a half-advanced one. A call refused before any
   * micro-batch ran leaves the memory as it was.
   */
  async decodeRecurrent(
    rs: RecurrentMemory,
    parts: Batch[],
    signal: AbortSignal,
    into?: Float32Array,
  ): Promise<DecodeOutput> {
    const rows: Array<[number, Float32Array]> = [];
    const cur = into ? { buf: into, at: 0 } : undefined;
    let offset = 0;
    const before = rs.snapshot();
    // Sequences advanced by the micro-batches run so far, and those whose
    // states the running one moves (any may be half copied until it ends).
    const advanced = new Set<number>();
    let moving = new Set<number>();
    let started = false;
    try {
      for (const b of parts) {
        this.#init(b, rs, false);
        const ubs: Ubatch[] = [];
        try {
          for (let ub = this.#splitter.splitEqual(this.#nUbatch, true); ub;) {
            ubs.push(ub);
            ub = this.#splitter.splitEqual(this.#nUbatch, true);
          }
        } catch (e) {
          if (e instanceof KvError) throw new ContextError(`decode: ${e.message}`);
          throw e;
        }
        if (this.#splitter.nUsed < this.#length(b) || !rs.prepare(ubs)) {
          throw new ContextError(
            `decode: no slot for the batch's sequences in the recurrent memory ` +
              `(${rs.used} of ${rs.size} states used)`,
          );
        }
        const out: Float32Array[] = [];
        for (const ub of ubs) {
          signal.throwIfAborted();
          started = true;
          rs.findSlot(ub);
          moving = new Set();
          for (let i = rs.head; i < rs.head + rs.n; i++) {
            for (const s of rs.cells[i].seqId) moving.add(s);
          }
          for (const ids of ub.seqId) for (const s of ids) advanced.add(s);
          out.push(...await this.#decodeUbatch(ub, null, signal, cur));
          moving = new Set();
        }
        this.#splitter.outIds.forEach((i, k) => rows.push([offset + i, out[k]]));
        offset += this.#length(b);
      }
    } catch (e) {
      if (this.#isOpen()) {
        // Nothing ran: as before. Otherwise the cells describe the states as
        // they now are, and the sequences advanced part way are removed.
        if (!started) rs.restore(before);
        else for (const s of new Set([...advanced, ...moving])) rs.seqRm(s, -1, -1);
      }
      throw e;
    }
    // llama_context reorders the outputs to batch order.
    rows.sort((a, b) => a[0] - b[0]);
    const out = rows.map((r) => r[1]);
    const outputIds = rows.map((r) => r[0]);
    return this.#embeddings
      ? { logits: [], embeddings: out, outputIds }
      : { logits: out, outputIds };
  }

  async #applyShift(kv: KvCache): Promise<void> {
    this.#last = null; // the scheduler's plan becomes the shift graph's
    const { g, shift } = buildShiftGraph(this.#model, kv);
    this.#sched.alloc(g);
    this.#sched.setInput(shift, kv.shiftInput());
    await this.#sched.compute(this.#closer);
    this.#closer.throwIfAborted();
    kv.resetShift();
  }

  // A graph of this shape built before, its plan made current again (null
  // when there is none, or its plan's arena has been reallocated since).

  // `into`: where the output rows go, one after another (the decode
  // options' `into`; `at` advances over the micro-batches of one call),
  // while they fit; otherwise rows come from the slab.
  async #decodeUbatch(
    ub: Ubatch,
    slot: SlotInfo | null,
    signal: AbortSignal,
    into?: { buf: Float32Array; at: number },
  ): Promise<Float32Array[]> {
    const kv = this.#kv;
    const rs = this.#rs;
    const nKv = kv ? kv.nKv(slot) : rs ? 1 : ub.nTokens;
    const outRows: number[] = [];
    for (let i = 0; i < ub.nTokens; i++) if (ub.output[i]) outRows.push(i);
    const sched = this.#sched;
    // A step shaped like the last one reuses its graph, plan and encoded
    // nodes; only the inputs and the cells the keys and values land in change.
    // A recurrent graph's state views depend on the slot's first cell, its
    // width and the cell zeroed (llm_graph_input_rs::can_reuse): in the key.
    const rsKey = rs ? `/rs${rs.head},${rs.n},${rs.rsZ},${ub.nSeqs}` : "";
    // The K/V views of a multi-stream slot start at its first stream.
    const sKey = slot?.ns
      ? `/s${slot.s0},${slot.ns}${slot.runs ? `/${slot.runs.join(";")}` : ""}`
      : "";
    const key = `${ub.nTokens}/${outRows.length}/${nKv}/${ub.token ? "t" : "e"}${rsKey}${sKey}`;
    let last = this.#last?.key === key ? this.#last : null;
    const cached = last ? null : this.#graphs.get(key);
    if (cached && sched.switchTo(cached.g)) last = this.#last = cached;
    // Without a cache a graph of the same shape is reused as it is.
    const moved = last && kv && slot ? kv.moveStores(last.g, slot) : null;
    if (moved) {
      if (moved.length) sched.update(moved);
    } else if (!last || kv) {
      last = null;
      this.#last = null; // until the new plan is in place
      const { g, io } = buildGraph(
        this.#model,
        kv,
        this.#taps,
        {
          nTokens: ub.nTokens,
          nOutputs: outRows.length,
          nKv,
          slot,
          embeddings: this.#embeddings,
          inputEmbd: !ub.token,
          nSeqs: rs ? ub.nSeqs : undefined,
        },
        rs,
        this.#flashAttn,
        this.#flashAttnF32,
      );
      sched.alloc(g);
      last = this.#last = { key, g, io };
      this.#graphs.delete(key);
      this.#graphs.set(key, last);
      if (this.#graphs.size > MAX_GRAPHS) this.#graphs.delete(this.#graphs.keys().next().value!);
    }
    const io = last!.io;
    if (io.tokens) sched.setInput(io.tokens, ub.token!);
    else sched.setInput(io.embd!, ub.embd!);
    if (io.pos) sched.setInput(io.pos, ub.pos);
    // The cells the keys and values land in: the stores' row ids.
    if (kv && slot) {
      for (const [t, ids] of kv.storeInputs(last!.g, slot)) {
        sched.setInput(t, ids);
      }
    }
    if (rs) {
      // No attention: the states' source cells instead of a mask.
      sched.setInput(io.sCopy!, rs.sCopy());
    } else {
      // F16 bits for flash attention's mask.
      const half = io.mask.type === GGMLType.F16;
      if (kv) {
        const cells = kv.nStream > 1 ? kv.cellsOf : kv.cells;
        sched.setInput(io.mask, this.#kqMask.fill(cells, kv, ub, nKv, half));
      } else {
        const n = nKv * ub.nTokens;
        if (this.#mask.length !== n || (this.#mask instanceof Uint16Array) !== half) {
          this.#mask = half ? new Uint16Array(n) : new Float32Array(n);
        }
        // Without a cache, non-causal whatever attention.causal says: llama.cpp's
        // encode (which llama_decode runs for such models) always is.
        encoderMask(ub, false, this.#mask);
        sched.setInput(io.mask, this.#mask);
      }
    }
    if (io.outIds) {
      // One output row (a decode step): the same one-element array every time.
      const ids = outRows.length === 1 ? this.#oneOut : new Int32Array(outRows.length);
      for (let i = 0; i < outRows.length; i++) ids[i] = outRows[i];
      sched.setInput(io.outIds, ids);
    }
    await sched.compute(signal);
    signal.throwIfAborted(); // the flag may have come after the last node
    this.lastTaps.clear();
    for (const [name, t] of io.taps) this.lastTaps.set(name, sched.read(t));
    if (!io.output) return [];
    const n = io.output.nelements;
    let dst: Float32Array;
    if (into && into.at + n <= into.buf.length) {
      dst = n === into.buf.length ? into.buf : into.buf.subarray(into.at, into.at + n);
      into.at += n;
    } else {
      dst = this.#rows.take(n); // the caller may keep it
    }
    const all = sched.read(io.output, dst);
    if (outRows.length === 1) return [all];
    const width = io.output.ne[0];
    return outRows.map((_, r) => all.subarray(r * width, (r + 1) * width));
  }
}

// Rows and their batch indices, sorted by batch index together.
function sortRows(ids: number[], rows: Float32Array[]): void {
  const order = ids.map((id, k) => [id, k] as const).sort((a, b) => a[0] - b[0]);
  const r = order.map(([, k]) => rows[k]);
  order.forEach(([id], k) => (ids[k] = id, rows[k] = r[k]));
}
