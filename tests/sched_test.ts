// Scheduler: backend assignment, splits, cross-backend copies, arena reuse.
// Runs a small two-"layer" graph on one backend and split across two, and
// compares both with the same math done directly in plain TypeScript.
import assert from "node:assert/strict";
import type {
  Backend,
  BackendBuffer,
  ExecNode,
  OpQuery,
  ResolvedTensor,
} from "../lib/backend/types.ts";
import { CpuBackend } from "../lib/backend/cpu.ts";
import { ReferenceBackend } from "../lib/backend/reference.ts";
import { Graph } from "../lib/graph/graph.ts";
import { bitsF32, Op } from "../lib/graph/ops.ts";
import { GGMLType } from "../lib/ggml/types.ts";
import { Scheduler } from "../lib/sched/scheduler.ts";
import { dryBackend } from "../lib/runtime/sizing.ts";
import { fp16ToF32 } from "../lib/ggml/half.ts";

// ---- a tiny test-only backend (F32 math in TS) ---------------------------

function getter(t: ResolvedTensor): (i0: number, i1: number, i2: number, i3: number) => number {
  const b = t.data.buffer.bytes;
  const dv = new DataView(b.buffer, b.byteOffset, b.byteLength);
  const o = t.data.offset;
  const [s0, s1, s2, s3] = t.nb;
  if (t.type === GGMLType.F32) {
    return (a, c, d, e) => dv.getFloat32(o + a * s0 + c * s1 + d * s2 + e * s3, true);
  }
  if (t.type === GGMLType.I32) {
    return (a, c, d, e) => dv.getInt32(o + a * s0 + c * s1 + d * s2 + e * s3, true);
  }
  if (t.type === GGMLType.F16) {
    return (a, c, d, e) => fp16ToF32(dv.getUint16(o + a * s0 + c * s1 + d * s2 + e * s3, true));
  }
  throw new Error(`mini backend: type ${t.type}`);
}

function setter(
  t: ResolvedTensor,
): (v: number, i0: number, i1: number, i2: number, i3: number) => void {
  const b = t.data.buffer.bytes;
  const dv = new DataView(b.buffer, b.byteOffset, b.byteLength);
  const o = t.data.offset;
  const [s0, s1, s2, s3] = t.nb;
  if (t.type !== GGMLType.F32) throw new Error(`mini backend: dst type ${t.type}`);
  return (v, a, c, d, e) => dv.setFloat32(o + a * s0 + c * s1 + d * s2 + e * s3, v, true);
}

function each(
  ne: readonly number[],
  f: (a: number, b: number, c: number, d: number) => void,
): void {
  for (let d = 0; d < ne[3]; d++) {
    for (let c = 0; c < ne[2]; c++) {
      for (let b = 0; b < ne[1]; b++) {
        for (let a = 0; a < ne[0]; a++) f(a, b, c, d);
      }
    }
  }
}

const SUPPORTED = new Set<number>([
  Op.GET_ROWS,
  Op.RMS_NORM,
  Op.MUL,
  Op.ADD,
  Op.MUL_MAT,
  Op.SILU,
  Op.CPY,
  Op.SCALE,
]);

/** Test backend; `ops` restricts what it claims to support. */
class MiniBackend implements Backend {
  calls = 0;
  computeCalls = 0;
  constructor(readonly name: string, readonly ops: ReadonlySet<number> = SUPPORTED) {}
  supportsOp(q: OpQuery): boolean {
    return this.ops.has(q.op) &&
      (q.op === Op.GET_ROWS || q.srcTypes.every((t) => t === GGMLType.F32));
  }
  alloc(size: number): BackendBuffer {
    this.calls++;
    return { backend: this.name, size, bytes: new Uint8Array(size), ptr: null };
  }
  free(_buf: BackendBuffer): void {}
  compute(nodes: readonly ExecNode[]): Promise<void> {
    this.computeCalls++;
    for (const n of nodes) run(n);
    return Promise.resolve();
  }
  [Symbol.dispose](): void {}
}

