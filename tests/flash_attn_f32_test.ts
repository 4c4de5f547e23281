/**
 * FLASH_ATTN_EXT at GGML_PREC_F32 (ContextOptions.flashAttnPrecision "f32";
 * kernels/src/flash_attn_f32.c): not llama.cpp's arithmetic, so it is held
 * to the float64 reference backend instead, more tightly than the default
 * path (whose V accumulates in f16) can be, at AVX-512 and AVX2. Where the
 * level has no f32 kernel (scalar), the node must give the default path's
 * bits.
 */
import assert from "node:assert/strict";
import { loadLibrary } from "../ffi/library.ts";
import { SimdLevel } from "../ffi/symbols.ts";
import { CpuBackend } from "../lib/backend/cpu.ts";
import { ReferenceBackend } from "../lib/backend/reference.ts";
import { GGMLType } from "../lib/ggml/types.ts";
import { Model } from "../lib/model/model.ts";
import { Context } from "../lib/runtime/context.ts";
import { loadOracle, maxAbsDiff, nearTieStep, top2 } from "./oracle/oracle.ts";
import { OracleBatchContext } from "./oracle/oracle_batch.ts";
import { TOLSTOY_F16 } from "./oracle/models.ts";
import { type FaCase, type Operands, operands, ours, streamOf } from "./fa_operands.ts";
import { mulberry32 } from "./rng.ts";

const { F16 } = GGMLType;
const lib = await loadLibrary();
const oracleLevel = (await loadOracle()).cpu.simdLevel;
const features = lib.symbols.le_cpu_features();

// One query row over F16 cells: the split-KV decode step, the only place
// the f32 kernel runs (from 32 cells).
const base = { n: 1, kvType: F16, mask: "causal" as const };
const CASES: (FaCase & { lateMasked?: number; infMaskedV?: boolean })[] = [
  // TinyLlama's heads: 32 query heads over 4 K/V heads of 64
  { ...base, name: "heads 32/4 of 64", d: 64, nHead: 32, nHeadKv: 4, nKv: 1024, threads: 2 },
  // four heads per K/V head (the dot kernel's one-head leftovers), 128 wide,
  // chunks that are not a multiple of 16 cells
  { ...base, name: "heads 8/2 of 128", d: 128, nHead: 8, nHeadKv: 2, nKv: 700, threads: 3 },
  // tolstoy-6m's heads of 32, every third cell masked, whose V is infinite:
  // masked cells must not be read (0 times inf)
  {
    ...base,
    name: "heads 8/4 of 32, sparse, inf in masked V",
    d: 32,
    nHead: 8,
    nHeadKv: 4,
    nKv: 600,
    mask: "sparse",
    threads: 2,
    infMaskedV: true,
  },
  // only the first 200 cells visible: three of four threads' chunks are
  // wholly masked, and their partials must add nothing
  {
    ...base,
    name: "late cells masked",
    d: 64,
    nHead: 16,
    nHeadKv: 2,
    nKv: 1024,
    threads: 4,
    lateMasked: 200,
  },
  { ...base, name: "ALiBi", d: 64, nHead: 8, nHeadKv: 1, nKv: 520, threads: 2, maxBias: 8 },
  // a short cache (the f32 kernel splits from 32 cells; ggml from 512):
  // chunks of 34, 34 and 32 cells
  { ...base, name: "100 cells", d: 64, nHead: 32, nHeadKv: 4, nKv: 100, threads: 3 },
  { ...base, name: "40 cells", d: 32, nHead: 8, nHeadKv: 4, nKv: 40, threads: 2, mask: "sparse" },
];

function setup(c: FaCase & { lateMasked?: number }): Operands {
  const o = operands(c);
  if (c.lateMasked !== undefined) {
    for (let j = c.lateMasked; j < c.nKv; j++) o.a.mask![j] = 0xfc00;
  }
  return o;
}

/** The same operands with V infinite in every cell the mask drops. */
function withInfMaskedV(o: Operands): Operands {
  const v = new Uint16Array(o.a.v.slice().buffer);
  const [d, nKv, nHeadKv] = o.a.vNe;
  for (let h = 0; h < nHeadKv; h++) {
    for (let j = 0; j < nKv; j++) {
      if (o.a.mask![j] !== 0xfc00) continue;
      v.fill(0x7c00, (h * nKv + j) * d, (h * nKv + j + 1) * d);
    }
  }
  return { ...o, a: { ...o.a, v: new Uint8Array(v.buffer) } };
}

