/**
 * FLASH_ATTN_EXT at the op level: our C kernel against ggml's own
 * ggml_flash_attn_ext (tests/oracle/oracle_fa.c, the variant's graph compute
 * with the same thread count) bit for bit, at the SIMD level that follows
 * each variant this CPU runs, on each of ggml's three CPU paths (one query
 * row at a time: F16 and Q8_0 caches; tiled: >= 64 query rows over F16;
 * split KV: one query row over >= 512 F16 cells, which ggml cuts by thread
 * count), and against the float64 reference backend within tolerance.
 */
import assert from "node:assert/strict";
import { loadLibrary } from "../ffi/library.ts";
import { SimdLevel } from "../ffi/symbols.ts";
import { f32ToFp16 } from "../lib/ggml/half.ts";
import { quantizeQ8_0Act } from "../lib/ggml/ref_quants.ts";
import { CpuBackend } from "../lib/backend/cpu.ts";
import { ReferenceBackend } from "../lib/backend/reference.ts";
import type { Backend, Dims, ExecNode, ResolvedTensor } from "../lib/backend/types.ts";
import { f32Bits, Op } from "../lib/graph/ops.ts";
import { GGMLType, ggmlTypeInfo } from "../lib/ggml/types.ts";
import { CPU_VARIANTS, loadOracle, variantUnavailable } from "./oracle/oracle.ts";
import { loadOracleFlashAttn, type OracleFlashAttnArgs } from "./oracle/oracle_fa.ts";
import { mulberry32 as rng } from "./rng.ts";

const { F32, F16, Q8_0 } = GGMLType;
const lib = await loadLibrary();
const oracleLevel = (await loadOracle()).cpu.simdLevel;
const ofa = await loadOracleFlashAttn();

const VARIANTS = CPU_VARIANTS;

interface FaCase {
  name: string;
  d: number;
  n: number;
  nHead: number;
  nHeadKv: number;
  nKv: number;
  kvType: number;
  mask: "none" | "causal" | "sparse";
  maxBias?: number;
  threads: number;
}

