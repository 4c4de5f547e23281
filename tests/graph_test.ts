// Graph builder shapes/strides (ggml's rules), expand order, memory planner.
import assert from "node:assert/strict";
import type { BackendBuffer } from "../lib/backend/types.ts";
import { planArena, planGraph } from "../lib/graph/alloc.ts";
import { Graph } from "../lib/graph/graph.ts";
import { bitsF32, Op, RopeParam } from "../lib/graph/ops.ts";
import { GraphError } from "../lib/graph/tensor.ts";
import { GGMLType } from "../lib/ggml/types.ts";

const host = (size: number): BackendBuffer => ({
  backend: "host",
  size,
  bytes: new Uint8Array(size),
  ptr: null,
});
const { F32, F16, Q4_0, I32 } = GGMLType;

Deno.test("graph: op shapes and types follow ggml", () => {
  const g = new Graph();
  const w = g.weight("w", Q4_0, [64, 10], { buffer: host(10 * 36), offset: 0 });
  assert.deepEqual(w.nb, [18, 36, 360, 360]); // block of 32 is 18 bytes
  const x = g.input("x", F32, [64, 5, 3]);
  const y = g.mulMat(w, x);
  assert.deepEqual(y.ne, [10, 5, 3, 1]);
  assert.equal(y.type, F32);
  const ids = g.input("ids", I32, [7]);
  const e = g.getRows(w, ids);
  assert.deepEqual(e.ne, [64, 7, 1, 1]);
  assert.equal(e.type, F32);
  const b = g.input("b", F32, [64, 1, 3]);
  assert.deepEqual(g.add(x, b).ne, [64, 5, 3, 1]);
  assert.throws(() => g.add(b, x), /does not broadcast/);
  assert.throws(() => g.mulMat(w, g.input("z", F32, [32, 2])), /mulMat: cannot multiply/);
  const n = g.rmsNorm(x, 1e-6);
  assert.equal(bitsF32(n.params[0]), Math.fround(1e-6));
  const pos = g.input("pos", I32, [3]);
  const r = g.rope(g.reshape(x, [16, 20, 3]), pos, { nDims: 16, freqBase: 5e5 });
  assert.equal(r.params[RopeParam.N_DIMS], 16);
  assert.equal(bitsF32(r.params[RopeParam.FREQ_BASE]), 5e5);
  assert.throws(() => g.rope(x, g.input("p5", I32, [5]), { nDims: 16 }), /positions/);
  assert.throws(() => g.rope(x, pos, { nDims: 65 }), /nDims/);
  const kq = g.input("kq", F32, [32, 4, 2]);
  const mask = g.input("mask", F16, [32, 4]);
  const sm = g.softMax(kq, { mask, scale: 0.125 });
  assert.equal(bitsF32(sm.params[0]), 0.125);
  assert.throws(() => g.softMax(kq, { mask: g.input("m2", F32, [16, 4]) }), /mask/);
  assert.throws(() => g.swiglu(x, b), /swiglu/);
  assert.throws(() => g.geglu(x, b), /geglu/);
  assert.equal(g.geglu(x, x).op, Op.GEGLU);
  assert.ok(new Graph().input("q", F32, [2]) && true);
  assert.throws(() => g.silu(new Graph().input("q", F32, [2])), GraphError);
});

Deno.test("graph: views, permute, transpose and reshape are zero-copy with ggml strides", () => {
  const g = new Graph();
  const x = g.input("x", F32, [4, 3, 2]);
  assert.deepEqual(x.nb, [4, 16, 48, 96]);
  const p = g.permute(x, 0, 2, 1, 3); // axis 1 -> 2, axis 2 -> 1
  assert.deepEqual(p.ne, [4, 2, 3, 1]);
  assert.deepEqual(p.nb, [4, 48, 16, 96]);
  assert.equal(p.root, x);
  assert.ok(!p.isContiguous);
  const t = g.transpose(x);
  assert.deepEqual(t.ne, [3, 4, 2, 1]);
  assert.deepEqual(t.nb, [16, 4, 48, 96]);
  assert.throws(() => g.reshape(t, [12, 2]), /not contiguous/);
  const c = g.cont(t);
  assert.equal(c.op, Op.CPY);
  assert.deepEqual(c.nb, [4, 12, 48, 96]);
  const v = g.view(x, [4, 2], [16], 16); // rows 1..2 of the first matrix
  const vv = g.view(v, [2], [], 8);
  assert.equal(vv.root, x);
  assert.equal(vv.viewOffset, 24);
  assert.throws(() => g.view(x, [4, 3], [16], 64), /exceeds/);
  assert.deepEqual(g.reshape(x, [12, 2]).ne, [12, 2, 1, 1]);
  const k = g.input("kv", F16, [8, 16]);
  assert.deepEqual(g.view(k, [8, 4], [16], 32).nb, [2, 16, 64, 64]);
  assert.throws(() => g.view(k, [8, 4], [16], 32 * 16), /exceeds/);
});