function run(n: ExecNode): void {
  const d = n.dst;
  const set = setter(d);
  const a = getter(n.src[0]);
  const A = n.src[0];
  switch (n.op) {
    case Op.GET_ROWS: {
      const ids = getter(n.src[1]);
      each(d.ne, (i0, i1, i2, i3) => set(a(i0, ids(i1, i2, i3, 0), i2, i3), i0, i1, i2, i3));
      return;
    }
    case Op.RMS_NORM: {
      const eps = bitsF32(n.params[0]);
      each([1, ...d.ne.slice(1)], (_, i1, i2, i3) => {
        let ss = 0;
        for (let i = 0; i < d.ne[0]; i++) ss += a(i, i1, i2, i3) ** 2;
        const k = 1 / Math.sqrt(ss / d.ne[0] + eps);
        for (let i = 0; i < d.ne[0]; i++) set(a(i, i1, i2, i3) * k, i, i1, i2, i3);
      });
      return;
    }
    case Op.MUL:
    case Op.ADD: {
      const b = getter(n.src[1]);
      const B = n.src[1].ne;
      each(d.ne, (i0, i1, i2, i3) => {
        const x = a(i0, i1, i2, i3), y = b(i0 % B[0], i1 % B[1], i2 % B[2], i3 % B[3]);
        set(n.op === Op.MUL ? x * y : x + y, i0, i1, i2, i3);
      });
      return;
    }
    case Op.MUL_MAT: {
      const b = getter(n.src[1]);
      const B = n.src[1].ne;
      each(d.ne, (i0, i1, i2, i3) => {
        let s = 0;
        const j2 = Math.floor(i2 / (B[2] / A.ne[2])), j3 = Math.floor(i3 / (B[3] / A.ne[3]));
        for (let k = 0; k < A.ne[0]; k++) s += a(k, i0, j2, j3) * b(k, i1, i2, i3);
        set(s, i0, i1, i2, i3);
      });
      return;
    }
    case Op.SILU:
      each(d.ne, (i0, i1, i2, i3) => {
        const x = a(i0, i1, i2, i3);
        set(x / (1 + Math.exp(-x)), i0, i1, i2, i3);
      });
      return;
    case Op.SCALE: {
      const s = bitsF32(n.params[0]);
      each(d.ne, (i0, i1, i2, i3) => set(a(i0, i1, i2, i3) * s, i0, i1, i2, i3));
      return;
    }
    case Op.CPY: {
      // element k of src (ggml order) goes to element k of dst
      const vals: number[] = [];
      each(A.ne, (i0, i1, i2, i3) => vals.push(a(i0, i1, i2, i3)));
      let k = 0;
      each(d.ne, (i0, i1, i2, i3) => set(vals[k++], i0, i1, i2, i3));
      return;
    }
  }
  throw new Error(`mini backend: op ${n.op}`);
}

// ---- the test model ------------------------------------------------------

const D = 8, H = 12, V = 5, T = 3, L = 2;

function rng(seed: number): () => number {
  let s = seed >>> 0;
  return () => {
    s = (s * 1664525 + 1013904223) >>> 0;
    return s / 2 ** 32 - 0.5;
  };
}

function f32buf(backend: string, data: Float32Array): BackendBuffer {
  return { backend, size: data.byteLength, bytes: new Uint8Array(data.buffer), ptr: null };
}

interface Weights {
  embd: Float32Array;
  norm: Float32Array[];
  up: Float32Array[]; // [D, H] : H rows of D
  down: Float32Array[]; // [H, D] : D rows of H
  out: Float32Array; // V rows of D
}

function makeWeights(): Weights {
  const r = rng(42);
  const fill = (n: number) => Float32Array.from({ length: n }, r);
  return {
    embd: fill(D * V),
    norm: Array.from({ length: L }, () => fill(D)),
    up: Array.from({ length: L }, () => fill(D * H)),
    down: Array.from({ length: L }, () => fill(H * D)),
    out: fill(D * V),
  };
}