/** max |got - want| / (1 + |want|). */
function maxErr(got: Float32Array, want: Float32Array): number {
  let m = 0;
  for (let i = 0; i < got.length; i++) {
    m = Math.max(m, Math.abs(got[i] - want[i]) / (1 + Math.abs(want[i])));
  }
  return m;
}

const LEVELS = [
  { level: SimdLevel.AVX512, name: "AVX-512", has: (features & 2) !== 0, kernel: true },
  { level: SimdLevel.AVX2, name: "AVX2", has: (features & 1) !== 0, kernel: true },
  { level: SimdLevel.SCALAR, name: "scalar", has: true, kernel: false },
];

/** Runs `cases` at `level`: where it has no kernel, "f32" must give the
 * default path's bits; else `judge` holds both against float64's. */
async function atLevel<C extends FaCase>(
  level: number,
  cases: C[],
  kernel: boolean,
  judge: (
    c: C,
    got: { f32: Float32Array; def: Float32Array; want: Float32Array },
    o: Operands,
    cpu: CpuBackend,
  ) => Promise<void>,
): Promise<void> {
  try {
    assert.equal(lib.symbols.le_set_simd_level(level), level);
    const ref = new ReferenceBackend();
    for (const c of cases) {
      using cpu = new CpuBackend({ threads: c.threads, library: lib });
      const o = setup(c);
      const f32 = await ours(cpu, o, true);
      const def = await ours(cpu, o, false);
      if (!kernel) {
        assert.deepEqual(new Uint32Array(f32.buffer), new Uint32Array(def.buffer), c.name);
        continue;
      }
      await judge(c, { f32, def, want: await ours(ref, o, true) }, o, cpu);
    }
  } finally {
    lib.symbols.le_set_simd_level(oracleLevel);
  }
}

for (const { level, name, has, kernel } of LEVELS) {
  Deno.test({
    name: (kernel
      ? `flash_attn_ext f32: the ${name} kernel is closer to float64 than ggml's arithmetic`
      : `flash_attn_ext f32: with no ${name} kernel the default path's bits`) +
      (has ? "" : ` [skipped: no ${name} on this CPU]`),
    ignore: !has,
    fn: () =>
      atLevel(level, CASES, kernel, async (c, { f32, def, want }, o, cpu) => {
        const [e32, eDef] = [maxErr(f32, want), maxErr(def, want)];
        // Zen 4, when this was written: f32 0.7-3e-7, ggml's f16
        // accumulator 4e-4-2e-3 (relative, against float64)
        assert.ok(e32 <= 1e-6, `${c.name}: f32 error ${e32}`);
        assert.ok(e32 * 100 <= eDef, `${c.name}: f32 error ${e32}, default's ${eDef}`);
        if (c.infMaskedV) {
          const inf = await ours(cpu, withInfMaskedV(o), true);
          assert.deepEqual(new Uint32Array(inf.buffer), new Uint32Array(f32.buffer), c.name);
        }
      }),
  });
}

// Over a Q8_0 cache (flash_attn_q8.c): at AVX-512 with VNNI only; the
// query is ggml's Q8_0 in both (the reference rounds it so too), so what
// is left between them is the f32 order of adding, held to the same 1e-6.
// ggml's own Q8_0 path accumulates V in f32 as well, so its error is of the
// same order: the kernel must differ from its bits (it ran) and be no
// worse. Elsewhere, the default path's bits.
const { Q8_0 } = GGMLType;
/** Case `c` over a Q8_0 cache (`over`: what differs). */
const q8 = (c: FaCase, over: Partial<FaCase> = {}): FaCase => ({
  ...c,
  kvType: Q8_0,
  name: `q8_0 ${c.name}`,
  ...over,
});
const [heads64, heads128, heads32, , alibi, , cells40] = CASES;
const Q8_CASES: FaCase[] = [
  q8(heads64),
  q8(heads128),
  q8(heads32, { name: "q8_0 heads 8/4 of 32, sparse" }),
  q8(alibi),
  q8(cells40, { mask: "causal" }),
  // a prompt's rows: over a Q8_0 cache (no tiled path) one at a time, each
  // over the cells its causal mask leaves, one with fewer cells than threads
  q8({ ...base, name: "9 rows, causal", d: 64, nHead: 8, nHeadKv: 2, nKv: 300, n: 9, threads: 3 }),
  q8({
    ...base,
    name: "5 rows, short",
    d: 32,
    nHead: 8,
    nHeadKv: 4,
    nKv: 36,
    n: 5,
    threads: 4,
    mask: "sparse",
  }),
];
const vnni = (() => {
  try {
    return / avx512_vnni( |$)/m.test(Deno.readTextFileSync("/proc/cpuinfo"));
  } catch {
    return false;
  }
})();

