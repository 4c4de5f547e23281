// The KV cells' bookkeeping kept up to date as cells change (per-sequence
// position bounds, the used extent, the change log) and the one-token mask
// rewritten only where cells changed, against brute-force recomputation
// after every step of random cache histories: decode steps, sequence edits,
// shifts, undone placements and clears.
import assert from "node:assert/strict";
import type { Backend, BackendBuffer } from "../lib/backend/types.ts";
import { GGMLType } from "../lib/ggml/types.ts";
import { BatchSplitter, type Ubatch } from "../lib/kv/batch.ts";
import { KvCache } from "../lib/kv/cache.ts";
import { fillKqMask, KqMask } from "../lib/kv/mask.ts";
import { mulberry32 } from "./rng.ts";

const backend: Backend = {
  name: "host",
  supportsOp: () => false,
  alloc: (size: number): BackendBuffer => ({
    backend: "host",
    size,
    bytes: new Uint8Array(size),
    ptr: null,
  }),
  free() {},
  compute: () => Promise.resolve(),
  [Symbol.dispose]() {},
};

function bruteBounds(kv: KvCache, s: number): [number, number] {
  let lo = -1, hi = -1;
  for (let i = 0; i < kv.size; i++) {
    const p = kv.cells.pos[i];
    if (p === -1 || !kv.cells.seqHas(i, s)) continue;
    if (lo < 0 || p < lo) lo = p;
    if (p > hi) hi = p;
  }
  return [lo, hi];
}

function bruteMaxP1(kv: KvCache): number {
  for (let i = kv.size - 1; i >= 0; i--) if (kv.cells.pos[i] !== -1) return i + 1;
  return 0;
}

// One token of sequence s after what the cache holds (as a decode step
// places it), or at position `at` unchecked (the mask must not rely on the
// batch checks).
function step(kv: KvCache, split: BatchSplitter, s: number, at?: number): Ubatch | null {
  const pos = at === undefined ? undefined : new Int32Array([at]);
  split.init(
    { token: new Int32Array([1]), seqId: [[s]], pos },
    { nSeqMax: 4, memory: at === undefined ? kv : undefined },
  );
  const ub = split.splitSimple(1)!;
  const slots = kv.prepare([ub]);
  if (!slots) return null;
  kv.applyUbatch(slots[0], ub);
  return ub;
}

for (const [name, half] of [["F32", false], ["F16", true]] as const) {
  Deno.test(`kv: bounds, extent and the incremental ${name} mask match recomputation over random histories`, () => {
    const rnd = mulberry32(half ? 7 : 3);
    const pick = (n: number) => Math.floor(rnd() * n);
    for (let run = 0; run < 20; run++) {
      using kv = new KvCache({
        size: 48,
        nLayer: 1,
        nHeadKv: 1,
        nEmbdHeadK: 4,
        nEmbdHeadV: 4,
        typeK: GGMLType.F32,
        typeV: GGMLType.F32,
        nSeqMax: 4,
        backend,
      });
      const split = new BatchSplitter();
      const mask = new KqMask();
      let reused = 0, s = 0;
      for (let k = 0; k < 300; k++) {
        const r = rnd();
        if (rnd() < 0.2) s = pick(4); // mostly one sequence generating, as in use
        let ub: Ubatch | null = null;
        if (r < 0.5) {
          ub = step(kv, split, s);
        } else if (r < 0.6) {
          ub = step(kv, split, s, Math.max(0, kv.seqPosMax(s) + pick(7) - 4));
        } else if (r < 0.68) {
          const p0 = pick(30);
          kv.seqRm(pick(5) - 1, p0, rnd() < 0.3 ? -1 : p0 + pick(8));
        } else if (r < 0.74) {
          kv.seqCp(s, pick(4), pick(20) - 1, -1);
        } else if (r < 0.77) {
          kv.seqKeep(s);
        } else if (r < 0.83) {
          kv.seqAdd(s, pick(20), -1, pick(9) - 5);
        } else if (r < 0.86) {
          kv.seqDiv(s, pick(10), -1, 2 + pick(2));
        } else if (r < 0.93) {
          // A placement undone (a failed decode).
          split.init({ token: new Int32Array([1]), seqId: [[s]] }, { nSeqMax: 4, memory: kv });
          const u = split.splitSimple(1)!;
          const slot = kv.findSlot(u);
          if (slot) {
            const saved = kv.saveSlot(slot);
            kv.applyUbatch(slot, u);
            kv.undo([saved]);
          }
        } else if (r < 0.95) {
          kv.clear();
        }
        for (let q = 0; q < 4; q++) {
          const [lo, hi] = bruteBounds(kv, q);
          assert.equal(kv.seqPosMin(q), lo, `run ${run} step ${k}: seqPosMin(${q})`);
          assert.equal(kv.seqPosMax(q), hi, `run ${run} step ${k}: seqPosMax(${q})`);
        }
        assert.equal(kv.cells.usedMaxP1(), bruteMaxP1(kv), `run ${run} step ${k}: usedMaxP1`);
        if (!ub) continue;
        const nKv = kv.nKv();
        const got = mask.fill(kv.cells, kv, ub, nKv, half);
        const want = half ? new Uint16Array(nKv) : new Float32Array(nKv);
        fillKqMask(kv.cells, kv, ub, nKv, want);
        assert.deepEqual(Array.from(got), Array.from(want), `run ${run} step ${k}: mask`);
        if (mask.lastWritten < nKv) reused++;
      }
      assert.ok(reused > 50, `run ${run}: ${reused} masks rewritten in part, expected most steps`);
    }
  });
}

Deno.test("kv: the change log names each changed cell and gives up past its capacity", () => {
  using kv = new KvCache({
    size: 4096,
    nLayer: 1,
    nHeadKv: 1,
    nEmbdHeadK: 4,
    nEmbdHeadV: 4,
    nSeqMax: 4,
    backend,
  });
  const split = new BatchSplitter();
  const e0 = kv.cells.epoch;
  step(kv, split, 0);
  step(kv, split, 0);
  assert.deepEqual([...new Set(kv.cells.changedSince(e0))], [0, 1]);
  const e1 = kv.cells.epoch;
  assert.equal(kv.cells.changedSince(e1)?.length, 0);
  kv.clear();
  assert.equal(kv.cells.changedSince(e1), null, "a clear: any cell may have changed");
  const e2 = kv.cells.epoch;
  for (let i = 0; i < 2000; i++) step(kv, split, 0);
  assert.equal(kv.cells.changedSince(e2), null, "more changes than the log holds");
  const e3 = kv.cells.epoch;
  kv.seqRm(0, 1990, -1);
  assert.deepEqual([...new Set(kv.cells.changedSince(e3))].sort((a, b) => a - b), [
    1990,
    1991,
    1992,
    1993,
    1994,
    1995,
    1996,
    1997,
    1998,
    1999,
  ]);
  assert.equal(kv.seqPosMax(0), 1989);
  assert.equal(kv.cells.usedMaxP1(), 1990);
});
