// Reusing a planned graph across decode steps: Graph.moveView, KvCache.moveStores,
// Scheduler.update and the CPU backend's re-encoding of changed nodes. The
// expected cache contents are the input values written (copies, no arithmetic).
import assert from "node:assert/strict";
import { CpuBackend } from "../lib/backend/cpu.ts";
import { Graph } from "../lib/graph/graph.ts";
import { GGMLType } from "../lib/ggml/types.ts";
import { KvCache } from "../lib/kv/cache.ts";
import { Scheduler } from "../lib/sched/scheduler.ts";

const { F32 } = GGMLType;

Deno.test("graph: moveView moves a copy and refuses what it cannot move", () => {
  const g = new Graph();
  const buf = { backend: "host", size: 256, bytes: new Uint8Array(256), ptr: null };
  const ext = g.external("ext", F32, [8, 8], { buffer: buf, offset: 0 });
  const x = g.input("x", F32, [8]);
  const c = g.cpy(x, g.view(ext, [8], [], 32));
  g.expand(c);
  g.moveView(c, 96);
  assert.equal(c.viewOffset, 96);
  assert.equal(c.src[1].viewOffset, 96);
  assert.throws(() => g.moveView(c, 232), /exceeds/);
  assert.throws(() => g.moveView(c, -4), /exceeds/);
  assert.throws(() => g.moveView(g.silu(x), 0), /does not write into another tensor/);
  const r = g.rope(g.reshape(g.cpy(x, g.view(ext, [8], [], 0)), [8, 1, 1]), g.input("p", 26, [1]), {
    nDims: 8,
  });
  assert.throws(() => g.moveView(r.src[0].src[0], 64), /has views/);
});

Deno.test("kv: a graph planned once stores each step's keys and values in that step's cells", async () => {
  using cpu = await CpuBackend.create({ threads: 2 });
  using kv = new KvCache({
    size: 8,
    nLayer: 1,
    nHeadKv: 2,
    nEmbdHeadK: 4,
    nEmbdHeadV: 3,
    typeK: F32,
    typeV: F32,
    backend: cpu,
  });
  const [hd, nh, hv] = [4, 2, 3];
  const g = new Graph();
  const kCur = g.input("k", F32, [hd, nh, 2]);
  const vCur = g.input("v", F32, [hv, nh, 2]);
  kv.storeK(g, 0, kCur, { idxs: [2, 3] });
  kv.storeV(g, 0, vCur, { idxs: [2, 3] });
  const kView = kv.kView(g, 0, 8), vView = kv.vView(g, 0, 8);
  g.markOutput(kView), g.markOutput(vView);
  using sched = new Scheduler([cpu]);
  sched.alloc(g);
  const step = async (cells: number[], base: number) => {
    const k = Float32Array.from({ length: hd * nh * 2 }, (_, i) => base + i);
    const v = Float32Array.from({ length: hv * nh * 2 }, (_, i) => -(base + i));
    sched.setInput(kCur, k);
    sched.setInput(vCur, v);
    for (const [t, ids] of kv.storeInputs(g, { idxs: cells })) sched.setInput(t, ids);
    await sched.compute();
    const K = new Float32Array(kv.storage(0).k.buffer.bytes.slice(kv.storage(0).k.offset).buffer);
    const V = new Float32Array(kv.storage(0).v.buffer.bytes.slice(kv.storage(0).v.offset).buffer);
    cells.forEach((cell, t) => {
      for (let h = 0; h < nh; h++) {
        for (let d = 0; d < hd; d++) {
          assert.equal(K[cell * hd * nh + h * hd + d], k[(t * nh + h) * hd + d]);
        }
        for (let d = 0; d < hv; d++) {
          assert.equal(V[(h * hv + d) * 8 + cell], v[(t * nh + h) * hv + d]);
        }
      }
    });
    return { K, V };
  };
  await step([2, 3], 100);
  const allocs = sched.arenaAllocations;
  // The cells are the stores' row ids: nothing in the plan moves.
  assert.deepEqual(kv.moveStores(g, { idxs: [5, 6] }), []);
  const { K } = await step([5, 6], 200);
  assert.equal(K[2 * hd * nh], 100, "the earlier step's cells keep their keys");
  assert.equal(sched.arenaAllocations, allocs);
  // Cells that wrap around serve the same graph; another token count does not.
  await step([7, 0], 300);
  assert.equal(kv.moveStores(g, { idxs: [7, 0, 1] }), null);
  assert.throws(() => kv.moveStores(g, { idxs: [8, 9] }), /out of range/);
  assert.throws(() => kv.storeInputs(g, { idxs: [8, 9] }), /out of range/);
});

Deno.test("sched: switchTo brings a planned graph back until an arena moves", async () => {
  using cpu = await CpuBackend.create({ threads: 2 });
  using sched = new Scheduler([cpu]);
  const graph = (n: number, s: number) => {
    const g = new Graph();
    const x = g.input("x", F32, [n]);
    const y = g.scale(x, s);
    g.markOutput(y);
    return { g, x, y };
  };
  const a = graph(8, 2), b = graph(8, 3);
  assert.equal(sched.switchTo(a.g), false, "never planned");
  sched.alloc(a.g);
  sched.alloc(b.g);
  assert.ok(sched.switchTo(a.g));
  sched.setInput(a.x, Float32Array.from({ length: 8 }, (_, i) => i));
  await sched.compute();
  assert.deepEqual([...sched.read(a.y)], Array.from({ length: 8 }, (_, i) => 2 * i));
  // A graph that needs more arena than there is: the arena grows, older plans are void.
  sched.alloc(graph(1 << 16, 1).g);
  assert.equal(sched.switchTo(a.g), false);
});
