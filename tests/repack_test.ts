/**
 * Repacked Q4_0 and Q4_K weights (lib/backend/cpu_repack.ts,
 * kernels/src/repack.c, repack_q4_k.c) against the plain rows: the CPU
 * backend repacks a mapped weight of those types with ne1 % 8 == 0 where
 * llama.cpp's matching variant would (any AVX2 CPU, AVX-512 ones included), and every
 * MUL_MAT output must keep its bits — 1 to 17 columns (gemv, groups of 4
 * for gemm and the leftovers), row counts of 1, 2, 3 and 5 groups of 8 (odd
 * numbers of 16-row units), 1 to 3 threads. Weights llama.cpp keeps plain
 * (ne1 % 8 != 0, writable buffers) must not be repacked. The portable
 * kernel over the repacked layout (used when the SIMD level changes after a
 * weight was repacked) must give the same bits too. And against llama.cpp:
 * its haswell variant with the weight in its CPU_REPACK buffer (its q4_0_8x8
 * and q4_K_8x8 gemv and gemm kernels) gives the same bits as ours.
 */
import assert from "node:assert/strict";
import { join } from "node:path";
import { loadLibrary } from "../ffi/library.ts";
import { SimdLevel } from "../ffi/symbols.ts";
import { CpuBackend } from "../lib/backend/cpu.ts";
import { liveCopies } from "../lib/backend/cpu_repack.ts";
import { mapFile } from "../lib/gguf/mmap.ts";
import { GGMLType } from "../lib/ggml/types.ts";
import { fp16ToF32 } from "../lib/ggml/half.ts";
import { loadOracle, variantUnavailable } from "./oracle/oracle.ts";
import { loadOracleMulMat } from "./oracle/oracle_mul_mat.ts";
import { assertSameBits, BLOCK, mulMat, weightsFile } from "./repack_util.ts";
import { mulberry32 as rng } from "./rng.ts";

const lib = await loadLibrary();
const { Q4_0, Q4_K, Q8_0 } = GGMLType;
/** Elements and bytes per block of the weight types under test. */
const NAME: Record<number, string> = { [Q4_0]: "Q4_0", [Q4_K]: "Q4_K" };
/** Row lengths: several blocks of each type. */
const KS: Record<number, number> = { [Q4_0]: 256, [Q4_K]: 768 };
const avx2 = (lib.symbols.le_cpu_features() & 1) !== 0;
const level = lib.symbols.le_set_simd_level(SimdLevel.BEST);

/** K x M random weights of `type` (llama.cpp's reference quantizer), scales over decades. */
function weights(k: number, m: number, seed: number, type: number = Q4_0): Uint8Array {
  const r = rng(seed);
  const w = Float32Array.from({ length: k * m }, (_, i) => {
    const x = (r() - 0.5) * 2, block = Math.floor(i / 32);
    return x * (block % 7 === 3 ? 300 : block % 5 === 1 ? 1e-4 : 1);
  });
  const [n, size] = BLOCK[type];
  const a = new Uint8Array((w.length / n) * size);
  assert.equal(lib.symbols.le_quantize_row(type, w, a, BigInt(w.length)), 0);
  return a;
}

// Several weights in one mapped file, at offsets that are not 64-byte aligned.
const SHAPES = [{ m: 8 }, { m: 16 }, { m: 24 }, { m: 40 }, { m: 12 }, { m: 36 }];
const COLUMNS = [1, 2, 3, 4, 5, 8, 17];
const K = KS[Q4_0];

for (const type of [Q4_0, Q4_K]) {
  Deno.test({
    name: `repack: ${NAME[type]} mul_mat on repacked weights equals the plain rows bit for bit ` +
      "(1 to 17 columns, 1 to 5 row groups, 1 to 3 threads)" + (avx2 ? "" : " [skipped: no AVX2]"),
    ignore: !avx2,
    fn: async () => {
      const k = KS[type];
      const dir = await Deno.makeTempDir();
      try {
        const parts = SHAPES.map((s, i) => weights(k, s.m, 7 + i, type));
        const { path, offsets } = await weightsFile(dir, parts);
        using map = mapFile(path, lib);
        const r = rng(99);
        for (const threads of [1, 2, 3]) {
          using plain = new CpuBackend({ threads, library: lib, repack: false });
          using packed = new CpuBackend({ threads, library: lib });
          for (const [i, { m }] of SHAPES.entries()) {
            for (const n of COLUMNS) {
              const b = Float32Array.from({ length: k * n }, () => (r() - 0.5) * 4);
              const want = await mulMat(plain, map, offsets[i], k, m, b, type);
              const got = await mulMat(packed, map, offsets[i], k, m, b, type);
              assertSameBits(got, want, m, `M ${m} N ${n}, ${threads} threads`);
            }
          }
          assert.equal(plain.repackedBytes, 0);
          // Only the weights with ne1 % 8 == 0, each once (Q4_K's layout adds 32 bytes
          // of decoded scales per 8 rows and super-block).
          const extra = type === Q4_K ? 32 / 1152 : 0;
          const expected = SHAPES.reduce(
            (t, s, i) => t + (s.m % 8 ? 0 : parts[i].length * (1 + extra)),
            0,
          );
          assert.equal(packed.repackedBytes, expected);
        }
      } finally {
        await Deno.remove(dir, { recursive: true });
      }
    },
  });
}

