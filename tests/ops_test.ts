// Kernel tests: every op x supported type on the CPU backend against the
// float64 reference backend, bit-identical across 1/2/3 threads, and within
// tolerance at every SIMD level this CPU has.
import assert from "node:assert/strict";
import { f32Bits, Op, RopeMode } from "../lib/graph/ops.ts";
import { GGMLType, ggmlTypeInfo } from "../lib/ggml/types.ts";
import type { Backend, Dims, ExecNode, ResolvedTensor } from "../lib/backend/types.ts";
import { ReferenceBackend } from "../lib/backend/reference.ts";
import { CpuBackend } from "../lib/backend/cpu.ts";
import { f32ToBf16, f32ToFp16, fp16ToF32 } from "../lib/ggml/half.ts";
import { DEQUANT, QUANT_REF, quantizeQ8_0Act } from "../lib/ggml/ref_quants.ts";
import { loadLibrary } from "../ffi/library.ts";
import { SimdLevel } from "../ffi/symbols.ts";
import { mulberry32 as rng } from "./rng.ts";

const { F32, F16, BF16, Q8_0, Q4_0, I32 } = GGMLType;
const lib = await loadLibrary();

/** A tensor spec: bytes to upload plus layout; `view` lets nb/offset differ from contiguous. */
interface Spec {
  type: number;
  ne: Dims;
  nb: Dims;
  offset: number;
  bytes: Uint8Array; // the whole buffer content
}

function contiguousNb(type: number, ne: Dims): Dims {
  const info = ggmlTypeInfo(type)!;
  const nb0 = info.typeSize;
  const nb1 = (ne[0] / info.blockSize) * info.typeSize;
  return [nb0, nb1, nb1 * ne[1], nb1 * ne[1] * ne[2]];
}

function encodeValues(type: number, vals: ArrayLike<number>): Uint8Array {
  const info = ggmlTypeInfo(type)!;
  const out = new Uint8Array((vals.length / info.blockSize) * info.typeSize);
  const v = new DataView(out.buffer);
  if (type === F32) vals.length && new Float32Array(out.buffer).set(vals);
  else if (type === F16) {
    for (let i = 0; i < vals.length; i++) v.setUint16(2 * i, f32ToFp16(vals[i]), true);
  } else if (type === BF16) {
    for (let i = 0; i < vals.length; i++) v.setUint16(2 * i, f32ToBf16(vals[i]), true);
  } else if (type === I32) new Int32Array(out.buffer).set(vals);
  else QUANT_REF.get(type)!(vals, out);
  return out;
}

function randomSpec(type: number, ne: Dims, r: () => number, scale = 1): Spec {
  const n = ne[0] * ne[1] * ne[2] * ne[3];
  const vals = Array.from({ length: n }, () => (r() * 2 - 1) * scale);
  return { type, ne, nb: contiguousNb(type, ne), offset: 0, bytes: encodeValues(type, vals) };
}

function valuesSpec(type: number, ne: Dims, vals: ArrayLike<number>): Spec {
  return { type, ne, nb: contiguousNb(type, ne), offset: 0, bytes: encodeValues(type, vals) };
}

function emptySpec(type: number, ne: Dims): Spec {
  const nb = contiguousNb(type, ne);
  return { type, ne, nb, offset: 0, bytes: new Uint8Array(nb[3] * ne[3]) };
}

interface Case {
  name: string;
  op: number;
  dst: Spec;
  src: Spec[];
  params?: number[];
  /** |cpu - ref| <= atol + rtol*|ref| (per element) */
  atol: number;
  rtol: number;
}

function upload(b: Backend, s: Spec): ResolvedTensor {
  const buf = b.alloc(s.bytes.length);
  buf.bytes.set(s.bytes);
  return { type: s.type, ne: s.ne, nb: s.nb, data: { buffer: buf, offset: s.offset } };
}

