/**
 * The scheduler: assigns each graph node to a backend, cuts the node list
 * into splits of consecutive nodes on one backend, adds copies where a split
 * reads memory another backend owns, plans one arena per backend, and runs
 * the splits in order with one `compute` call each.
 *
 * It moves bytes (inputs in, copies between backends, outputs out) only
 * through the buffers' own interface ({@link bufferSet}, {@link bufferCopy},
 * {@link bufferGet}): it never reads a buffer's memory itself, so a backend
 * whose memory the host cannot address takes part like any other.
 *
 * @module
 */
import type {
  Backend,
  BackendBuffer,
  BufferRef,
  ExecNode,
  ResolvedTensor,
} from "../backend/types.ts";
import { ARENA_ALIGN, type Lifetime, planArena } from "../graph/alloc.ts";
import { execSources, type Graph } from "../graph/graph.ts";
import { GraphError, type Tensor } from "../graph/tensor.ts";
import { GGMLType } from "../ggml/types.ts";
import { fp16ToF32 } from "../ggml/half.ts";
import { bufferCopy, bufferGet, bufferSet } from "../ggml/memory.ts";

export type {
  Backend,
  BackendBuffer,
  BufferRef,
  ExecNode,
  OpQuery,
  ResolvedTensor,
} from "../backend/types.ts";

/** Options of {@link Scheduler}. */
export interface SchedulerOptions {
  /**
   * Backend name for a node that no weight pulls elsewhere (e.g. by
   * `node.layer` for partial offload); undefined = default rules.
   */
  assign?: (node: Tensor) => string | undefined;
  /**
   * Whether a backend reads host memory (buffers owned by no scheduled
   * backend, such as mapped files) in place. Default: every backend does.
   */
  hostReadable?: (backend: string) => boolean;
  /** Arena alignment (default 64). */
  align?: number;
}

/** A summary of one split, for tests and logs. */
export interface SplitInfo {
  /** Backend that runs it. */
  readonly backend: string;
  /** Names of the nodes it runs. */
  readonly nodes: readonly string[];
  /** Names of the tensors copied into this backend before it runs. */
  readonly copies: readonly string[];
}

interface Copy {
  readonly root: Tensor;
  from: BufferRef;
  to: BufferRef;
  readonly bytes: number;
}

interface Split {
  readonly backend: Backend;
  readonly nodes: Tensor[];
  readonly copies: Map<Tensor, Copy>;
  /** Step of the copies (the nodes follow). */
  copyStep: number;
  exec: ExecNode[];
}

interface Plan {
  readonly graph: Graph;
  readonly splits: Split[];
  readonly owner: Map<Tensor, Backend>;
  readonly lifetimes: Map<string, Lifetime<Tensor | Copy>[]>;
  readonly sizes: Map<string, number>;
  /** Offsets planned per backend (the same plan that gave `sizes`). */
  readonly offsets: Map<string, Map<Tensor | Copy, number>>;
  home: Map<Tensor, BufferRef>;
  /** Where each tensor appears as a node or operand (built by the first update). */
  uses?: Map<Tensor, Array<[Split, number]>>;
}

/** Runs graphs over several backends, given in priority order. */
export class Scheduler implements Disposable {
  /** The backends, highest priority first. */
  readonly backends: readonly Backend[];
  #opts: SchedulerOptions;
  #byName = new Map<string, Backend>();
  #arenas = new Map<string, BackendBuffer>();
  #plan: Plan | null = null;
  #allocs = 0;
  // Each graph's plan, while the arenas it placed tensors in are the current ones.
  #plans = new WeakMap<Graph, { plan: Plan; allocs: number }>();