const CASES: FaCase[] = [
  // One query row over F16 cells with heads of 64 and 128: the AVX-512
  // kernel keeps VKQ in registers over blocks of 32 cells (split KV too).
  {
    name: "rows f16, head 128, sparse",
    d: 128,
    n: 2,
    nHead: 2,
    nHeadKv: 1,
    nKv: 150,
    kvType: F16,
    mask: "sparse",
    threads: 2,
  },
  {
    name: "split kv f16, head 64",
    d: 64,
    n: 1,
    nHead: 4,
    nHeadKv: 2,
    nKv: 600,
    kvType: F16,
    mask: "causal",
    threads: 2,
  },
  {
    name: "rows f16",
    d: 32,
    n: 5,
    nHead: 4,
    nHeadKv: 2,
    nKv: 96,
    kvType: F16,
    mask: "causal",
    threads: 2,
  },
  {
    name: "rows q8_0",
    d: 32,
    n: 7,
    nHead: 4,
    nHeadKv: 4,
    nKv: 128,
    kvType: Q8_0,
    mask: "causal",
    threads: 3,
  },
  {
    name: "rows q8_0, 70 tokens",
    d: 64,
    n: 70,
    nHead: 2,
    nHeadKv: 1,
    nKv: 100,
    kvType: Q8_0,
    mask: "sparse",
    threads: 2,
  },
  {
    name: "rows f16, no mask",
    d: 64,
    n: 3,
    nHead: 2,
    nHeadKv: 2,
    nKv: 40,
    kvType: F16,
    mask: "none",
    threads: 1,
  },
  {
    name: "rows f16, alibi",
    d: 32,
    n: 4,
    nHead: 3,
    nHeadKv: 3,
    nKv: 64,
    kvType: F16,
    mask: "causal",
    maxBias: 8,
    threads: 2,
  },
  {
    name: "tiled f16",
    d: 32,
    n: 70,
    nHead: 4,
    nHeadKv: 2,
    nKv: 200,
    kvType: F16,
    mask: "causal",
    threads: 3,
  },
  {
    name: "tiled f16, sparse mask",
    d: 64,
    n: 64,
    nHead: 2,
    nHeadKv: 2,
    nKv: 256,
    kvType: F16,
    mask: "sparse",
    threads: 2,
  },
  // Split KV with four and eight query heads per K head: their dots are
  // taken together by the row kernels (four heads per K row read).
  {
    name: "split kv f16, grouped 4, head 64",
    d: 64,
    n: 1,
    nHead: 8,
    nHeadKv: 2,
    nKv: 700,
    kvType: F16,
    mask: "causal",
    threads: 2,
  },
  {
    name: "split kv f16, grouped 8, head 128",
    d: 128,
    n: 1,
    nHead: 8,
    nHeadKv: 1,
    nKv: 530,
    kvType: F16,
    mask: "sparse",
    threads: 3,
  },
  // Tiled, heads of 64 and 128: at AVX-512 the products take four query
  // rows at a time, and rows left over one at a time.
  {
    name: "tiled f16, head 128, 130 tokens",
    d: 128,
    n: 130,
    nHead: 2,
    nHeadKv: 1,
    nKv: 300,
    kvType: F16,
    mask: "causal",
    threads: 2,
  },
  {
    name: "tiled f16, head 64, 67 tokens, sparse mask",
    d: 64,
    n: 67,
    nHead: 4,
    nHeadKv: 1,
    nKv: 190,
    kvType: F16,
    mask: "sparse",
    threads: 3,
  },
  {
    name: "split kv f16, 4 threads",
    d: 32,
    n: 1,
    nHead: 4,
    nHeadKv: 2,
    nKv: 512,
    kvType: F16,
    mask: "sparse",
    threads: 4,
  },
  {
    name: "split kv f16, 3 threads",
    d: 64,
    n: 1,
    nHead: 2,
    nHeadKv: 1,
    nKv: 768,
    kvType: F16,
    mask: "causal",
    threads: 3,
  },
  {
    name: "decode q8_0, 768 cells",
    d: 32,
    n: 1,
    nHead: 4,
    nHeadKv: 4,
    nKv: 768,
    kvType: Q8_0,
    mask: "causal",
    threads: 3,
  },
];

interface Operands {
  a: OracleFlashAttnArgs;
  dstNe: Dims;
}

function typeBytes(type: number, vals: Float32Array): Uint8Array {
  if (type === F32) return new Uint8Array(vals.slice().buffer);
  if (type === F16) return new Uint8Array(Uint16Array.from(vals, (x) => f32ToFp16(x)).buffer);
  const out = new Uint8Array((vals.length / 32) * 34);
  quantizeQ8_0Act(vals, out); // ggml's quantize_row_q8_0: the cache store's bits
  return out;
}

function operands(c: FaCase): Operands {
  const r = rng(c.d * 1000 + c.n * 7 + c.nKv);
  const rand = (len: number, s: number) =>
    Float32Array.from({ length: len }, () => (r() * 2 - 1) * s);
  const qNe = [c.d, c.n, c.nHead, 1], kNe = [c.d, c.nKv, c.nHeadKv, 1];
  const q = rand(c.d * c.n * c.nHead, 1.5);
  const k = typeBytes(c.kvType, rand(c.d * c.nKv * c.nHeadKv, 1.5));
  const v = typeBytes(c.kvType, rand(c.d * c.nKv * c.nHeadKv, 2));
  const a: OracleFlashAttnArgs = {
    q,
    qNe,
    k,
    kType: c.kvType,
    kNe,
    v,
    vType: c.kvType,
    vNe: kNe,
    scale: 1 / Math.sqrt(c.d),
    maxBias: c.maxBias ?? 0,
    threads: c.threads,
  };
  if (c.mask !== "none") {
    const m = new Uint16Array(c.nKv * c.n);
    for (let t = 0; t < c.n; t++) {
      for (let j = 0; j < c.nKv; j++) {
        // causal: token t sees cells up to nKv - n + t; sparse also drops every third cell
        const visible = j <= c.nKv - c.n + t && (c.mask === "causal" || j % 3 !== 1);
        m[t * c.nKv + j] = visible ? (c.maxBias ? f32ToFp16(-Math.abs(j - t)) : 0) : 0xfc00;
      }
    }
    a.mask = m;
    a.maskNe = [c.nKv, c.n, 1, 1];
  }
  return { a, dstNe: [c.d, c.nHead, c.n, 1] };
}

