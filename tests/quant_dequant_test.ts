/**
 * The quantized types against ggml itself: reference quantizers byte-exact
 * (C and, for the legacy types, TS), dequantization bit-exact (C, TS, ggml's
 * to_float) on every tensor of llama.cpp's tolstoy-6m files, and dot products
 * within test-quantize-fns' tolerances, the scalar level bit-identical with
 * llama.cpp's x64 build and the AVX2 and AVX-512 levels agreeing.
 */
import assert from "node:assert/strict";
import { loadLibrary } from "../ffi/library.ts";
import { SimdLevel } from "../ffi/symbols.ts";
import { openGGUF } from "../lib/gguf/mod.ts";
import { GGMLType, ggmlTypeInfo, ggmlTypeName } from "../lib/ggml/types.ts";
import { DEQUANT, QUANT_REF } from "../lib/ggml/ref_quants.ts";
import { loadOracleQuant } from "./oracle/oracle_quant.ts";
import { llamaQuantized } from "./quant_util.ts";

const lib = await loadLibrary();
const T = GGMLType;
const WEIGHT_TYPES = [
  T.Q8_0,
  T.Q4_0,
  T.Q4_1,
  T.Q5_0,
  T.Q5_1,
  T.Q2_K,
  T.Q3_K,
  T.Q4_K,
  T.Q5_K,
  T.Q6_K,
];

function rng(seed: number) {
  return () => (seed = (seed * 1103515245 + 12345) >>> 0) / 2 ** 32;
}
const bytesOf = (t: number, n: number) =>
  (n / ggmlTypeInfo(t)!.blockSize) * ggmlTypeInfo(t)!.typeSize;

Deno.test("reference quantizers are byte-exact with ggml_quantize_chunk", async () => {
  const oq = await loadOracleQuant();
  const r = rng(7), n = 256 * 32;
  // mixed magnitudes, a zero super-block and a constant one exercise the edge paths
  const x = new Float32Array(n).map((_, i) =>
    i < 256 ? 0 : i < 512 ? 0.25 : (r() - 0.5) * (i % 7 === 0 ? 4 : 1)
  );
  for (const t of WEIGHT_TYPES) {
    const want = new Uint8Array(bytesOf(t, n)), got = new Uint8Array(want.length);
    oq.quantize(t, x, want, n / 256, 256);
    assert.equal(lib.symbols.le_quantize_row(t, x, got, BigInt(n)), 0);
    assert.deepEqual(got, want, `C ${ggmlTypeName(t)}`);
    const q = QUANT_REF.get(t);
    if (q) {
      const ts = new Uint8Array(want.length);
      q(x, ts);
      assert.deepEqual(ts, want, `TS ${ggmlTypeName(t)}`);
    }
  }
});

const bits = (a: Float32Array) => new Uint32Array(a.buffer, a.byteOffset, a.length);

Deno.test("dequantization is bit-exact with ggml on every tensor of llama.cpp's files", async () => {
  const oq = await loadOracleQuant();
  const seen = new Set<number>();
  for (
    const preset of ["Q8_0", "Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q2_K", "Q3_K_M", "Q4_K_M"] as const
  ) {
    using f = await openGGUF(await llamaQuantized(preset));
    for (const t of f.header.tensors) {
      if (ggmlTypeInfo(t.type)!.blockSize === 1) continue;
      seen.add(t.type);
      const src = f.tensorBytes(t.name).slice();
      const n = src.length / ggmlTypeInfo(t.type)!.typeSize * ggmlTypeInfo(t.type)!.blockSize;
      const want = oq.toFloat(t.type, src, n);
      const c = new Float32Array(n);
      assert.equal(lib.symbols.le_dequantize_row(t.type, src, c, BigInt(n)), 0);
      assert.deepEqual(bits(c), bits(want), `${preset} ${t.name} C`);
      const ts = new Float64Array(n);
      DEQUANT.get(t.type)!(new DataView(src.buffer), 0, ts, n);
      assert.deepEqual(bits(Float32Array.from(ts)), bits(want), `${preset} ${t.name} TS`);
    }
  }
  for (const t of [T.Q4_1, T.Q5_0, T.Q5_1, T.Q2_K, T.Q3_K, T.Q4_K, T.Q5_K, T.Q6_K]) {
    assert.ok(seen.has(t), `${ggmlTypeName(t)} covered`);
  }
});

