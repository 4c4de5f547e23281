/**
 * The reference backend: every op in plain TypeScript, computed in float64
 * from the same ExecNode description the native backends get. It needs no
 * FFI, reads any buffer through its `bytes`, and is the oracle of the kernel
 * tests. It follows ggml's definitions including where ggml rounds on
 * purpose (activations converted to the weights' vec_dot_type in mul_mat,
 * the f16 gelu table), so differences left against the C kernels are
 * accumulation order only.
 *
 * @module
 */
import { bitsF32, FlashAttnParam, GGMLPrec, Op, opSupported } from "../graph/ops.ts";
import { GGMLType, ggmlTypeInfo, vecDotType } from "../ggml/types.ts";
import type { Backend, BackendBuffer, ExecNode, OpQuery, ResolvedTensor } from "./types.ts";
import { bf16ToF32, f32ToBf16, f32ToFp16, fp16ToF32 } from "../ggml/half.ts";
import { DEQUANT, QUANT_REF, quantizeQ8_0Act, roundActivations } from "../ggml/ref_quants.ts";
import { checkRowIds, validateNode } from "./validate.ts";
import { ssmConv, ssmScan } from "./ref_ssm.ts";
import { HostBuffer, type OwnedBuffer } from "../ggml/memory.ts";

const { F32, F16, BF16, I32, Q8_0 } = GGMLType;

const views = new WeakMap<BackendBuffer, DataView>();
function viewOf(b: BackendBuffer): DataView {
  let v = views.get(b);
  if (!v) {
    v = new DataView(b.bytes.buffer, b.bytes.byteOffset, b.bytes.byteLength);
    views.set(b, v);
  }
  return v;
}

/** Byte offset of row (i1, i2, i3) of `t` inside its buffer. */
const rowOff = (t: ResolvedTensor, i1: number, i2: number, i3: number) =>
  t.data.offset + i1 * t.nb[1] + i2 * t.nb[2] + i3 * t.nb[3];

function getF(t: ResolvedTensor, v: DataView, off: number): number {
  switch (t.type) {
    case F32:
      return v.getFloat32(off, true);
    case F16:
      return fp16ToF32(v.getUint16(off, true));
    case BF16:
      return bf16ToF32(v.getUint16(off, true));
    case I32:
      return v.getInt32(off, true);
  }
  throw new RangeError(`element read of type ${t.type}`);
}

function setF(t: ResolvedTensor, v: DataView, off: number, x: number): void {
  if (t.type === F32) v.setFloat32(off, x, true);
  else if (t.type === F16) v.setUint16(off, f32ToFp16(x), true);
  else if (t.type === BF16) v.setUint16(off, f32ToBf16(x), true);
  else throw new RangeError(`element write of type ${t.type}`);
}

/** Reads row (i1,i2,i3) of `t` (any type, dim-0 stride honored for float types). */
function readRow(t: ResolvedTensor, i1: number, i2: number, i3: number, out: Float64Array): void {
  const v = viewOf(t.data.buffer), off = rowOff(t, i1, i2, i3);
  const info = ggmlTypeInfo(t.type)!;
  if (info.blockSize > 1) DEQUANT.get(t.type)!(v, off, out, t.ne[0]);
  else for (let i = 0; i < t.ne[0]; i++) out[i] = getF(t, v, off + i * t.nb[0]);
}

function writeRow(t: ResolvedTensor, i1: number, i2: number, i3: number, x: Float64Array): void {
  const v = viewOf(t.data.buffer), off = rowOff(t, i1, i2, i3);
  for (let i = 0; i < t.ne[0]; i++) setF(t, v, off + i * t.nb[0], x[i]);
}

function forRows(t: ResolvedTensor, fn: (i1: number, i2: number, i3: number) => void): void {
  for (let i3 = 0; i3 < t.ne[3]; i3++) {
    for (let i2 = 0; i2 < t.ne[2]; i2++) for (let i1 = 0; i1 < t.ne[1]; i1++) fn(i1, i2, i3);
  }
}

