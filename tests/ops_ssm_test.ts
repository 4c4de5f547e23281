/**
 * SSM_CONV and SSM_SCAN (Mamba's convolution and selective scan): our C
 * kernels against ggml's own ops (tests/oracle/oracle_ssm.c) at the SIMD
 * level that follows each llama.cpp CPU variant this CPU runs, bit for bit;
 * the TS reference backend against the scalar level (both follow the x64
 * variant's order), bit for bit; thread counts; and the op rules. Shapes
 * cover Mamba-1 (A [d_state, d_inner], head_dim 1) and Mamba-2 (A scalar
 * per head, groups, K rollback slots), several sequences picked by ids out
 * of a larger state pool, odd sizes around every SIMD group edge, dt above
 * softplus's 20 threshold, and B/C/x as strided views (llama.cpp passes
 * views of one projection).
 */
import assert from "node:assert/strict";
import { loadLibrary } from "../ffi/library.ts";
import { SimdLevel } from "../ffi/symbols.ts";
import { CpuBackend } from "../lib/backend/cpu.ts";
import { ReferenceBackend } from "../lib/backend/reference.ts";
import type { Backend, Dims, ExecNode, ResolvedTensor } from "../lib/backend/types.ts";
import { Graph } from "../lib/graph/graph.ts";
import { Op, opViolation } from "../lib/graph/ops.ts";
import { GGMLType } from "../lib/ggml/types.ts";
import { HostBuffer } from "../lib/ggml/memory.ts";
import { CPU_VARIANTS, loadOracle, variantUnavailable } from "./oracle/oracle.ts";
import { loadOracleSsm, type OracleF32 } from "./oracle/oracle_ssm.ts";
import { mulberry32 as rng } from "./rng.ts";

const { F32, I32 } = GGMLType;
const lib = await loadLibrary();
const oracleLevel = (await loadOracle()).cpu.simdLevel;
const og = await loadOracleSsm();

/** Variants whose order one of our SIMD levels follows (kernels/PARITY.md §12). */
const VARIANTS = CPU_VARIANTS;

/** One source: packed values, its shape, and extra bytes between ne2 slices (a strided view). */
interface Src extends OracleF32 {
  type: number;
  pad?: number;
}

interface Case {
  name: string;
  op: number;
  src: Src[];
  ids?: Int32Array;
  k?: number;
  /** dst elements (1-D for scan, [d_inner, n_t, n_s] for conv) */
  dst: Dims;
}

const rand = (n: number, r: () => number, lo: number, hi: number) =>
  Float32Array.from({ length: n }, () => lo + (hi - lo) * r());
const prod = (ne: readonly number[]) => ne.reduce((a, b) => a * b, 1);

function convCase(dConv: number, dInner: number, nT: number, nS: number, seed: number): Case {
  const r = rng(seed);
  const sxNe = [dConv - 1 + nT, dInner, nS];
  return {
    name: `ssm_conv d_conv ${dConv} d_inner ${dInner} n_t ${nT} n_s ${nS}`,
    op: Op.SSM_CONV,
    src: [
      { type: F32, ne: sxNe, data: rand(prod(sxNe), r, -2, 2), pad: nS > 1 ? 3 : 0 },
      { type: F32, ne: [dConv, dInner], data: rand(dConv * dInner, r, -1, 1) },
    ],
    dst: [dInner, nT, nS, 1],
  };
}

interface ScanShape {
  dState: number;
  headDim: number;
  nHead: number;
  nGroup: number;
  nT: number;
  nS: number;
  nStates: number;
  mamba2: boolean;
  k?: number;
}

function scanCase(o: ScanShape, seed: number): Case {
  const r = rng(seed);
  const { dState, headDim, nHead, nGroup, nT, nS, nStates, mamba2 } = o;
  const k = o.k ?? 1;
  const dt = rand(nHead * nT * nS, r, -4, 4);
  for (let i = 0; i < dt.length; i += 7) dt[i] = 19.5 + r(); // both sides of softplus's 20
  const aNe = mamba2 ? [1, nHead] : [dState, nHead];
  const a = rand(prod(aNe), r, 0, 3).map((v) => -Math.exp(v - 1));
  const bcNe = [dState, nGroup, nT, nS];
  // a permutation of distinct state slots, as llama.cpp's recurrent cache gives
  const slots = Array.from({ length: nStates }, (_, i) => i);
  for (let i = nStates - 1; i > 0; i--) {
    const j = Math.floor(r() * (i + 1));
    [slots[i], slots[j]] = [slots[j], slots[i]];
  }
  const ids = Int32Array.from(slots.slice(0, nS));
  const sNe = [dState, headDim, nHead, nStates];
  const xNe = [headDim, nHead, nT, nS];
  return {
    name: `ssm_scan ${mamba2 ? "mamba-2" : "mamba-1"} d_state ${dState} head_dim ${headDim} ` +
      `n_head ${nHead} n_group ${nGroup} n_t ${nT} n_s ${nS} states ${nStates} K ${k}`,
    op: Op.SSM_SCAN,
    src: [
      { type: F32, ne: sNe, data: rand(prod(sNe), r, -1, 1) },
      { type: F32, ne: xNe, data: rand(prod(xNe), r, -2, 2), pad: 2 },
      { type: F32, ne: [nHead, nT, nS], data: dt },
      { type: F32, ne: aNe, data: a },
      { type: F32, ne: bcNe, data: rand(prod(bcNe), r, -1, 1), pad: 5 },
      { type: F32, ne: bcNe, data: rand(prod(bcNe), r, -1, 1), pad: 1 },
    ],
    ids,
    k,
    dst: [prod(xNe) + k * dState * headDim * nHead * nS, 1, 1, 1],
  };
}

