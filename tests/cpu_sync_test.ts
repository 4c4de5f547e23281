// CpuBackend runs a node array synchronously once a run of it was short
// (syncBelowMs), lets the event loop turn (I/O polled) every few ms of such
// runs, and never runs synchronously what it has not seen complete.
// Results are the same either way.
// A node that only moved inside its buffers is re-encoded by its addresses.
import assert from "node:assert/strict";
import { loadLibrary } from "../ffi/library.ts";
import { CpuBackend } from "../lib/backend/cpu.ts";
import type { ExecNode, ResolvedTensor } from "../lib/backend/types.ts";
import { GGMLType } from "../lib/ggml/types.ts";
import { Op } from "../lib/graph/ops.ts";
import { requestDuringLoop } from "./event_loop_util.ts";

const lib = await loadLibrary();

// dst = a + b over 64 floats in one buffer: [a | b | dst].
function addNodes(cpu: CpuBackend): { nodes: ExecNode[]; bytes: Uint8Array } {
  const buf = cpu.alloc(3 * 256);
  const t = (k: number): ResolvedTensor => ({
    type: GGMLType.F32,
    ne: [64, 1, 1, 1],
    nb: [4, 256, 256, 256],
    data: { buffer: buf, offset: 256 * k },
  });
  const f = new Float32Array(buf.bytes.buffer, buf.bytes.byteOffset, 192);
  for (let i = 0; i < 64; i++) [f[i], f[64 + i]] = [i, 1000 * i];
  return {
    nodes: [{ op: Op.ADD, dst: t(2), src: [t(0), t(1)], params: new Int32Array(16) }],
    bytes: buf.bytes,
  };
}

function sums(bytes: Uint8Array): number[] {
  return Array.from(new Float32Array(bytes.buffer, bytes.byteOffset + 512, 64));
}

Deno.test("cpu: a short graph runs synchronously after its first run", async () => {
  // A generous bound: a loaded machine's first run may take milliseconds.
  using cpu = new CpuBackend({ threads: 2, library: lib, syncBelowMs: 1000 });
  const { nodes, bytes } = addNodes(cpu);
  await cpu.compute(nodes);
  assert.equal(cpu.lastComputeSync, false, "never run before: another thread");
  assert.deepEqual(sums(bytes), Array.from({ length: 64 }, (_, i) => 1001 * i));
  new Float32Array(bytes.buffer, bytes.byteOffset + 512, 64).fill(0);
  const p = cpu.compute(nodes);
  assert.equal(cpu.lastComputeSync, true, "short: on this thread");
  assert.deepEqual(sums(bytes), Array.from({ length: 64 }, (_, i) => 1001 * i), "done on return");
  await p;
});

Deno.test({
  name: "cpu: a loop of synchronous runs lets a local HTTP request through",
  async fn() {
    using cpu = new CpuBackend({ threads: 2, library: lib, syncBelowMs: 1000 });
    const { nodes } = addNodes(cpu);
    await cpu.compute(nodes);
    // Before the turns, such a request waited until the loop ended.
    let syncRuns = 0;
    const { answered, runs } = await requestDuringLoop(async () => {
      await cpu.compute(nodes);
      if (cpu.lastComputeSync) syncRuns++;
    });
    assert.ok(
      answered > 0 && answered < 500,
      `answered after ${answered.toFixed(1)} ms (${runs} runs, ${syncRuns} on this thread)`,
    );
    assert.equal(syncRuns, runs, "every run stayed on this thread");
  },
});

Deno.test("cpu: syncBelowMs 0 never runs on the caller's thread", async () => {
  using cpu = new CpuBackend({ threads: 1, library: lib, syncBelowMs: 0 });
  const { nodes } = addNodes(cpu);
  for (let i = 0; i < 5; i++) {
    await cpu.compute(nodes);
    assert.equal(cpu.lastComputeSync, false);
  }
  assert.throws(() => new CpuBackend({ library: lib, syncBelowMs: -1 }), RangeError);
});

Deno.test("cpu: a node moved inside its buffer is re-encoded at its new place; out of it, refused", async () => {
  using cpu = new CpuBackend({ threads: 1, library: lib });
  const { nodes, bytes } = addNodes(cpu);
  const [n] = nodes;
  await cpu.compute(nodes);
  // The same op, params, shapes and buffer, src0 64 bytes further (as a KV
  // store moves to the next cell): only its address changes.
  const moved = (offset: number): ExecNode[] => [{
    ...n,
    src: [{ ...n.src[0], data: { buffer: n.src[0].data.buffer, offset } }, n.src[1]],
  }];
  const f = new Float32Array(bytes.buffer, bytes.byteOffset, 192);
  f.fill(0, 128);
  await cpu.compute(moved(64));
  const want = Array.from({ length: 64 }, (_, i) => f[16 + i] + f[64 + i]);
  assert.deepEqual(sums(bytes), want, "src0 read at its new offset");
  // Past the buffer's end: the full validation runs and names the extent.
  assert.throws(() => cpu.computeSync(moved(640)), /node 0.* src0: extent \[640, 896\)/);
  // The refused node was not left encoded: the original runs again.
  f.fill(0, 128);
  cpu.computeSync(nodes);
  assert.deepEqual(sums(bytes), Array.from({ length: 64 }, (_, i) => 1001 * i));
});
