// The WebAssembly backend runs every graph on the caller's thread; a loop
// of such runs (a generation) must still let the event loop poll I/O, or
// the edge handler's next request and its streams' tokens wait for the
// loop to end. Same check as tests/cpu_sync_test.ts for the CPU backend.
import assert from "node:assert/strict";
import { WasmBackend } from "../lib/backend/wasm.ts";
import type { ExecNode, ResolvedTensor } from "../lib/backend/types.ts";
import { GGMLType } from "../lib/ggml/types.ts";
import { Op } from "../lib/graph/ops.ts";
import { requestDuringLoop } from "./event_loop_util.ts";
import { WASM_SKIP, wasmKernels, wasmTestName } from "./wasm_util.ts";

Deno.test({
  name: wasmTestName("wasm: a loop of runs lets a local HTTP request through"),
  ignore: WASM_SKIP !== undefined,
  async fn() {
    using wasm = new WasmBackend(await wasmKernels());
    // dst = a + b over 64 floats in one buffer: [a | b | dst].
    const buf = wasm.alloc(3 * 256);
    const t = (k: number): ResolvedTensor => ({
      type: GGMLType.F32,
      ne: [64, 1, 1, 1],
      nb: [4, 256, 256, 256],
      data: { buffer: buf, offset: 256 * k },
    });
    const nodes: ExecNode[] = [
      { op: Op.ADD, dst: t(2), src: [t(0), t(1)], params: new Int32Array(16) },
    ];
    const { answered, runs } = await requestDuringLoop(() => wasm.compute(nodes));
    console.log(`answered after ${answered.toFixed(1)} ms, ${runs} runs`);
    assert.ok(
      answered > 0 && answered < 500,
      `answered after ${answered.toFixed(1)} ms (${runs} runs)`,
    );
  },
});
