/**
 * ggml's row dequantizers and llama.cpp's quantizers (reference and the CPU
 * activation variant) in pure TypeScript, with f32 arithmetic emulated
 * through Math.fround so results are bit-identical to the C kernels. The
 * reference backend computes with them; model checks, the quantize tool and
 * the tests read rows with them.
 *
 * Adding a type: write its dequantizer (and quantizer) here and register it
 * in DEQUANT / QUANT_REF.
 *
 * @module
 */
import { GGMLType } from "./types.ts";
import { bf16ToF32, f32ToBf16, f32ToFp16, fp16ToF32 } from "./half.ts";
import { dqQ2K, dqQ3K, dqQ4K, dqQ5K, dqQ6K, dqQ8K, quantizeQ8K } from "./ref_kquants.ts";

const fr = Math.fround;

/** Dequantizes `n` elements of `type` starting at byte `off` of `bytes` into `out`. */
export type Dequantizer = (bytes: DataView, off: number, out: Float64Array, n: number) => void;

function dqF32(v: DataView, off: number, out: Float64Array, n: number): void {
  for (let i = 0; i < n; i++) out[i] = v.getFloat32(off + 4 * i, true);
}
function dqF16(v: DataView, off: number, out: Float64Array, n: number): void {
  for (let i = 0; i < n; i++) out[i] = fp16ToF32(v.getUint16(off + 2 * i, true));
}
function dqBf16(v: DataView, off: number, out: Float64Array, n: number): void {
  for (let i = 0; i < n; i++) out[i] = bf16ToF32(v.getUint16(off + 2 * i, true));
}
function dqQ8_0(v: DataView, off: number, out: Float64Array, n: number): void {
  for (let b = 0; b < n / 32; b++) {
    const o = off + 34 * b;
    const d = fp16ToF32(v.getUint16(o, true));
    for (let j = 0; j < 32; j++) out[32 * b + j] = fr(v.getInt8(o + 2 + j) * d);
  }
}
function dqQ4_0(v: DataView, off: number, out: Float64Array, n: number): void {
  for (let b = 0; b < n / 32; b++) {
    const o = off + 18 * b;
    const d = fp16ToF32(v.getUint16(o, true));
    for (let j = 0; j < 16; j++) {
      const q = v.getUint8(o + 2 + j);
      out[32 * b + j] = fr(((q & 0x0f) - 8) * d);
      out[32 * b + j + 16] = fr(((q >> 4) - 8) * d);
    }
  }
}

function dqQ4_1(v: DataView, off: number, out: Float64Array, n: number): void {
  for (let b = 0; b < n / 32; b++) {
    const o = off + 20 * b;
    const d = fp16ToF32(v.getUint16(o, true)), m = fp16ToF32(v.getUint16(o + 2, true));
    for (let j = 0; j < 16; j++) {
      const q = v.getUint8(o + 4 + j);
      out[32 * b + j] = fr(fr((q & 0x0f) * d) + m);
      out[32 * b + j + 16] = fr(fr((q >> 4) * d) + m);
    }
  }
}
/** q5_0/q5_1: nibbles at `qs`, fifth bits as a u32 mask at `qh`; `m` null for q5_0. */
function dq5(v: DataView, o: number, out: Float64Array, at: number, qh: number, qs: number) {
  const d = fp16ToF32(v.getUint16(o, true));
  const m = qh === 4 ? fp16ToF32(v.getUint16(o + 2, true)) : null;
  const h = v.getUint32(o + qh, true);
  for (let j = 0; j < 16; j++) {
    const q = v.getUint8(o + qs + j);
    const x0 = (q & 0x0f) | (((h >>> j) & 1) << 4), x1 = (q >> 4) | (((h >>> (j + 16)) & 1) << 4);
    if (m === null) {
      out[at + j] = fr((x0 - 16) * d);
      out[at + j + 16] = fr((x1 - 16) * d);
    } else {
      out[at + j] = fr(fr(x0 * d) + m);
      out[at + j + 16] = fr(fr(x1 * d) + m);
    }
  }
}
function dqQ5_0(v: DataView, off: number, out: Float64Array, n: number): void {
  for (let b = 0; b < n / 32; b++) dq5(v, off + 22 * b, out, 32 * b, 2, 6);
}
function dqQ5_1(v: DataView, off: number, out: Float64Array, n: number): void {
  for (let b = 0; b < n / 32; b++) dq5(v, off + 24 * b, out, 32 * b, 4, 8);
}
function dqQ8_1(v: DataView, off: number, out: Float64Array, n: number): void {
  for (let b = 0; b < n / 32; b++) {
    const o = off + 36 * b;
    const d = fp16ToF32(v.getUint16(o, true));
    for (let j = 0; j < 32; j++) out[32 * b + j] = fr(v.getInt8(o + 4 + j) * d);
  }
}