/** Weights for layer `il` live in buffers owned by `where(il)` ("host" = mapped file). */
function build(w: Weights, where: (il: number) => string) {
  const g = new Graph();
  const wt = (name: string, ne: number[], data: Float32Array, b: string) =>
    g.weight(name, GGMLType.F32, ne, { buffer: f32buf(b, data), offset: 0 });
  const ids = g.input("ids", GGMLType.I32, [T]);
  let x = g.getRows(wt("embd", [D, V], w.embd, "host"), ids);
  for (let il = 0; il < L; il++) {
    g.setLayer(il);
    const b = where(il);
    let h = g.mul(g.rmsNorm(x, 1e-5), wt(`norm${il}`, [D], w.norm[il], b));
    h = g.silu(g.mulMat(wt(`up${il}`, [D, H], w.up[il], b), h));
    h = g.mulMat(wt(`down${il}`, [H, D], w.down[il], b), h);
    x = g.add(x, h);
  }
  g.setLayer(-1);
  const logits = g.mulMat(wt("out", [D, V], w.out, "host"), g.scale(g.rmsNorm(x, 1e-5), 0.5));
  g.markOutput(logits);
  return { g, ids, logits };
}

function reference(w: Weights, tokens: number[]): Float32Array {
  const rms = (v: number[]) => {
    const k = 1 / Math.sqrt(v.reduce((s, a) => s + a * a, 0) / v.length + 1e-5);
    return v.map((a) => a * k);
  };
  const matvec = (m: Float32Array, rows: number, cols: number, v: number[]) =>
    Array.from({ length: rows }, (_, r) => v.reduce((s, a, k) => s + m[r * cols + k] * a, 0));
  const out = new Float32Array(V * T);
  tokens.forEach((tok, t) => {
    let x = Array.from(w.embd.subarray(tok * D, tok * D + D));
    for (let il = 0; il < L; il++) {
      const h0 = rms(x).map((a, i) => a * w.norm[il][i]);
      const h1 = matvec(w.up[il], H, D, h0).map((a) => a / (1 + Math.exp(-a)));
      const h2 = matvec(w.down[il], D, H, h1);
      x = x.map((a, i) => a + h2[i]);
    }
    const y = matvec(w.out, V, D, rms(x).map((a) => a * 0.5));
    out.set(y, t * V);
  });
  return out;
}

async function runOn(
  sched: Scheduler,
  w: Weights,
  where: (il: number) => string,
  tokens: number[],
) {
  const { g, ids, logits } = build(w, where);
  sched.alloc(g);
  sched.setInput(ids, Int32Array.from(tokens));
  await sched.compute();
  return sched.read(logits);
}

function close(a: Float32Array, b: Float32Array, tol = 1e-5): void {
  assert.equal(a.length, b.length);
  for (let i = 0; i < a.length; i++) {
    assert.ok(Math.abs(a[i] - b[i]) <= tol * (1 + Math.abs(b[i])), `at ${i}: ${a[i]} vs ${b[i]}`);
  }
}

const TOKENS = [3, 0, 4];

Deno.test("sched: one backend matches plain math, one split", async () => {
  const w = makeWeights();
  const a = new MiniBackend("a");
  using sched = new Scheduler([a]);
  const got = await runOn(sched, w, () => "host", TOKENS);
  close(got, reference(w, TOKENS));
  assert.equal(sched.splits.length, 1);
  assert.equal(a.computeCalls, 1);
});

Deno.test("sched: layer override splits across two backends with copies", async () => {
  const w = makeWeights();
  const a = new MiniBackend("a"), b = new MiniBackend("b");
  using sched = new Scheduler([a, b], { assign: (n) => (n.layer === 1 ? "b" : "a") });
  const got = await runOn(sched, w, () => "host", TOKENS);
  close(got, reference(w, TOKENS));
  const splits = sched.splits;
  assert.deepEqual(splits.map((s) => s.backend), ["a", "b", "a"]);
  // b reads the residual stream produced on a; a then reads b's result back
  assert.equal(splits[1].copies.length, 1);
  assert.equal(splits[2].copies.length, 1);
  assert.deepEqual(splits[0].copies, []);
  assert.equal(a.computeCalls, 2);
  assert.equal(b.computeCalls, 1);
});

