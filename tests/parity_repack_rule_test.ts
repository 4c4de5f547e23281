/**
 * Parity with llama.cpp for weights of a repackable type that llama.cpp does
 * not repack. ggml-cpu/repack.cpp (`ggml_repack_get_optimal_repack_type`,
 * the extra buffer type's `supports_op`) repacks Q4_0 and Q4_K (AVX2 and
 * AVX-512) and Q2_K (AVX-512) only for 2-D weights whose ne1 is a multiple of
 * 8; the others run the plain vec_dot (and tinyBLAS_Q0_AVX for Q4_0 batches).
 * kernels/src/mul_mat.c `tiles_for` must follow that rule, and tolstoy's
 * matrices all have ne1 % 8 == 0, so this test makes its own: a small random
 * llama with 64 query heads of width 12 and one KV head, so attn_k and attn_v
 * have ne1 = 12 while every other matrix has ne1 % 8 == 0. llama.cpp
 * quantizes it to Q4_0 and Q4_K_M (the K/V types are checked and printed).
 * For a 19-token batch prompt (groups of 4 columns plus 3 leftovers) and 16
 * token-by-token decode steps, with F32 and F16 KV caches, our logits and
 * the K/V projections (taps Kcur/Vcur of every layer) must be bit-identical
 * to llama.cpp's.
 *
 * Why the taps: a last-bit difference in K or V rarely reaches Q4_0 logits.
 * An F16 cache rounds it away, and attention's output is quantized to q8_0
 * (fp16 scale, 8-bit values) before attn_output, which almost always maps
 * both to the same blocks. Q4_K_M's q8_K activations keep an f32 scale, so
 * there it shows in the logits with an F32 cache.
 *
 * Gated like tests/parity_quant_ops_test.ts: runs only where our SIMD level
 * follows the CPU variant llama.cpp loaded (AVX-512, AVX2, or scalar for x64,
 * which repacks nothing, so there every weight runs the generic vec_dot),
 * else skipped with the reason printed.
 */
import assert from "node:assert/strict";
import { join } from "node:path";
import { readGGUF } from "../lib/gguf/mod.ts";
import { GGMLType } from "../lib/ggml/types.ts";
import { Model } from "../lib/model/model.ts";
import { writeRandomLlama } from "../lib/model/random.ts";
import { Context } from "../lib/runtime/context.ts";
import { Ftype } from "../lib/quant/rules.ts";
import { loadOracle, type OracleModel } from "./oracle/oracle.ts";
import { OracleTapContext } from "./oracle/oracle_debug.ts";
import { firstDiff, parityGate } from "./parity_util.ts";
import { TOLSTOY_F32 } from "./oracle/models.ts";
import { ROOT } from "./quant_util.ts";

/** Decode steps, one token each. */
const N_POS = 16;
/** Batch prompt length: 4 full column groups and 3 leftover columns. */
const N_BATCH = 19;
/**
 * nEmbd 768 (a multiple of 256, so Q4_K needs no fallback type) over 64
 * heads of 12 with one KV head: attn_k/attn_v are 768 x 12. Two layers give
 * Q4_K_M's attn_v Q4_K in layer 0 (Q6_K in layer 1, use_more_bits).
 * Tolstoy's 4096-token vocabulary keeps the output matrix small.
 */
const SHAPE = { nEmbd: 768, nHead: 64, nHeadKv: 1, nFF: 512, nLayer: 2, std: 0.03, seed: 7 };
const KV_NE1 = (SHAPE.nEmbd / SHAPE.nHead) * SHAPE.nHeadKv;
const PRESETS: [keyof typeof Ftype, number][] = [
  ["Q4_0", GGMLType.Q4_0],
  ["Q4_K_M", GGMLType.Q4_K],
];
/**
 * KV cache types. With an F16 cache the f32 K/V projections are rounded to
 * f16 before attention reads them, which hides a last-bit difference in
 * them almost always; an F32 cache passes their exact bits on.
 */
