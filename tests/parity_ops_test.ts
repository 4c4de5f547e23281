/**
 * Op-by-op parity with llama.cpp in token-by-token decode: every named
 * intermediate tensor of every layer (llama.cpp's graph callback names) and
 * the logits must be bit-identical at each of 64 positions, for tolstoy in
 * f32, f16 and q8_0 with the default F16 KV cache (and f32 with an F32 one).
 *
 * Which kernels must match depends on the CPU variant llama.cpp loaded
 * (tests/oracle/oracle.ts `OracleCpu`): AVX-512 variants (icelake, ...) are
 * matched by our AVX-512 level, haswell by our AVX2 level, x64 by our scalar
 * level; loadOracle() puts our kernels at that level. Variants we do not
 * reproduce (sse42, sandybridge, ivybridge, piledriver) skip these tests with
 * the reason in the test name, and tests/parity_test.ts's tolerances apply. The test at the end reruns this
 * file in a child process against each other variant the CPU can execute
 * (LLM_EDGE_ORACLE_CPU), so an AVX-512 host checks both orders.
 * A failure names the first tensor, in execution order, that differs.
 */
import assert from "node:assert/strict";
import { Model } from "../lib/model/model.ts";
import { Context } from "../lib/runtime/context.ts";
import { loadOracle, ORACLE_CPU_ENV, variantScore } from "./oracle/oracle.ts";
import { OracleTapContext } from "./oracle/oracle_debug.ts";
import { firstDiff, parityGate, tapNames } from "./parity_util.ts";
import { TOLSTOY_F16, TOLSTOY_F32, tolstoyQuantized } from "./oracle/models.ts";

const N_POS = 64;
/** Variants whose order our kernels follow, each checked where the CPU runs it. */
const CHECKED_VARIANTS = ["icelake", "haswell", "x64"];
/** Limit of one child run (4 tests, ~1 s of compute each on an idle host). */
const CHILD_TIMEOUT_MS = 300_000;

const cpu = (await loadOracle()).cpu;
const { level: levelName, skip: why } = parityGate(cpu);
const skip = why ? `skipped: ${why}` : "";
if (skip) console.log(`parity_ops_test: llama.cpp's CPU variant is ${cpu.name}; ${skip}`);

async function checkDecode(path: string, kvType: "f16" | "f32"): Promise<void> {
  const oracle = await loadOracle(); // also sets our SIMD level to cpu.simdLevel
  using om = oracle.load(path);
  using model = await Model.load(path);
  const names = tapNames(model.hparams.nLayer);
  // One oracle thread: the callback ends a graph chunk at every tap, and two
  // spinning threads on a busy host turn each chunk boundary into a long wait.
  using oc = await OracleTapContext.create(om, {
    nCtx: 256,
    threads: 1,
    kvType: kvType === "f16" ? 1 : 0,
  });
  using ctx = await Context.create(model, { nCtx: 256, threads: 2, kvType, debugTaps: names });

  // A natural prompt: llama.cpp's own greedy continuation of a seed.
  const seed = om.tokenize("The prince said that", { addSpecial: true });
  const prompt = [...seed];
  for (let r = oc.decode(seed).logits; prompt.length < N_POS;) {
    let best = 0;
    for (let i = 1; i < r.length; i++) if (r[i] > r[best]) best = i;
    prompt.push(best);
    r = oc.decode([best]).logits;
  }
  oc.clear();
  oc.want(names);

  for (let p = 0; p < N_POS; p++) {
    const want = oc.decode([prompt[p]]);
    const got = (await ctx.decode([prompt[p]])).logits[0];
    for (const name of names) {
      const a = ctx.lastTaps.get(name), b = want.taps.get(name);
      assert.ok(a && b, `position ${p}: tap ${name} missing (ours ${!!a}, llama.cpp ${!!b})`);
      const diff = firstDiff(a, b);
      assert.equal(
        diff,
        null,
        diff ? `position ${p}: ${name} first differs at [${diff.i}] by ${diff.d}` : "",
      );
    }
    const diff = firstDiff(got, want.logits);
    assert.equal(diff, null, `position ${p}: logits differ by ${diff?.d}`);
  }
}

for (
  const [label, file, kv] of [
    ["f32", () => TOLSTOY_F32, "f16"],
    ["f16", () => TOLSTOY_F16, "f16"],
    ["q8_0", () => tolstoyQuantized("Q8_0"), "f16"],
    ["f32", () => TOLSTOY_F32, "f32"],
  ] as const
) {
  Deno.test({
    name: `tolstoy ${label}, ${kv} KV cache: token-by-token decode is op-by-op bit-identical ` +
      `to llama.cpp's ${cpu.name} variant (our ${levelName} kernels)${skip ? ` [${skip}]` : ""}`,
    ignore: !cpu.exact,
    sanitizeResources: false,
    fn: async () => await checkDecode(await file(), kv),
  });
}

// The other variants, each in a child process (the oracle loads one CPU
// variant per process). Not nested: a child has ORACLE_CPU_ENV set.
const others = Deno.env.get(ORACLE_CPU_ENV) ? [] : CHECKED_VARIANTS.filter((v) => v !== cpu.name);
for (const variant of others) {
  const score = await variantScore(variant);
  const why = score < 0 ? "no such library" : score === 0 ? "this CPU cannot run it" : "";
  if (why) console.log(`parity_ops_test: not checking llama.cpp's ${variant} variant: ${why}`);
  Deno.test({
    name: `op-by-op parity also holds against llama.cpp's ${variant} variant ` +
      `(${ORACLE_CPU_ENV}=${variant}, child process)${why ? ` [skipped: ${why}]` : ""}`,
    ignore: why !== "",
    fn: async () => {
      const out = await new Deno.Command(Deno.execPath(), {
        args: ["test", "-A", "--no-check", new URL(import.meta.url).pathname],
        env: { [ORACLE_CPU_ENV]: variant, NO_COLOR: "1" },
        stdout: "piped",
        stderr: "piped",
        signal: AbortSignal.timeout(CHILD_TIMEOUT_MS),
      }).output();
      const text = new TextDecoder().decode(out.stdout) + new TextDecoder().decode(out.stderr);
      const summary = text.split("\n").filter((l) => / (ok|FAILED|ignored) \(/.test(l));
      console.log(summary.join("\n"));
      assert.ok(out.success, `${variant} child run failed:\n${text.slice(-4000)}`);
      // the child must have run the four decode tests, not skipped them
      assert.ok(!/ \.\.\. ignored/.test(text), `${variant}: the child skipped tests:\n${text}`);
    },
  });
}