Deno.test("vec_dot: tolerances; scalar level = llama.cpp x64; AVX2 = AVX-512", async () => {
  // test-quantize-fns: data 0.1 + a*cos(i + offset), 4096 elements,
  // |dot - float dot| / n < 0.02 (0.04 for q2_K and q3_K)
  const n = 4096;
  const gen = (off: number) =>
    new Float32Array(n).map((_, i) => Math.fround(0.1 + 2 * Math.cos(i + off)));
  const a = gen(0), b = gen(1);
  let ref = 0;
  for (let i = 0; i < n; i++) ref += a[i] * b[i];
  // Rows for the exactness checks: the cos data and random rows over six
  // decades of scale (multi-super-block chains, both signs of the min terms).
  const r = rng(11);
  const rows: [Float32Array, Float32Array][] = [[a, b]];
  for (let k = 0; k < 6; k++) {
    const len = 256 * (1 + (k % 4)) * (k < 3 ? 1 : 4);
    const sa = 10 ** (k - 3), sb = 10 ** (2 - k);
    rows.push([
      new Float32Array(len).map(() => (r() - 0.3) * sa),
      new Float32Array(len).map(() => (r() - 0.5) * sb * (r() < 0.05 ? 8 : 1)),
    ]);
  }
  const simd: number[] = [];
  const feats = lib.symbols.le_cpu_features();
  if (feats & 1) simd.push(SimdLevel.AVX2);
  if (feats & 2) simd.push(SimdLevel.AVX512);
  const oq = await loadOracleQuant();
  const dot = (level: number, t: number, q: Uint8Array, y: Float32Array) => {
    assert.equal(lib.symbols.le_set_simd_level(level), level);
    const o = new Float32Array(1);
    assert.equal(lib.symbols.le_vec_dot(t, BigInt(y.length), q, y, o), 0);
    return o[0];
  };
  let x64Checked = 0;
  try {
    for (const t of WEIGHT_TYPES) {
      const tol = t === T.Q2_K || t === T.Q3_K ? 0.04 : 0.02;
      for (const [ri, [x, y]] of rows.entries()) {
        const q = new Uint8Array(bytesOf(t, x.length));
        lib.symbols.le_quantize_row(t, x, q, BigInt(x.length));
        // The scalar level follows llama.cpp's x64 build (ggml's generic C
        // vec_dots and reference activation quantizers, kernels/PARITY.md
        // §14): bit-identical with that build's own vec_dot.
        const s = dot(SimdLevel.SCALAR, t, q, y);
        const x64 = Deno.build.arch === "x86_64" ? oq.variantVecDot("x64", t, q, y) : null;
        if (x64 !== null) {
          assert.equal(s, x64, `${ggmlTypeName(t)} row ${ri}: scalar ${s} vs x64 ${x64}`);
          x64Checked++;
        }
        const out = [s, ...simd.map((level) => dot(level, t, q, y))];
        if (ri === 0) {
          for (const v of out) {
            assert.ok(Math.abs(v - ref) / n < tol, `${ggmlTypeName(t)}: ${v} vs ${ref}`);
          }
        }
        // AVX2 and AVX-512 follow the same llama.cpp orders: K-quants (exact
        // integers per super-block, same float chains) agree exactly.
        const simdOut = out.slice(1);
        for (const v of simdOut) {
          const same = ggmlTypeInfo(t)!.blockSize === 256 ? 0 : 1e-5 * Math.abs(simdOut[0]);
          assert.ok(Math.abs(v - simdOut[0]) <= same, `${ggmlTypeName(t)} levels ${out}`);
        }
      }
    }
  } finally {
    lib.symbols.le_set_simd_level(SimdLevel.BEST);
  }
  if (Deno.build.arch === "x86_64") {
    assert.equal(x64Checked, WEIGHT_TYPES.length * rows.length, "x64 oracle reachable");
  }
});

Deno.test("Q8_K quantizer: the vector form gives the scalar form's bytes, NaN, infinities and ties included", () => {
  // llama.cpp's x86 quantize_row_q8_K is its reference; ours runs it eight
  // lanes at a time at the x86 levels: the bytes must not change.
  const feats = lib.symbols.le_cpu_features();
  const levels: number[] = [SimdLevel.SCALAR, ...(feats & 1 ? [SimdLevel.AVX2] : [])];
  if (feats & 2) levels.push(SimdLevel.AVX512);
  const n = 256 * 64, x = new Float32Array(n);
  let a = 12345;
  const r = () => (a = (Math.imul(a, 1664525) + 1013904223) >>> 0) / 2 ** 32;
  for (let i = 0; i < n; i++) x[i] = (r() - 0.5) * 10 ** (r() * 8 - 4);
  x.fill(0, 256, 512); // an all-zero block
  [x[600], x[700], x[800], x[900]] = [3, -3, -3, 3]; // the first of tied magnitudes is the max
  [x[1029], x[1287], x[1545], x[1795]] = [NaN, Infinity, -Infinity, 1e-40];
  for (let i = 2048; i < 2304; i++) x[i] = (i % 2 ? 1 : -1) * 0.5;
  const bytes = (level: number) => {
    assert.equal(lib.symbols.le_set_simd_level(level), level);
    const y = new Uint8Array(292 * (n / 256));
    assert.equal(lib.symbols.le_quantize_row(GGMLType.Q8_K, x, y, BigInt(n)), 0);
    return y;
  };
  try {
    const want = bytes(SimdLevel.SCALAR);
    for (const level of levels.slice(1)) assert.deepEqual(bytes(level), want, `level ${level}`);
  } finally {
    lib.symbols.le_set_simd_level(SimdLevel.BEST);
  }
});