  /** A scheduler over `backends` (distinct names, highest priority first). */
  constructor(backends: readonly Backend[], opts: SchedulerOptions = {}) {
    if (backends.length === 0) throw new GraphError("scheduler needs at least one backend");
    for (const b of backends) {
      if (this.#byName.has(b.name)) throw new GraphError(`duplicate backend name ${b.name}`);
      this.#byName.set(b.name, b);
    }
    this.backends = [...backends];
    this.#opts = opts;
  }

  /** How many arena buffers were allocated so far (steady state adds none). */
  get arenaAllocations(): number {
    return this.#allocs;
  }

  /** Current arena size per backend name. */
  get arenaSizes(): Map<string, number> {
    return new Map([...this.#arenas].map(([k, b]) => [k, b.size]));
  }

  /** Splits of the graph last passed to {@link alloc}. */
  get splits(): SplitInfo[] {
    return (this.#plan?.splits ?? []).map((s) => ({
      backend: s.backend.name,
      nodes: s.nodes.map((n) => n.name),
      copies: [...s.copies.keys()].map((t) => t.name),
    }));
  }

  /** Which backend runs `node` in the graph last passed to {@link alloc}. */
  backendOf(node: Tensor): string | undefined {
    return this.#plan?.owner.get(node)?.name;
  }

  /** Arena bytes `g` needs on each backend, without allocating anything. */
  measure(g: Graph): Map<string, number> {
    return this.#build(g).sizes;
  }

  /**
   * Make every arena large enough for `g` (the worst case: largest batch,
   * full KV window) so later graphs up to that size allocate nothing.
   */
  reserve(g: Graph): void {
    for (const [name, size] of this.measure(g)) this.#ensure(name, size);
  }

  /** Plan `g`: assign backends, split, place tensors. Grows arenas only if needed. */
  alloc(g: Graph): void {
    const plan = this.#build(g);
    for (const [name, size] of plan.sizes) this.#ensure(name, size);
    this.#resolve(plan);
    this.#plan = plan;
    this.#plans.set(g, { plan, allocs: this.#allocs });
  }

  /**
   * Make the plan {@link alloc} made for `g` current again, as it was left
   * ({@link update}s included), when every arena is still the one it placed
   * tensors in; false otherwise (call alloc). For a caller that keeps a few
   * built graphs and unchanged since, as a decoder does for the shapes of
   * its steps.
   */
  switchTo(g: Graph): boolean {
    const known = this.#plans.get(g);
    if (!known || known.allocs !== this.#allocs) return false;
    this.#plan = known.plan;
    return true;
  }

  /**
   * Re-resolve the nodes of the planned graph that use `moved` (tensors
   * moved with {@link Graph.moveView} since {@link alloc}), keeping
   * everything else: backend assignment, splits, arena placement. This is
   * how a graph is reused for a step that differs only in where its copies
   * land; backends see new node objects for exactly those nodes.
   */
  update(moved: readonly Tensor[]): void {
    const plan = this.#plan;
    if (!plan) throw new GraphError("update: call alloc(graph) first");
    if (!plan.uses) {
      plan.uses = new Map();
      for (const s of plan.splits) {
        s.nodes.forEach((n, i) => {
          for (const t of [n, ...execSrc(n)]) {
            const u = plan.uses!.get(t);
            if (u) u.push([s, i]);
            else plan.uses!.set(t, [[s, i]]);
          }
        });
      }
    }
    // Indexed loops: this runs every decode step, mostly before the JIT warms up.
    const uses = plan.uses;
    for (let m = 0; m < moved.length; m++) {
      const u = uses.get(moved[m]);
      if (!u) {
        throw new GraphError(`update: ${moved[m].describe()} is not used by the planned graph`);
      }
      for (let k = 0; k < u.length; k++) {
        const s = u[k][0], i = u[k][1];
        s.exec[i] = this.#execNode(plan, s, s.nodes[i]);
      }
    }
  }

  /** Write an input's bytes (after {@link alloc}, before {@link compute}). */
  setInput(t: Tensor, data: ArrayBufferView): void {
    if (t.kind !== "input") throw new GraphError(`setInput: ${t.describe()} is not an input`);
    const loc = this.#location(t);
    if (data.byteLength !== t.nbytes) {
      throw new GraphError(
        `setInput: ${t.describe()} takes ${t.nbytes} bytes, got ${data.byteLength}`,
      );
    }
    bufferSet(
      loc.buffer,
      loc.offset,
      new Uint8Array(data.buffer, data.byteOffset, data.byteLength),
    );
  }

  /** Run the planned graph: per split, do its copies then one backend compute. */
  async compute(signal?: AbortSignal): Promise<void> {
    const plan = this.#plan;
    if (!plan) throw new GraphError("compute: call alloc(graph) first");
    for (const s of plan.splits) {
      signal?.throwIfAborted();
      // The destination's backend decides how (memcpy for host memory).
      for (const c of s.copies.values()) {
        bufferCopy(c.to.buffer, c.to.offset, c.from.buffer, c.from.offset, c.bytes);
      }
      await s.backend.compute(s.exec, signal);
    }
  }

  /**
   * Raw bytes spanned by `t` (an output, input, weight or external; other
   * intermediates may have been overwritten), copied out.
   */
  readBytes(t: Tensor): Uint8Array {
    const loc = this.#location(t);
    return bufferGet(loc.buffer, loc.offset, t.nbytes);
  }

  /**
   * Values of an F32 or F16 tensor in ggml order (strides honoured), copied
   * out: into `into` when given (exactly nelements long), else a new array.
   */
  read(t: Tensor, into?: Float32Array): Float32Array {
    const loc = this.#location(t);
    if (t.type !== GGMLType.F32 && t.type !== GGMLType.F16) {
      throw new GraphError(`read: ${t.describe()} is not F32/F16`);
    }
    if (into && into.length !== t.nelements) {
      throw new GraphError(`read: ${t.describe()} has ${t.nelements} values, got ${into.length}`);
    }
    if (t.type === GGMLType.F32 && LITTLE_ENDIAN && t.isContiguous) {
      // One copy of the bytes, straight into the floats (logits: nVocab values per token).
      const out = into ?? new Float32Array(t.nelements);
      bufferGet(loc.buffer, loc.offset, new Uint8Array(out.buffer, out.byteOffset, out.byteLength));
      return out;
    }
    // The bytes the tensor spans, then its elements picked out by stride.
    const bytes = bufferGet(loc.buffer, loc.offset, t.nbytes);
    const dv = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
    const out = into ?? new Float32Array(t.nelements);
    const [n0, n1, n2, n3] = t.ne;
    const [s0, s1, s2, s3] = t.nb;
    let k = 0;
    for (let i3 = 0; i3 < n3; i3++) {
      for (let i2 = 0; i2 < n2; i2++) {
        for (let i1 = 0; i1 < n1; i1++) {
          const row = i3 * s3 + i2 * s2 + i1 * s1;
          for (let i0 = 0; i0 < n0; i0++) {
            const at = row + i0 * s0;
            out[k++] = t.type === GGMLType.F32
              ? dv.getFloat32(at, true)
              : fp16ToF32(dv.getUint16(at, true));
          }
        }
      }
    }
    return out;
  }

  /** Free the arenas. */
  [Symbol.dispose](): void {
    for (const [name, buf] of this.#arenas) this.#byName.get(name)!.free(buf);
    this.#arenas.clear();
    this.#plan = null;
    this.#plans = new WeakMap();
  }

  #location(t: Tensor): BufferRef {
    const root = t.root;
    if (root.data) return { buffer: root.data.buffer, offset: root.data.offset + t.viewOffset };
    const plan = this.#plan;
    const home = plan?.home.get(root);
    if (!plan || !home) {
      throw new GraphError(`${t.describe()} is not placed; call alloc(graph) first`);
    }
    if (root.kind === "op" && !plan.graph.outputs.some((o) => o.root === root)) {
      throw new GraphError(`${t.describe()} is an intermediate; markOutput() it to read it`);
    }
    return { buffer: home.buffer, offset: home.offset + t.viewOffset };
  }

  #ensure(name: string, size: number): void {
    const cur = this.#arenas.get(name);
    if (cur && cur.size >= size) return;
    const b = this.#byName.get(name)!;
    if (cur) b.free(cur);
    this.#arenas.set(name, b.alloc(Math.max(size, this.#opts.align ?? ARENA_ALIGN)));
    this.#allocs++;
  }

  #owningBackend(buf: BackendBuffer): Backend | undefined {
    return this.#byName.get(buf.backend);
  }