const CASES: Case[] = [
  // d_conv around the AVX2 (8, then 4) and AVX-512 (16, then 8) group edges
  ...[
    [4, 37, 1, 1],
    [4, 64, 5, 3],
    [3, 17, 7, 2],
    [1, 5, 4, 1],
    [5, 9, 2, 2],
    [7, 6, 3, 1],
    [8, 5, 2, 2],
    [
      12,
      4,
      2,
      1,
    ],
    [15, 3, 2, 2],
    [16, 3, 1, 1],
    [23, 5, 3, 2],
    [29, 2, 2, 1],
  ].map(([c, d, t, s], i) => convCase(c, d, t, s, 100 + i)),
  scanCase({
    dState: 16,
    headDim: 1,
    nHead: 24,
    nGroup: 1,
    nT: 1,
    nS: 1,
    nStates: 1,
    mamba2: false,
  }, 1),
  scanCase({
    dState: 16,
    headDim: 1,
    nHead: 37,
    nGroup: 1,
    nT: 5,
    nS: 3,
    nStates: 4,
    mamba2: false,
  }, 2),
  scanCase(
    { dState: 5, headDim: 1, nHead: 7, nGroup: 1, nT: 3, nS: 2, nStates: 2, mamba2: false },
    3,
  ),
  scanCase(
    { dState: 33, headDim: 2, nHead: 9, nGroup: 3, nT: 2, nS: 2, nStates: 3, mamba2: false },
    4,
  ),
  scanCase(
    { dState: 128, headDim: 4, nHead: 6, nGroup: 2, nT: 3, nS: 2, nStates: 3, mamba2: true },
    5,
  ),
  scanCase(
    { dState: 70, headDim: 3, nHead: 4, nGroup: 1, nT: 2, nS: 2, nStates: 2, mamba2: true },
    6,
  ),
  scanCase(
    { dState: 17, headDim: 2, nHead: 3, nGroup: 3, nT: 4, nS: 1, nStates: 1, mamba2: true },
    7,
  ),
  scanCase(
    { dState: 40, headDim: 5, nHead: 2, nGroup: 1, nT: 1, nS: 3, nStates: 5, mamba2: true },
    8,
  ),
  scanCase(
    { dState: 64, headDim: 2, nHead: 4, nGroup: 2, nT: 4, nS: 2, nStates: 2, mamba2: true, k: 3 },
    9,
  ),
  scanCase(
    // K <= n_t: ggml leaves slots past n_t unwritten (llama.cpp reads min(n_t, K))
    { dState: 96, headDim: 2, nHead: 2, nGroup: 1, nT: 5, nS: 2, nStates: 3, mamba2: true, k: 4 },
    10,
  ),
];

/** Strides of a source (ne2 slices `pad` floats apart beyond packed). */
function strides(s: Src): { ne: Dims; nb: Dims; bytes: number } {
  const ne = [0, 1, 2, 3].map((i) => s.ne[i] ?? 1) as Dims;
  const ts = s.type === I32 ? 4 : 4;
  const nb1 = ts * ne[0], nb2 = nb1 * ne[1], nb3 = (nb2 + 4 * (s.pad ?? 0)) * ne[2];
  const nbs: Dims = [ts, nb1, nb2 + 4 * (s.pad ?? 0), nb3];
  return { ne, nb: nbs, bytes: nb3 * ne[3] };
}

function upload(b: Backend, s: Src, fill: Float32Array | Int32Array): ResolvedTensor {
  const { ne, nb, bytes } = strides(s);
  const buf = b.alloc(bytes);
  const v = new DataView(buf.bytes.buffer, buf.bytes.byteOffset, buf.bytes.byteLength);
  let k = 0;
  for (let i3 = 0; i3 < ne[3]; i3++) {
    for (let i2 = 0; i2 < ne[2]; i2++) {
      for (let i1 = 0; i1 < ne[1]; i1++) {
        for (let i0 = 0; i0 < ne[0]; i0++) {
          const o = i0 * nb[0] + i1 * nb[1] + i2 * nb[2] + i3 * nb[3];
          if (s.type === I32) v.setInt32(o, fill[k++], true);
          else v.setFloat32(o, fill[k++], true);
        }
      }
    }
  }
  return { type: s.type, ne, nb, data: { buffer: buf, offset: 0 } };
}

