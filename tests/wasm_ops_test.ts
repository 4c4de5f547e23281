// The WebAssembly backend's kernels: every op case of tests/ops_cases.ts
// against the float64 reference backend (the CPU tests' tolerances) and bit
// for bit against the CPU backend at its scalar level (the same C, so the
// same operation order; ROPE's sinf/cosf in wasm are glibc's algorithm,
// kernels/src/third_party_arm_sincosf.c); the row helpers (quantize,
// dequantize, vec_dot) for every type; memory growth, the 4 GiB limit and
// threads. Both builds: llm_edge.wasm (one thread) and llm_edge_mt.wasm (the
// shared instance in Deno) at 1 and 2 threads. Skipped, naming the missing tool, only where the wasm toolchain is
// absent.
import assert from "node:assert/strict";
import { ReferenceBackend } from "../lib/backend/reference.ts";
import { CpuBackend } from "../lib/backend/cpu.ts";
import { WasmBackend } from "../lib/backend/wasm.ts";
import { GGMLType, ggmlTypeInfo } from "../lib/ggml/types.ts";
import { Op } from "../lib/graph/ops.ts";
import { bufferGet, bufferSet } from "../lib/ggml/memory.ts";
import { loadLibrary } from "../ffi/library.ts";
import { SimdLevel } from "../ffi/symbols.ts";
import {
  loadWasmKernels,
  WASM32_MAX_BYTES,
  WasmKernelError,
  type WasmKernels,
} from "../ffi/wasm.ts";
import { readFileIntoWasm } from "../lib/gguf/wasm_file.ts";
import { buildCases, type Case, emptySpec, randomSpec, readDst, run } from "./ops_cases.ts";
import { mulberry32 as rng } from "./rng.ts";
import { WASM_SKIP, wasmKernels, wasmModules, wasmTestName } from "./wasm_util.ts";

const ignore = WASM_SKIP !== undefined;
const CASES = buildCases();

function within(c: Case, got: number[], want: number[]): void {
  assert.equal(got.length, want.length, c.name);
  for (let i = 0; i < want.length; i++) {
    const err = Math.abs(got[i] - want[i]);
    if (!(err <= c.atol + c.rtol * Math.abs(want[i]))) {
      assert.fail(`wasm ${c.name}: element ${i} wasm ${got[i]} ref ${want[i]} (err ${err})`);
    }
  }
}

Deno.test({
  name: wasmTestName(
    "wasm ops match the reference and the cpu scalar level bit for bit " +
      "(single-threaded build; threaded build at 1 and 2 threads)",
  ),
  ignore,
  async fn() {
    const mt = await wasmKernels();
    assert.ok(mt.threaded, "Deno shares memory with workers: the shared instance is threaded");
    const one = await loadWasmKernels({ source: (await wasmModules()).single });
    assert.ok(!one.threaded);
    const lib = await loadLibrary();
    using single = new WasmBackend(one);
    using mt1 = new WasmBackend(mt);
    using mt2 = await WasmBackend.create({ kernels: mt, threads: 2 });
    assert.equal(mt2.threads, 2);
    const ref = new ReferenceBackend();
    using cpu = new CpuBackend({ threads: 1, library: lib });
    // split flash attention's values depend on the thread count (kernels/PARITY.md)
    using cpu2 = new CpuBackend({ threads: 2, library: lib });
    assert.equal(lib.symbols.le_set_simd_level(SimdLevel.SCALAR), SimdLevel.SCALAR);
    try {
      for (const c of CASES) {
        const got = await run(single, c);
        within(c, readDst(c, got), readDst(c, await run(ref, c)));
        assert.deepEqual(got, await run(cpu, c), `${c.name}: wasm differs from cpu scalar`);
        assert.deepEqual(await run(mt1, c), got, `${c.name}: threaded build differs at 1 thread`);
        assert.deepEqual(
          await run(mt2, c),
          await run(cpu2, c),
          `${c.name}: threaded build at 2 threads differs from cpu scalar at 2`,
        );
      }
    } finally {
      lib.symbols.le_set_simd_level(SimdLevel.BEST);
    }
  },
});