function tensor(
  b: Backend,
  type: number,
  ne: readonly number[],
  bytes: Uint8Array,
): ResolvedTensor {
  const info = ggmlTypeInfo(type)!;
  const nb1 = (ne[0] / info.blockSize) * info.typeSize;
  const nb: Dims = [info.typeSize, nb1, nb1 * ne[1], nb1 * ne[1] * ne[2]];
  const buf = b.alloc(Math.max(bytes.length, 1));
  buf.bytes.set(bytes);
  return { type, ne: [...ne] as Dims, nb, data: { buffer: buf, offset: 0 } };
}

/** Our FLASH_ATTN_EXT on `b`. */
async function ours(b: Backend, o: Operands): Promise<Float32Array> {
  const { a } = o;
  const src = [
    tensor(b, F32, a.qNe, new Uint8Array(a.q.slice().buffer)),
    tensor(b, a.kType, a.kNe, a.k),
    tensor(b, a.vType, a.vNe, a.v),
  ];
  if (a.mask) src.push(tensor(b, F16, a.maskNe!, new Uint8Array(a.mask.slice().buffer)));
  const n = o.dstNe.reduce((x, y) => x * y);
  const dst = tensor(b, F32, o.dstNe, new Uint8Array(4 * n));
  const params = new Int32Array(16);
  params[0] = f32Bits(a.scale), params[1] = f32Bits(a.maxBias ?? 0);
  const node: ExecNode = { op: Op.FLASH_ATTN_EXT, dst, src, params, name: "fa" };
  await b.compute([node]);
  const out = new Float32Array(dst.data.buffer.bytes.slice(0, 4 * n).buffer);
  for (const t of [...src, dst]) b.free(t.data.buffer);
  return out;
}

function firstDiff(got: Float32Array, want: Float32Array): string {
  const a = new Uint32Array(got.buffer), b = new Uint32Array(want.buffer);
  let bad = 0, first = -1, max = 0;
  for (let i = 0; i < a.length; i++) {
    if (a[i] !== b[i]) {
      bad++;
      if (first < 0) first = i;
      max = Math.max(max, Math.abs(got[i] - want[i]));
    }
  }
  return bad === 0
    ? ""
    : `${bad} of ${a.length} differ (max |diff| ${max}), first at ${first}: ours ${
      got[first]
    }, ggml ${want[first]}`;
}

for (const { variant, level, name } of VARIANTS) {
  const why = await variantUnavailable(variant, level, lib);
  Deno.test({
    name: `flash_attn_ext: our ${name} kernel equals llama.cpp's ${variant} variant bit for bit` +
      (why ? ` [skipped: ${why}]` : ""),
    ignore: why !== "",
    fn: async () => {
      try {
        assert.equal(lib.symbols.le_set_simd_level(level), level);
        const fails: string[] = [];
        for (const c of CASES) {
          const o = operands(c);
          const want = ofa.flashAttn(variant, o.a);
          assert.ok(want, `${variant} did not load`);
          using cpu = new CpuBackend({ threads: c.threads, library: lib });
          const d = firstDiff(await ours(cpu, o), want);
          if (d) fails.push(`${c.name}: ${d}`);
        }
        assert.deepEqual(fails, [], fails.join("\n"));
      } finally {
        lib.symbols.le_set_simd_level(oracleLevel);
      }
    },
  });
}