/** Runs a case on `b`; the dst's floats. */
async function ours(b: Backend, c: Case): Promise<Float32Array> {
  const src = c.src.map((s) => upload(b, s, s.data));
  if (c.ids) {
    src.push(upload(b, { type: I32, ne: [c.ids.length], data: new Float32Array() }, c.ids));
  }
  const n = prod(c.dst);
  const dstBuf = b.alloc(4 * n);
  const d = c.dst;
  const dst: ResolvedTensor = {
    type: F32,
    ne: d,
    nb: [4, 4 * d[0], 4 * d[0] * d[1], 4 * d[0] * d[1] * d[2]],
    data: { buffer: dstBuf, offset: 0 },
  };
  const params = new Int32Array(16);
  params[0] = c.k ?? 0;
  const node: ExecNode = { op: c.op as ExecNode["op"], dst, src, params, name: c.name };
  await b.compute([node]);
  const out = new Float32Array(dstBuf.bytes.slice(0, 4 * n).buffer);
  b.free(dstBuf);
  src.forEach((s) => b.free(s.data.buffer));
  return out;
}

function ggml(variant: string, c: Case, threads = 1): Float32Array | null {
  if (c.op === Op.SSM_CONV) return og.conv(variant, c.src[0], c.src[1], threads);
  const [s, x, dt, a, b, cc] = c.src;
  return og.scan(variant, { s, x, dt, a, b, c: cc }, c.ids!, c.k, threads);
}

/** Largest |a - b| and the count of differing bit patterns. */
function diff(a: Float32Array, b: Float32Array): { max: number; bad: number } {
  assert.equal(a.length, b.length);
  const ua = new Uint32Array(a.buffer), ub = new Uint32Array(b.buffer);
  let max = 0, bad = 0;
  for (let i = 0; i < a.length; i++) {
    if (ua[i] !== ub[i]) bad++, max = Math.max(max, Math.abs(a[i] - b[i]));
  }
  return { max, bad };
}

for (const { variant, level, name } of VARIANTS) {
  const why = await variantUnavailable(variant, level, lib);
  Deno.test({
    name: `ssm_conv and ssm_scan: our ${name} kernels equal llama.cpp's ${variant} variant ` +
      `bit for bit (${CASES.length} shapes, 1 and 3 threads)` + (why ? ` [skipped: ${why}]` : ""),
    ignore: why !== "",
    fn: async () => {
      for (const threads of [1, 3]) {
        using cpu = new CpuBackend({ threads, library: lib });
        try {
          assert.equal(lib.symbols.le_set_simd_level(level), level);
          for (const c of CASES) {
            const want = ggml(variant, c, threads);
            assert.ok(want, `${variant} did not load`);
            const { max, bad } = diff(await ours(cpu, c), want);
            console.log(`${name} vs ${variant}, ${threads} threads, ${c.name}: max |diff| ${max}`);
            assert.equal(bad, 0, `${c.name}: ${bad} elements differ (max |diff| ${max})`);
          }
        } finally {
          lib.symbols.le_set_simd_level(oracleLevel);
        }
      }
    },
  });
}

// The reference rounds like the x64 build but takes exp and log from
// float64 (Math.exp, Math.log) rounded to float, which agrees with glibc's
// expf/logf except in rare near-halfway cases: SSM_CONV (no exp) must match
// the scalar level bit for bit, SSM_SCAN to a few float ulps.
Deno.test("ssm ops: the reference backend equals our scalar level (conv bit for bit, scan within ulps), other levels within 1e-5", async () => {
  const ref = new ReferenceBackend();
  const features = lib.symbols.le_cpu_features();
  const levels: number[] = [SimdLevel.SCALAR];
  if (features & 1) levels.push(SimdLevel.AVX2);
  if (features & 2) levels.push(SimdLevel.AVX512);
  using cpu = new CpuBackend({ threads: 2, library: lib });
  let scanBits = 0, scanMax = 0, scanN = 0;
  try {
    for (const c of CASES) {
      const want = await ours(ref, c);
      for (const level of levels) {
        assert.equal(lib.symbols.le_set_simd_level(level), level);
        const got = await ours(cpu, c);
        const { max, bad } = diff(got, want);
        if (level === SimdLevel.SCALAR && c.op === Op.SSM_CONV) {
          assert.equal(bad, 0, `${c.name}: scalar level vs reference, ${bad} differ (max ${max})`);
          continue;
        }
        if (level === SimdLevel.SCALAR) {
          scanBits += bad, scanN += got.length, scanMax = Math.max(scanMax, max);
        }
        const rtol = level === SimdLevel.SCALAR ? 1e-6 : 1e-5;
        for (let i = 0; i < got.length; i++) {
          const tol = rtol * (1 + Math.abs(want[i]));
          assert.ok(
            Math.abs(got[i] - want[i]) <= tol,
            `${c.name} level ${level} [${i}]: ${got[i]} vs ${want[i]}`,
          );
        }
      }
    }
  } finally {
    lib.symbols.le_set_simd_level(oracleLevel);
  }
  console.log(
    `scan, reference vs scalar level: ${scanBits} of ${scanN} differ, max |diff| ${scanMax}`,
  );
});