/** Dequantizers by ggml type id. */
export const DEQUANT: ReadonlyMap<number, Dequantizer> = new Map<number, Dequantizer>([
  [GGMLType.F32, dqF32],
  [GGMLType.F16, dqF16],
  [GGMLType.BF16, dqBf16],
  [GGMLType.Q8_0, dqQ8_0],
  [GGMLType.Q4_0, dqQ4_0],
  [GGMLType.Q4_1, dqQ4_1],
  [GGMLType.Q5_0, dqQ5_0],
  [GGMLType.Q5_1, dqQ5_1],
  [GGMLType.Q8_1, dqQ8_1],
  [GGMLType.Q2_K, dqQ2K],
  [GGMLType.Q3_K, dqQ3K],
  [GGMLType.Q4_K, dqQ4K],
  [GGMLType.Q5_K, dqQ5K],
  [GGMLType.Q6_K, dqQ6K],
  [GGMLType.Q8_K, dqQ8K],
]);

/** Quantizes `x` (length a multiple of the block size) into `out` bytes. */
export type Quantizer = (x: ArrayLike<number>, out: Uint8Array) => void;

function roundAway(x: number): number {
  return x < 0 ? -Math.floor(-x + 0.5) : Math.floor(x + 0.5);
}
function roundEven(x: number): number {
  const r = Math.round(x); // half up
  return r - x === 0.5 && r % 2 !== 0 ? r - 1 : r;
}

function q8_0(x: ArrayLike<number>, out: Uint8Array, act: boolean): void {
  const v = new DataView(out.buffer, out.byteOffset, out.byteLength);
  for (let b = 0; b < x.length / 32; b++) {
    let amax = 0;
    for (let j = 0; j < 32; j++) amax = Math.max(amax, Math.abs(fr(x[32 * b + j])));
    const d = fr(amax / 127);
    const id = act ? (amax !== 0 ? fr(127 / amax) : 0) : (d !== 0 ? fr(1 / d) : 0);
    v.setUint16(34 * b, f32ToFp16(d), true);
    for (let j = 0; j < 32; j++) {
      const q = fr(fr(x[32 * b + j]) * id);
      v.setInt8(34 * b + 2 + j, act ? roundEven(q) : roundAway(q));
    }
  }
}

/** llama.cpp's quantize_row_q8_0_ref (round half away from zero). */
export function quantizeQ8_0(x: ArrayLike<number>, out: Uint8Array): void {
  q8_0(x, out, false);
}

/**
 * ggml-cpu's activation quantizer for q8_0 on x86 (scale 127/amax, round half
 * to even): what mul_mat applies to src1 for q8_0/q4_0 weights.
 */
export function quantizeQ8_0Act(x: ArrayLike<number>, out: Uint8Array): void {
  q8_0(x, out, true);
}