for (const { level, name, has } of LEVELS) {
  const kernel = level === SimdLevel.AVX512 && vnni;
  Deno.test({
    name: (kernel
      ? `flash_attn_ext f32 over Q8_0: the ${name} VNNI kernel agrees with float64`
      : `flash_attn_ext f32 over Q8_0: at ${name}${
        level === SimdLevel.AVX512 ? " without VNNI" : ""
      } the default path's bits`) + (has ? "" : ` [skipped: no ${name} on this CPU]`),
    ignore: !has,
    fn: () =>
      atLevel(level, Q8_CASES, kernel, (c, { f32, def, want }) => {
        const [e32, eDef] = [maxErr(f32, want), maxErr(def, want)];
        console.log(`${c.name}: f32 ${e32.toExponential(1)}, default ${eDef.toExponential(1)}`);
        assert.ok(e32 <= 1e-6, `${c.name}: f32 error ${e32}`);
        assert.ok(e32 <= eDef, `${c.name}: f32 error ${e32}, default's ${eDef}`);
        assert.notDeepEqual(new Uint32Array(f32.buffer), new Uint32Array(def.buffer), c.name);
        return Promise.resolve();
      }),
  });
}

// A batch of sequences with a KV stream each (ContextOptions.kvUnified
// false): every stream's decode row takes the kernel, over the cells its
// mask leaves, cut into the chunks a node of that stream alone would have,
// so a sequence gets the same bits batched as alone.
const STREAM_CASES: FaCase[] = [
  {
    ...base,
    name: "3 streams, heads 8/2 of 64",
    d: 64,
    nHead: 8,
    nHeadKv: 2,
    nKv: 300,
    threads: 2,
    streams: 3,
  },
  {
    ...base,
    name: "4 streams, heads 8/4 of 32, sparse",
    d: 32,
    nHead: 8,
    nHeadKv: 4,
    nKv: 120,
    threads: 3,
    streams: 4,
    mask: "sparse",
  },
];
const Q8_STREAM_CASES = STREAM_CASES.map((c) => q8(c));

/** Each stream's rows of `got` equal a node of that stream alone, bit for bit. */
async function streamsAlone(c: FaCase, got: Float32Array, o: Operands, cpu: CpuBackend) {
  const per = got.length / c.streams!;
  for (let st = 0; st < c.streams!; st++) {
    const alone = await ours(cpu, streamOf(o, st), true);
    assert.deepEqual(
      new Uint32Array(alone.buffer),
      new Uint32Array(got.slice(st * per, (st + 1) * per).buffer),
      `${c.name}: stream ${st} batched vs alone`,
    );
  }
}

for (const { level, name, has, kernel } of LEVELS) {
  const q8 = level === SimdLevel.AVX512 && vnni;
  Deno.test({
    name: `flash_attn_ext f32, one KV stream per sequence: at ${name} ` +
      (kernel
        ? `each stream as alone, near float64 (F16${q8 ? " and Q8_0" : ""})`
        : "the default path's bits") +
      (has ? "" : ` [skipped: no ${name} on this CPU]`),
    ignore: !has,
    fn: async () => {
      await atLevel(level, STREAM_CASES, kernel, async (c, { f32, def, want }, o, cpu) => {
        const [e32, eDef] = [maxErr(f32, want), maxErr(def, want)];
        assert.ok(e32 <= 1e-6, `${c.name}: f32 error ${e32}`);
        assert.ok(e32 * 100 <= eDef, `${c.name}: f32 error ${e32}, default's ${eDef}`);
        await streamsAlone(c, f32, o, cpu);
      });
      await atLevel(level, Q8_STREAM_CASES, q8, async (c, { f32, def, want }, o, cpu) => {
        const [e32, eDef] = [maxErr(f32, want), maxErr(def, want)];
        assert.ok(e32 <= 1e-6, `${c.name}: f32 error ${e32}`);
        assert.ok(e32 <= eDef, `${c.name}: f32 error ${e32}, default's ${eDef}`);
        assert.notDeepEqual(new Uint32Array(f32.buffer), new Uint32Array(def.buffer), c.name);
        await streamsAlone(c, f32, o, cpu);
      });
    },
  });
}