Deno.test({
  name: wasmTestName(
    "wasm f16/q8_0/q4_0 mul_mat tiles equal the cpu scalar level's vec_dot for any shape",
  ),
  ignore,
  async fn() {
    const lib = await loadLibrary();
    using wasm = new WasmBackend(await wasmKernels());
    using cpu = new CpuBackend({ threads: 1, library: lib });
    const r = rng(11);
    lib.symbols.le_set_simd_level(SimdLevel.SCALAR);
    let n = 0;
    try {
      for (const t of [GGMLType.F16, GGMLType.Q8_0, GGMLType.Q4_0]) {
        // M % 8 == 0 takes the tiles (4-row groups, leftover columns); M = 12 the vec_dot
        // path; F16 also with K % 4 != 0 (the tiles' element tail)
        const shapes = [[32, 8], [96, 16], [256, 24], [64, 12]];
        if (t === GGMLType.F16) shapes.push([38, 8]);
        for (const [K, M] of shapes) {
          for (const N of [1, 2, 3, 4, 5, 7, 9]) {
            const c: Case = {
              name: `mul_mat ${t} K${K} M${M} N${N}`,
              op: Op.MUL_MAT,
              src: [randomSpec(t, [K, M, 1, 1], r), randomSpec(GGMLType.F32, [K, N, 1, 1], r)],
              dst: emptySpec(GGMLType.F32, [M, N, 1, 1]),
              atol: 0,
              rtol: 0,
            };
            assert.deepEqual(await run(wasm, c), await run(cpu, c), c.name);
            n++;
          }
        }
      }
    } finally {
      lib.symbols.le_set_simd_level(SimdLevel.BEST);
    }
    assert.equal(n, 91);
  },
});

Deno.test({
  name: wasmTestName(
    "wasm reuses an encoded node array, and copies foreign sources again each run",
  ),
  ignore,
  async fn() {
    using wasm = new WasmBackend(await wasmKernels());
    const ref = new ReferenceBackend();
    const n = 64, f32 = (v: number[]) => new Uint8Array(new Float32Array(v).buffer);
    const tensor = (buf: ReturnType<typeof wasm.alloc>) => ({
      type: GGMLType.F32,
      ne: [n, 1, 1, 1] as [number, number, number, number],
      nb: [4, 4 * n, 4 * n, 4 * n] as [number, number, number, number],
      data: { buffer: buf, offset: 0 },
    });
    const a = wasm.alloc(4 * n), d = wasm.alloc(4 * n), foreign = ref.alloc(4 * n);
    bufferSet(a, 0, f32(Array.from({ length: n }, (_, i) => i)));
    const nodes = [{
      op: Op.ADD,
      dst: tensor(d),
      src: [tensor(a), { ...tensor(a), data: { buffer: foreign, offset: 0 } }],
      params: new Int32Array(16),
    }];
    for (const k of [1, 2, 3]) {
      bufferSet(foreign, 0, f32(Array.from({ length: n }, () => 100 * k)));
      bufferSet(a, 0, f32(Array.from({ length: n }, (_, i) => i + k)));
      await wasm.compute(nodes);
      const got = new Float32Array(bufferGet(d, 0, 4 * n).buffer);
      assert.deepEqual(Array.from(got), Array.from({ length: n }, (_, i) => i + k + 100 * k));
    }
  },
});

// Copies `src` into fresh module memory; its address.
function put(k: WasmKernels, src: Uint8Array): number {
  const a = k.alloc(src.byteLength);
  k.u8.set(src, a);
  return a;
}

Deno.test({
  name: wasmTestName("wasm row helpers equal the native scalar level for every type"),
  ignore,
  async fn() {
    const k = await wasmKernels();
    const lib = await loadLibrary();
    const ex = k.exports;
    const r = rng(7);
    const n = 512;
    const x = new Float32Array(n).map(() => (r() - 0.5) * 4);
    const y = new Float32Array(n).map(() => r() - 0.5);
    lib.symbols.le_set_simd_level(SimdLevel.SCALAR);
    let checked = 0;
    try {
      for (const [name, t] of Object.entries(GGMLType)) {
        const info = ggmlTypeInfo(t);
        if (!info || n % info.blockSize !== 0) continue;
        const bytes = (n / info.blockSize) * info.typeSize;
        const want = new Uint8Array(bytes);
        if (lib.symbols.le_quantize_row(t, x, want, BigInt(n)) !== 0) continue; // not quantizable
        const xa = put(k, new Uint8Array(x.buffer)), qa = k.alloc(bytes);
        assert.equal(ex.le_quantize_row(t, xa, qa, BigInt(n)), 0, `${name}: ${k.lastError()}`);
        assert.deepEqual(k.u8.slice(qa, qa + bytes), want, `${name}: quantize_row`);
        const dq = new Float32Array(n), da = k.alloc(4 * n);
        assert.equal(lib.symbols.le_dequantize_row(t, want, dq, BigInt(n)), 0);
        assert.equal(ex.le_dequantize_row(t, qa, da, BigInt(n)), 0, name);
        assert.deepEqual(k.u8.slice(da, da + 4 * n), new Uint8Array(dq.buffer), `${name}: dequant`);
        const dot = new Float32Array(1), ya = put(k, new Uint8Array(y.buffer)), oa = k.alloc(4);
        const rc = lib.symbols.le_vec_dot(t, BigInt(n), want, y, dot);
        assert.equal(ex.le_vec_dot(t, BigInt(n), qa, ya, oa), rc, `${name}: vec_dot result code`);
        const got = new Float32Array(k.u8.slice(oa, oa + 4).buffer)[0];
        if (rc === 0) {
          assert.ok(Object.is(got, dot[0]), `${name}: vec_dot wasm ${got} native ${dot[0]}`);
        }
        for (const a of [xa, qa, da, ya, oa]) k.free(a);
        checked++;
      }
    } finally {
      lib.symbols.le_set_simd_level(SimdLevel.BEST);
    }
    assert.ok(checked >= 10, `only ${checked} types checked`);
  },
});

