// KV cache: slots, masks, sequence edits, K-shift bookkeeping, the
// K/V views and store nodes, and batch splitting. Expected values are derived
// by hand from llama.cpp's rules (src/llama-kv-cache.cpp, llama-batch.cpp).
import assert from "node:assert/strict";
import type { Backend, BackendBuffer, ExecNode, ResolvedTensor } from "../lib/backend/types.ts";
import { Graph } from "../lib/graph/graph.ts";
import { Op } from "../lib/graph/ops.ts";
import { GGMLType } from "../lib/ggml/types.ts";
import { type Batch, BatchSplitter, type Ubatch } from "../lib/kv/batch.ts";
import { KvCache, type KvCacheOptions, SwaType } from "../lib/kv/cache.ts";
import { Scheduler } from "../lib/sched/scheduler.ts";
import { referenceCompute } from "../lib/backend/reference.ts";

// A backend that only copies F32 tensors (all the cache graphs need): CPY
// here, SET_ROWS (the stores) by the reference backend's kernel.
class CopyBackend implements Backend {
  readonly name = "copy";
  supportsOp(q: { op: number }): boolean {
    return q.op === Op.CPY || q.op === Op.SET_ROWS;
  }
  alloc(size: number): BackendBuffer {
    return { backend: this.name, size, bytes: new Uint8Array(size), ptr: null };
  }
  free(): void {}
  compute(nodes: readonly ExecNode[]): Promise<void> {
    for (const n of nodes) {
      if (n.op === Op.SET_ROWS) {
        referenceCompute(n);
        continue;
      }
      const vals = elems(n.src[0]).map(([dv, at]) => dv.getFloat32(at, true));
      elems(n.dst).forEach(([dv, at], k) => dv.setFloat32(at, vals[k], true));
    }
    return Promise.resolve();
  }
  [Symbol.dispose](): void {}
}

function elems(t: ResolvedTensor): Array<[DataView, number]> {
  assert.equal(t.type, GGMLType.F32);
  const b = t.data.buffer.bytes;
  const dv = new DataView(b.buffer, b.byteOffset, b.byteLength);
  const out: Array<[DataView, number]> = [];
  for (let i3 = 0; i3 < t.ne[3]; i3++) {
    for (let i2 = 0; i2 < t.ne[2]; i2++) {
      for (let i1 = 0; i1 < t.ne[1]; i1++) {
        for (let i0 = 0; i0 < t.ne[0]; i0++) {
          out.push([dv, t.data.offset + i0 * t.nb[0] + i1 * t.nb[1] + i2 * t.nb[2] + i3 * t.nb[3]]);
        }
      }
    }
  }
  return out;
}

const backend = new CopyBackend();

function cache(o: Partial<KvCacheOptions> = {}): KvCache {
  return new KvCache({
    size: 8,
    nLayer: 1,
    nHeadKv: 2,
    nEmbdHeadK: 4,
    nEmbdHeadV: 3,
    nSeqMax: 4,
    backend,
    ...o,
  });
}

function ubatch(b: Batch, nSeqMax = 4): Ubatch {
  const s = new BatchSplitter();
  s.init(b, { nSeqMax });
  return s.splitSimple(1024)!;
}

function seqTokens(seq: number, pos: number[]): Ubatch {
  return ubatch({
    token: new Int32Array(pos.length),
    pos: Int32Array.from(pos),
    seqId: pos.map(() => [seq]),
  });
}

function place(kv: KvCache, ub: Ubatch): number[] {
  const slot = kv.findSlot(ub);
  assert.ok(slot, "slot expected");
  kv.applyUbatch(slot, ub);
  return [...slot.idxs];
}

Deno.test("kv: find_slot fills from head, wraps around, and reports a full cache", () => {
  using kv = cache();
  assert.deepEqual(place(kv, seqTokens(0, [0, 1, 2, 3, 4, 5])), [0, 1, 2, 3, 4, 5]);
  assert.equal(kv.head, 6);
  kv.seqRm(0, 0, 2); // frees cells 0,1 and moves head back to 0
  assert.equal(kv.head, 0);
  kv.head = 6;
  const ub = seqTokens(0, [6, 7, 8, 9]);
  assert.deepEqual([...kv.findSlot(ub)!.idxs], [6, 7, 0, 1]);
  assert.equal(kv.findSlot(ub, true), null, "no 4 contiguous free cells");
  kv.applyUbatch(kv.findSlot(ub)!, ub);
  assert.equal(kv.head, 2);
  assert.equal(kv.cells.used, 8);
  assert.equal(kv.findSlot(seqTokens(0, [10])), null);
});