Deno.test("sched: weights in a backend's buffer pull their nodes to it", async () => {
  const w = makeWeights();
  const a = new MiniBackend("a"), b = new MiniBackend("b");
  using sched = new Scheduler([a, b]);
  const { g, ids, logits } = build(w, (il) => (il === 0 ? "b" : "host"));
  sched.alloc(g);
  sched.setInput(ids, Int32Array.from(TOKENS));
  await sched.compute();
  close(sched.read(logits), reference(w, TOKENS));
  const mm = g.nodes.filter((n) => n.op === Op.MUL_MAT && n.layer === 0);
  assert.equal(mm.length, 2);
  for (const n of mm) assert.equal(sched.backendOf(n), "b");
  // the first op (get_rows on host weights) has no pull: highest priority backend
  assert.equal(sched.backendOf(g.nodes[0]), "a");
});

Deno.test("sched: unsupported op falls back to a backend that supports it", async () => {
  const w = makeWeights();
  const noSilu = new Set([...SUPPORTED].filter((o) => o !== Op.SILU));
  const a = new MiniBackend("a", noSilu), b = new MiniBackend("b");
  using sched = new Scheduler([a, b]);
  const got = await runOn(sched, w, () => "host", TOKENS);
  close(got, reference(w, TOKENS));
  const { g } = build(w, () => "host");
  sched.alloc(g);
  // silu moves to b; later nodes follow their producer there (no weight pulls them back)
  const firstSilu = g.nodes.findIndex((n) => n.op === Op.SILU);
  g.nodes.forEach((n, i) => assert.equal(sched.backendOf(n), i < firstSilu ? "a" : "b"));
  assert.deepEqual(sched.splits.map((s) => s.backend), ["a", "b"]);
});

Deno.test("sched: reserve once, steady state allocates nothing, arena reuses memory", async () => {
  const w = makeWeights();
  const a = new MiniBackend("a");
  using sched = new Scheduler([a]);
  const worst = build(w, () => "host");
  sched.reserve(worst.g);
  const sizes = sched.measure(worst.g);
  const sumOfResults = worst.g.nodes.reduce((s, n) => s + Math.ceil(n.nbytes / 64) * 64, 0);
  assert.ok(
    sizes.get("a")! < sumOfResults,
    `arena ${sizes.get("a")} should reuse (sum ${sumOfResults})`,
  );
  const before = a.calls;
  for (let i = 0; i < 3; i++) {
    close(await runOn(sched, w, () => "host", TOKENS), reference(w, TOKENS));
  }
  assert.equal(a.calls, before);
  assert.equal(sched.arenaAllocations, 1);
});

Deno.test("sched: switchTo runs a graph's plan again after another's; not once its arena grew", async () => {
  const w = makeWeights();
  using sched = new Scheduler([new MiniBackend("a")]);
  const first = build(w, () => "host");
  sched.alloc(first.g);
  // Another graph over the same arena, then back to the first plan.
  const other = await runOn(sched, w, () => "host", [1, 2, 0]);
  close(other, reference(w, [1, 2, 0]));
  assert.ok(sched.switchTo(first.g));
  sched.setInput(first.ids, Int32Array.from(TOKENS));
  await sched.compute();
  close(sched.read(first.logits), reference(w, TOKENS));
  // A graph needing a bigger arena reallocates it: the first plan is refused.
  const big = new Graph();
  const x = big.input("x", GGMLType.F32, [1 << 16]);
  big.markOutput(big.silu(x));
  sched.alloc(big);
  assert.equal(sched.switchTo(first.g), false);
  assert.ok(sched.switchTo(big));
});

Deno.test("sched: errors name the problem", () => {
  const a = new MiniBackend("a");
  using sched = new Scheduler([a]);
  const g = new Graph();
  const x = g.input("x", GGMLType.F32, [4]);
  const y = g.silu(x);
  g.expand(y);
  sched.alloc(g);
  assert.throws(() => sched.setInput(x, new Float32Array(3)), /takes 16 bytes/);
  assert.throws(() => sched.read(y), /intermediate/);
  const none = new Scheduler([new MiniBackend("c", new Set())]);
  assert.throws(() => none.alloc(g), /no backend supports/);
  assert.throws(() => new Scheduler([a, new MiniBackend("a")]), /duplicate/);
});