const f = (n: ExecNode, slot: number) => bitsF32(n.params[slot]);

function getRows(n: ExecNode): void {
  const [a, ids] = n.src, d = n.dst;
  const iv = viewOf(ids.data.buffer), row = new Float64Array(a.ne[0]);
  forRows(d, (i1, i2, i3) => {
    const id = iv.getInt32(
      ids.data.offset + i1 * ids.nb[0] + i2 * ids.nb[1] + i3 * ids.nb[2],
      true,
    );
    if (id < 0 || id >= a.ne[1]) throw new RangeError(`get_rows: row id ${id} out of range`);
    readRow(a, id, i2, i3, row);
    writeRow(d, i1, i2, i3, row);
  });
}

function unaryRows(n: ExecNode, fn: (x: Float64Array, i1: number, i2: number, i3: number) => void) {
  const a = n.src[0], x = new Float64Array(a.ne[0]);
  forRows(n.dst, (i1, i2, i3) => {
    readRow(a, i1, i2, i3, x);
    fn(x, i1, i2, i3);
    writeRow(n.dst, i1, i2, i3, x);
  });
}

const silu = (x: number) => x / (1 + Math.exp(-x));
// ggml_gelu_f32's float constants.
const GELU_A = Math.fround(0.044715), GELU_C = Math.fround(0.7978845608028654);
/**
 * ggml's f16 gelu table entry for x: ggml_gelu_f32 in float arithmetic, each
 * step rounded as float (1 + tanh cancels, so float rounding shows in the
 * f16 result), with 1 + a*x*x as the fma(a*x, x, 1) of the FMA builds (the
 * C kernels' SIMD levels; the scalar level's x64 form differs at one input).
 * Products of a float and an f16 value are exact in float64, so one fround
 * rounds each step as float does (checked against ggml on every f16 input,
 * the GELU parity test, parity_gelu_test.ts).
 */
function gelu(x: number): number {
  if (x <= -10) return 0;
  if (x >= 10) return x;
  const f = Math.fround;
  const h = fp16ToF32(f32ToFp16(x));
  const t = f(f(GELU_A * h) * h + 1);
  const g = f(f(0.5 * h) * f(1 + f(Math.tanh(f(f(GELU_C * h) * t)))));
  return fp16ToF32(f32ToFp16(g));
}

function binary(n: ExecNode, add: boolean): void {
  const [, b] = n.src, y = new Float64Array(b.ne[0]);
  unaryRows(n, (x, i1, i2, i3) => {
    readRow(b, i1 % b.ne[1], i2 % b.ne[2], i3 % b.ne[3], y);
    for (let i = 0; i < x.length; i++) x[i] = add ? x[i] + y[i % y.length] : x[i] * y[i % y.length];
  });
}

function mulMat(n: ExecNode): void {
  const [a, b] = n.src, d = n.dst, K = a.ne[0];
  const vdt = vecDotType(a.type)!;
  const r2 = b.ne[2] / a.ne[2], r3 = b.ne[3] / a.ne[3];
  const x = new Float64Array(K), out = new Float64Array(a.ne[1]);
  const wcache = new Map<string, Float64Array>();
  forRows(b, (i11, i12, i13) => {
    readRow(b, i11, i12, i13, x);
    roundActivations(vdt, x);
    const i02 = Math.floor(i12 / r2), i03 = Math.floor(i13 / r3);
    for (let i01 = 0; i01 < a.ne[1]; i01++) {
      const key = `${i01},${i02},${i03}`;
      let w = wcache.get(key);
      if (!w) {
        w = new Float64Array(K);
        readRow(a, i01, i02, i03, w);
        wcache.set(key, w);
      }
      let s = 0;
      for (let k = 0; k < K; k++) s += w[k] * x[k];
      out[i01] = s;
    }
    writeRow(d, i11, i12, i13, out);
  });
}

