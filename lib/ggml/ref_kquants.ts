/**
 * Pure-TypeScript dequantizers of the K-quant types (Q2_K..Q6_K, Q8_K), with
 * f32 arithmetic emulated through Math.fround in ggml's operation order so
 * the values are bit-identical to ggml's to_float and the C kernels.
 *
 * @module
 */
import { fp16ToF32 } from "./half.ts";

const fr = Math.fround;
const QK_K = 256;

/** 6-bit scale and min of group j from q4_K/q5_K's 12 packed bytes at `o`. */
function scaleMinK4(v: DataView, o: number, j: number): [number, number] {
  const q = (k: number) => v.getUint8(o + k);
  if (j < 4) return [q(j) & 63, q(j + 4) & 63];
  return [(q(j + 4) & 0xf) | ((q(j - 4) >> 6) << 4), (q(j + 4) >> 4) | ((q(j) >> 6) << 4)];
}

/** Dequantizes n elements of Q2_K at byte `off`. */
export function dqQ2K(v: DataView, off: number, out: Float64Array, n: number): void {
  for (let b = 0; b < n / QK_K; b++) {
    const o = off + 84 * b;
    const d = fp16ToF32(v.getUint16(o + 80, true)), min = fp16ToF32(v.getUint16(o + 82, true));
    for (let e = 0; e < QK_K; e++) {
      const sc = v.getUint8(o + (e >> 4));
      const dl = fr(d * (sc & 0xf)), ml = fr(min * (sc >> 4));
      const q = (v.getUint8(o + 16 + 32 * (e >> 7) + (e & 31)) >> (2 * ((e & 127) >> 5))) & 3;
      out[QK_K * b + e] = fr(fr(dl * q) - ml);
    }
  }
}

/** The 16 signed 6-bit scales of a q3_K block (each minus 32). */
function q3kScales(v: DataView, o: number): Int8Array {
  const sc = new Int8Array(16);
  for (let j = 0; j < 16; j++) {
    const lo = j < 8 ? v.getUint8(o + j) & 0xf : v.getUint8(o + j - 8) >> 4;
    const hi = (v.getUint8(o + 8 + (j % 4)) >> (2 * (j >> 2))) & 3;
    sc[j] = (lo | (hi << 4)) - 32;
  }
  return sc;
}

/** Dequantizes n elements of Q3_K at byte `off`. */
export function dqQ3K(v: DataView, off: number, out: Float64Array, n: number): void {
  for (let b = 0; b < n / QK_K; b++) {
    const o = off + 110 * b;
    const d = fp16ToF32(v.getUint16(o + 108, true));
    const sc = q3kScales(v, o + 96);
    for (let e = 0; e < QK_K; e++) {
      const lo = (v.getUint8(o + 32 + 32 * (e >> 7) + (e & 31)) >> (2 * ((e & 127) >> 5))) & 3;
      const hi = (v.getUint8(o + (e & 31)) >> (e >> 5)) & 1;
      out[QK_K * b + e] = fr(fr(d * sc[e >> 4]) * (lo + 4 * hi - 4));
    }
  }
}

function dqK4(v: DataView, off: number, out: Float64Array, n: number, five: boolean): void {
  const bytes = five ? 176 : 144, qs = five ? 48 : 16;
  for (let b = 0; b < n / QK_K; b++) {
    const o = off + bytes * b;
    const d = fp16ToF32(v.getUint16(o, true)), min = fp16ToF32(v.getUint16(o + 2, true));
    for (let g = 0; g < 8; g++) {
      const [sc, m] = scaleMinK4(v, o + 4, g);
      const dl = fr(d * sc), ml = fr(min * m);
      for (let l = 0; l < 32; l++) {
        const byte = v.getUint8(o + qs + 32 * (g >> 1) + l);
        let q = g & 1 ? byte >> 4 : byte & 0xf;
        if (five) q |= ((v.getUint8(o + 16 + l) >> g) & 1) << 4;
        out[QK_K * b + 32 * g + l] = fr(fr(dl * q) - ml);
      }
    }
  }
}

/** Dequantizes n elements of Q4_K at byte `off`. */
export function dqQ4K(v: DataView, off: number, out: Float64Array, n: number): void {
  dqK4(v, off, out, n, false);
}

/** Dequantizes n elements of Q5_K at byte `off`. */
export function dqQ5K(v: DataView, off: number, out: Float64Array, n: number): void {
  dqK4(v, off, out, n, true);
}

/** Dequantizes n elements of Q6_K at byte `off`. */
export function dqQ6K(v: DataView, off: number, out: Float64Array, n: number): void {
  for (let b = 0; b < n / QK_K; b++) {
    const o = off + 210 * b;
    const d = fp16ToF32(v.getUint16(o + 208, true));
    for (let e = 0; e < QK_K; e++) {
      const h = e >> 7, k = (e & 127) >> 5, l = e & 31;
      const byte = v.getUint8(o + 64 * h + l + 32 * (k & 1));
      const lo = k >= 2 ? byte >> 4 : byte & 0xf;
      const hi = (v.getUint8(o + 128 + 32 * h + l) >> (2 * k)) & 3;
      const sc = v.getInt8(o + 192 + (e >> 4));
      out[QK_K * b + e] = fr(fr(d * sc) * ((lo | (hi << 4)) - 32));
    }
  }
}

/** Dequantizes n elements of Q8_K (f32 scale) at byte `off`. */
export function dqQ8K(v: DataView, off: number, out: Float64Array, n: number): void {
  for (let b = 0; b < n / QK_K; b++) {
    const o = off + 292 * b;
    const d = v.getFloat32(o, true);
    for (let j = 0; j < QK_K; j++) out[QK_K * b + j] = fr(d * v.getInt8(o + 4 + j));
  }
}

function nearestInt(x: number): number {
  // ggml's magic-number round: ties to even on the f32 value
  const r = Math.round(x);
  return r - x === 0.5 && r % 2 !== 0 ? r - 1 : r;
}

/**
 * ggml's quantize_row_q8_K (reference and CPU path alike): the K-quants'
 * activation type, with f32 scale -max/127 and per-16 code sums.
 */
export function quantizeQ8K(x: ArrayLike<number>, out: Uint8Array): void {
  const v = new DataView(out.buffer, out.byteOffset, out.byteLength);
  for (let b = 0; b < x.length / QK_K; b++) {
    const o = 292 * b;
    let max = 0, amax = 0;
    for (let j = 0; j < QK_K; j++) {
      const e = fr(x[QK_K * b + j]);
      if (Math.abs(e) > amax) {
        amax = Math.abs(e);
        max = e;
      }
    }
    if (amax === 0) {
      out.fill(0, o, o + 292);
      continue;
    }
    const iscale = fr(-127 / max);
    for (let j = 0; j < QK_K; j++) {
      v.setInt8(o + 4 + j, Math.min(127, nearestInt(fr(iscale * fr(x[QK_K * b + j])))));
    }
    for (let g = 0; g < 16; g++) {
      let s = 0;
      for (let j = 0; j < 16; j++) s += v.getInt8(o + 4 + 16 * g + j);
      v.setInt16(o + 260 + 2 * g, s, true);
    }
    v.setFloat32(o, fr(1 / iscale), true);
  }
}