Deno.test({
  name: wasmTestName(
    "wasm buffers survive memory growth; 4 GiB and threads the build cannot run are refused clearly",
  ),
  ignore,
  async fn() {
    const k = await wasmKernels();
    using wasm = new WasmBackend(k);
    const a = wasm.alloc(1024);
    const pattern = new Uint8Array(1024).map((_, i) => i * 7);
    bufferSet(a, 0, pattern);
    const before = k.memoryBytes;
    const big = wasm.alloc(before + (64 << 20)); // must grow the memory
    assert.ok(k.memoryBytes > before, "memory did not grow");
    assert.deepEqual(bufferGet(a, 0, 1024), pattern);
    assert.equal(a.bytes.byteLength, 1024);
    wasm.free(big);
    wasm.free(a);
    assert.throws(() => bufferGet(a, 0, 1), /freed/);
    assert.equal(a.bytes.byteLength, 0);
    assert.throws(
      () => wasm.alloc(WASM32_MAX_BYTES + 1),
      (e: Error) =>
        e instanceof WasmKernelError && e.message.includes(String(WASM32_MAX_BYTES + 1)) &&
        e.message.includes(String(WASM32_MAX_BYTES)),
    );
    // more threads need the workers WasmBackend.create starts, and the threaded build
    assert.throws(() => new WasmBackend(k, { threads: 2 }), /WasmBackend.create/);
    const one = await loadWasmKernels({ source: (await wasmModules()).single });
    await assert.rejects(
      () => WasmBackend.create({ kernels: one, threads: 2 }),
      /threads 2: .*llm_edge\.wasm is the single-threaded WebAssembly build; use threads: 1/,
    );
    await assert.rejects(() => WasmBackend.create({ kernels: k, threads: 0 }), /1\.\.64/);
  },
});

Deno.test({
  name: wasmTestName(
    "wasm threads: contexts at once each hold their own workers, which serve later ones when freed",
  ),
  ignore,
  async fn() {
    const k = await wasmKernels();
    const parked = () => (k.exports as unknown as { le_wasm_workers(): number }).le_wasm_workers();
    const c = CASES.find((x) => x.name === "mul_mat 8 N=7")!;
    const before = parked();
    let want: Uint8Array;
    {
      using one = new WasmBackend(k);
      want = await run(one, c);
    }
    {
      const [a, b] = await Promise.all([
        WasmBackend.create({ kernels: k, threads: 2 }),
        WasmBackend.create({ kernels: k, threads: 3 }),
      ]);
      using _a = a, _b = b;
      assert.ok(parked() >= 3, `${parked()} workers parked for 1 + 2 threads`);
      assert.deepEqual(await run(a, c), want);
      assert.deepEqual(await run(b, c), want);
    }
    const pool = parked();
    {
      using again = await WasmBackend.create({ kernels: k, threads: 3 });
      assert.deepEqual(await run(again, c), want);
    }
    assert.equal(parked(), pool, "freed workers were not reused");
    assert.ok(pool >= before);
  },
});

Deno.test({
  name: wasmTestName("a model file too big for wasm32 is refused before reading, with both sizes"),
  ignore,
  async fn() {
    const k = await wasmKernels();
    const path = await Deno.makeTempFile({ suffix: ".gguf" });
    try {
      const size = WASM32_MAX_BYTES + (1 << 20);
      await Deno.truncate(path, size); // sparse: nothing is written
      await assert.rejects(
        () => readFileIntoWasm(path, { kernels: k }),
        (e: Error) =>
          e instanceof WasmKernelError && e.message.includes(`${size} bytes`) &&
          e.message.includes(String(WASM32_MAX_BYTES)),
      );
    } finally {
      await Deno.remove(path);
    }
  },
});
