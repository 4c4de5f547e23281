// Kernel tests: every op x supported type on the CPU backend against the
// float64 reference backend, bit-identical across 1/2/3 threads, and within
// tolerance at every SIMD level this CPU has.
import assert from "node:assert/strict";
import { f32Bits, Op } from "../lib/graph/ops.ts";
import { GGMLType, ggmlTypeInfo } from "../lib/ggml/types.ts";
import { ReferenceBackend } from "../lib/backend/reference.ts";
import { CpuBackend } from "../lib/backend/cpu.ts";
import { f32ToFp16, fp16ToF32 } from "../lib/ggml/half.ts";
import { DEQUANT, QUANT_REF, quantizeQ8_0Act } from "../lib/ggml/ref_quants.ts";
import { loadLibrary } from "../ffi/library.ts";
import { SimdLevel } from "../ffi/symbols.ts";
import { mulberry32 as rng } from "./rng.ts";
import {
  buildCases,
  type Case,
  emptySpec,
  encodeValues,
  readDst,
  run,
  valuesSpec,
} from "./ops_cases.ts";

const { F32, F16, Q8_0, Q4_0, I32 } = GGMLType;
const lib = await loadLibrary();

const CASES = buildCases();
const ref = new ReferenceBackend();
const REF_OUT = new Map<string, number[]>();
for (const c of CASES) REF_OUT.set(c.name, readDst(c, await run(ref, c)));

function compare(c: Case, got: number[], label: string) {
  const want = REF_OUT.get(c.name)!;
  assert.equal(got.length, want.length);
  for (let i = 0; i < want.length; i++) {
    const err = Math.abs(got[i] - want[i]);
    if (!(err <= c.atol + c.rtol * Math.abs(want[i]))) {
      assert.fail(`${label} ${c.name}: element ${i} cpu ${got[i]} ref ${want[i]} (err ${err})`);
    }
  }
}

Deno.test("reference backend matches hand-computed values", async () => {
  // rms_norm([3, 4]) = [3, 4] / sqrt(12.5 + eps); softmax([0, ln 3]) = [1/4, 3/4]
  const c: Case = {
    name: "hand rms",
    op: Op.RMS_NORM,
    src: [valuesSpec(F32, [2, 1, 1, 1], [3, 4])],
    dst: emptySpec(F32, [2, 1, 1, 1]),
    params: [f32Bits(0)],
    atol: 0,
    rtol: 0,
  };
  const out = readDst(c, await run(ref, c));
  assert.ok(
    Math.abs(out[0] - 3 / Math.sqrt(12.5)) < 1e-7 && Math.abs(out[1] - 4 / Math.sqrt(12.5)) < 1e-7,
  );
  const s: Case = {
    name: "hand sm",
    op: Op.SOFT_MAX,
    src: [valuesSpec(F32, [2, 1, 1, 1], [0, Math.log(3)])],
    dst: emptySpec(F32, [2, 1, 1, 1]),
    params: [f32Bits(1), 0],
    atol: 0,
    rtol: 0,
  };
  const sm = readDst(s, await run(ref, s));
  assert.ok(Math.abs(sm[0] - 0.25) < 1e-7 && Math.abs(sm[1] - 0.75) < 1e-7);
  // rope normal, position 1, n_dims 2: rotation of (1, 0) by 1 radian
  const rc: Case = {
    name: "hand rope",
    op: Op.ROPE,
    src: [valuesSpec(F32, [2, 1, 1, 1], [1, 0]), valuesSpec(I32, [1, 1, 1, 1], [1])],
    dst: emptySpec(F32, [2, 1, 1, 1]),
    params: [2, 0, 4096, f32Bits(10000), f32Bits(1), 0, f32Bits(1), f32Bits(32), f32Bits(1)],
    atol: 0,
    rtol: 0,
  };
  const ro = readDst(rc, await run(ref, rc));
  assert.ok(Math.abs(ro[0] - Math.cos(1)) < 1e-7 && Math.abs(ro[1] - Math.sin(1)) < 1e-7);
});

Deno.test("cpu ops match the reference at every SIMD level", async () => {
  const features = lib.symbols.le_cpu_features();
  const levels: number[] = [SimdLevel.SCALAR];
  if (features & 1) levels.push(SimdLevel.AVX2);
  if (features & 2) levels.push(SimdLevel.AVX512);
  if (features & 4) levels.push(SimdLevel.NEON);
  using cpu = new CpuBackend({ threads: 2, library: lib });
  try {
    for (const level of levels) {
      assert.equal(lib.symbols.le_set_simd_level(level), level);
      for (const c of CASES) compare(c, readDst(c, await run(cpu, c)), `simd ${level}`);
    }
  } finally {
    lib.symbols.le_set_simd_level(SimdLevel.BEST);
  }
});

Deno.test("cpu results are bit-identical for 1, 2 and 3 threads", async () => {
  const outs: Uint8Array[][] = [];
  for (const threads of [1, 2, 3]) {
    using cpu = new CpuBackend({ threads, library: lib });
    const o: Uint8Array[] = [];
    for (const c of CASES) o.push(await run(cpu, c));
    outs.push(o);
  }
  for (let i = 0; i < CASES.length; i++) {
    assert.deepEqual(outs[1][i], outs[0][i], `${CASES[i].name}: 2 threads differ from 1`);
    assert.deepEqual(outs[2][i], outs[0][i], `${CASES[i].name}: 3 threads differ from 1`);
  }
});