Deno.test("kv: multi-sequence causal mask follows llama.cpp's visibility rule", () => {
  using kv = cache();
  place(kv, seqTokens(0, [0, 1, 2])); // cells 0..2
  kv.seqCp(0, 1); // seq 1 shares the prompt
  const ub = ubatch({
    token: new Int32Array(3),
    pos: Int32Array.from([3, 3, 0]),
    seqId: [[0], [1], [2]],
    logits: [1, 1, 1],
  });
  assert.deepEqual(place(kv, ub), [3, 4, 5]);
  const nKv = kv.nKv();
  assert.equal(nKv, 8); // padded to 256, capped at the cache size
  const m = new Float32Array(nKv * 3);
  kv.fillMask(ub, nKv, m);
  const I = -Infinity;
  assert.deepEqual([...m.subarray(0, 8)], [0, 0, 0, 0, I, I, I, I]);
  assert.deepEqual([...m.subarray(8, 16)], [0, 0, 0, I, 0, I, I, I]);
  assert.deepEqual([...m.subarray(16, 24)], [I, I, I, I, I, 0, I, I]);
  const h = new Uint16Array(nKv * 3);
  kv.fillMask(ub, nKv, h);
  assert.deepEqual([...h.subarray(0, 8)], [0, 0, 0, 0, 0xfc00, 0xfc00, 0xfc00, 0xfc00]);
  // a prompt token only sees earlier positions of its own sequence
  kv.seqRm(-1);
  const pr = seqTokens(0, [0, 1, 2]);
  place(kv, pr);
  const pm = new Float32Array(nKv * 3);
  kv.fillMask(pr, nKv, pm);
  assert.deepEqual([...pm.subarray(8, 16)], [0, 0, I, I, I, I, I, I]);
});

Deno.test("kv: sliding window masks old cells and lets find_slot reuse them", () => {
  using kv = cache({ nSwa: 2, swaType: SwaType.STANDARD, nSeqMax: 1 });
  place(kv, seqTokens(0, [0, 1, 2, 3, 4, 5, 6, 7]));
  const ub = seqTokens(0, [8]);
  // cell 0 (pos 0): 8 - 0 >= 2 so it is outside every future window
  assert.deepEqual([...kv.findSlot(ub)!.idxs], [0]);
  place(kv, ub);
  assert.equal(kv.seqPosMin(0), 1);
  const m = new Float32Array(8);
  kv.fillMask(ub, 8, m);
  const I = -Infinity;
  assert.deepEqual([...m], [0, I, I, I, I, I, I, 0]); // sees pos 8 (cell 0) and pos 7 (cell 7)
});

Deno.test("kv: seq_add / seq_div record shifts; seq_keep and seq_rm free cells", () => {
  using kv = cache({ nSeqMax: 2 });
  place(kv, seqTokens(0, [0, 1, 2, 3, 4, 5]));
  kv.seqRm(0, 0, 2);
  kv.seqAdd(0, 2, -1, -2); // context shift: positions 2..5 become 0..3
  assert.deepEqual([...kv.cells.pos], [-1, -1, 0, 1, 2, 3, -1, -1]);
  assert.ok(kv.hasShift);
  assert.deepEqual([...kv.shiftInput()], [0, 0, -2, -2, -2, -2, 0, 0]);
  kv.seqDiv(0, 0, -1, 2);
  assert.deepEqual([...kv.cells.pos], [-1, -1, 0, 0, 1, 1, -1, -1]);
  assert.deepEqual([...kv.shiftInput()], [0, 0, -2, -1, -1, 0, 0, 0]);
  kv.resetShift();
  assert.ok(!kv.hasShift);
  kv.seqAdd(0, -1, -1, -1); // pos 0 cells go negative and are freed
  assert.deepEqual([...kv.cells.pos], [-1, -1, -1, -1, 0, 0, -1, -1]);
  assert.equal(kv.head, 2);
  kv.seqCp(0, 1);
  kv.seqRm(0);
  assert.equal(kv.cells.used, 2, "seq 1 still holds the cells");
  kv.seqKeep(0);
  assert.equal(kv.cells.used, 0);
  assert.equal(kv.seqPosMax(1), -1);
  assert.throws(() => kv.seqRm(7), /sequence id 7/);
});

Deno.test("kv: prepare finds slots for every ubatch and leaves the cells untouched", () => {
  using kv = cache();
  place(kv, seqTokens(0, [0, 1]));
  const before = [...kv.cells.pos];
  const slots = kv.prepare([seqTokens(0, [2, 3]), seqTokens(0, [4, 5, 6])]);
  assert.deepEqual(slots?.map((s) => [...s.idxs]), [[2, 3], [4, 5, 6]]);
  assert.deepEqual([...kv.cells.pos], before);
  assert.equal(kv.head, 2);
  assert.equal(kv.prepare([seqTokens(0, [2, 3, 4, 5]), seqTokens(0, [6, 7, 8])]), null);
});

Deno.test("kv: n_kv pads the used extent to 256", () => {
  using kv = cache({ size: 512 });
  assert.equal(kv.nKv(), 256);
  place(kv, seqTokens(0, Array.from({ length: 300 }, (_, i) => i)));
  assert.equal(kv.nKv(), 512);
});