/**
 * The repack order computed independently: per output acc = fma(block
 * integer dot, d_x * d_y, acc) over blocks, activations through llama.cpp's
 * reference q8_0 quantizer (what the scalar level uses). The fma is the
 * exact product plus acc rounded once in double, then to float.
 */
function reference(a: Uint8Array, k: number, m: number, b: Float32Array): Float32Array {
  const n = b.length / k, nb = k / 32, out = new Float32Array(m * n);
  const q = new Uint8Array(n * nb * 34);
  assert.equal(lib.symbols.le_quantize_row(Q8_0, b, q, BigInt(b.length)), 0);
  const qv = new DataView(q.buffer), av = new DataView(a.buffer);
  for (let c = 0; c < n; c++) {
    for (let r = 0; r < m; r++) {
      let acc = 0;
      for (let i = 0; i < nb; i++) {
        const xo = (r * nb + i) * 18, yo = (c * nb + i) * 34;
        let isum = 0;
        for (let j = 0; j < 16; j++) {
          const x = a[xo + 2 + j];
          isum += ((x & 15) - 8) * qv.getInt8(yo + 2 + j) +
            ((x >> 4) - 8) * qv.getInt8(yo + 18 + j);
        }
        const d = Math.fround(
          fp16ToF32(av.getUint16(xo, true)) * fp16ToF32(qv.getUint16(yo, true)),
        );
        acc = Math.fround(isum * d + acc);
      }
      out[c * m + r] = acc;
    }
  }
  return out;
}

Deno.test({
  name: "repack: writable buffers are not repacked; a repacked weight met at the scalar level " +
    "takes the portable kernel, in the repack order" + (avx2 ? "" : " [skipped: no AVX2]"),
  ignore: !avx2,
  fn: async () => {
    const a = weights(K, 24, 3);
    const b = Float32Array.from({ length: K * 6 }, (_, i) => Math.sin(i) * 3);
    {
      using cpu = new CpuBackend({ threads: 2, library: lib });
      const wb = cpu.alloc(a.length);
      wb.bytes.set(a);
      await mulMat(cpu, wb, 0, K, 24, b, Q4_0);
      assert.equal(cpu.repackedBytes, 0);
    }
    const dir = await Deno.makeTempDir();
    try {
      const path = join(dir, "w.bin");
      await Deno.writeFile(path, a);
      using map = mapFile(path, lib);
      using cpu = new CpuBackend({ threads: 2, library: lib });
      await mulMat(cpu, map, 0, K, 24, b, Q4_0);
      assert.equal(cpu.repackedBytes, a.length);
      // The plain rows' pages were handed back (le_mmap_drop): they read back
      // from the file unchanged. Memory that is not a file mapping is refused.
      assert.deepEqual(map.bytes.slice(0, a.length), a);
      const anon = new Uint8Array(3 * 4096);
      assert.equal(lib.symbols.le_mmap_drop(Deno.UnsafePointer.of(anon), BigInt(anon.length)), -1);
      const end = BigInt(map.size - 1);
      assert.equal(lib.symbols.le_mmap_drop(map.ptr, end + 2n), -1);
      try {
        assert.equal(lib.symbols.le_set_simd_level(SimdLevel.SCALAR), SimdLevel.SCALAR);
        const want = reference(a, K, 24, b);
        assertSameBits(await mulMat(cpu, map, 0, K, 24, b, Q4_0), want, 24, "scalar level");
      } finally {
        lib.symbols.le_set_simd_level(level);
      }
      // Q4_K: q8_K activations are the same at every level, so the portable
      // kernel must give the AVX2 kernel's bits (gemm form for 4 columns,
      // gemv form for the other 2).
      const k4 = KS[Q4_K], a4 = weights(k4, 24, 4, Q4_K);
      const b4 = Float32Array.from({ length: k4 * 6 }, (_, i) => Math.cos(i) * 3);
      const path4 = join(dir, "w4.bin");
      await Deno.writeFile(path4, a4);
      using map4 = mapFile(path4, lib);
      const avx = await mulMat(cpu, map4, 0, k4, 24, b4, Q4_K);
      assert.ok(cpu.repackedBytes > a.length);
      try {
        assert.equal(lib.symbols.le_set_simd_level(SimdLevel.SCALAR), SimdLevel.SCALAR);
        assertSameBits(await mulMat(cpu, map4, 0, k4, 24, b4, Q4_K), avx, 24, "Q4_K scalar level");
      } finally {
        lib.symbols.le_set_simd_level(level);
      }
    } finally {
      await Deno.remove(dir, { recursive: true });
    }
  },
});