function softMax(n: ExecNode): void {
  const [a, m] = n.src;
  const scale = f(n, 0), maxBias = f(n, 1);
  const nHead = a.ne[2], log2 = 2 ** Math.floor(Math.log2(nHead));
  const m0 = 2 ** (-maxBias / log2), m1 = 2 ** (-(maxBias / 2) / log2);
  const mask = m ? new Float64Array(m.ne[0]) : null;
  unaryRows(n, (x, i1, i2, i3) => {
    const slope = maxBias > 0 ? (i2 < log2 ? m0 ** (i2 + 1) : m1 ** (2 * (i2 - log2) + 1)) : 1;
    if (m && mask) readRow(m, i1, i2 % m.ne[2], i3 % m.ne[3], mask);
    let max = -Infinity;
    for (let i = 0; i < x.length; i++) {
      x[i] = x[i] * scale + (mask ? slope * mask[i] : 0);
      max = Math.max(max, x[i]);
    }
    let sum = 0;
    for (let i = 0; i < x.length; i++) sum += x[i] = Math.exp(x[i] - max);
    for (let i = 0; i < x.length; i++) x[i] /= sum;
  });
}

function rope(n: ExecNode): void {
  const [, pos, ffT] = n.src;
  const p = n.params, nDims = p[0], neox = (p[1] & 2) !== 0, nCtxOrig = p[2];
  const base = f(n, 3), fScale = f(n, 4), ext = f(n, 5), attn = f(n, 6);
  const betaFast = f(n, 7), betaSlow = f(n, 8);
  // ggml_rope_yarn_corr_dims in f32 like ggml: the ramp's ends are floored and
  // ceiled, so a double near an integer could move them by a whole pair.
  const r = Math.fround;
  const corrDim = (nRot: number) =>
    r(
      r(nDims * r(Math.log(r(nCtxOrig / r(r(nRot * 2) * r(Math.PI)))))) /
        r(2 * r(Math.log(base))),
    );
  const c0 = Math.max(0, Math.floor(corrDim(betaFast)));
  const c1 = Math.min(nDims - 1, Math.ceil(corrDim(betaSlow)));
  const pv = viewOf(pos.data.buffer);
  const ff = ffT ? new Float64Array(ffT.ne[0]) : null;
  if (ffT && ff) readRow(ffT, 0, 0, 0, ff);
  unaryRows(n, (x, _i1, i2) => {
    const position = pv.getInt32(pos.data.offset + i2 * pos.nb[0], true);
    const off = neox ? nDims / 2 : 1;
    for (let i0 = 0; i0 < nDims; i0 += 2) {
      const extrap = position * base ** (-i0 / nDims) / (ff ? ff[i0 / 2] : 1);
      const interp = fScale * extrap;
      let theta = interp, mscale = attn;
      if (ext !== 0) {
        const y = (i0 / 2 - c0) / Math.max(0.001, c1 - c0);
        const ramp = (1 - Math.min(1, Math.max(0, y))) * ext;
        theta = interp * (1 - ramp) + extrap * ramp;
        mscale *= 1 + 0.1 * Math.log(1 / fScale);
      }
      const c = Math.cos(theta) * mscale, s = Math.sin(theta) * mscale;
      const ic = neox ? i0 / 2 : i0;
      const x0 = x[ic], x1 = x[ic + off];
      x[ic] = x0 * c - x1 * s;
      x[ic + off] = x0 * s + x1 * c;
    }
  });
}

