// The recurrent state memory's bookkeeping (llama_memory_recurrent's rules):
// tails, copy-on-write after seqCp, contiguous slots with cell swaps, the
// zeroed cell, refused partial removal, tail-only position edits. The
// end-to-end check against llama.cpp is tests/parity_arch_mamba_test.ts.
import assert from "node:assert/strict";
import { BatchSplitter } from "../lib/kv/batch.ts";
import { RecurrentMemory } from "../lib/kv/recurrent.ts";

const opts = { nLayer: 1, nEmbdR: 4, nEmbdS: 8 };

// One equal-split ubatch of `n` tokens for each of `seqs`, continuing from `pos0[s]`.
function ubatch(seqs: number[], n: number, pos0: number[], nSeqMax: number) {
  const token = new Int32Array(seqs.length * n);
  const pos = new Int32Array(seqs.length * n);
  const seqId: number[][] = [];
  seqs.forEach((s, k) => {
    for (let i = 0; i < n; i++) {
      pos[k * n + i] = pos0[k] + i;
      seqId.push([s]);
    }
  });
  const sp = new BatchSplitter();
  sp.init({ token, pos, seqId }, { nSeqMax });
  sp.splitReset();
  return sp.splitEqual(1024)!;
}

Deno.test("recurrent: fresh sequences take contiguous cells, each zeroed from rsZ", () => {
  const m = new RecurrentMemory({ nSeqMax: 4, ...opts });
  assert.ok(m.findSlot(ubatch([0, 1], 3, [0, 0], 4)));
  assert.deepEqual([m.head, m.n], [0, 2]);
  assert.deepEqual(m.cells[0].tail, 0);
  assert.deepEqual(m.cells[1].tail, 1);
  assert.deepEqual(m.rsZ, 0, "no cell copies from cell 0: it is the zeroed state");
  assert.deepEqual([...m.sCopy()], [0, 0], "both fresh states start from the zeroed cell");
  assert.deepEqual([m.seqPosMin(0), m.seqPosMax(0), m.seqPosMax(1)], [2, 2, 2]);
  assert.deepEqual(m.used, 2);
  // The next step: each cell keeps its own state.
  assert.ok(m.findSlot(ubatch([0, 1], 1, [3, 3], 4)));
  assert.deepEqual([...m.sCopy()], [0, 1]);
  assert.deepEqual(m.rsZ, -1, "every cell of the slot is copied from: nothing to zero");
});

Deno.test("recurrent: seqCp shares a cell; advancing one copies it (copy-on-write)", () => {
  const m = new RecurrentMemory({ nSeqMax: 3, ...opts });
  m.findSlot(ubatch([0], 4, [0], 3));
  m.seqCp(0, 1);
  assert.deepEqual(m.cells[1].tail, 0);
  assert.deepEqual([...m.cells[0].seqId].sort(), [0, 1]);
  assert.deepEqual(m.seqPosMax(1), 3);
  // Both advance together: seq 1 moves to an empty cell starting from cell 0's state.
  assert.ok(m.findSlot(ubatch([0, 1], 1, [4, 4], 3)));
  assert.deepEqual([m.head, m.n], [0, 2]);
  assert.deepEqual([...m.sCopy()], [0, 0], "seq 1's new cell reads the shared state");
  assert.deepEqual([m.cells[0].tail, m.cells[1].tail], [0, 1]);
  assert.deepEqual(m.used, 2);
});

Deno.test("recurrent: a ubatch's cells are gathered contiguously by swapping cells", () => {
  const m = new RecurrentMemory({ nSeqMax: 3, ...opts });
  m.findSlot(ubatch([0], 1, [0], 3)); // seq 0 in cell 0
  m.findSlot(ubatch([1], 1, [0], 3)); // seq 1 in cell 1
  m.findSlot(ubatch([2], 1, [0], 3)); // seq 2 in cell 2
  assert.deepEqual([0, 1, 2].map((s) => m.cells[s].tail), [0, 1, 2]);
  // seqs 2 and 0 together: their cells (2, 0) are swapped into 0, 1 in set order.
  const ub = ubatch([2, 0], 1, [1, 1], 3);
  const order = [ub.seqId[0][0], ub.seqId[1][0]];
  assert.ok(m.findSlot(ub));
  assert.deepEqual(order, [2, 0], "sets in batch order");
  // The slot spans min..max of the tails before the swaps: cells 0..2.
  assert.deepEqual([m.head, m.n], [0, 3]);
  assert.deepEqual(order.map((s) => m.cells[s].tail), [0, 1]);
  assert.equal(m.cells[1].tail, 2, "seq 1 swapped out to cell 2");
  assert.deepEqual([...m.sCopy()], [2, 0, 1], "every cell reads its own old state");
  assert.deepEqual(m.seqPosMax(1), 0, "seq 1 untouched");
});

Deno.test("recurrent: partial removal refused, whole sequences removed, keep, add/div on the tail", () => {
  const m = new RecurrentMemory({ nSeqMax: 2, ...opts });
  m.findSlot(ubatch([0, 1], 5, [0, 0], 2));
  assert.deepEqual(m.seqRm(0, 2, -1), false, "cannot cut tokens out of a state");
  assert.deepEqual(m.seqRm(0, 7, -1), true, "a range after the state removes nothing");
  assert.deepEqual(m.seqPosMax(0), 4);
  assert.deepEqual(m.seqRm(-1, 1, 3), false, "seq -1 needs everything or nothing");
  m.seqAdd(0, 0, -1, 10);
  assert.deepEqual(m.seqPosMax(0), 14);
  m.seqAdd(1, 5, -1, 10);
  assert.deepEqual(m.seqPosMax(1), 4, "outside [p0, p1): unchanged");
  m.seqDiv(0, 0, -1, 4);
  assert.deepEqual(m.seqPosMax(0), 3);
  m.seqKeep(1);
  assert.deepEqual([m.seqPosMax(0), m.seqPosMax(1), m.used], [-1, 4, 1]);
  assert.deepEqual(m.seqRm(1), true);
  assert.deepEqual([m.seqPosMin(1), m.used], [-1, 0]);
});

Deno.test("recurrent: prepare changes nothing; an out-of-range sequence fails", () => {
  const m = new RecurrentMemory({ nSeqMax: 2, ...opts });
  const before = JSON.stringify(m.snapshot().cells.map((c) => [c.pos, c.src, c.tail]));
  assert.ok(m.prepare([ubatch([0, 1], 2, [0, 0], 2), ubatch([0, 1], 2, [2, 2], 2)]));
  assert.deepEqual(JSON.stringify(m.cells.map((c) => [c.pos, c.src, c.tail])), before);
  assert.deepEqual(m.prepare([ubatch([3], 1, [0], 4)]), false);
});