Deno.test({
  name: "repack: backends reading the same weight share one copy, freed with the last of them" +
    (avx2 ? "" : " [skipped: no AVX2]"),
  ignore: !avx2,
  fn: async () => {
    const a = weights(K, 24, 5);
    const b = Float32Array.from({ length: K * 3 }, (_, i) => Math.sin(i) * 2);
    const dir = await Deno.makeTempDir();
    try {
      const path = join(dir, "w.bin");
      await Deno.writeFile(path, a);
      using map = mapFile(path, lib);
      const before = liveCopies(lib);
      const one = new CpuBackend({ threads: 2, library: lib });
      const two = new CpuBackend({ threads: 1, library: lib });
      const want = await mulMat(one, map, 0, K, 24, b, Q4_0);
      assertSameBits(await mulMat(two, map, 0, K, 24, b, Q4_0), want, 24, "second backend");
      // Each reads it, one copy exists (a model's contexts each made their own).
      assert.equal(one.repackedBytes, a.length);
      assert.equal(two.repackedBytes, a.length);
      assert.equal(liveCopies(lib), before + 1);
      one[Symbol.dispose]();
      // Still held by the other backend: not freed under it.
      assert.equal(liveCopies(lib), before + 1);
      assertSameBits(
        await mulMat(two, map, 0, K, 24, b, Q4_0),
        want,
        24,
        "after the first is freed",
      );
      two[Symbol.dispose]();
      assert.equal(liveCopies(lib), before);
      // A later backend makes it again.
      using three = new CpuBackend({ threads: 2, library: lib });
      assertSameBits(await mulMat(three, map, 0, K, 24, b, Q4_0), want, 24, "made again");
      assert.equal(liveCopies(lib), before + 1);
    } finally {
      await Deno.remove(dir, { recursive: true });
    }
  },
});

const HASWELL = await variantUnavailable("haswell", SimdLevel.AVX2, lib);
Deno.test({
  name: "repack: Q4_0 and Q4_K repacked mul_mat equal llama.cpp's haswell CPU_REPACK one bit " +
    "for bit (1 to 17 columns, 1 and 3 threads)" + (HASWELL ? ` [skipped: ${HASWELL}]` : ""),
  ignore: HASWELL !== "",
  fn: async () => {
    const om = await loadOracleMulMat();
    const oracleLevel = (await loadOracle()).cpu.simdLevel;
    const dir = await Deno.makeTempDir();
    try {
      assert.equal(lib.symbols.le_set_simd_level(SimdLevel.AVX2), SimdLevel.AVX2);
      for (const type of [Q4_0, Q4_K]) {
        const k = KS[type];
        for (const [i, m] of [8, 24, 40].entries()) {
          const a = weights(k, m, 50 + i, type);
          const path = join(dir, `w${type}-${m}.bin`);
          await Deno.writeFile(path, a);
          using map = mapFile(path, lib);
          for (const n of COLUMNS) {
            const b = Float32Array.from({ length: k * n }, (_, j) => Math.cos(j * 0.7 + m) * 2);
            const want = om.mulMatRepacked("haswell", { type, k, m, n }, a, b);
            assert.ok(want, `haswell has no ${NAME[type]} repack for this shape`);
            for (const threads of [1, 3]) {
              using cpu = new CpuBackend({ threads, library: lib });
              const got = await mulMat(cpu, map, 0, k, m, b, type);
              assert.ok(cpu.repackedBytes >= a.length);
              const label = `vs llama.cpp: ${NAME[type]} M ${m} N ${n}, ${threads} threads`;
              assertSameBits(got, want, m, label);
            }
          }
        }
      }
    } finally {
      lib.symbols.le_set_simd_level(oracleLevel);
      await Deno.remove(dir, { recursive: true });
    }
  },
});