function cpy(n: ExecNode): void {
  const a = n.src[0], d = n.dst;
  const info = ggmlTypeInfo(d.type)!;
  if (info.blockSize > 1) {
    const x = new Float64Array(a.ne[0]);
    const q = d.type === Q8_0 ? quantizeQ8_0Act : QUANT_REF.get(d.type)!;
    const rowBytes = (a.ne[0] / info.blockSize) * info.typeSize;
    forRows(a, (i1, i2, i3) => {
      readRow(a, i1, i2, i3, x);
      const o = rowOff(d, i1, i2, i3);
      q(x, d.data.buffer.bytes.subarray(o, o + rowBytes));
    });
    return;
  }
  if (ggmlTypeInfo(a.type)!.blockSize > 1) {
    // dequantizing copy: same shape, whole rows
    const x = new Float64Array(a.ne[0]);
    forRows(a, (i1, i2, i3) => {
      readRow(a, i1, i2, i3, x);
      writeRow(d, i1, i2, i3, x);
    });
    return;
  }
  // element-wise in logical row-major order; dst shape may differ
  const sv = viewOf(a.data.buffer), dv = viewOf(d.data.buffer);
  let j = 0;
  for (let i3 = 0; i3 < a.ne[3]; i3++) {
    for (let i2 = 0; i2 < a.ne[2]; i2++) {
      for (let i1 = 0; i1 < a.ne[1]; i1++) {
        for (let i0 = 0; i0 < a.ne[0]; i0++, j++) {
          const v = getF(a, sv, rowOff(a, i1, i2, i3) + i0 * a.nb[0]);
          const j0 = j % d.ne[0], r = Math.floor(j / d.ne[0]);
          const j1 = r % d.ne[1], r2 = Math.floor(r / d.ne[1]);
          const j2 = r2 % d.ne[2], j3 = Math.floor(r2 / d.ne[2]);
          setF(d, dv, rowOff(d, j1, j2, j3) + j0 * d.nb[0], v);
        }
      }
    }
  }
}

/** ggml_set_rows: dst row ids[i, i2 % ne11, i3 % ne12] of plane (i2, i3) = src0 row (i, i2, i3). */
function setRows(n: ExecNode): void {
  checkRowIds(n);
  const [a, ids] = n.src, d = n.dst;
  const iv = viewOf(ids.data.buffer), x = new Float64Array(a.ne[0]);
  const info = ggmlTypeInfo(d.type)!;
  const q = info.blockSize > 1
    ? (d.type === Q8_0 ? quantizeQ8_0Act : QUANT_REF.get(d.type)!)
    : null;
  const rowBytes = (a.ne[0] / info.blockSize) * info.typeSize;
  forRows(a, (i1, i2, i3) => {
    const at = ids.data.offset + i1 * ids.nb[0] + (i2 % ids.ne[1]) * ids.nb[1] +
      (i3 % ids.ne[2]) * ids.nb[2];
    const id = iv.getInt32(at, true);
    readRow(a, i1, i2, i3, x);
    if (!q) return writeRow(d, id, i2, i3, x);
    const o = rowOff(d, id, i2, i3);
    q(x, d.data.buffer.bytes.subarray(o, o + rowBytes));
  });
}

function concat(n: ExecNode): void {
  const [a, b] = n.src, d = n.dst, dim = n.params[0], ea = a.ne[dim];
  const dv = viewOf(d.data.buffer), av = viewOf(a.data.buffer), bv = viewOf(b.data.buffer);
  forRows(d, (i1, i2, i3) => {
    for (let i0 = 0; i0 < d.ne[0]; i0++) {
      const o = [i0, i1, i2, i3];
      const fromA = o[dim] < ea;
      const s = fromA ? a : b;
      if (!fromA) o[dim] -= ea;
      const at = s.data.offset + o[0] * s.nb[0] + o[1] * s.nb[1] + o[2] * s.nb[2] + o[3] * s.nb[3];
      setF(d, dv, rowOff(d, i1, i2, i3) + i0 * d.nb[0], getF(s, fromA ? av : bv, at));
    }
  });
}

/**
 * ggml_flash_attn_ext: per query row, softmax(q·k * scale + slope * mask) v
 * in float64, with q rounded to K's vec_dot type first as ggml does (its
 * online softmax and f16/f32 accumulators are accumulation order only),
 * except at GGML_PREC_F32 over a float K, where our CPU kernel keeps q in
 * f32 (over a Q8_0 K it takes ggml's Q8_0 q for its int8 dots).
 */
