/**
 * Pure-TypeScript conversions for the reference backend: f16/bf16 bit
 * conversions, row dequantizers, and llama.cpp's quantizers (reference and
 * the CPU activation variant), with f32 arithmetic emulated through
 * Math.fround so results are bit-identical to the C kernels.
 *
 * Adding a type: write its dequantizer (and quantizer) here and register it
 * in DEQUANT / QUANT_REF.
 *
 * @module
 */
import { GGMLType } from "../gguf/types.ts";

const f32 = new Float32Array(1);
const u32 = new Uint32Array(f32.buffer);
const fr = Math.fround;

/** The f32 value of IEEE half bits `h`. */
export function fp16ToF32(h: number): number {
  const sign = h & 0x8000 ? -1 : 1;
  const exp = (h >> 10) & 0x1f;
  const man = h & 0x3ff;
  if (exp === 0) return sign * man * 2 ** -24;
  if (exp === 0x1f) return man ? NaN : sign * Infinity;
  return sign * (1 + man / 1024) * 2 ** (exp - 15);
}

/** Half bits of `x` rounded to nearest even (as F16C and ggml do). */
export function f32ToFp16(x: number): number {
  f32[0] = x;
  const w = u32[0];
  const sign = (w >>> 16) & 0x8000;
  const a = w & 0x7fffffff;
  if (a > 0x7f800000) return sign | 0x7e00;
  if (a >= 0x477ff000) return sign | 0x7c00;
  if (a < 0x38800000) {
    // subnormal half: count of 2^-24 units, rounded to nearest even (exact in f64)
    return sign | roundEven(Math.abs(f32[0]) * 2 ** 24);
  }
  const r = a + 0x0fff + ((a >>> 13) & 1);
  return sign | ((r - 0x38000000) >>> 13);
}

/** The f32 value of bf16 bits `h`. */
export function bf16ToF32(h: number): number {
  u32[0] = h << 16;
  return f32[0];
}

/** bf16 bits of `x` rounded to nearest even. */
export function f32ToBf16(x: number): number {
  f32[0] = x;
  const u = u32[0];
  if ((u & 0x7fffffff) > 0x7f800000) return ((u >>> 16) | 64) & 0xffff;
  return ((u + 0x7fff + ((u >>> 16) & 1)) >>> 16) & 0xffff;
}

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

/** Dequantizers by ggml type id. */
export const DEQUANT: ReadonlyMap<number, Dequantizer> = new Map<number, Dequantizer>([
  [GGMLType.F32, dqF32],
  [GGMLType.F16, dqF16],
  [GGMLType.BF16, dqBf16],
  [GGMLType.Q8_0, dqQ8_0],
  [GGMLType.Q4_0, dqQ4_0],
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

/** Reference quantizers (what `le_quantize_row` does) by type id. */
export const QUANT_REF: ReadonlyMap<number, Quantizer> = new Map<number, Quantizer>([
  [GGMLType.Q8_0, quantizeQ8_0],
  [GGMLType.Q4_0, quantizeQ4_0],
]);

/**
 * The type mul_mat converts f32 activations to for weights of `type`
 * (ggml's vec_dot_type), or undefined when the type cannot be multiplied.
 */
export function vecDotType(type: number): number | undefined {
  switch (type) {
    case GGMLType.F32:
    case GGMLType.F16:
    case GGMLType.BF16:
    case GGMLType.Q8_0:
      return type;
    case GGMLType.Q4_0:
      return GGMLType.Q8_0;
    default:
      return undefined;
  }
}

/**
 * Rounds f32 activations `x` in place the way mul_mat's conversion to
 * `vdType` does (f16/bf16 rounding, or q8_0 quantize-then-dequantize).
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
  } else {
    throw new RangeError(`no activation conversion for type ${vdType}`);
  }
}
