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
import { CpuBackend } from "../lib/backend/cpu.ts";
import { ReferenceBackend } from "../lib/backend/reference.ts";
import type { Backend, ExecNode } from "../lib/backend/types.ts";
import { Op } from "../lib/graph/ops.ts";
import { GGMLType } from "../lib/ggml/types.ts";
import { CPU_VARIANTS, loadOracle, variantUnavailable } from "./oracle/oracle.ts";
import { loadOracleFlashAttn } from "./oracle/oracle_fa.ts";
import { type FaCase, operands, ours, tensor } from "./fa_operands.ts";
import { mulberry32 as rng } from "./rng.ts";

const { F32, F16, Q8_0 } = GGMLType;
const lib = await loadLibrary();
const oracleLevel = (await loadOracle()).cpu.simdLevel;
const ofa = await loadOracleFlashAttn();

const VARIANTS = CPU_VARIANTS;

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
  // One query row under 512 cells (ggml's per-row path): the kq dots of a
  // K head's query heads taken beforehand by the row kernel; threads whose
  // heads start inside a group (11 of 32 heads each at 3 threads).
  {
    name: "decode f16 under 512 cells, heads 32/4 of 64",
    d: 64,
    n: 1,
    nHead: 32,
    nHeadKv: 4,
    nKv: 300,
    kvType: F16,
    mask: "sparse",
    threads: 3,
  },
  {
    name: "decode f16 under 512 cells, heads 6/2 of 128",
    d: 128,
    n: 1,
    nHead: 6,
    nHeadKv: 2,
    nKv: 77,
    kvType: F16,
    mask: "causal",
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
  // a K/V head's query heads together over a Q8_0 V (fa_cells_q8_heads at
  // AVX-512: four of 64, two of 128), with a leftover head alone
  {
    name: "decode q8_0, heads 8/2 of 64",
    d: 64,
    n: 1,
    nHead: 8,
    nHeadKv: 2,
    nKv: 700,
    kvType: Q8_0,
    mask: "sparse",
    threads: 3,
  },
  {
    name: "rows q8_0, heads 8/2 of 64, 9 tokens",
    d: 64,
    n: 9,
    nHead: 8,
    nHeadKv: 2,
    nKv: 400,
    kvType: Q8_0,
    mask: "causal",
    threads: 3,
  },
  {
    name: "decode q8_0, heads 6/3 of 128",
    d: 128,
    n: 1,
    nHead: 6,
    nHeadKv: 3,
    nKv: 300,
    kvType: Q8_0,
    mask: "causal",
    threads: 2,
  },
];

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
