// Two places where the wasm build needed more than the same C to equal the
// CPU backend bit for bit.
//
// ROPE: the cos/sin cache calls glibc's sinf/cosf algorithm
// (kernels/src/third_party_arm_sincosf.c) instead of wasi-libc's musl, which
// differs by an ulp for ~1% of angles; checked on 2048 positions up to 131071
// (angles through both range reductions, |x| < 120 and above), and on angles
// where that code without its fused multiply-adds differs from glibc (found by
// an exhaustive comparison on the host; the angle enters as freq_scale at
// position 1, x = (1, 0), so the output is (cos, sin) itself).
//
// F16: the wasm F16 dot (kernels/src/wasm_simd.c) sums in its own order and keeps
// dot_f16_scalar's float only through a certificate that sends doubtful dots
// back to the sequential double sum. Random data almost never needs that
// fallback, so these rows are built to need it: a large product that absorbs
// tiny ones in the sequential order (exact sum != sequential sum), products
// that cancel to exactly 0, inf and NaN halves in the weights and in the
// activations, subnormal halves, 65504, and a sum landing next to a float
// midpoint. Every output must equal the CPU backend at its scalar level (the
// sequential order, llama.cpp's x64 ggml_vec_dot_f16) bit for bit (NaN: both
// NaN), through every tile shape (N = 1, 4 and leftover columns; M % 4 rows
// and the vec_dot path) and element tails (K % 8 != 0).
import assert from "node:assert/strict";
import { CpuBackend } from "../lib/backend/cpu.ts";
import { WasmBackend } from "../lib/backend/wasm.ts";
import { GGMLType } from "../lib/ggml/types.ts";
import { Op } from "../lib/graph/ops.ts";
import { loadLibrary } from "../ffi/library.ts";
import { SimdLevel } from "../ffi/symbols.ts";
import { type Case, emptySpec, randomSpec, run, valuesSpec } from "./ops_cases.ts";
import { mulberry32 as rng } from "./rng.ts";
import { WASM_SKIP, wasmKernels, wasmTestName } from "./wasm_util.ts";

const ignore = WASM_SKIP !== undefined;

/** Weight rows (K values each, all exact halves) that stress the summation order. */
function weightRows(K: number, r: () => number): number[][] {
  const rnd = () => Math.fround((r() * 2 - 1) * 0.5);
  const row = (f: (k: number) => number) => Array.from({ length: K }, (_, k) => f(k));
  return [
    // 2^8 * 2^8 absorbs the 2^-20 * 2^-20 products in a sequential double, then cancels
    row((k) => (k === 0 ? 256 : k === K - 1 ? -256 : 2 ** -20)),
    // the same with the large pair in the middle (another lane and accumulator)
    row((k) => (k === 9 ? 256 : k === K - 2 ? -256 : 2 ** -20)),
    // exact cancellation to 0 (pairs +a, -a)
    row((k) => (k % 2 === 0 ? 0.375 : -0.375)),
    // inf, -inf, NaN weights
    row((k) => (k === 5 ? Infinity : rnd())),
    row((k) => (k === K - 1 ? -Infinity : rnd())),
    row((k) => (k === 3 ? NaN : rnd())),
    // subnormal halves and the largest half
    row((k) => (k % 3 === 0 ? 2 ** -24 * (1 + (k % 7)) : k === 1 ? 65504 : rnd() * 2 ** -10)),
    // 1 + 2^-24 (a float midpoint) plus a product of 2^-48 pushing it up
    row((k) => (k === 0 ? 1 : k === 1 ? 2 ** -12 : k === 2 ? 2 ** -24 : 0)),
    ...Array.from({ length: 4 }, () => row(rnd)),
  ];
}

/** Activation columns (f32 values that are exact halves, converted to F16 by mul_mat). */
function activationCols(K: number, N: number, r: () => number): number[][] {
  const cols: number[][] = [
    // pairs with the weight rows above: 2^8 and 2^-20 where they need them
    Array.from({ length: K }, (_, k) => (k === 0 || k === 9 || k >= K - 2 ? 256 : 2 ** -20)),
    Array.from(
      { length: K },
      (_, k) => (k === 0 ? 1 : k === 1 ? 2 ** -12 : k === 2 ? 2 ** -24 : 1),
    ),
    Array.from({ length: K }, (_, k) => (k === 4 ? Infinity : Math.fround(r() - 0.5))),
    Array.from({ length: K }, (_, k) => (k === K - 1 ? NaN : Math.fround(r() - 0.5))),
  ];
  while (cols.length < N) cols.push(Array.from({ length: K }, () => Math.fround(r() * 2 - 1)));
  return cols.slice(0, N);
}

function sameFloats(got: Uint8Array, want: Uint8Array, name: string): void {
  const g = new Float32Array(got.buffer), w = new Float32Array(want.buffer);
  assert.equal(g.length, w.length, name);
  for (let i = 0; i < w.length; i++) {
    if (Number.isNaN(w[i])) {
      assert.ok(Number.isNaN(g[i]), `${name}: element ${i} wasm ${g[i]} cpu NaN`);
    } else assert.ok(Object.is(g[i], w[i]), `${name}: element ${i} wasm ${g[i]} cpu ${w[i]}`);
  }
}