Deno.test("quantizers match llama.cpp reference semantics bit-exactly", () => {
  const r = rng(99);
  const n = 33 * 32;
  const xs = new Float32Array(n).map(() => (r() - 0.5) * 10);
  // ties: a block where x/d lands on .5 exactly (amax 127 → d 1)
  for (let j = 0; j < 32; j++) xs[j] = j === 0 ? 127 : (j % 5) - 2.5;
  xs.fill(0, 32, 64); // an all-zero block
  for (const t of [Q8_0, Q4_0]) {
    const info = ggmlTypeInfo(t)!;
    const c = new Uint8Array((n / 32) * info.typeSize);
    assert.equal(lib.symbols.le_quantize_row(t, xs, c, BigInt(n)), 0);
    const ts = new Uint8Array(c.length);
    QUANT_REF.get(t)!(xs, ts);
    assert.deepEqual(c, ts);
    const dq = new Float32Array(n), tdq = new Float64Array(n);
    assert.equal(lib.symbols.le_dequantize_row(t, c, dq, BigInt(n)), 0);
    DEQUANT.get(t)!(new DataView(ts.buffer), 0, tdq, n);
    assert.deepEqual(Array.from(dq), Array.from(tdq));
  }
  // q8_0 reference rounds half away from zero: x[2] = -0.5 → -1, x[3] = 0.5 → 1
  const q = new Uint8Array(34);
  QUANT_REF.get(Q8_0)!(xs.subarray(0, 32), q);
  const qi = new Int8Array(q.buffer);
  assert.deepEqual([qi[2], qi[4], qi[5]], [127, -1, 1]);
  // the activation quantizer rounds half to even: both → 0
  quantizeQ8_0Act(xs.subarray(0, 32), q);
  assert.deepEqual([qi[2], qi[4], qi[5]], [127, 0, 0]);
  // and C's activation path (le_vec_dot with y = e_3) sees the same rounding
  const e = new Float32Array(32);
  e[3] = 1;
  const out = new Float32Array(1);
  const xq = new Uint8Array(34);
  lib.symbols.le_quantize_row(Q8_0, xs.subarray(0, 32), xq, 32n);
  lib.symbols.le_vec_dot(Q8_0, 32n, xq, e, out);
  // x[3] → 1 (scale 1); y = e_3 → 127 with scale f16(1/127)
  assert.equal(out[0], Math.fround(127 * fp16ToF32(f32ToFp16(1 / 127))));
  // unsupported type → error code and message
  assert.equal(
    lib.symbols.le_quantize_row(GGMLType.IQ2_XXS, xs, new Uint8Array(4096), BigInt(256)),
    -1,
  );
  assert.match(lib.lastError(), /unsupported type/);
});

Deno.test("le_vec_dot agrees with a float64 dot of the converted operands", () => {
  const r = rng(5);
  const n = 1056;
  const x = new Float32Array(n).map(() => r() - 0.5), y = new Float32Array(n).map(() => r() - 0.5);
  for (const t of [F32, F16, Q8_0, Q4_0]) {
    const info = ggmlTypeInfo(t)!;
    const xb = encodeValues(t, x);
    const out = new Float32Array(1);
    assert.equal(lib.symbols.le_vec_dot(t, BigInt(n), xb, y, out), 0);
    const xd = new Float64Array(n);
    DEQUANT.get(t)!(new DataView(xb.buffer), 0, xd, n);
    const yd = new Float64Array(n);
    if (info.blockSize > 1) {
      const yq = new Uint8Array((n / 32) * 34);
      quantizeQ8_0Act(y, yq);
      DEQUANT.get(Q8_0)!(new DataView(yq.buffer), 0, yd, n);
    } else {
      for (let i = 0; i < n; i++) yd[i] = t === F16 ? fp16ToF32(f32ToFp16(y[i])) : y[i];
    }
    let s = 0;
    for (let i = 0; i < n; i++) s += xd[i] * yd[i];
    assert.ok(
      Math.abs(out[0] - s) < 1e-5 * Math.max(1, Math.abs(s)),
      `type ${t}: ${out[0]} vs ${s}`,
    );
  }
});

Deno.test("set_rows: an id outside dst's rows is refused before any byte is written", async () => {
  using cpu = new CpuBackend({ threads: 2, library: lib });
  for (const bad of [12, -1]) {
    const c: Case = {
      name: `set_rows id ${bad}`,
      op: Op.SET_ROWS,
      src: [
        valuesSpec(F32, [4, 2, 1, 1], [1, 2, 3, 4, 5, 6, 7, 8]),
        valuesSpec(I32, [2, 1, 1, 1], [
          3,
          bad,
        ]),
      ],
      dst: emptySpec(F16, [4, 12, 1, 1]),
      atol: 0,
      rtol: 0,
    };
    await assert.rejects(() => run(cpu, c), new RegExp(`ids\\[1, 0, 0\\] = ${bad} outside`));
    await assert.rejects(() => run(ref, c), /outside/);
  }
});