Deno.test("graph: expand orders dependencies first and keeps side effects in call order", () => {
  const g = new Graph();
  const cacheBuf = host(4 * 16 * 4);
  const cache = g.external("cache", F32, [4, 16], { buffer: cacheBuf, offset: 0 });
  const x = g.input("x", F32, [4, 2]);
  const k = g.scale(x, 2);
  const store = g.cpy(k, g.view(cache, [4, 2], [16], 0));
  assert.equal(store.root, cache);
  g.expand(store);
  const read = g.mulMat(g.view(cache, [4, 16], [16], 0), x);
  g.markOutput(read);
  assert.deepEqual(g.nodes, [k, store, read]);
  assert.deepEqual(g.leafs.map((l) => l.name), ["x", "cache"]);
  g.expand(read); // idempotent
  assert.equal(g.nodes.length, 3);
  assert.throws(() => g.cpy(x, g.input("y", F32, [3])), /element count/);
  const wt = g.weight("w", F32, [4], { buffer: host(16), offset: 0 });
  assert.throws(() => g.cpy(x, wt), /element count|cannot write/);
  assert.throws(() => g.weight("big", F32, [8], { buffer: host(16), offset: 0 }), /overrun/);
});

Deno.test("planner: reuses memory after the last reader and never overlaps live tensors", () => {
  const g = new Graph();
  const x = g.input("x", F32, [256]); // 1 KiB each
  let h = x;
  for (let i = 0; i < 10; i++) h = g.silu(h);
  g.markOutput(h);
  const plan = planGraph(g);
  // a chain needs only two live buffers plus the pinned output
  assert.ok(plan.size <= 3 * 1024, `arena ${plan.size}`);
  // invariants on random lifetimes
  let seed = 7;
  const rnd = () => ((seed = (seed * 1103515245 + 12345) >>> 0) / 2 ** 32);
  const items = Array.from({ length: 200 }, (_, key) => {
    const start = Math.floor(rnd() * 100);
    return { key, size: 1 + Math.floor(rnd() * 5000), start, end: start + Math.floor(rnd() * 20) };
  });
  const p = planArena(items);
  for (const a of items) {
    const oa = p.offsets.get(a.key)!;
    assert.equal(oa % 64, 0);
    assert.ok(oa + a.size <= p.size);
    for (const b of items) {
      if (a.key >= b.key || a.end < b.start || b.end < a.start) continue;
      const ob = p.offsets.get(b.key)!;
      assert.ok(oa + a.size <= ob || ob + b.size <= oa, `${a.key} overlaps ${b.key}`);
    }
  }
  const total = items.reduce((s, i) => s + Math.ceil(i.size / 64) * 64, 0);
  assert.ok(p.size < total / 2, `arena ${p.size} vs ${total}`);
});

Deno.test("planner: a result written in place takes its source's block only when that source ends where it starts", () => {
  const kb = 1024;
  // a (steps 0-1) feeds b in place at step 1; c (1-3) lives beside both.
  const items = [
    { key: "a", size: 4 * kb, start: 0, end: 1 },
    { key: "c", size: kb, start: 1, end: 3 },
    { key: "b", size: 4 * kb, start: 1, end: 2, inPlaceOf: "a" },
  ];
  const p = planArena(items);
  assert.equal(p.offsets.get("b"), p.offsets.get("a"));
  assert.equal(p.size, 5 * kb); // without the hand-over: a, c and b at once (9 KiB)
  assert.equal(planArena(items.map(({ inPlaceOf: _, ...it }) => it)).size, 9 * kb);
  // b's block is free again after b: d (step 3) takes it.
  const more = planArena([...items, { key: "d", size: 4 * kb, start: 3, end: 3 }]);
  assert.equal(more.offsets.get("d"), more.offsets.get("a"));
  // a source still read after the node's step, or a smaller one: no hand-over.
  for (const a of [{ end: 2, size: 4 * kb }, { end: 1, size: 2 * kb }]) {
    const q = planArena([{ key: "a", start: 0, ...a }, items[1], items[2]]);
    assert.notEqual(q.offsets.get("b"), q.offsets.get("a"));
  }
});