/** Runs a case; returns the dst buffer's bytes (a copy). */
async function run(b: Backend, c: Case): Promise<Uint8Array> {
  const dst = upload(b, c.dst);
  const src = c.src.map((s) => upload(b, s));
  const params = new Int32Array(16);
  (c.params ?? []).forEach((p, i) => (params[i] = p));
  const node: ExecNode = { op: c.op as ExecNode["op"], dst, src, params, name: c.name };
  await b.compute([node]);
  const out = dst.data.buffer.bytes.slice();
  b.free(dst.data.buffer);
  src.forEach((s) => b.free(s.data.buffer));
  return out;
}

/** The dst elements a case writes, as numbers (dequantized for quant dst). */
function readDst(c: Case, bytes: Uint8Array): number[] {
  const s = c.dst, info = ggmlTypeInfo(s.type)!, v = new DataView(bytes.buffer);
  const out: number[] = [];
  const row = new Float64Array(s.ne[0]);
  for (let i3 = 0; i3 < s.ne[3]; i3++) {
    for (let i2 = 0; i2 < s.ne[2]; i2++) {
      for (let i1 = 0; i1 < s.ne[1]; i1++) {
        const o = s.offset + i1 * s.nb[1] + i2 * s.nb[2] + i3 * s.nb[3];
        if (info.blockSize > 1) {
          DEQUANT.get(s.type)!(v, o, row, s.ne[0]);
          out.push(...row);
        } else {
          for (let i0 = 0; i0 < s.ne[0]; i0++) {
            const e = o + i0 * s.nb[0];
            out.push(s.type === F32 ? v.getFloat32(e, true) : fp16ToF32(v.getUint16(e, true)));
          }
        }
      }
    }
  }
  return out;
}

