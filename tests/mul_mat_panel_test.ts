/**
 * MUL_MAT against ggml's own, one CPU variant at a time: our kernels at the
 * SIMD level that follows each variant must give its bits for every output,
 * whatever path computes them. The shapes aim at the AVX2 panels
 * (kernels/src/sgemm_avx2.c: F16/F32 weights in tinyBLAS<8> order with
 * 1x8 and 3x4 register tiles, Q8_0 in its vec_dot order 8 columns at a
 * time): N = 2..17 columns (every partial column group), rows below and
 * above 1024 (where the F16 tiles change shape), attention-like broadcast
 * (4 weight matrices for 12 column matrices), and shapes llama.cpp keeps
 * off tinyBLAS (M % 4 != 0, K % 8 != 0) or sends to vec_dot (N = 1), also
 * the one-column products of decode attention over grouped KV heads and
 * heads whose dots leave elements to a serial double sum.
 */
import assert from "node:assert/strict";
import { loadLibrary } from "../ffi/library.ts";
import { SimdLevel } from "../ffi/symbols.ts";
import { CpuBackend } from "../lib/backend/cpu.ts";
import type { Backend, Dims, ExecNode, ResolvedTensor } from "../lib/backend/types.ts";
import { f32ToFp16 } from "../lib/ggml/half.ts";
import { Op } from "../lib/graph/ops.ts";
import { GGMLType } from "../lib/ggml/types.ts";
import { loadOracle, variantUnavailable } from "./oracle/oracle.ts";
import { loadOracleMulMat, type MulMatShape } from "./oracle/oracle_mul_mat.ts";
import { mulberry32 as rng } from "./rng.ts";

const lib = await loadLibrary();
const oracleLevel = (await loadOracle()).cpu.simdLevel;
const om = await loadOracleMulMat();

/** Variants whose operation order one of our SIMD levels follows (tests/oracle/oracle.ts variantLevel). */
const VARIANTS = [
  { variant: "icelake", level: SimdLevel.AVX512, name: "AVX512" },
  { variant: "haswell", level: SimdLevel.AVX2, name: "AVX2" },
  { variant: "x64", level: SimdLevel.SCALAR, name: "SCALAR" },
] as const;

const { F32, F16, Q8_0 } = GGMLType;
const shape = (type: number, k: number, m: number, n: number, ne2a = 1, ne2 = ne2a) => ({
  type,
  k,
  m,
  n,
  ne2a,
  ne2,
});
const SHAPES: MulMatShape[] = [
  ...[2, 3, 5, 8, 9, 16, 17].map((n) => shape(F16, 768, 100, n)),
  shape(F16, 2048, 52, 8),
  shape(F16, 1032, 24, 11),
  shape(F16, 64, 256, 8, 4, 12), // KQ: head dim 64, 4 KV heads, 12 query heads
  shape(F16, 1280, 64, 8, 4, 12), // KQV
  shape(F16, 40, 10, 3), // M % 4 != 0: vec_dot
  shape(F16, 36, 12, 4), // K % 8 != 0: vec_dot
  shape(F16, 768, 64, 1), // one column: vec_dot
  // Decode attention over grouped KV heads (one column per query head): four
  // query heads per K row (le_f16_rows: 16 rows at AVX-512, 8 at AVX2), vec_dot's bits.
  shape(F16, 64, 256, 1, 4, 16), // KQ: 4 query heads per KV head
  shape(F16, 1280, 64, 1, 2, 16), // KQV: 8 per KV head, K % 64 != 0 (leftovers)
  shape(F16, 100, 24, 1, 1, 8), // one KV head, K % 64 != 0
  // Dots that leave elements to vec_dot's serial double sum (K % 64 != 0 at
  // AVX-512) go 16 rows at a time with those sums lane-parallel
  // (le_f16_rows): heads of 32, partial row groups, K below one chunk.
  shape(F16, 32, 37, 1, 4, 8), // KQ: heads of 32, 2 query heads per KV head
  shape(F16, 200, 32, 1, 2, 8), // KQV: 4 per KV head, 8 leftovers after 3 chunks
  shape(F16, 264, 32, 1, 4, 8), // KQV: 2 per KV head (read once for both), 8 leftovers
  shape(F16, 7, 21, 1, 3, 3), // one query head per KV head, K < 16
  ...[2, 8, 13].map((n) => shape(F32, 512, 64, n)),
  shape(F32, 1536, 36, 6, 2, 4),
  ...[2, 4, 8, 9, 16, 17].map((n) => shape(Q8_0, 768, 72, n)),
  shape(Q8_0, 2048, 40, 8),
  shape(Q8_0, 4096, 16, 5), // more blocks than one scale-product pass
  shape(Q8_0, 64, 96, 8, 4, 12),
  shape(Q8_0, 64, 96, 5, 4, 12), // odd columns per matrix: the column pairs of the lane terms
  shape(Q8_0, 256, 20, 1),
];