Deno.test("kv: windowPad 64 pads the used extent to 64; other values are refused", () => {
  using kv = cache({ size: 512, windowPad: 64 });
  assert.equal(kv.nKv(), 64);
  place(kv, seqTokens(0, Array.from({ length: 100 }, (_, i) => i)));
  assert.equal(kv.nKv(), 128);
  for (const windowPad of [0, 32, 96.5, 100]) {
    assert.throws(() => cache({ size: 512, windowPad }), /windowPad .* multiple of 64/);
  }
});

Deno.test("kv: store nodes write token rows into the slot cells; views read them back", async () => {
  using kv = cache({ typeK: GGMLType.F32, typeV: GGMLType.F32 });
  const [hd, nh, hv, T] = [4, 2, 3, 4];
  const g = new Graph();
  const kCur = g.input("k", GGMLType.F32, [hd, nh, T]);
  const vCur = g.input("v", GGMLType.F32, [hv, nh, T]);
  const slot = { idxs: [6, 7, 0, 1] }; // wrapped: still one store node
  assert.equal(kv.storeK(g, 0, kCur, slot).length, 1);
  kv.storeV(g, 0, vCur, slot);
  const kView = kv.kView(g, 0, 8), vView = kv.vView(g, 0, 8);
  using sched = new Scheduler([backend]);
  sched.alloc(g);
  const kVals = Float32Array.from({ length: hd * nh * T }, (_, i) => i + 1);
  const vVals = Float32Array.from({ length: hv * nh * T }, (_, i) => -(i + 1));
  sched.setInput(kCur, kVals);
  sched.setInput(vCur, vVals);
  for (const [t, ids] of kv.storeInputs(g, slot)) sched.setInput(t, ids);
  await sched.compute();
  const K = sched.read(kView); // [hd, 8, nh]
  const V = sched.read(vView); // [8, hv, nh]
  slot.idxs.forEach((cell, t) => {
    for (let h = 0; h < nh; h++) {
      for (let d = 0; d < hd; d++) {
        assert.equal(K[(h * 8 + cell) * hd + d], kVals[(t * nh + h) * hd + d]);
      }
      for (let d = 0; d < hv; d++) {
        assert.equal(V[(h * hv + d) * 8 + cell], vVals[(t * nh + h) * hv + d]);
      }
    }
  });
  assert.deepEqual(kv.vView(g, 0, 8).ne, [8, hv, nh, 1]);
  assert.deepEqual(kv.kShiftView(g, 0, 2).ne, [2, nh, 8, 1]);
});

Deno.test("batch: split_simple, split_equal, split_seq and output ids", () => {
  const s = new BatchSplitter();
  s.init({
    token: Int32Array.from([10, 11, 12, 13, 14, 15]),
    pos: Int32Array.from([0, 0, 1, 1, 2, 2]),
    seqId: [[0], [1], [0], [1], [0], [1]],
    logits: [0, 0, 0, 0, 1, 1],
  }, { nSeqMax: 2, nVocab: 100 });
  const simple = [s.splitSimple(4)!, s.splitSimple(4)!];
  assert.equal(s.splitSimple(4), null);
  assert.deepEqual(simple.map((u) => [...u.token!]), [[10, 11, 12, 13], [14, 15]]);
  assert.deepEqual(s.outIds, [4, 5]);
  s.splitReset();
  const e1 = s.splitEqual(4)!, e2 = s.splitEqual(4)!;
  assert.deepEqual([...e1.token!], [10, 12, 11, 13]);
  assert.equal(e1.nSeqs, 2);
  assert.equal(e1.nSeqTokens, 2);
  assert.deepEqual([...e2.token!], [14, 15]);
  assert.equal(s.splitEqual(4), null);
  s.splitReset();
  const q = s.splitSeq(10)!;
  assert.deepEqual([...q.token!], [10, 12, 14]);
  assert.deepEqual(q.seqIdUnq, [0]);
  assert.deepEqual([...q.output], [0, 0, 1]);
});

Deno.test("batch: defaults and validation errors", () => {
  const s = new BatchSplitter();
  const mem = { seqPosMin: () => 0, seqPosMax: (q: number) => (q === 0 ? 4 : -1) };
  s.init({ token: Int32Array.from([1, 2]) }, { memory: mem });
  const u = s.splitSimple(8)!;
  assert.deepEqual([...u.pos], [5, 6]);
  assert.deepEqual([...u.output], [0, 1]);
  assert.throws(
    () => s.init({ token: Int32Array.from([1]), pos: Int32Array.from([3]) }, { memory: mem }),
    /starts at 3/,
  );
  assert.throws(
    () => s.init({ token: Int32Array.from([1, 2]), pos: Int32Array.from([0, 2]) }),
    /not continuous/,
  );
  assert.throws(
    () => s.init({ token: Int32Array.from([1]), seqId: [[3]] }, { nSeqMax: 2 }),
    /seq_id\[0\]\[0\] = 3/,
  );
  assert.throws(
    () => s.init({ token: Int32Array.from([7]) }, { nVocab: 5 }),
    /invalid token\[0\] = 7/,
  );
});