// Threads split by K/V head where their count divides the heads': a head's
// work is the same on any such thread count, so the bits are one thread's
// (by cells, each thread count has its own chunks and merge).
const THREAD_CASES: FaCase[] = [
  { ...base, name: "heads 32/4 of 64", d: 64, nHead: 32, nHeadKv: 4, nKv: 1024, threads: 1 },
  {
    ...base,
    name: "2 streams, heads 8/4 of 32, sparse",
    d: 32,
    nHead: 8,
    nHeadKv: 4,
    nKv: 300,
    threads: 1,
    streams: 2,
    mask: "sparse",
  },
];

for (const { level, name, has } of LEVELS.filter((l) => l.kernel)) {
  const withQ8 = level === SimdLevel.AVX512 && vnni;
  Deno.test({
    name: `flash_attn_ext f32 at ${name}: 2 and 4 threads over 4 K/V heads give one thread's bits` +
      ` (F16${withQ8 ? " and Q8_0" : ""})` + (has ? "" : ` [skipped: no ${name} on this CPU]`),
    ignore: !has,
    fn: async () => {
      try {
        assert.equal(lib.symbols.le_set_simd_level(level), level);
        const cases = withQ8 ? [...THREAD_CASES, ...THREAD_CASES.map((c) => q8(c))] : THREAD_CASES;
        for (const c of cases) {
          const o = setup(c);
          const at = async (threads: number) => {
            using cpu = new CpuBackend({ threads, library: lib });
            return new Uint32Array((await ours(cpu, o, true)).buffer);
          };
          const one = await at(1);
          const def = await (async () => {
            using cpu = new CpuBackend({ threads: 1, library: lib });
            return new Uint32Array((await ours(cpu, o, false)).buffer);
          })();
          assert.notDeepEqual(one, def, `${c.name}: the f32 kernel ran`);
          assert.deepEqual(await at(2), one, `${c.name}: 2 threads`);
          assert.deepEqual(await at(4), one, `${c.name}: 4 threads`);
        }
      } finally {
        lib.symbols.le_set_simd_level(oracleLevel);
      }
    },
  });
}

// tolstoy-6m (heads of 32, 8 query heads over 4 K/V heads) after a
// 700-token prompt, so that every decode step is split KV over >= 512
// cells, with flashAttnPrecision "f32" against llama.cpp's flash attention
// (its f16 V accumulator): the same token at every step before llama.cpp's
// first near-tie, and logits within a bound that only the two accumulators'
// difference explains (kernels/PARITY.md section 31). Over a Q8_0 cache
// (section 32) both sides quantize q alike and accumulate V in f32: only
// the order of adding is left, and the same bound holds.
const LOGIT_TOL = 0.05;

/** tolstoy-6m in llama.cpp's flash attention and in ours at f32, same options. */
async function f32Pair(
  kvType: "f16" | "q8_0",
  opts: { nCtx: number; nBatch: number; threads: number; nSeqMax?: number; kvUnified?: boolean },
) {
  const oracle = await loadOracle();
  const type = kvType === "f16" ? 1 : 8; // ggml type ids
  const stack = new DisposableStack();
  const om = stack.use(oracle.load(TOLSTOY_F16));
  const oc = stack.use(
    await OracleBatchContext.create(om, { ...opts, typeK: type, typeV: type, flashAttn: true }),
  );
  const model = stack.use(await Model.load(TOLSTOY_F16));
  const ctx = stack.use(
    await Context.create(model, { ...opts, flashAttn: true, flashAttnPrecision: "f32", kvType }),
  );
  return { om, oc, ctx, [Symbol.dispose]: () => stack.dispose() };
}

