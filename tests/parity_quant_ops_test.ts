/**
 * Op-by-op parity with llama.cpp for tolstoy-6m quantized by llama.cpp to
 * each preset: in token-by-token decode every named intermediate tensor of
 * every layer and the logits are bit-identical at each of N_POS positions,
 * and a batch (prompt) decode gives bit-identical logits at every position.
 *
 * Decode exercises the N = 1 kernels (ggml_vec_dot_*, and ggml_gemv_* for the
 * types llama.cpp repacks); the batch prompt exercises N >= 2 (ggml_gemm_* on
 * groups of 4 columns with gemv leftovers, llamafile tinyBLAS, or vec_dot),
 * and its length leaves a remainder of 3 columns so both forms run.
 *
 * Bit-identity needs our SIMD level to follow the CPU variant llama.cpp
 * loaded (tests/oracle/oracle.ts `OracleCpu`): AVX-512 ↔ its icelake build,
 * AVX2 ↔ its haswell build, scalar ↔ its x64 build (ggml's generic C quant
 * dots, no repacking; LLM_EDGE_ORACLE_CPU=x64 selects it). For other
 * variants (pre-AVX2 builds with SSE3/AVX, AMX) the test is skipped with the
 * reason printed. A
 * failure names the first tensor, in execution order, that differs.
 */
import assert from "node:assert/strict";
import { join } from "node:path";
import { Model } from "../lib/model/model.ts";
import { Context } from "../lib/runtime/context.ts";
import { loadOracle, type OracleModel } from "./oracle/oracle.ts";
import { OracleTapContext } from "./oracle/oracle_debug.ts";
import { firstDiff, parityGate, tapNames } from "./parity_util.ts";
import { TOLSTOY_F32, tolstoyQuantized } from "./oracle/models.ts";
import { Ftype } from "../lib/quant/rules.ts";
import { ROOT } from "./quant_util.ts";

/** Positions decoded one token at a time per preset. */
const N_POS = 16;
/** Batch prompt length: 4 full column groups and 3 leftover columns. */
const N_BATCH = 19;
/** llama_ftype of the presets; Q3_K_L (13) is not among our quantize tool's. */
const PRESETS: [string, number][] = [
  ...Object.entries(Ftype),
  ["Q3_K_L", 13],
];

const cpu = (await loadOracle()).cpu;
const { level: SIMD, skip: SKIP } = parityGate(cpu);
if (SKIP) console.log(`parity_quant_ops_test: skipped: ${SKIP}`);

/** tolstoy-6m quantized by llama.cpp to `ftype` (cached in .cache/models). */
async function quantized(name: string, ftype: number): Promise<string> {
  if (name in Ftype) return await tolstoyQuantized(name as keyof typeof Ftype);
  const out = join(ROOT, ".cache", "models", `tolstoy-6m-${name.toLowerCase()}.gguf`);
  try {
    Deno.statSync(out);
    return out;
  } catch {
    // not made yet
  }
  const tmp = `${out}.${Deno.pid}.tmp`;
  (await loadOracle()).quantize(TOLSTOY_F32, tmp, ftype);
  Deno.renameSync(tmp, out);
  return out;
}

/** A natural prompt of n tokens: llama.cpp's own greedy continuation of a seed. */
function naturalPrompt(om: OracleModel, n: number): number[] {
  using oc = om.context({ nCtx: 256, threads: 1 });
  const seed = om.tokenize("The prince said that", { addSpecial: true });
  return [...seed, ...oc.greedy(seed, n - seed.length).tokens];
}

/** The first batch-mode logits difference, or null. */
async function checkBatch(om: OracleModel, ctx: Context, prompt: number[]): Promise<string | null> {
  using oc = om.context({ nCtx: 256, threads: 1 });
  const want = oc.decode(prompt, true);
  const got = (await ctx.decode(prompt, { allLogits: true })).logits;
  for (let p = 0; p < prompt.length; p++) {
    const diff = firstDiff(got[p], want[p]);
    if (diff) {
      return `batch of ${prompt.length}: logits of position ${p} differ at [${diff.i}] by ${diff.d}`;
    }
  }
  return null;
}

/** The first tap (or logits) difference of a token-by-token decode, or null. */
async function checkDecode(
  om: OracleModel,
  model: Model,
  prompt: number[],
  names: string[],
): Promise<string | null> {
  // One oracle thread: each tap ends a graph chunk, and two spinning ggml
  // threads on a busy host make that slow.
  using oc = await OracleTapContext.create(om, { nCtx: 256, threads: 1 });
  using ctx = await Context.create(model, { nCtx: 256, threads: 2, debugTaps: names });
  oc.want(names);
  for (let p = 0; p < prompt.length; p++) {
    const want = oc.decode([prompt[p]]);
    const got = (await ctx.decode([prompt[p]])).logits[0];
    for (const name of names) {
      const a = ctx.lastTaps.get(name), b = want.taps.get(name);
      if (!a || !b) return `position ${p}: tap ${name} missing (ours ${!!a}, llama.cpp ${!!b})`;
      const diff = firstDiff(a, b);
      if (diff) return `decode position ${p}: ${name} first differs at [${diff.i}] by ${diff.d}`;
    }
    const diff = firstDiff(got, want.logits);
    if (diff) return `decode position ${p}: logits differ at [${diff.i}] by ${diff.d}`;
  }
  return null;
}

async function checkPreset(path: string): Promise<void> {
  const oracle = await loadOracle();
  using om = oracle.load(path);
  using model = await Model.load(path);
  const prompt = naturalPrompt(om, Math.max(N_POS, N_BATCH));
  const decode = await checkDecode(
    om,
    model,
    prompt.slice(0, N_POS),
    tapNames(model.hparams.nLayer),
  );
  using ctx = await Context.create(model, { nCtx: 256, threads: 2 });
  const batch = await checkBatch(om, ctx, prompt.slice(0, N_BATCH));
  const failures = [decode, batch].filter((f) => f !== null);
  assert.deepEqual(failures, [], failures.join("; "));
}

for (const [name, ftype] of PRESETS) {
  Deno.test({
    name: `tolstoy ${name} (our ${SIMD} vs llama.cpp's ${cpu.name}): batch logits and ` +
      `every decode op bit-identical${SKIP ? ` [skipped: ${SKIP}]` : ""}`,
    ignore: SKIP !== "",
    sanitizeResources: false,
    fn: async () => await checkPreset(await quantized(name, ftype)),
  });
}