Deno.test({
  name: wasmTestName(
    "wasm f16 dots equal the cpu scalar level's sequential double sum on rows built to need it",
  ),
  ignore,
  async fn() {
    const lib = await loadLibrary();
    using wasm = new WasmBackend(await wasmKernels());
    using cpu = new CpuBackend({ threads: 1, library: lib });
    const r = rng(19);
    lib.symbols.le_set_simd_level(SimdLevel.SCALAR);
    let n = 0, special = 0;
    try {
      for (const K of [64, 67, 21]) {
        const rows = weightRows(K, r);
        for (const M of [12, 10]) { // 12: three 4-row tiles; 10: two tiles and two single rows
          for (const N of [1, 4, 5]) {
            const w = rows.slice(0, M).flat(), a = activationCols(K, N, r).flat();
            const c: Case = {
              name: `f16 mul_mat K${K} M${M} N${N}`,
              op: Op.MUL_MAT,
              src: [
                valuesSpec(GGMLType.F16, [K, M, 1, 1], w),
                valuesSpec(GGMLType.F32, [K, N, 1, 1], a),
              ],
              dst: emptySpec(GGMLType.F32, [M, N, 1, 1]),
              atol: 0,
              rtol: 0,
            };
            const want = await run(cpu, c);
            sameFloats(await run(wasm, c), want, c.name);
            special += new Float32Array(want.buffer).filter((v) => !Number.isFinite(v)).length;
            n++;
          }
        }
      }
    } finally {
      lib.symbols.le_set_simd_level(SimdLevel.BEST);
    }
    assert.equal(n, 18);
    assert.ok(special > 0, "no inf/NaN output: the special rows did not reach the dot");
  },
});

Deno.test({
  name: wasmTestName("wasm rope equals the cpu backend bit for bit on 2048 positions up to 131071"),
  ignore,
  async fn() {
    const lib = await loadLibrary();
    using wasm = new WasmBackend(await wasmKernels());
    using cpu = new CpuBackend({ threads: 1, library: lib });
    const r = rng(23), T = 2048, f = (x: number) => new Int32Array(new Float32Array([x]).buffer)[0];
    const pos = Array.from({ length: T }, (_, i) => (i < 256 ? i : Math.floor(r() * 131072)));
    lib.symbols.le_set_simd_level(SimdLevel.SCALAR);
    try {
      for (const mode of [0, 2]) { // NORMAL, NEOX
        const c: Case = {
          name: `rope mode ${mode}`,
          op: Op.ROPE,
          src: [
            randomSpec(GGMLType.F32, [128, 1, T, 1], r),
            valuesSpec(GGMLType.I32, [T, 1, 1, 1], pos),
          ],
          dst: emptySpec(GGMLType.F32, [128, 1, T, 1]),
          params: [128, mode, 4096, f(10000), f(1), f(0), f(1), f(32), f(1)],
          atol: 0,
          rtol: 0,
        };
        sameFloats(await run(wasm, c), await run(cpu, c), c.name);
      }
    } finally {
      lib.symbols.le_set_simd_level(SimdLevel.BEST);
    }
  },
});

Deno.test({
  name: wasmTestName("wasm rope equals the cpu backend where an unfused sinf/cosf would not"),
  ignore,
  async fn() {
    const lib = await loadLibrary();
    using wasm = new WasmBackend(await wasmKernels());
    using cpu = new CpuBackend({ threads: 1, library: lib });
    const f = (x: number) => new Int32Array(new Float32Array([x]).buffer)[0];
    // cosf: 0x1.1475b6p+4 .. 0x1.1475bap+4; sinf: 0x1.ab6152p+5, 0x1.46b80ep+6, 0x1.46ba88p+6
    const bits = [0x418a3adb, 0x418a3adc, 0x418a3add, 0x4255b0a9, 0x42a35c07, 0x42a35d44];
    const angles = bits.map((b) => new Float32Array(new Uint32Array([b]).buffer)[0]);
    lib.symbols.le_set_simd_level(SimdLevel.SCALAR);
    try {
      for (const a of angles) {
        assert.equal(Math.fround(a), a);
        const c: Case = {
          name: `rope angle ${a}`,
          op: Op.ROPE,
          src: [
            valuesSpec(GGMLType.F32, [2, 1, 1, 1], [1, 0]),
            valuesSpec(GGMLType.I32, [1, 1, 1, 1], [1]),
          ],
          dst: emptySpec(GGMLType.F32, [2, 1, 1, 1]),
          params: [2, 0, 4096, f(10000), f(a), f(0), f(1), f(32), f(1)],
          atol: 0,
          rtol: 0,
        };
        const want = await run(cpu, c);
        assert.ok(Math.abs(new Float32Array(want.buffer)[0] - Math.cos(a)) < 1e-6, c.name);
        sameFloats(await run(wasm, c), want, c.name);
      }
    } finally {
      lib.symbols.le_set_simd_level(SimdLevel.BEST);
    }
  },
});