function flashAttnExt(n: ExecNode): void {
  const [q, k, v, m] = n.src, d = n.dst;
  const scale = f(n, 0), maxBias = f(n, 1);
  const DK = k.ne[0], DV = v.ne[0], nKv = k.ne[1];
  const nHead = q.ne[2], log2 = 2 ** Math.floor(Math.log2(nHead));
  const m0 = 2 ** (-maxBias / log2), m1 = 2 ** (-(maxBias / 2) / log2);
  const vdt = vecDotType(k.type)!;
  const qr = new Float64Array(DK), kr = new Float64Array(DK), vr = new Float64Array(DV);
  const mask = m ? new Float64Array(m.ne[0]) : null;
  const s = new Float64Array(nKv), out = new Float64Array(DV);
  const dv = viewOf(d.data.buffer);
  forRows(q, (i1, i2, i3) => {
    const slope = maxBias > 0 ? (i2 < log2 ? m0 ** (i2 + 1) : m1 ** (2 * (i2 - log2) + 1)) : 1;
    readRow(q, i1, i2, i3, qr);
    if (n.params[FlashAttnParam.PREC] !== GGMLPrec.F32 || k.type === Q8_0) {
      roundActivations(vdt, qr);
    }
    if (m && mask) readRow(m, i1, i2 % m.ne[2], i3 % m.ne[3], mask);
    const ik2 = Math.floor(i2 / (q.ne[2] / k.ne[2])), ik3 = Math.floor(i3 / (q.ne[3] / k.ne[3]));
    const iv2 = Math.floor(i2 / (q.ne[2] / v.ne[2])), iv3 = Math.floor(i3 / (q.ne[3] / v.ne[3]));
    let max = -Infinity;
    for (let j = 0; j < nKv; j++) {
      const mv = mask ? slope * mask[j] : 0;
      if (mv === -Infinity) {
        s[j] = -Infinity;
        continue;
      }
      readRow(k, j, ik2, ik3, kr);
      let dot = 0;
      for (let c = 0; c < DK; c++) dot += qr[c] * kr[c];
      s[j] = dot * scale + mv;
      max = Math.max(max, s[j]);
    }
    out.fill(0);
    let sum = 0;
    if (max > -Infinity) {
      for (let j = 0; j < nKv; j++) {
        if (s[j] === -Infinity) continue;
        const w = Math.exp(s[j] - max);
        sum += w;
        readRow(v, j, iv2, iv3, vr);
        for (let c = 0; c < DV; c++) out[c] += w * vr[c];
      }
    }
    // dst [Dv, nHead, n, ..]: row (head i2, token i1); a fully masked row is 0
    const off = d.data.offset + i2 * d.nb[1] + i1 * d.nb[2] + i3 * d.nb[3];
    for (let c = 0; c < DV; c++) dv.setFloat32(off + 4 * c, sum > 0 ? out[c] / sum : 0, true);
  });
}