/** llama.cpp's quantize_row_q4_0_ref. */
export function quantizeQ4_0(x: ArrayLike<number>, out: Uint8Array): void {
  const v = new DataView(out.buffer, out.byteOffset, out.byteLength);
  for (let b = 0; b < x.length / 32; b++) {
    let amax = 0, max = 0;
    for (let j = 0; j < 32; j++) {
      const e = fr(x[32 * b + j]);
      if (amax < Math.abs(e)) {
        amax = Math.abs(e);
        max = e;
      }
    }
    const d = fr(max / -8);
    const id = d !== 0 ? fr(1 / d) : 0;
    v.setUint16(18 * b, f32ToFp16(d), true);
    for (let j = 0; j < 16; j++) {
      const q0 = Math.min(15, Math.trunc(fr(fr(fr(x[32 * b + j]) * id) + 8.5)));
      const q1 = Math.min(15, Math.trunc(fr(fr(fr(x[32 * b + j + 16]) * id) + 8.5)));
      v.setUint8(18 * b + 2 + j, q0 | (q1 << 4));
    }
  }
}

/** Block min and max of 32 values (f32) for the q4_1/q5_1 quantizers. */
function minMax(x: ArrayLike<number>, at: number): [number, number] {
  let min = 3.4028234663852886e38, max = -3.4028234663852886e38;
  for (let j = 0; j < 32; j++) {
    const e = fr(x[at + j]);
    if (e < min) min = e;
    if (e > max) max = e;
  }
  return [min, max];
}

/** llama.cpp's quantize_row_q4_1_ref. */
export function quantizeQ4_1(x: ArrayLike<number>, out: Uint8Array): void {
  const v = new DataView(out.buffer, out.byteOffset, out.byteLength);
  for (let b = 0; b < x.length / 32; b++) {
    const [min, max] = minMax(x, 32 * b);
    const d = fr((max - min) / 15);
    const id = d !== 0 ? fr(1 / d) : 0;
    v.setUint16(20 * b, f32ToFp16(d), true);
    v.setUint16(20 * b + 2, f32ToFp16(min), true);
    const q = (e: number) => Math.min(15, Math.trunc(fr(fr(fr(fr(e) - min) * id) + 0.5)));
    for (let j = 0; j < 16; j++) {
      v.setUint8(20 * b + 4 + j, q(x[32 * b + j]) | (q(x[32 * b + j + 16]) << 4));
    }
  }
}

/** llama.cpp's quantize_row_q5_0_ref. */
export function quantizeQ5_0(x: ArrayLike<number>, out: Uint8Array): void {
  const v = new DataView(out.buffer, out.byteOffset, out.byteLength);
  for (let b = 0; b < x.length / 32; b++) {
    let amax = 0, max = 0;
    for (let j = 0; j < 32; j++) {
      const e = fr(x[32 * b + j]);
      if (amax < Math.abs(e)) {
        amax = Math.abs(e);
        max = e;
      }
    }
    const d = fr(max / -16);
    const id = d !== 0 ? fr(1 / d) : 0;
    v.setUint16(22 * b, f32ToFp16(d), true);
    const q = (e: number) => Math.min(31, Math.trunc(fr(fr(fr(e) * id) + 16.5)));
    let qh = 0;
    for (let j = 0; j < 16; j++) {
      const q0 = q(x[32 * b + j]), q1 = q(x[32 * b + j + 16]);
      v.setUint8(22 * b + 6 + j, (q0 & 0x0f) | ((q1 & 0x0f) << 4));
      qh |= ((q0 >> 4) << j) | ((q1 >> 4) << (j + 16));
    }
    v.setUint32(22 * b + 2, qh >>> 0, true);
  }
}

/** llama.cpp's quantize_row_q5_1_ref. */
export function quantizeQ5_1(x: ArrayLike<number>, out: Uint8Array): void {
  const v = new DataView(out.buffer, out.byteOffset, out.byteLength);
  for (let b = 0; b < x.length / 32; b++) {
    const [min, max] = minMax(x, 32 * b);
    const d = fr((max - min) / 31);
    const id = d !== 0 ? fr(1 / d) : 0;
    v.setUint16(24 * b, f32ToFp16(d), true);
    v.setUint16(24 * b + 2, f32ToFp16(min), true);
    const q = (e: number) => Math.trunc(fr(fr(fr(fr(e) - min) * id) + 0.5)) & 0xff;
    let qh = 0;
    for (let j = 0; j < 16; j++) {
      const q0 = q(x[32 * b + j]), q1 = q(x[32 * b + j + 16]);
      v.setUint8(24 * b + 8 + j, (q0 & 0x0f) | ((q1 & 0x0f) << 4));
      qh |= (((q0 & 0x10) >> 4) << j) | (((q1 & 0x10) >> 4) << (j + 16));
    }
    v.setUint32(24 * b + 4, qh >>> 0, true);
  }
}

