/**
 * Half-precision conversions, the one TypeScript copy of ggml's: IEEE f16
 * and bf16 bits to f32 and back. f32 → f16 matches ggml's
 * GGML_FP32_TO_FP16 (ggml_compute_fp32_to_fp16) bit for bit: round to
 * nearest even, subnormal halves included, overflow to ±inf, every NaN to
 * the quiet NaN 0x7e00 with its sign. kernels/src/le_internal.h holds the
 * C twin; the test suite (ggml_half_test) checks both on all 65536 halves.
 *
 * @module
 */

const f32 = new Float32Array(1);
const u32 = new Uint32Array(f32.buffer);

/** The f32 value of IEEE half bits `h` (exact: every half is an f32). */
export function fp16ToF32(h: number): number {
  const sign = h & 0x8000 ? -1 : 1;
  const exp = (h >> 10) & 0x1f;
  const man = h & 0x3ff;
  if (exp === 0) return sign * man * 2 ** -24;
  if (exp === 0x1f) return man ? NaN : sign * Infinity;
  return sign * (1 + man / 1024) * 2 ** (exp - 15);
}

/** Half bits of `x` (first rounded to f32) rounded to nearest even, as ggml does. */
export function f32ToFp16(x: number): number {
  f32[0] = x;
  const w = u32[0];
  const sign = (w >>> 16) & 0x8000;
  const a = w & 0x7fffffff;
  if (a > 0x7f800000) return sign | 0x7e00;
  // 0x477ff000 is 65520, halfway between the largest half and 2^16: it and
  // everything above round to infinity.
  if (a >= 0x477ff000) return sign | 0x7c00;
  if (a < 0x38800000) {
    // A subnormal half counts units of 2^-24. |x| < 2^-14 times 2^24 is below
    // 2^10 and exact in f64, so rounding that count to even rounds x to even.
    const units = Math.abs(f32[0]) * 2 ** 24;
    const r = Math.round(units); // ties go up here; pull odd ties back down
    return sign | (r - units === 0.5 && r % 2 !== 0 ? r - 1 : r);
  }
  // Normal half: drop 13 mantissa bits rounding to even, then rebias the
  // exponent (127 - 15 = 112 = 0x38000000 >> 23); a carry out of the
  // mantissa bumps the exponent, as it should.
  const r = a + 0x0fff + ((a >>> 13) & 1);
  return sign | ((r - 0x38000000) >>> 13);
}

/** The f32 value of bf16 bits `h`. */
export function bf16ToF32(h: number): number {
  u32[0] = h << 16;
  return f32[0];
}

/** bf16 bits of `x` rounded to nearest even; NaN stays NaN (quiet bit set), as ggml does. */
export function f32ToBf16(x: number): number {
  f32[0] = x;
  const u = u32[0];
  if ((u & 0x7fffffff) > 0x7f800000) return ((u >>> 16) | 64) & 0xffff;
  return ((u + 0x7fff + ((u >>> 16) & 1)) >>> 16) & 0xffff;
}