/** Executes one validated node with float64 arithmetic. */
export function referenceCompute(n: ExecNode): void {
  switch (n.op) {
    case Op.NONE:
      return;
    case Op.GET_ROWS:
      return getRows(n);
    case Op.RMS_NORM:
      return unaryRows(n, (x) => {
        let s = 0;
        for (const v of x) s += v * v;
        const sc = 1 / Math.sqrt(s / x.length + f(n, 0));
        for (let i = 0; i < x.length; i++) x[i] *= sc;
      });
    case Op.NORM:
      return unaryRows(n, (x) => {
        let s = 0, v2 = 0;
        for (const v of x) s += v;
        const mean = s / x.length;
        for (const v of x) v2 += (v - mean) ** 2;
        const sc = 1 / Math.sqrt(v2 / x.length + f(n, 0));
        for (let i = 0; i < x.length; i++) x[i] = (x[i] - mean) * sc;
      });
    case Op.MUL:
      return binary(n, false);
    case Op.ADD:
      return binary(n, true);
    case Op.MUL_MAT:
      return mulMat(n);
    case Op.ROPE:
      return rope(n);
    case Op.SOFT_MAX:
      return softMax(n);
    case Op.SILU:
      return unaryRows(n, (x) => x.forEach((v, i) => (x[i] = silu(v))));
    case Op.GELU:
      return unaryRows(n, (x) => x.forEach((v, i) => (x[i] = gelu(v))));
    case Op.SWIGLU: {
      const g = new Float64Array(n.src[1].ne[0]);
      return unaryRows(n, (x, i1, i2, i3) => {
        readRow(n.src[1], i1, i2, i3, g);
        x.forEach((v, i) => (x[i] = silu(v) * g[i]));
      });
    }
    case Op.GEGLU: {
      // ggml_vec_geglu_f32: +0 below the -10 clamp, not 0 * gate (-0 for a negative gate).
      const g = new Float64Array(n.src[1].ne[0]);
      return unaryRows(n, (x, i1, i2, i3) => {
        readRow(n.src[1], i1, i2, i3, g);
        x.forEach((v, i) => (x[i] = v <= -10 ? 0 : gelu(v) * g[i]));
      });
    }
    case Op.SCALE:
      return unaryRows(n, (x) => x.forEach((v, i) => (x[i] = v * f(n, 0) + f(n, 1))));
    case Op.CPY:
      return cpy(n);
    case Op.FLASH_ATTN_EXT:
      return flashAttnExt(n);
    case Op.HADAMARD:
      return unaryRows(n, (x) => {
        // ggml_compute_forward_fwht in float: each sum and difference rounded
        const fr = Math.fround, len0 = x.length, s = fr(1 / fr(Math.sqrt(len0)));
        for (let j = 0; j < len0; j++) x[j] = fr(x[j] * s);
        for (let len = 1; len < len0; len <<= 1) {
          for (let i = 0; i < len0; i += 2 * len) {
            for (let j = 0; j < len; j++) {
              const u = x[i + j], v = x[i + len + j];
              x[i + j] = fr(u + v);
              x[i + len + j] = fr(u - v);
            }
          }
        }
      });
    case Op.SSM_CONV:
      return ssmConv(n);
    case Op.SSM_SCAN:
      return ssmScan(n);
    case Op.CONCAT:
      return concat(n);
    case Op.SET_ROWS:
      return setRows(n);
    default:
      throw new RangeError(`reference backend: op ${n.op} not implemented`);
  }
}

/** A JavaScript-heap buffer of the reference backend (set/get/copy are memcpys). */
export interface ReferenceBuffer extends OwnedBuffer {
  /** Always "ref". */
  readonly backend: "ref";
  /** JavaScript-heap memory has no native address. */
  readonly ptr: null;
}

/** Pure-TypeScript float64 backend (oracle for kernel tests, fallback without FFI). */
export class ReferenceBackend implements Backend {
  /** Backend name. */
  readonly name = "ref";

  /** Whether the op/type combination is implemented. */
  supportsOp(q: OpQuery): boolean {
    return opSupported(q);
  }

  /** A zero-filled ArrayBuffer-backed buffer. */
  alloc(size: number): ReferenceBuffer {
    if (!Number.isSafeInteger(size) || size < 0) throw new RangeError(`alloc: bad size ${size}`);
    return new HostBuffer("ref", new Uint8Array(size)) as ReferenceBuffer;
  }

  /** Nothing to release: the garbage collector owns the memory. */
  free(_buf: BackendBuffer): void {}

  /** Validates every node, then executes them in order. */
  compute(nodes: readonly ExecNode[], signal?: AbortSignal): Promise<void> {
    try {
      nodes.forEach(validateNode);
      for (const n of nodes) {
        signal?.throwIfAborted();
        referenceCompute(n);
      }
      return Promise.resolve();
    } catch (e) {
      return Promise.reject(e);
    }
  }

  /** No native resources. */
  [Symbol.dispose](): void {}
}