function buildCases(): Case[] {
  const r = rng(1234);
  const cases: Case[] = [];
  const f = f32Bits;
  for (const t of [F32, F16, BF16, Q8_0, Q4_0]) {
    cases.push({
      name: `get_rows ${t}`,
      op: Op.GET_ROWS,
      src: [randomSpec(t, [64, 10, 1, 1], r), valuesSpec(I32, [4, 1, 1, 1], [3, 0, 9, 3])],
      dst: emptySpec(F32, [64, 4, 1, 1]),
      atol: 0,
      rtol: 0,
    });
  }
  for (const op of [Op.RMS_NORM, Op.NORM]) {
    cases.push({
      name: `norm ${op}`,
      op,
      src: [randomSpec(F32, [67, 5, 2, 1], r, 3)],
      dst: emptySpec(F32, [67, 5, 2, 1]),
      params: [f(1e-5)],
      atol: 1e-6,
      rtol: 1e-6,
    });
  }
  for (const op of [Op.MUL, Op.ADD]) {
    for (const b of [[33, 1, 2, 1], [11, 6, 1, 1], [33, 6, 4, 1]] as Dims[]) {
      cases.push({
        name: `binary ${op} ${b}`,
        op,
        src: [randomSpec(F32, [33, 6, 4, 1], r), randomSpec(F32, b, r)],
        dst: emptySpec(F32, [33, 6, 4, 1]),
        atol: 0,
        rtol: 1e-7,
      });
    }
  }
  // mul_mat: K = 33 blocks, odd M, N = 1 and 7, GQA broadcast, permuted src1
  for (const t of [F32, F16, BF16, Q8_0, Q4_0]) {
    for (const N of [1, 7]) {
      cases.push({
        name: `mul_mat ${t} N=${N}`,
        op: Op.MUL_MAT,
        src: [randomSpec(t, [1056, 37, 1, 1], r), randomSpec(F32, [1056, N, 1, 1], r)],
        dst: emptySpec(F32, [37, N, 1, 1]),
        atol: 1e-5,
        rtol: 1e-5,
      });
    }
    // src1 stored [K, heads=4, tokens=3], viewed permuted as [K, tokens, heads]
    const K = 64, heads = 4, toks = 3;
    const s1 = randomSpec(F32, [K, heads, toks, 1], r);
    s1.ne = [K, toks, heads, 1];
    s1.nb = [4, 4 * K * heads, 4 * K, 4 * K * heads * toks];
    cases.push({
      name: `mul_mat gqa permuted ${t}`,
      op: Op.MUL_MAT,
      src: [randomSpec(t, [K, 9, 2, 1], r), s1],
      dst: emptySpec(F32, [9, toks, heads, 1]),
      atol: 1e-5,
      rtol: 1e-5,
    });
  }
  // KV streams as dim 3 (kvUnified false): each stream's queries [K, tokens,
  // heads] against its own keys [K, cells, kvHeads] (a strided view of the
  // cache: stream stride beyond the cells attended), and the mask broadcast
  // over heads, one plane per stream.
  for (const t of [F32, F16]) {
    const K = 32, cells = 11, size = 16, kvHeads = 2, heads = 4, toks = 2, ns = 3;
    const k = randomSpec(t, [K, size, kvHeads, ns], r);
    k.ne = [K, cells, kvHeads, ns];
    const q = randomSpec(F32, [K, toks, heads, ns], r);
    cases.push({
      name: `mul_mat streams ${t}`,
      op: Op.MUL_MAT,
      src: [k, q],
      dst: emptySpec(F32, [cells, toks, heads, ns]),
      atol: 1e-5,
      rtol: 1e-5,
    });
    cases.push({
      name: `soft_max streams mask ${t}`,
      op: Op.SOFT_MAX,
      src: [
        randomSpec(F32, [cells, toks, heads, ns], r, 4),
        randomSpec(t, [cells, toks, 1, ns], r, 2),
      ],
      dst: emptySpec(F32, [cells, toks, heads, ns]),
      params: [f(0.125), f(0)],
      atol: 1e-6,
      rtol: 1e-5,
    });
  }
  for (const t of [F32, F16]) {
    for (const mode of [RopeMode.NORMAL, RopeMode.NEOX]) {
      for (const [nDims, ext, fs] of [[64, 0, 1], [32, 1, 0.25]]) {
        const src = [
          randomSpec(t, [64, 3, 5, 1], r),
          valuesSpec(I32, [5, 1, 1, 1], [0, 1, 7, 30, 99]),
        ];
        if (nDims === 32) {
          src.push(valuesSpec(F32, [16, 1, 1, 1], Array.from({ length: 16 }, (_, i) => 1 + i / 4)));
        }
        cases.push({
          name: `rope ${t} mode ${mode} n_dims ${nDims}`,
          op: Op.ROPE,
          src,
          dst: emptySpec(t, [64, 3, 5, 1]),
          params: [nDims, mode, 4096, f(10000), f(fs), f(ext), f(1), f(32), f(1)],
          atol: t === F16 ? 2e-3 : 2e-5,
          rtol: t === F16 ? 2e-3 : 2e-5,
        });
      }
    }
  }
  // YaRN as mistral3 runs it: its own betas, an attention factor below 1, and
  // an original context that puts the ramp (pairs 4..8) inside the head.
  for (const mode of [RopeMode.NORMAL, RopeMode.NEOX]) {
    cases.push({
      name: `rope yarn mode ${mode}`,
      op: Op.ROPE,
      src: [randomSpec(F32, [32, 2, 5, 1], r), valuesSpec(I32, [5, 1, 1, 1], [0, 1, 37, 99, 160])],
      dst: emptySpec(F32, [32, 2, 5, 1]),
      params: [32, mode, 1024, f(10000), f(0.25), f(1), f(0.87), f(16), f(2)],
      atol: 2e-5,
      rtol: 2e-5,
    });
  }
  for (const mt of [undefined, F32, F16]) {
    for (const maxBias of [0, 8]) {
      const src = [randomSpec(F32, [37, 5, 4, 1], r, 4)];
      if (mt !== undefined) {
        const m = randomSpec(mt, [37, 8, 1, 1], r, 2);
        src.push(m);
      }
      cases.push({
        name: `soft_max mask ${mt} bias ${maxBias}`,
        op: Op.SOFT_MAX,
        src,
        dst: emptySpec(F32, [37, 5, 4, 1]),
        params: [f(0.125), f(maxBias)],
        atol: 1e-6,
        rtol: 1e-5,
      });
    }
  }
  // concat (Mamba: conv states ++ transposed x along dim 0): exact copies,
  // src1 a transposed view; and along dim 1 with packed sources.
  {
    const t = randomSpec(F32, [5, 4, 2, 1], r);
    const bT: Spec = { ...t, ne: [4, 5, 2, 1], nb: [20, 4, 80, 160] };
    cases.push({
      name: "concat dim 0, transposed src1",
      op: Op.CONCAT,
      src: [randomSpec(F32, [3, 5, 2, 1], r), bT],
      dst: emptySpec(F32, [7, 5, 2, 1]),
      params: [0],
      atol: 0,
      rtol: 0,
    });
    cases.push({
      name: "concat dim 1",
      op: Op.CONCAT,
      src: [randomSpec(F32, [6, 2, 3, 1], r), randomSpec(F32, [6, 5, 3, 1], r)],
      dst: emptySpec(F32, [6, 7, 3, 1]),
      params: [1],
      atol: 0,
      rtol: 0,
    });
  }
  for (const op of [Op.SILU, Op.GELU, Op.SCALE]) {
    cases.push({
      name: `unary ${op}`,
      op,
      src: [randomSpec(F32, [45, 3, 1, 1], r, 12)],
      dst: emptySpec(F32, [45, 3, 1, 1]),
      params: op === Op.SCALE ? [f(0.37), f(0.5)] : [],
      atol: op === Op.GELU ? 1e-3 : 1e-6,
      rtol: op === Op.GELU ? 1e-3 : 1e-6,
    });
  }
  cases.push({
    name: "swiglu",
    op: Op.SWIGLU,
    src: [randomSpec(F32, [45, 3, 1, 1], r, 6), randomSpec(F32, [45, 3, 1, 1], r, 6)],
    dst: emptySpec(F32, [45, 3, 1, 1]),
    atol: 1e-6,
    rtol: 1e-6,
  });
  // Scale 12 reaches both ±10 clamps; the one f16 entry where the SIMD levels'
  // gelu forms differ stays within the tolerance.
  cases.push({
    name: "geglu",
    op: Op.GEGLU,
    src: [randomSpec(F32, [45, 3, 1, 1], r, 12), randomSpec(F32, [45, 3, 1, 1], r, 6)],
    dst: emptySpec(F32, [45, 3, 1, 1]),
    atol: 1e-3,
    rtol: 1e-3,
  });
  // cpy into a strided view: dst [16, 5] inside a [32, 6] f16 buffer, offset one row
  const big = emptySpec(F16, [32, 6, 1, 1]);
  cases.push({
    name: "cpy f32->f16 strided dst",
    op: Op.CPY,
    src: [randomSpec(F32, [16, 5, 1, 1], r)],
    dst: { ...big, ne: [16, 5, 1, 1], offset: 64 },
    atol: 0,
    rtol: 0,
  });
  const tr = randomSpec(F32, [6, 9, 1, 1], r); // transposed view [9, 6]
  tr.ne = [9, 6, 1, 1];
  tr.nb = [24, 4, 216, 216];
  cases.push({
    name: "cpy transposed f32->f32",
    op: Op.CPY,
    src: [tr],
    dst: emptySpec(F32, [9, 6, 1, 1]),
    atol: 0,
    rtol: 0,
  });
  cases.push({
    name: "cpy f16->f32 reshape",
    op: Op.CPY,
    src: [randomSpec(F16, [12, 4, 1, 1], r)],
    dst: emptySpec(F32, [6, 8, 1, 1]),
    atol: 0,
    rtol: 0,
  });
  for (const qt of [Q8_0, Q4_0]) {
    cases.push({
      name: `cpy f32->${qt}`,
      op: Op.CPY,
      src: [randomSpec(F32, [96, 3, 1, 1], r)],
      dst: emptySpec(qt, [96, 3, 1, 1]),
      atol: 0,
      rtol: 0,
    });
  }
  return cases;
}

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