/** Random weights of `s.type` (Q8_0 through our reference quantizer, llama.cpp's) and f32 columns. */
function inputs(s: MulMatShape, seed: number): { a: Uint8Array; b: Float32Array } {
  const r = rng(seed);
  // Mostly small values, a few large and tiny ones (f16 rounding, scales over decades).
  const v = () => {
    const x = (r() - 0.5) * 2, p = r();
    return p < 0.02 ? x * 300 : p < 0.04 ? x * 1e-5 : x;
  };
  const w = Float32Array.from({ length: s.k * s.m * s.ne2a }, v);
  let a: Uint8Array;
  if (s.type === F32) a = new Uint8Array(w.buffer);
  else if (s.type === F16) a = new Uint8Array(Uint16Array.from(w, f32ToFp16).buffer);
  else {
    a = new Uint8Array((w.length / 32) * 34);
    assert.equal(lib.symbols.le_quantize_row(Q8_0, w, a, BigInt(w.length)), 0);
  }
  return { a, b: Float32Array.from({ length: s.k * s.n * s.ne2 }, v) };
}

function tensor(b: Backend, type: number, ne: Dims, esize: number, bytes: Uint8Array) {
  const buf = b.alloc(bytes.byteLength);
  buf.bytes.set(bytes);
  const row = (ne[0] * esize) / (type === Q8_0 ? 32 : 1);
  const nb: Dims = [type === Q8_0 ? 34 : esize, row, row * ne[1], row * ne[1] * ne[2]];
  return { type, ne, nb, data: { buffer: buf, offset: 0 } } as ResolvedTensor;
}

/** Our MUL_MAT of the same inputs on the CPU backend (threads as given). */
async function ours(
  s: MulMatShape,
  a: Uint8Array,
  b: Float32Array,
  threads: number,
): Promise<Float32Array> {
  using cpu = new CpuBackend({ threads, library: lib });
  const esize = s.type === F32 ? 4 : s.type === F16 ? 2 : 34;
  const ta = tensor(cpu, s.type, [s.k, s.m, s.ne2a, 1], esize, a);
  const tb = tensor(cpu, F32, [s.k, s.n, s.ne2, 1], 4, new Uint8Array(b.buffer));
  const out = new Float32Array(s.m * s.n * s.ne2);
  const td = tensor(cpu, F32, [s.m, s.n, s.ne2, 1], 4, new Uint8Array(out.byteLength));
  const node = {
    op: Op.MUL_MAT as ExecNode["op"],
    dst: td,
    src: [ta, tb],
    params: new Int32Array(16),
    name: "mul_mat",
  } as ExecNode;
  await cpu.compute([node]);
  out.set(new Float32Array(td.data.buffer.bytes.slice(0, out.byteLength).buffer));
  for (const t of [ta, tb, td]) cpu.free(t.data.buffer);
  return out;
}

const TYPE_NAME: Record<number, string> = { [F32]: "f32", [F16]: "f16", [Q8_0]: "q8_0" };

for (const { variant, level, name } of VARIANTS) {
  const why = await variantUnavailable(variant, level, lib);
  Deno.test({
    name: `mul_mat: our ${name} kernels equal llama.cpp's ${variant} variant bit for bit ` +
      `(f16, f32, q8_0 weights; 1 to 17 columns; 1 and 3 threads)` +
      (why ? ` [skipped: ${why}]` : ""),
    ignore: why !== "",
    fn: async () => {
      try {
        for (const [i, s] of SHAPES.entries()) {
          const { a, b } = inputs(s, 100 + i);
          const want = om.mulMat(variant, s, a, b);
          assert.ok(want, `${variant} cannot be loaded`);
          assert.equal(lib.symbols.le_set_simd_level(level), level);
          for (const threads of [1, 3]) {
            const got = await ours(s, a, b, threads);
            const gw = new Uint32Array(got.buffer), ww = new Uint32Array(want.buffer);
            const bad = gw.findIndex((x, j) => x !== ww[j]);
            const label = `${TYPE_NAME[s.type]} K ${s.k} M ${s.m} N ${s.n} ` +
              `(${s.ne2a} -> ${s.ne2} matrices), ${threads} threads`;
            assert.equal(
              bad,
              -1,
              `${label}: output ${bad} (row ${bad % s.m}, column ${Math.floor(bad / s.m) % s.n}) ` +
                `ours ${got[bad]}, llama.cpp ${want[bad]}`,
            );
          }
        }
      } finally {
        lib.symbols.le_set_simd_level(oracleLevel);
      }
    },
  });
}
