// lib/ggml/half.ts, the one TypeScript half-float conversion, against
// ggml's own semantics and against the C kernels: all 65536 halves both
// ways, every rounding boundary between adjacent halves (ties, one f32 ulp
// either side, subnormals included), overflow, signed zeros and NaNs.
//
// The oracle is a line-by-line port of ggml's portable
// ggml_compute_fp32_to_fp16 / ggml_compute_fp16_to_fp32 (ggml-impl.h), the
// branch-free float tricks GGML_FP32_TO_FP16 uses where no F16C exists,
// evaluated in f32 arithmetic (Math.fround after every operation; exact for
// + and * through f64, as 53 >= 2 * 24 + 2).
import assert from "node:assert/strict";
import { bf16ToF32, f32ToBf16, f32ToFp16, fp16ToF32 } from "../lib/ggml/half.ts";
import { GGMLType } from "../lib/ggml/types.ts";
import { loadLibrary } from "../ffi/library.ts";
import { SimdLevel } from "../ffi/symbols.ts";
import { mulberry32 as rng } from "./rng.ts";

const lib = await loadLibrary();
const fr = Math.fround;
const f = new Float32Array(1);
const u = new Uint32Array(f.buffer);
const bits = (x: number) => (f[0] = x, u[0]);
const fromBits = (b: number) => (u[0] = b >>> 0, f[0]);

/** ggml_compute_fp32_to_fp16, ported. */
function ggmlFp32ToFp16(x: number): number {
  const scaleToInf = 2 ** 112, scaleToZero = 2 ** -110;
  let base = fr(fr(Math.abs(fr(x)) * scaleToInf) * scaleToZero);
  const w = bits(x);
  const shl1W = (w + w) >>> 0;
  const sign = (w & 0x80000000) >>> 0;
  let bias = (shl1W & 0xff000000) >>> 0;
  if (bias < 0x71000000) bias = 0x71000000;
  base = fr(fromBits((bias >>> 1) + 0x07800000) + base);
  const b = bits(base);
  const expBits = (b >>> 13) & 0x00007c00;
  const mantissaBits = b & 0x00000fff;
  const nonsign = expBits + mantissaBits;
  return (sign >>> 16) | (shl1W > 0xff000000 ? 0x7e00 : nonsign);
}

/** ggml_compute_fp16_to_fp32, ported. */
function ggmlFp16ToFp32(h: number): number {
  const w = (h << 16) >>> 0;
  const sign = (w & 0x80000000) >>> 0;
  const twoW = (w + w) >>> 0;
  const normalized = fr(fromBits((twoW >>> 4) + (0xe0 << 23)) * 2 ** -112);
  const denormalized = fr(fromBits((twoW >>> 17) | (126 << 23)) - 0.5);
  const result = (sign | (twoW < 1 << 27 ? bits(denormalized) : bits(normalized))) >>> 0;
  return fromBits(result);
}

const isNaNHalf = (h: number) => (h & 0x7c00) === 0x7c00 && (h & 0x3ff) !== 0;

// f32 inputs that probe every rounding decision: for each pair of adjacent
// finite halves, their exact midpoint (a tie) and the f32 values one ulp
// either side of it, with both signs; then overflow, zeros, NaNs and the
// extremes of f32.
function boundaryInputs(): Float32Array {
  const xs: number[] = [];
  for (let h = 0; h < 0x7c00; h++) {
    const mid = fr((fp16ToF32(h) + fp16ToF32(h + 1)) / 2); // exact: 12 significant bits
    const m = bits(mid);
    for (const b of [m - 1, m, m + 1]) xs.push(fromBits(b), fromBits(b | 0x80000000));
  }
  xs.push(0, -0, Infinity, -Infinity, NaN, 65504, 65519, 65520, -65520, 3.4028234663852886e38);
  xs.push(2 ** -24, 2 ** -25, fromBits(bits(2 ** -25) + 1), 3 * 2 ** -25, 2 ** -14 - 2 ** -25);
  xs.push(2 ** -149, 2 ** -126, fromBits(0x7f800001), fromBits(0xffc00000), fromBits(0x7fffffff));
  return new Float32Array(xs);
}

Deno.test("ggml half: all 65536 halves to f32 equal ggml's conversion and the C kernels'", () => {
  const all = new Uint16Array(65536).map((_, i) => i);
  for (const level of [SimdLevel.SCALAR, SimdLevel.BEST]) {
    lib.symbols.le_set_simd_level(level);
    const c = new Float32Array(65536);
    assert.equal(lib.symbols.le_dequantize_row(GGMLType.F16, all, c, 65536n), 0);
    for (let h = 0; h < 65536; h++) {
      const ts = fp16ToF32(h);
      if (isNaNHalf(h)) {
        assert.ok(Number.isNaN(ts) && Number.isNaN(ggmlFp16ToFp32(h)) && Number.isNaN(c[h]));
        continue;
      }
      assert.ok(Object.is(ts, ggmlFp16ToFp32(h)), `h=0x${h.toString(16)}: ${ts}`);
      assert.ok(Object.is(ts, c[h]), `h=0x${h.toString(16)}: C ${c[h]} vs ${ts}`);
    }
  }
  lib.symbols.le_set_simd_level(SimdLevel.BEST);
});