async function atDepth(kvType: "f16" | "q8_0", ran: boolean): Promise<void> {
  using pair = await f32Pair(kvType, { nCtx: 1024, nBatch: 256, threads: 2 });
  const { om, oc, ctx } = pair;
  const r = mulberry32(7);
  const prompt = Array.from({ length: 700 }, () => 3 + Math.floor(r() * (om.nVocab - 3)));
  let pos = 0;
  let last: [Float32Array, Float32Array] = [new Float32Array(0), new Float32Array(0)];
  const both = async (tokens: number[], lastOut: boolean) => {
    const batch = {
      tokens,
      pos: tokens.map((_, k) => pos + k),
      seqIds: tokens.map(() => 0),
      logits: tokens.map((_, k) => lastOut && k === tokens.length - 1),
    };
    const t = oc.decode(batch);
    assert.equal(t.rc, 0);
    const o = await ctx.decodeBatch(batch);
    pos += tokens.length;
    if (lastOut) last = [o.logits[0], t.logits[0]];
  };
  for (let i = 0; i < prompt.length; i += 256) {
    await both(prompt.slice(i, i + 256), i + 256 >= prompt.length);
  }
  const gaps: number[] = [];
  let worst = 0;
  for (let s = 0; s < 16; s++) {
    const [o, t]: [Float32Array, Float32Array] = last;
    const [tok, gap] = top2(t);
    gaps.push(gap);
    if (nearTieStep(gaps) === gaps.length) assert.equal(top2(o)[0], tok, `step ${s}`);
    worst = Math.max(worst, maxAbsDiff(o, t));
    await both([tok], true);
  }
  console.log(
    `f32 (${kvType} cache) vs llama.cpp at depth 700: logits max |diff| ${worst.toExponential(2)}`,
  );
  assert.ok(worst <= LOGIT_TOL, `logits differ by ${worst}`);
  // not llama.cpp's bits where the f32 kernel runs
  if (ran) assert.ok(worst > 0, "bit-identical logits: the f32 kernel did not run");
}

Deno.test("flashAttnPrecision f32: tolstoy-6m at depth 700 against llama.cpp's flash attention", async () => {
  await atDepth("f16", (features & 3) !== 0); // AVX2 and AVX-512 have the kernel
});

Deno.test("flashAttnPrecision f32 over a Q8_0 cache: tolstoy-6m at depth 700 against llama.cpp", async () => {
  await atDepth("q8_0", oracleLevel === SimdLevel.AVX512 && vnni);
});

// Four sequences, one KV stream each, decoded as one batch at every step
// (the server's default layout): each stream's attention takes the kernel,
// and every sequence is held to llama.cpp's batch as at depth above.
async function streamsAtDepth(kvType: "f16" | "q8_0", ran: boolean): Promise<void> {
  const nSeq = 4;
  using pair = await f32Pair(kvType, {
    nCtx: 4 * 256,
    nBatch: 1024,
    nSeqMax: nSeq,
    kvUnified: false,
    threads: 2,
  });
  const { om, oc, ctx } = pair;
  const r = mulberry32(11);
  // prompts of different lengths: the streams' windows differ
  const prompts = [200, 150, 90, 40].map((len) =>
    Array.from({ length: len }, () => 3 + Math.floor(r() * (om.nVocab - 3)))
  );
  const pos = prompts.map(() => 0);
  let last: Float32Array[][] = [];
  const both = async (perSeq: number[][]) => {
    const batch = {
      tokens: [] as number[],
      pos: [] as number[],
      seqIds: [] as number[],
      logits: [] as boolean[],
    };
    perSeq.forEach((toks, s) =>
      toks.forEach((t, k) => {
        batch.tokens.push(t);
        batch.pos.push(pos[s] + k);
        batch.seqIds.push(s);
        batch.logits.push(k === toks.length - 1);
      })
    );
    const t = oc.decode(batch);
    assert.equal(t.rc, 0);
    const o = await ctx.decodeBatch(batch);
    perSeq.forEach((toks, s) => (pos[s] += toks.length));
    last = [o.logits, t.logits];
  };
  await both(prompts);
  const gaps: number[][] = prompts.map(() => []);
  const tied = prompts.map(() => false);
  let worst = 0;
  for (let step = 0; step < 8; step++) {
    const [o, t] = last;
    const next: number[][] = [];
    for (let s = 0; s < nSeq; s++) {
      const [tok, gap] = top2(t[s]);
      gaps[s].push(gap);
      tied[s] ||= nearTieStep(gaps[s]) !== gaps[s].length;
      if (!tied[s]) assert.equal(top2(o[s])[0], tok, `sequence ${s}, step ${step}`);
      worst = Math.max(worst, maxAbsDiff(o[s], t[s]));
      next.push([tok]);
    }
    await both(next);
  }
  console.log(
    `f32 (${kvType} cache), 4 streams vs llama.cpp: logits max |diff| ${worst.toExponential(2)}`,
  );
  assert.ok(worst <= LOGIT_TOL, `logits differ by ${worst}`);
  if (ran) assert.ok(worst > 0, "bit-identical logits: the f32 kernel did not run");
}

Deno.test("flashAttnPrecision f32, one KV stream per sequence: tolstoy-6m batches against llama.cpp", async () => {
  await streamsAtDepth("f16", (features & 3) !== 0);
  await streamsAtDepth("q8_0", oracleLevel === SimdLevel.AVX512 && vnni);
});
