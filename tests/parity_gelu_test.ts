/**
 * GELU and GeGLU against ggml's own ops on every f16 input: ggml's CPU gelu
 * is a table lookup (GGML_GELU_FP16) of ggml_gelu_f32 computed in float at
 * startup, compiled with FMA contraction in the haswell and AVX-512
 * variants and without it in x64, and ggml_geglu_split multiplies that
 * table entry by the gate (and writes +0 below the -10 clamp, where a GELU
 * then MUL would give -0 for a negative gate: hence our own GEGLU op). Our C
 * kernels at the SIMD level that follows each variant, and the TS reference
 * backend (which follows the FMA form), must give the same bits.
 */
import assert from "node:assert/strict";
import { loadLibrary } from "../ffi/library.ts";
import { SimdLevel } from "../ffi/symbols.ts";
import { fp16ToF32 } from "../lib/ggml/half.ts";
import { CpuBackend } from "../lib/backend/cpu.ts";
import { ReferenceBackend } from "../lib/backend/reference.ts";
import type { Backend, Dims, ExecNode, ResolvedTensor } from "../lib/backend/types.ts";
import { Op } from "../lib/graph/ops.ts";
import { GGMLType } from "../lib/ggml/types.ts";
import { loadOracle, variantScore, variantUnavailable } from "./oracle/oracle.ts";
import { loadOracleGelu } from "./oracle/oracle_gelu.ts";
import { mulberry32 as rng } from "./rng.ts";

const lib = await loadLibrary();
const oracleLevel = (await loadOracle()).cpu.simdLevel;
const og = await loadOracleGelu();

/** Variants whose operation order one of our SIMD levels follows (tests/oracle/oracle.ts variantLevel). */
const VARIANTS = [
  { variant: "icelake", level: SimdLevel.AVX512, name: "AVX512", fma: true },
  { variant: "haswell", level: SimdLevel.AVX2, name: "AVX2", fma: true },
  { variant: "x64", level: SimdLevel.SCALAR, name: "SCALAR", fma: false },
] as const;

/**
 * Every f16 value (±inf and NaNs included), the f32 midpoints between
 * neighbouring f16 values (the f32→f16 rounding's ties) and their f32
 * neighbours, and the ±10 clamps with their f32 neighbours and far beyond.
 */
function inputs(): Float32Array {
  const xs: number[] = [];
  for (let i = 0; i < 65536; i++) xs.push(fp16ToF32(i));
  const up = (x: number, d: number) => {
    const b = new Float32Array([x]);
    new Int32Array(b.buffer)[0] += d;
    return b[0];
  };
  for (let i = 0; i < 0x7bff; i++) {
    const mid = (fp16ToF32(i) + fp16ToF32(i + 1)) / 2;
    for (const s of [1, -1]) xs.push(s * mid, s * up(mid, 1), s * up(mid, -1));
  }
  for (const s of [1, -1]) {
    for (const x of [10, up(10, 1), up(10, -1), up(10, 2), 9.995, 1e5, 7e4, 3.4e38]) xs.push(s * x);
  }
  return new Float32Array(xs);
}

const X = inputs();
const r = rng(11);
const GATE = X.map(() => (r() - 0.5) * 8);

function tensor(b: Backend, data: Float32Array): ResolvedTensor {
  const buf = b.alloc(data.byteLength);
  new Float32Array(buf.bytes.buffer, buf.bytes.byteOffset, data.length).set(data);
  const n = data.length;
  const ne: Dims = [n, 1, 1, 1], nb: Dims = [4, 4 * n, 4 * n, 4 * n];
  return { type: GGMLType.F32, ne, nb, data: { buffer: buf, offset: 0 } };
}

/** Our GELU(X) and GEGLU(X, GATE) on `b`. */
async function ours(b: Backend): Promise<{ gelu: Float32Array; geglu: Float32Array }> {
  const x = tensor(b, X), g = tensor(b, GATE);
  const y = tensor(b, new Float32Array(X.length)), z = tensor(b, new Float32Array(X.length));
  const node = (op: number, dst: ResolvedTensor, src: ResolvedTensor[], name: string) =>
    ({ op: op as ExecNode["op"], dst, src, params: new Int32Array(16), name }) as ExecNode;
  await b.compute([node(Op.GELU, y, [x], "gelu"), node(Op.GEGLU, z, [x, g], "geglu")]);
  const read = (t: ResolvedTensor) =>
    new Float32Array(t.data.buffer.bytes.slice(0, X.byteLength).buffer);
  const out = { gelu: read(y), geglu: read(z) };
  for (const t of [x, g, y, z]) b.free(t.data.buffer);
  return out;
}

/** Asserts bit identity (any NaN equals any NaN: payloads are not compared). */
function assertSameBits(got: Float32Array, want: Float32Array, label: string): void {
  const a = new Uint32Array(got.buffer), b = new Uint32Array(want.buffer);
  let bad = 0, first = -1;
  for (let i = 0; i < X.length; i++) {
    if (a[i] !== b[i] && !(Number.isNaN(got[i]) && Number.isNaN(want[i]))) {
      bad++;
      if (first < 0) first = i;
    }
  }
  assert.equal(
    bad,
    0,
    `${label}: ${bad} of ${X.length} inputs differ, first x = ${X[first]}: ` +
      `ours ${got[first]}, ggml ${want[first]}`,
  );
}

for (const { variant, level, name } of VARIANTS) {
  const why = await variantUnavailable(variant, level, lib);
  Deno.test({
    name: `gelu and geglu: our ${name} kernels equal llama.cpp's ${variant} variant bit for bit ` +
      `on every f16 input, the f16 rounding ties and the ±10 clamps` +
      (why ? ` [skipped: ${why}]` : ""),
    ignore: why !== "",
    fn: async () => {
      const gelu = og.gelu(variant, X)!, geglu = og.gelu(variant, X, GATE)!;
      assert.ok(gelu && geglu);
      using cpu = new CpuBackend({ threads: 2, library: lib });
      try {
        assert.equal(lib.symbols.le_set_simd_level(level), level);
        const got = await ours(cpu);
        assertSameBits(got.gelu, gelu, `gelu, ${name} vs ${variant}`);
        assertSameBits(got.geglu, geglu, `geglu, ${name} vs ${variant}`);
      } finally {
        lib.symbols.le_set_simd_level(oracleLevel);
      }
    },
  });
}

// The reference backend follows the FMA builds: checked against the first
// of them this CPU runs.
const fmaVariants = [];
for (const v of VARIANTS) if (v.fma && (await variantScore(v.variant)) > 0) fmaVariants.push(v);
const refVariant = fmaVariants[0]?.variant;
Deno.test({
  name:
    `gelu and geglu: the reference backend equals llama.cpp's ${
      refVariant ?? "FMA"
    } variant bit for bit on every f16 input` +
    (refVariant ? "" : " [skipped: this CPU runs no FMA variant]"),
  ignore: !refVariant,
  fn: async () => {
    const got = await ours(new ReferenceBackend());
    assertSameBits(got.gelu, og.gelu(refVariant!, X)!, `reference gelu vs ${refVariant}`);
    assertSameBits(got.geglu, og.gelu(refVariant!, X, GATE)!, `reference geglu vs ${refVariant}`);
  },
});