Deno.test("flash_attn_ext: the C kernel agrees with the float64 reference", async () => {
  using cpu = new CpuBackend({ threads: 2, library: lib });
  const ref = new ReferenceBackend();
  for (const c of CASES) {
    const o = operands(c);
    const [got, want] = [await ours(cpu, o), await ours(ref, o)];
    // f16 accumulation (ggml_vec_mad_f16) in the row path bounds the agreement
    const tol = c.kvType === F16 && c.n < 64 ? 4e-3 : 2e-4;
    for (let i = 0; i < got.length; i++) {
      const e = Math.abs(got[i] - want[i]);
      assert.ok(e <= tol * (1 + Math.abs(want[i])), `${c.name}[${i}]: ${got[i]} vs ${want[i]}`);
    }
  }
});

Deno.test("hadamard: the C kernel equals the float reference bit for bit; applied twice it is the identity", async () => {
  using cpu = new CpuBackend({ threads: 2, library: lib });
  const ref = new ReferenceBackend();
  const r = rng(64);
  for (const n of [2, 64, 128, 256]) {
    const rows = 9;
    const x = Float32Array.from({ length: n * rows }, () => (r() * 2 - 1) * 3);
    const run = async (b: Backend, input: Float32Array) => {
      const src = tensor(b, F32, [n, rows, 1, 1], new Uint8Array(input.slice().buffer));
      const dst = tensor(b, F32, [n, rows, 1, 1], new Uint8Array(4 * n * rows));
      const node: ExecNode = {
        op: Op.HADAMARD,
        dst,
        src: [src],
        params: new Int32Array(16),
        name: "h",
      };
      await b.compute([node]);
      const out = new Float32Array(dst.data.buffer.bytes.slice(0, 4 * n * rows).buffer);
      b.free(src.data.buffer), b.free(dst.data.buffer);
      return out;
    };
    const got = await run(cpu, x);
    assert.equal(firstDiff(got, await run(ref, x)), "", `n ${n}`);
    const back = await run(cpu, got);
    for (let i = 0; i < x.length; i++) {
      assert.ok(Math.abs(back[i] - x[i]) < 1e-5, `n ${n}: H·H ≠ I`);
    }
  }
});

// The split path's cell loops take a block's exponentials several lanes
// at a time, by libm's own steps (expf_libm.c: eight at AVX-512, four at
// AVX2); ggml calls libm's expf per cell. The two must agree on every
// float: checked here at each level this CPU has, over every 7th bit
// pattern of |x| <= 128 (about 300 million; every float of that range gave
// 0 when this was written) and over the infinities and NaNs, which go to
// libm's path.
const features = lib.symbols.le_cpu_features();
const EXPF_LEVELS = [
  { level: SimdLevel.AVX512, name: "AVX512", has: (features & 2) !== 0 },
  { level: SimdLevel.AVX2, name: "AVX2", has: (features & 1) !== 0 },
];
for (const { level, name, has } of EXPF_LEVELS) {
  Deno.test({
    name: `flash attention: the ${name} vector expf equals libm's expf bit for bit` +
      (has ? "" : ` [skipped: no ${name} on this CPU]`),
    ignore: !has,
    fn: () => {
      try {
        assert.equal(lib.symbols.le_set_simd_level(level), level);
        const sweeps: [string, number, number, number][] = [
          ["negatives", 0x80000000, 0xc3000000, 7],
          ["positives", 0x00000000, 0x43000000, 7],
          ["beyond 128, infinities, NaNs", 0x43000001, 0xffffffff, 4099],
        ];
        for (const [what, lo, hi, step] of sweeps) {
          const bad = lib.symbols.le_expf_mismatches(lo, hi, step);
          assert.notEqual(bad, -1n, "the kernel's self-check against libm's expf failed");
          assert.equal(bad, 0n, `${what}: ${bad} floats differ from libm's expf`);
        }
      } finally {
        lib.symbols.le_set_simd_level(oracleLevel);
      }
    },
  });
}