Deno.test("ssm ops: a state id outside the pool fails the compute with its value", async () => {
  const c = scanCase({
    dState: 4,
    headDim: 1,
    nHead: 3,
    nGroup: 1,
    nT: 1,
    nS: 1,
    nStates: 2,
    mamba2: false,
  }, 11);
  c.ids = Int32Array.of(2);
  using cpu = new CpuBackend({ threads: 1, library: lib });
  await assert.rejects(() => ours(cpu, c), /state id 2 outside 0\.\.1/);
  await assert.rejects(() => ours(new ReferenceBackend(), c), /state id 2 outside 0\.\.1/);
});

Deno.test("ssm ops: graph builder shapes and refusals", () => {
  const g = new Graph();
  const buf = new HostBuffer("ref", new Uint8Array(1 << 16));
  let off = 0;
  const w = (name: string, type: number, ne: number[]) => {
    const t = g.weight(name, type, ne, { buffer: buf, offset: off });
    off += 4 * prod(ne);
    return t;
  };
  // Mamba-1 as llama.cpp builds it: d_conv 4, d_inner 8, d_state 4, 3 tokens, 2 sequences
  const sx = g.input("conv_x", F32, [3 + 3, 8, 2]);
  const conv = g.ssmConv(sx, w("conv1d", F32, [4, 8]));
  assert.deepEqual([...conv.ne], [8, 3, 2, 1]);
  const states = g.input("s", F32, [4, 1, 8, 5]);
  const x = g.reshape(conv, [1, 8, 3, 2]);
  const dt = g.input("dt", F32, [8, 3, 2]);
  const A = w("A", F32, [4, 8]);
  const xdb = g.input("x_db", F32, [2 + 8, 3, 2]);
  const B = g.view(xdb, [4, 1, 3, 2], [16, 40, 120], 8);
  const C = g.view(xdb, [4, 1, 3, 2], [16, 40, 120], 24);
  const ids = g.input("ids", I32, [2]);
  const y = g.ssmScan(states, x, dt, A, B, C, ids);
  assert.deepEqual([...y.ne], [8 * 3 * 2 + 4 * 8 * 2, 1, 1, 1]);
  assert.throws(() => g.ssmScan(states, x, dt, A, B, C, ids, 2), /K = 1 \(Mamba-1\)/);
  assert.throws(() => g.ssmScan(states, x, dt, A, B, C, dt), /types not supported/);
  assert.throws(() => g.ssmConv(sx, w("c8", F32, [8, 8])), /shorter than c/);
  assert.throws(
    () => g.ssmConv(sx, w("c4x9", F32, [4, 9])),
    /sx \[d_conv - 1 \+ n_t, d_inner, n_s\]/,
  );
  const bad = g.input("dt_bad", F32, [8, 2, 2]);
  assert.throws(() => g.ssmScan(states, x, bad, A, B, C, ids), /dt must be \[n_head, n_t, n_s\]/);
  // the rule table itself: a wrong dst size
  const t = (ne: number[], type: number = F32) => {
    const d = [0, 1, 2, 3].map((i) => ne[i] ?? 1) as Dims;
    return { type, ne: d, nb: [4, 4 * d[0], 4 * d[0] * d[1], 4 * d[0] * d[1] * d[2]] as Dims };
  };
  const p = new Int32Array(16);
  p[0] = 1;
  const src = [
    t([4, 1, 8, 5]),
    t([1, 8, 3, 2]),
    t([8, 3, 2]),
    t([4, 8]),
    t([4, 1, 3, 2]),
    t([4, 1, 3, 2]),
    t([2], I32),
  ];
  assert.equal(opViolation(Op.SSM_SCAN, t([112]), src, p), undefined);
  assert.match(opViolation(Op.SSM_SCAN, t([111]), src, p)!, /dst must be contiguous \[112\]/);
  p[0] = 0;
  assert.match(opViolation(Op.SSM_SCAN, t([112]), src, p)!, /K 0 must be >= 1/);
});
