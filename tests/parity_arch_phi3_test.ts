/**
 * phi3 against llama.cpp on random-weight GGUFs written in llama.cpp's
 * layout (tests/archs/phi3.ts): the decoder parity standard
 * (tests/arch_parity.ts) on f32 and f16 files covering fused and separate
 * q/k/v, q/k/v biases, a tied head, partial rotation, both LongRoPE factor
 * sets and a sliding window llama.cpp switches off; the reference backend
 * on the same graph; intermediate tensors bit for bit where our kernels
 * follow llama.cpp's CPU variant; and what both engines refuse to load.
 */
import assert from "node:assert/strict";
import { join } from "node:path";
import { ModelError } from "../lib/model/hparams.ts";
import { Model } from "../lib/model/model.ts";
import { Context } from "../lib/runtime/context.ts";
import { checkDecoderParity, promptIds } from "./arch_parity.ts";
import { type RandomPhi3Options, writeRandomPhi3 } from "./archs/phi3.ts";
import { ROOT, SHARED } from "./gguf_util.ts";
import { loadOracle } from "./oracle/oracle.ts";
import { OracleTapContext } from "./oracle/oracle_debug.ts";
import { firstDiff, parityGate } from "./parity_util.ts";

const PHI3_VOCAB = join(SHARED, "fixtures", "vocab", "ggml-vocab-phi-3.gguf");
/** Weight scale at which most of llama.cpp's greedy steps have top-2 gaps above NEAR_TIE. */
const STD = 0.3;
const F32_TOL = 1e-3;
const F16_TOL = 2e-2;

const dir = await Deno.makeTempDir({ prefix: "phi3-parity-" });
globalThis.addEventListener("unload", () => Deno.removeSync(dir, { recursive: true }));
const cpu = (await loadOracle()).cpu;
const gate = parityGate(cpu);

/** Writes `o` once per name into the temp dir; returns its path and vocabulary size. */
const files = new Map<string, Promise<{ path: string; nVocab: number }>>();
function file(name: string, o: Omit<RandomPhi3Options, "std">) {
  let f = files.get(name);
  if (!f) {
    const path = join(dir, `${name}.gguf`);
    f = writeRandomPhi3(path, { std: STD, ...o }).then((nVocab) => ({ path, nVocab }));
    files.set(name, f);
  }
  return f;
}

/** Three prompts (5, 17 and 40 tokens: the last runs the batched matmul paths) of ids in [lo, hi). */
const prompts = (lo: number, hi: number) => [5, 17, 40].map((n, i) => promptIds(n, lo, hi, i + 1));

/** Fused q|k|v, GQA, a sliding window of 16 that llama.cpp reads and disables (40-token prompt). */
const BASE = (type: "f32" | "f16") =>
  ({ type, name: "random-p3", slidingWindow: 16, seed: 4 }) as const;
/** LongRoPE: long factors (context 256 > original 128), 24 of 32 dims rotated, attn_factor, qkv bias. */
const LONG = {
  type: "f32",
  name: "random-p3",
  nRot: 24,
  ropeFactors: true,
  nCtxOrig: 128,
  attnFactor: 1.19,
  qkvBias: true,
} as const;
/** Short factors (context 256 <= original 4096), separate q/k/v with biases, tied head, MHA. */
const SHORT = {
  type: "f32",
  name: "random-p3",
  ropeFactors: true,
  nCtxOrig: 4096,
  separateQkv: true,
  qkvBias: true,
  tied: true,
  nHeadKv: 4,
} as const;

/** Runs the parity standard on a file and, where our kernels follow llama.cpp's, demands bit identity. */
async function parity(label: string, name: string, o: Omit<RandomPhi3Options, "std">, tol: number) {
  const { path, nVocab } = await file(name, o);
  const lo = o.tokenizerFrom ? 100 : 0;
  const worst = await checkDecoderParity(path, {
    label,
    tol,
    prompts: prompts(lo, nVocab),
    arch: "phi3",
  });
  console.log(
    `${label}: logits max |diff| over prompts and greedy steps ${worst.toExponential(2)}`,
  );
  if (!gate.skip) assert.equal(worst, 0, `${label}: not bit-identical on ${cpu.name}`);
}

Deno.test("phi3 f32: fused qkv, GQA, sliding window ignored as llama.cpp does", async () => {
  await parity("phi3 f32", "base-f32", BASE("f32"), F32_TOL);
});

Deno.test("phi3 f16 with the Phi-3 vocabulary and a name llama.cpp special-cases", async () => {
  await parity("phi3 f16", "phi3-vocab-f16", {
    ...BASE("f16"),
    name: "Phi3 random",
    tokenizerFrom: PHI3_VOCAB,
  }, F16_TOL);
});

Deno.test("phi3 f32 LongRoPE long factors, partial rotation, attn_factor, qkv bias", async () => {
  await parity("phi3 long", "long", LONG, F32_TOL);
});