/**
 * ggml-cpu's x86 activation quantizer for q8_1 (the vec_dot_type of q4_1 and
 * q5_1): q8_0's rounding plus s = f16(d * sum of the codes).
 */
export function quantizeQ8_1Act(x: ArrayLike<number>, out: Uint8Array): void {
  const v = new DataView(out.buffer, out.byteOffset, out.byteLength);
  for (let b = 0; b < x.length / 32; b++) {
    let amax = 0;
    for (let j = 0; j < 32; j++) amax = Math.max(amax, Math.abs(fr(x[32 * b + j])));
    const d = fr(amax / 127);
    const id = amax !== 0 ? fr(127 / amax) : 0;
    v.setUint16(36 * b, f32ToFp16(d), true);
    let sum = 0;
    for (let j = 0; j < 32; j++) {
      const q = roundEven(fr(fr(x[32 * b + j]) * id));
      v.setInt8(36 * b + 4 + j, q);
      sum += q;
    }
    v.setUint16(36 * b + 2, f32ToFp16(fr(d * sum)), true);
  }
}

/**
 * Reference quantizers (what `le_quantize_row` does) by type id. The
 * K-quants' search-based quantizers exist in C only (kernels/src/q_q*_k.c).
 */
export const QUANT_REF: ReadonlyMap<number, Quantizer> = new Map<number, Quantizer>([
  [GGMLType.Q8_0, quantizeQ8_0],
  [GGMLType.Q4_0, quantizeQ4_0],
  [GGMLType.Q4_1, quantizeQ4_1],
  [GGMLType.Q5_0, quantizeQ5_0],
  [GGMLType.Q5_1, quantizeQ5_1],
  [GGMLType.Q8_K, quantizeQ8K],
]);

/**
 * Rounds f32 activations `x` in place the way mul_mat's conversion to
 * `vdType` does (f16/bf16 rounding, or q8_0/q8_1/q8_K quantize-then-dequantize).
 * For q8_1 the kernels' min term uses the block's rounded s = f16(d*sum)
 * rather than sum(d*q); that rounding (< 2^-11 relative) is not modelled.
 */
export function roundActivations(vdType: number, x: Float64Array): void {
  if (vdType === GGMLType.F32) {
    for (let i = 0; i < x.length; i++) x[i] = fr(x[i]);
  } else if (vdType === GGMLType.F16) {
    for (let i = 0; i < x.length; i++) x[i] = fp16ToF32(f32ToFp16(x[i]));
  } else if (vdType === GGMLType.BF16) {
    for (let i = 0; i < x.length; i++) x[i] = bf16ToF32(f32ToBf16(x[i]));
  } else if (vdType === GGMLType.Q8_0) {
    const q = new Uint8Array((x.length / 32) * 34);
    quantizeQ8_0Act(x, q);
    // keep the integer and scale apart: the kernel multiplies int sums by d
    dqQ8_0(new DataView(q.buffer), 0, x, x.length);
  } else if (vdType === GGMLType.Q8_1) {
    const q = new Uint8Array((x.length / 32) * 36);
    quantizeQ8_1Act(x, q);
    dqQ8_1(new DataView(q.buffer), 0, x, x.length);
  } else if (vdType === GGMLType.Q8_K) {
    const q = new Uint8Array((x.length / 256) * 292);
    quantizeQ8K(x, q);
    dqQ8K(new DataView(q.buffer), 0, x, x.length);
  } else {
    throw new RangeError(`no activation conversion for type ${vdType}`);
  }
}
