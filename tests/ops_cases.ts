// The op cases of the kernel tests (every op x supported type, small random
// shapes, with tolerances against the float64 reference backend), shared by
// tests/ops_test.ts (CPU backend) and tests/wasm_ops_test.ts (WebAssembly).
import { f32Bits, Op, RopeMode } from "../lib/graph/ops.ts";
import { GGMLType, ggmlTypeInfo } from "../lib/ggml/types.ts";
import type { Backend, Dims, ExecNode, ResolvedTensor } from "../lib/backend/types.ts";
import { f32ToBf16, f32ToFp16, fp16ToF32 } from "../lib/ggml/half.ts";
import { DEQUANT, QUANT_REF } from "../lib/ggml/ref_quants.ts";
import { mulberry32 as rng } from "./rng.ts";

const { F32, F16, BF16, Q8_0, Q4_0, I32 } = GGMLType;

/** A tensor spec: bytes to upload plus layout; `view` lets nb/offset differ from contiguous. */
export interface Spec {
  type: number;
  ne: Dims;
  nb: Dims;
  offset: number;
  bytes: Uint8Array; // the whole buffer content
}

export function contiguousNb(type: number, ne: Dims): Dims {
  const info = ggmlTypeInfo(type)!;
  const nb0 = info.typeSize;
  const nb1 = (ne[0] / info.blockSize) * info.typeSize;
  return [nb0, nb1, nb1 * ne[1], nb1 * ne[1] * ne[2]];
}

export function encodeValues(type: number, vals: ArrayLike<number>): Uint8Array {
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

export function randomSpec(type: number, ne: Dims, r: () => number, scale = 1): Spec {
  const n = ne[0] * ne[1] * ne[2] * ne[3];
  const vals = Array.from({ length: n }, () => (r() * 2 - 1) * scale);
  return { type, ne, nb: contiguousNb(type, ne), offset: 0, bytes: encodeValues(type, vals) };
}

export function valuesSpec(type: number, ne: Dims, vals: ArrayLike<number>): Spec {
  return { type, ne, nb: contiguousNb(type, ne), offset: 0, bytes: encodeValues(type, vals) };
}

export function emptySpec(type: number, ne: Dims): Spec {
  const nb = contiguousNb(type, ne);
  return { type, ne, nb, offset: 0, bytes: new Uint8Array(nb[3] * ne[3]) };
}

export interface Case {
  name: string;
  op: number;
  dst: Spec;
  src: Spec[];
  params?: number[];
  /** |cpu - ref| <= atol + rtol*|ref| (per element) */
  atol: number;
  rtol: number;
}

export function upload(b: Backend, s: Spec): ResolvedTensor {
  const buf = b.alloc(s.bytes.length);
  buf.bytes.set(s.bytes);
  return { type: s.type, ne: s.ne, nb: s.nb, data: { buffer: buf, offset: s.offset } };
}

/** Runs a case; returns the dst buffer's bytes (a copy). */
export async function run(b: Backend, c: Case): Promise<Uint8Array> {
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
export function readDst(c: Case, bytes: Uint8Array): number[] {
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

export function buildCases(): Case[] {
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
  // set_rows (the KV stores): rows scattered into a dst whose other rows keep
  // their bytes; ids broadcast over dim 2; one element per row (transposed V);
  // a strided dst view with a quantized type.
  {
    const ids = valuesSpec(I32, [5, 1, 1, 1], [7, 0, 11, 3, 4]);
    for (const d of [F32, F16, BF16, Q8_0, Q4_0]) {
      cases.push({
        name: `set_rows F32 -> ${d}`,
        op: Op.SET_ROWS,
        src: [randomSpec(F32, [64, 5, 2, 1], r), ids],
        dst: randomSpec(d, [64, 12, 2, 1], r),
        atol: d === Q4_0 ? 0.15 : d === Q8_0 ? 0.01 : d === F32 ? 0 : 0.004,
        rtol: 0,
      });
    }
    cases.push({
      name: "set_rows one element per row, ids per plane",
      op: Op.SET_ROWS,
      src: [
        randomSpec(F32, [1, 6, 2, 1], r),
        valuesSpec(I32, [6, 2, 1, 1], [
          39,
          1,
          20,
          21,
          0,
          5,
          2,
          3,
          4,
          38,
          6,
          7,
        ]),
      ],
      dst: randomSpec(F16, [1, 40, 2, 1], r),
      atol: 0.001,
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
  // (Last, so the cases above keep their random inputs.)
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
  return cases;
}