const KV_TYPES = ["f32", "f16"] as const;
type KvType = typeof KV_TYPES[number];
/** ggml type ids of the oracle's KV cache. */
const KV_GGML = { f32: GGMLType.F32, f16: GGMLType.F16 } as const;
const TYPE_NAMES = new Map(Object.entries(GGMLType).map(([k, v]) => [v as number, k]));

const cpu = (await loadOracle()).cpu;
const { level: SIMD, skip: SKIP } = parityGate(cpu);
if (SKIP) console.log(`parity_repack_rule_test: skipped: ${SKIP}`);

const DIR = join(ROOT, ".cache", "repack-rule");
const F32_PATH = join(DIR, "random-kv12-f32.gguf");
let written: Promise<void> | null = null;

/** The random f32 model, written once per run. */
function f32Model(): Promise<void> {
  written ??= (async () => {
    Deno.mkdirSync(DIR, { recursive: true });
    await writeRandomLlama(F32_PATH, { ...SHAPE, type: "f32", tokenizerFrom: TOLSTOY_F32 });
  })();
  return written;
}

/** The random model quantized by llama.cpp to `name`; its K/V types must be `want`. */
async function quantized(name: keyof typeof Ftype, want: number): Promise<string> {
  await f32Model();
  const out = join(DIR, `random-kv12-${name.toLowerCase()}.gguf`);
  (await loadOracle()).quantize(F32_PATH, out, Ftype[name]);
  const kv = (await readGGUF(out)).tensors.filter((t) => /attn_[kv]\.weight$/.test(t.name));
  console.log(
    `  ${name}: ` + kv.map((t) => `${t.name} [${t.ne.join(", ")}] ${TYPE_NAMES.get(t.type)}`)
      .join(", "),
  );
  for (const t of kv) assert.equal(Number(t.ne[1]), KV_NE1, `${t.name} ne1`);
  // Q4_K_M gives attn_v more bits in some layers (use_more_bits); every
  // attn_k, and at least one attn_v, must be the preset's repackable type.
  const k = kv.filter((t) => t.name.endsWith("attn_k.weight"));
  const v = kv.filter((t) => t.name.endsWith("attn_v.weight"));
  assert.ok(k.length === SHAPE.nLayer && k.every((t) => t.type === want), "attn_k types");
  assert.ok(v.some((t) => t.type === want), "attn_v types");
  return out;
}

/** Standard deviation and top-2 gap of a logits row (to see they are not degenerate). */
function spread(l: Float32Array): string {
  let sum = 0, sq = 0, a = -Infinity, b = -Infinity;
  for (const x of l) {
    sum += x;
    sq += x * x;
    if (x > a) [a, b] = [x, b > a ? b : a];
    else if (x > b) b = x;
  }
  const mean = sum / l.length;
  const sd = Math.sqrt(sq / l.length - mean * mean);
  return `logits sd ${sd.toFixed(3)}, top-2 gap ${(a - b).toFixed(4)}`;
}

/** A prompt of n varied tokens (BOS, then a seeded walk over the vocabulary). */
function promptOf(om: OracleModel, n: number, nVocab: number): number[] {
  const out = [om.bos];
  let s = 12345;
  while (out.length < n) {
    s = (Math.imul(s, 1103515245) + 12345) >>> 0;
    out.push(3 + ((s >>> 8) % (nVocab - 3)));
  }
  return out;
}

/** Kcur/Vcur taps of every layer, the values the ne1 = 12 matrices feed (as llama.cpp names them). */
function kvTaps(nLayer: number): string[] {
  const names: string[] = [];
  for (let il = 0; il < nLayer; il++) names.push(`Kcur-${il}`, `Vcur-${il}`);
  return names;
}