// The real pure-TS backend, twice under two names, so the split path runs on it.
class Renamed implements Backend {
  constructor(readonly inner: Backend, readonly name: string) {}
  supportsOp(q: OpQuery): boolean {
    return this.inner.supportsOp(q);
  }
  alloc(size: number): BackendBuffer {
    return { ...this.inner.alloc(size), backend: this.name };
  }
  free(buf: BackendBuffer): void {
    this.inner.free(buf);
  }
  compute(nodes: readonly ExecNode[], signal?: AbortSignal): Promise<void> {
    return this.inner.compute(nodes, signal);
  }
  [Symbol.dispose](): void {}
}

Deno.test("sched: ReferenceBackend, whole and split across two instances", async () => {
  const w = makeWeights();
  const want = reference(w, TOKENS);
  using one = new Scheduler([new ReferenceBackend()]);
  close(await runOn(one, w, () => "host", TOKENS), want);
  const r0 = new Renamed(new ReferenceBackend(), "r0"),
    r1 = new Renamed(new ReferenceBackend(), "r1");
  using two = new Scheduler([r0, r1], { assign: (n) => (n.layer === 0 ? "r1" : "r0") });
  close(await runOn(two, w, () => "host", TOKENS), want);
  assert.deepEqual(two.splits.map((s) => s.backend), ["r0", "r1", "r0"]);
});

Deno.test("sched: SOFT_MAX on the CPU backend writes over its scores (one block, same bits)", async () => {
  using cpu = new CpuBackend({ threads: 2 });
  const r = rng(7);
  const fill = (n: number) => Float32Array.from({ length: n }, () => r() * 4);
  const [d, nKv, nTok, nHead] = [4, 256, 32, 2]; // scores (64 KiB) outweigh the rest
  const data = { k: fill(d * nKv * nHead), q: fill(d * nTok * nHead), v: fill(nKv * d * nHead) };
  const run = async (b: Backend) => {
    const g = new Graph();
    const k = g.input("k", GGMLType.F32, [d, nKv, nHead]);
    const q = g.input("q", GGMLType.F32, [d, nTok, nHead]);
    const v = g.input("v", GGMLType.F32, [nKv, d, nHead]);
    const kq = g.mulMat(k, q); // [nKv, nTok, nHead]
    const out = g.mulMat(v, g.softMax(kq, { scale: 0.25 }));
    g.markOutput(out);
    using sched = new Scheduler([b]);
    sched.alloc(g);
    for (const [t, x] of [[k, data.k], [q, data.q], [v, data.v]] as const) sched.setInput(t, x);
    await sched.compute();
    return { size: sched.measure(g).get("cpu")!, out: sched.read(out), kqBytes: kq.nbytes };
  };
  const inPlace = await run(cpu);
  const apart = await run({ // the same kernels and buffers, no inPlaceOps
    name: "cpu",
    supportsOp: (q) => cpu.supportsOp(q),
    alloc: (size) => cpu.alloc(size),
    free: (buf) => cpu.free(buf),
    compute: (nodes, signal) => cpu.compute(nodes, signal),
    [Symbol.dispose]() {},
  });
  assert.ok(cpu.inPlaceOps.has(Op.SOFT_MAX));
  assert.equal(apart.size - inPlace.size, inPlace.kqBytes);
  assert.deepEqual(inPlace.out, apart.out);
});

Deno.test("sched: a dry-run stand-in measures what the CPU backend places (in-place softmax)", () => {
  using cpu = new CpuBackend({ threads: 1 });
  const [d, nKv, nTok, nHead] = [4, 256, 32, 2];
  const g = new Graph();
  const k = g.input("k", GGMLType.F32, [d, nKv, nHead]);
  const q = g.input("q", GGMLType.F32, [d, nTok, nHead]);
  const v = g.input("v", GGMLType.F32, [nKv, d, nHead]);
  const kq = g.mulMat(k, q);
  g.markOutput(g.mulMat(v, g.softMax(kq, { scale: 0.25 })));
  using real = new Scheduler([cpu]);
  using dry = new Scheduler([dryBackend(cpu)]);
  const placed = real.measure(g).get("cpu")!, measured = dry.measure(g).get("cpu")!;
  assert.equal(measured, placed);
  // the scores' block is the softmax's: one of them counted, not both
  assert.ok(placed < 2 * kq.nbytes, `${placed} bytes for scores of ${kq.nbytes}`);
});