  #supports(b: Backend, n: Tensor): boolean {
    const src = execSrc(n);
    return b.supportsOp({ op: n.op, dstType: n.type, srcTypes: src.map((s) => s.type) });
  }

  #assign(g: Graph): Map<Tensor, Backend> {
    const owner = new Map<Tensor, Backend>();
    let prev: Backend | undefined;
    for (const n of g.nodes) {
      let pick: Backend | undefined;
      // A node writing memory that a backend owns must run there.
      const dstRoot = n.viewSrc;
      if (dstRoot?.data) {
        const b = this.#owningBackend(dstRoot.data.buffer);
        if (b) {
          if (!this.#supports(b, n)) {
            throw new GraphError(`${b.name} cannot run ${n.describe()} on its own memory`);
          }
          pick = b;
        }
      } else if (dstRoot && owner.has(dstRoot)) {
        pick = owner.get(dstRoot);
      }
      // Weights pull the node to the backend holding them.
      if (!pick) {
        for (const s of n.src) {
          const d = s.root.kind === "weight" ? s.root.data : null;
          const b = d ? this.#owningBackend(d.buffer) : undefined;
          if (b && this.#supports(b, n)) {
            pick = b;
            break;
          }
        }
      }
      if (!pick && this.#opts.assign) {
        const name = this.#opts.assign(n);
        if (name !== undefined) {
          const b = this.#byName.get(name);
          if (!b) throw new GraphError(`assign: no backend named ${name} (node ${n.name})`);
          if (this.#supports(b, n)) pick = b;
        }
      }
      if (!pick) {
        const producer = n.src.map((s) => owner.get(s.root)).find((b) => b !== undefined);
        for (const b of [prev, producer]) {
          if (b && this.#supports(b, n)) {
            pick = b;
            break;
          }
        }
      }
      pick ??= this.backends.find((b) => this.#supports(b, n));
      if (!pick) throw new GraphError(`no backend supports ${n.describe()} (op ${n.op})`);
      owner.set(n, pick);
      prev = pick;
    }
    return owner;
  }

  #build(g: Graph): Plan {
    const owner = this.#assign(g);
    const splits: Split[] = [];
    for (const n of g.nodes) {
      const b = owner.get(n)!;
      const last = splits[splits.length - 1];
      if (last && last.backend === b) last.nodes.push(n);
      else splits.push({ backend: b, nodes: [n], copies: new Map(), copyStep: 0, exec: [] });
    }
    // Inputs live on the backend of their first reader.
    const inputHome = new Map<Tensor, Backend>();
    for (const n of g.nodes) {
      for (const s of n.src) {
        if (s.root.kind === "input" && !inputHome.has(s.root)) {
          inputHome.set(s.root, owner.get(n)!);
        }
      }
    }
    const pinned = new Set(g.outputs.map((o) => o.root));
    const life = new Map<
      Tensor | Copy,
      { backend: string; size: number; start: number; end: number }
    >();
    const touch = (key: Tensor | Copy, step: number) => {
      const l = life.get(key);
      if (l) l.end = Math.max(l.end, step);
    };
    for (const [t, b] of inputHome) {
      life.set(t, {
        backend: b.name,
        size: t.nbytes,
        start: -1,
        end: pinned.has(t) ? Infinity : -1,
      });
    }
    // Nodes that may write over their first source (checked once every
    // lifetime is known: that source must end where the node starts).
    const inPlace = new Map<Tensor, Tensor>();
    let step = 0;
    for (const s of splits) {
      s.copyStep = step++;
      const hostOk = this.#opts.hostReadable?.(s.backend.name) ?? true;
      for (const n of s.nodes) {
        const now = step++;
        if (!n.viewSrc) {
          life.set(n, {
            backend: s.backend.name,
            size: n.nbytes,
            start: now,
            end: pinned.has(n) ? Infinity : now,
          });
          const src0 = execSrc(n)[0];
          if (
            s.backend.inPlaceOps?.has(n.op) && src0 && sameBlock(n, src0) &&
            owner.get(src0) === s.backend
          ) {
            inPlace.set(n, src0);
          }
        }
        const reads = [...execSrc(n).map((x) => x.root)];
        if (n.viewSrc) reads.push(n.viewSrc);
        for (const r of reads) {
          const where = this.#where(r, owner, inputHome);
          const direct = where === s.backend || (where === "host" && hostOk);
          if (direct) {
            touch(r, now);
            continue;
          }
          if (r === n.viewSrc) {
            throw new GraphError(
              `${n.describe()} on ${s.backend.name} cannot write ${r.describe()} held elsewhere`,
            );
          }
          let c = s.copies.get(r);
          if (!c) {
            c = { root: r, from: DUMMY, to: DUMMY, bytes: r.nbytes };
            s.copies.set(r, c);
            touch(r, s.copyStep);
            life.set(c, {
              backend: s.backend.name,
              size: c.bytes,
              start: s.copyStep,
              end: s.copyStep,
            });
          }
          touch(c, now);
        }
      }
    }
    const lifetimes = new Map<string, Lifetime<Tensor | Copy>[]>();
    for (const b of this.backends) lifetimes.set(b.name, []);
    for (const [key, l] of life) {
      const from = inPlace.get(key as Tensor); // undefined for copies
      const inPlaceOf = from && life.get(from)?.end === l.start ? from : undefined;
      lifetimes.get(l.backend)!.push({ key, size: l.size, start: l.start, end: l.end, inPlaceOf });
    }
    const sizes = new Map<string, number>();
    const offsets = new Map<string, Map<Tensor | Copy, number>>();
    for (const [name, items] of lifetimes) {
      if (!items.length) continue;
      const planned = planArena(items, this.#opts.align ?? ARENA_ALIGN);
      sizes.set(name, planned.size);
      offsets.set(name, planned.offsets);
    }
    return { graph: g, splits, owner, lifetimes, sizes, offsets, home: new Map() };
  }

  // Where a storage root lives: a scheduled backend, or "host" memory.
  #where(
    r: Tensor,
    owner: Map<Tensor, Backend>,
    inputHome: Map<Tensor, Backend>,
  ): Backend | "host" {
    if (r.data) return this.#owningBackend(r.data.buffer) ?? "host";
    if (r.kind === "input") return inputHome.get(r)!;
    const b = owner.get(r);
    if (!b) throw new GraphError(`${r.describe()} is used but never computed`);
    return b;
  }

  #resolve(plan: Plan): void {
    const home = new Map<Tensor, BufferRef>();
    for (const [name, items] of plan.lifetimes) {
      if (!items.length) continue;
      const buffer = this.#arenas.get(name)!;
      const offsets = plan.offsets.get(name)!;
      for (const it of items) {
        const ref = { buffer, offset: offsets.get(it.key)! };
        if (isCopy(it.key)) it.key.to = ref;
        else home.set(it.key, ref);
      }
    }
    plan.home = home;
    for (const s of plan.splits) {
      for (const c of s.copies.values()) c.from = this.#at(plan, c.root);
      s.exec = s.nodes.map((n) => this.#execNode(plan, s, n));
    }
  }

  #at(plan: Plan, r: Tensor): BufferRef {
    return r.data ?? plan.home.get(r)!;
  }

  #execNode(plan: Plan, s: Split, n: Tensor): ExecNode {
    const from = execSrc(n);
    const src: ResolvedTensor[] = new Array(from.length);
    for (let k = 0; k < from.length; k++) src[k] = this.#resolveIn(plan, s, from[k]);
    return { op: n.op, dst: this.#resolveIn(plan, s, n), src, params: n.params, name: n.name };
  }

  // Where `t` lies for split `s`: its copy into the split's backend, else its home.
  #resolveIn(plan: Plan, s: Split, t: Tensor): ResolvedTensor {
    const root = t.root;
    const base = (s.copies.size ? s.copies.get(root)?.to : undefined) ?? this.#at(plan, root);
    return {
      type: t.type,
      ne: t.ne,
      nb: t.nb,
      data: { buffer: base.buffer, offset: base.offset + t.viewOffset },
    };
  }
}

const LITTLE_ENDIAN = new Uint8Array(new Uint32Array([1]).buffer)[0] === 1;

const DUMMY: BufferRef = {
  buffer: { backend: "", size: 0, bytes: new Uint8Array(0), ptr: null },
  offset: 0,
};

function isCopy(k: Tensor | Copy): k is Copy {
  return "bytes" in k && "root" in k && "from" in k;
}

// The operands a backend sees: a copy's destination is the node itself.
const execSrc = execSources;

/**
 * Whether `n` may take `src`'s block in place: `src` a whole computed tensor
 * (not a view, an input or a weight, not an output), of the same type,
 * shape and contiguous strides.
 */
function sameBlock(n: Tensor, src: Tensor): boolean {
  if (src.kind !== "op" || src.viewSrc) return false;
  if (src.type !== n.type || !src.isContiguous || !n.isContiguous) return false;
  for (let i = 0; i < 4; i++) if (src.ne[i] !== n.ne[i]) return false;
  return true;
}