Deno.test("ggml half: every half survives f32 and back; NaNs become ggml's quiet NaN", () => {
  for (let h = 0; h < 65536; h++) {
    const back = f32ToFp16(fp16ToF32(h));
    // a JavaScript NaN carries no sign or payload, so a NaN half comes back
    // as the quiet NaN 0x7e00 (sign as the engine's NaN has it)
    if (isNaNHalf(h)) assert.equal(back & 0x7fff, 0x7e00, `h=0x${h.toString(16)}`);
    else assert.equal(back, h, `h=0x${h.toString(16)}`);
  }
});

Deno.test("ggml half: f32 to half rounds like ggml and the C kernels at every boundary", () => {
  const xs = boundaryInputs();
  const r = rng(11);
  const random = new Float32Array(200_000).map(() => fromBits(Math.floor(r() * 2 ** 32)));
  for (const set of [xs, random]) {
    const ts = set.map(f32ToFp16);
    for (let i = 0; i < set.length; i++) {
      assert.equal(ts[i], ggmlFp32ToFp16(set[i]), `x=${set[i]} (0x${bits(set[i]).toString(16)})`);
    }
    for (const level of [SimdLevel.SCALAR, SimdLevel.BEST]) {
      lib.symbols.le_set_simd_level(level);
      const c = new Uint16Array(set.length);
      assert.equal(lib.symbols.le_quantize_row(GGMLType.F16, set, c, BigInt(set.length)), 0);
      for (let i = 0; i < set.length; i++) {
        // F16C keeps a NaN's payload where ggml's portable code does not;
        // both are NaN, which is all a NaN promises.
        if (Number.isNaN(set[i]) && level !== SimdLevel.SCALAR) assert.ok(isNaNHalf(c[i]));
        else assert.equal(c[i], ts[i], `x=${set[i]} level ${level}`);
      }
    }
  }
  lib.symbols.le_set_simd_level(SimdLevel.BEST);
  // independent facts about IEEE half rounding
  assert.equal(f32ToFp16(65504), 0x7bff);
  assert.equal(f32ToFp16(65520), 0x7c00); // the tie above the largest half overflows
  assert.equal(f32ToFp16(2 ** -25), 0x0000); // tie to even (0)
  assert.equal(f32ToFp16(3 * 2 ** -25), 0x0002); // tie to even (2)
  assert.equal(f32ToFp16(2 ** -14 - 2 ** -25), 0x0400); // subnormal tie rounds up into normals
  assert.equal(f32ToFp16(1 + 2 ** -11), 0x3c00);
  assert.equal(f32ToFp16(-0), 0x8000);
  assert.equal(f32ToFp16(-NaN), 0x7e00 | (bits(-NaN) >>> 16 & 0x8000));
});

Deno.test("ggml half: bf16 both ways matches ggml's rule and the C kernels", () => {
  for (let h = 0; h < 65536; h++) {
    const x = bf16ToF32(h);
    const nan = (h & 0x7f80) === 0x7f80 && (h & 0x7f) !== 0;
    assert.equal(f32ToBf16(x), nan ? h | 64 : h, `bf16 0x${h.toString(16)}`);
  }
  const r = rng(5);
  const xs = new Float32Array(100_000).map(() => fromBits(Math.floor(r() * 2 ** 32)));
  // ties: the low 16 bits exactly 0x8000, with odd and even kept halves
  for (let i = 0; i < 1000; i++) xs[i] = fromBits((Math.floor(r() * 0x7f00) << 16) | 0x8000);
  const c = new Uint16Array(xs.length);
  assert.equal(lib.symbols.le_quantize_row(GGMLType.BF16, xs, c, BigInt(xs.length)), 0);
  for (let i = 0; i < xs.length; i++) {
    const w = bits(xs[i]);
    // GGML_FP32_TO_BF16: NaN → quiet NaN, else round to nearest even
    const want = (w & 0x7fffffff) > 0x7f800000
      ? ((w >>> 16) | 64) & 0xffff
      : ((w + 0x7fff + ((w >>> 16) & 1)) >>> 16) & 0xffff;
    assert.equal(f32ToBf16(xs[i]), want);
    assert.equal(c[i], want, `C bf16 of 0x${w.toString(16)}`);
  }
});