/** Differences of the named taps (none when all are bit-identical). */
function tapDiffs(
  what: string,
  names: string[],
  ours: Map<string, Float32Array>,
  theirs: Map<string, Float32Array>,
): string[] {
  const out: string[] = [];
  for (const name of names) {
    const a = ours.get(name), b = theirs.get(name);
    if (!a || !b) {
      out.push(`${what}: tap ${name} missing (ours ${!!a}, llama.cpp ${!!b})`);
      continue;
    }
    const diff = firstDiff(a, b);
    if (diff) out.push(`${what}: ${name} [${diff.i}] differs by ${diff.d.toExponential(2)}`);
  }
  return out;
}

/** The batch prompt: K/V taps and the logits of every position. */
async function checkBatch(
  om: OracleModel,
  model: Model,
  prompt: number[],
  kvType: KvType,
): Promise<string[]> {
  const names = kvTaps(model.hparams.nLayer);
  using oc = om.context({ nCtx: 64, threads: 1, kvType: KV_GGML[kvType] });
  using ot = await OracleTapContext.create(om, { nCtx: 64, threads: 1, kvType: KV_GGML[kvType] });
  using ctx = await Context.create(model, { nCtx: 64, threads: 2, kvType, debugTaps: names });
  const want = oc.decode(prompt, true);
  ot.want(names);
  const wantTaps = ot.decode(prompt).taps;
  const got = (await ctx.decode(prompt, { allLogits: true })).logits;
  const out = tapDiffs(`${kvType} KV, batch`, names, ctx.lastTaps, wantTaps);
  for (let p = 0; p < prompt.length; p++) {
    const diff = firstDiff(got[p], want[p]);
    if (diff) {
      out.push(
        `${kvType} KV, batch logits ${p}: [${diff.i}] differs by ${diff.d.toExponential(2)}`,
      );
    }
  }
  return out;
}

/** Token-by-token decode: K/V taps and logits of every step. */
async function checkDecode(
  om: OracleModel,
  model: Model,
  prompt: number[],
  kvType: KvType,
): Promise<string[]> {
  const names = kvTaps(model.hparams.nLayer);
  using ot = await OracleTapContext.create(om, { nCtx: 64, threads: 1, kvType: KV_GGML[kvType] });
  using ctx = await Context.create(model, { nCtx: 64, threads: 2, kvType, debugTaps: names });
  ot.want(names);
  const out: string[] = [];
  for (let p = 0; p < prompt.length; p++) {
    const want = ot.decode([prompt[p]]);
    const got = (await ctx.decode([prompt[p]])).logits[0];
    if (p === prompt.length - 1) {
      console.log(`  ${kvType} KV, last decode step: ${spread(want.logits)}`);
    }
    out.push(...tapDiffs(`${kvType} KV, decode step ${p}`, names, ctx.lastTaps, want.taps));
    const diff = firstDiff(got, want.logits);
    if (diff) {
      out.push(
        `${kvType} KV, decode logits ${p}: [${diff.i}] differs by ${diff.d.toExponential(2)}`,
      );
    }
  }
  return out;
}

for (const [name, want] of PRESETS) {
  Deno.test({
    name: `random llama, attn_k/attn_v ne1 = ${KV_NE1}, ${name} (our ${SIMD} vs ` +
      `llama.cpp's ${cpu.name}): K/V taps and logits of batch and decode bit-identical` +
      `${SKIP ? ` [skipped: ${SKIP}]` : ""}`,
    ignore: SKIP !== "",
    sanitizeResources: false,
    fn: async () => {
      const path = await quantized(name, want);
      using om = (await loadOracle()).load(path);
      using model = await Model.load(path);
      const prompt = promptOf(om, Math.max(N_POS, N_BATCH), model.hparams.nVocab);
      const failures: string[] = [];
      for (const kvType of KV_TYPES) {
        failures.push(
          ...await checkBatch(om, model, prompt.slice(0, N_BATCH), kvType),
          ...await checkDecode(om, model, prompt.slice(0, N_POS), kvType),
        );
      }
      const rows = failures.filter((f) => f.includes("logits")).length;
      assert.deepEqual(
        failures,
        [],
        `${failures.length - rows} K/V taps and ${rows} logits rows differ; first: ${failures[0]}`,
      );
    },
  });
}