Deno.test("phi3 f32 short factors, separate q/k/v with biases, tied output", async () => {
  await parity("phi3 short", "short", SHORT, F32_TOL);
});

Deno.test("phi3 on the reference backend (strided views, swiglu halves, freq factors)", async () => {
  const { path, nVocab } = await file("long", LONG);
  const worst = await checkDecoderParity(path, {
    label: "phi3 ref",
    tol: F32_TOL,
    prompts: [promptIds(40, 0, nVocab, 3)],
    nGen: 8,
    ctx: { backend: "ref" },
  });
  console.log(`phi3 ref: logits max |diff| ${worst.toExponential(2)}`);
});

const TAPS = [
  "attn_norm",
  "Kcur",
  "Qcur",
  "kq",
  "kq_soft_max",
  "kqv",
  "kqv_out",
  "ffn_norm",
  "ffn_up",
  "ffn_swiglu",
  "ffn_out",
  "l_out",
];

Deno.test({
  name: `phi3: a 40-token batch then single tokens are op-by-op bit-identical to llama.cpp's ` +
    `${cpu.name} variant${gate.skip ? ` [skipped: ${gate.skip}]` : ""}`,
  ignore: gate.skip !== "",
  fn: async () => {
    for (const [name, o] of [["long", LONG], ["short", SHORT]] as const) {
      const { path, nVocab } = await file(name, o);
      const oracle = await loadOracle();
      using om = oracle.load(path);
      using model = await Model.load(path);
      const names = [...Array(model.hparams.nLayer).keys()].flatMap((il) =>
        TAPS.map((t) => `${t}-${il}`)
      ).concat("result_norm", "result_output");
      using oc = await OracleTapContext.create(om, { nCtx: 256, threads: 1, kvType: 1 });
      oc.want(names);
      using ctx = await Context.create(model, { nCtx: 256, threads: 2, debugTaps: names });
      const steps = [promptIds(40, 0, nVocab, 7), [3], [4], [5]];
      for (const [s, tokens] of steps.entries()) {
        const want = oc.decode(tokens);
        const got = (await ctx.decode(tokens)).logits[0];
        for (const n of names) {
          const a = ctx.lastTaps.get(n), b = want.taps.get(n);
          assert.ok(a && b, `${name} step ${s}: tap ${n} missing (ours ${!!a}, llama.cpp ${!!b})`);
          const d = firstDiff(a, b);
          assert.equal(d, null, d ? `${name} step ${s}: ${n} differs at [${d.i}] by ${d.d}` : "");
        }
        assert.equal(firstDiff(got, want.logits), null, `${name} step ${s}: logits differ`);
      }
    }
  },
});

Deno.test("phi3 loads as phi3 and inspect names the architecture", async () => {
  const { path } = await file("base-f32", BASE("f32"));
  using model = await Model.load(path);
  assert.equal(model.hparams.arch, "phi3");
  const r = await new Deno.Command(Deno.execPath(), {
    args: ["run", "-A", join(ROOT, "lib", "cli", "inspect.ts"), path],
    stdout: "piped",
    stderr: "piped",
  }).output();
  const out = new TextDecoder().decode(r.stdout);
  assert.equal(r.code, 0, new TextDecoder().decode(r.stderr));
  assert.match(out, /^architecture: phi3/m);
});

Deno.test("phi3: files llama.cpp refuses, and the layout this engine refuses", async () => {
  const oracle = await loadOracle();
  const refused = async (name: string, o: Omit<RandomPhi3Options, "std">, msg: RegExp) => {
    const { path } = await file(name, o);
    await assert.rejects(Model.load(path), msg);
    return path;
  };
  // The epsilon is required for phi3 (llama_model_phi3::load_arch_hparams).
  const noEps = await refused(
    "no-eps",
    { ...BASE("f32"), noNormEps: true },
    /missing metadata key phi3\.attention\.layer_norm_rms_epsilon/,
  );
  assert.throws(() => oracle.load(noEps), /could not load/);
  // A name containing "phi3" makes the vocab loader set attributes of
  // </s>, <unk>, <s> and <|endoftext|>: a vocabulary without them fails in both.
  const trap = await refused("name-trap", { ...BASE("f32"), name: "random-phi3" }, /missing/);
  assert.throws(() => oracle.load(trap), /could not load/);
  // llama.cpp concatenates separate biases beside a fused qkv; not implemented here.
  await assert.rejects(
    Model.load((await file("fused-separate-bias", { ...BASE("f32"), qkvBias: "separate" })).path),
    (e: Error) =>
      e instanceof ModelError &&
      /blk\.0\.attn_q\.bias beside a fused blk\.0\.attn_qkv\.weight is not supported/.test(
        e.message,
      ) && !e.message.includes("\n"),
  );
});
