// The WebAssembly backend on tolstoy-6m: f16, and q8_0 / q4_0 / q4_k made
// by our quantize tool into a temporary directory. (1) A child run with
// `deno run --allow-read` only (no FFI) imports mod.ts, picks the wasm
// backend by itself and generates the CPU backend's greedy tokens (compared
// up to the first step where the CPU's own top-2 gap is a near tie). (2) In
// process, prompt and decode logits against the CPU backend at its scalar
// level: the same C, so equal but for ROPE's libm sinf/cosf (see
// tests/wasm_ops_test.ts), which moves logits by far less than LOGIT_TOL.
// (3) The edge handler, unchanged, answers a greedy completion without FFI
// with the text it gives on the CPU backend. Skipped, naming the missing
// tool, only where the wasm toolchain is absent.
import assert from "node:assert/strict";
import { fileURLToPath } from "node:url";
import { Model } from "../lib/model/model.ts";
import { quantizeModel } from "../lib/quant/quantize.ts";
import { loadLibrary } from "../ffi/library.ts";
import { SimdLevel } from "../ffi/symbols.ts";
import { NEAR_TIE } from "./oracle/oracle.ts";
import { ourGreedy } from "./quant_util.ts";
import { WASM_SKIP, wasmModulePath, wasmTestName } from "./wasm_util.ts";
import { handlerCompletion } from "./wasm_greedy_child.ts";

const ROOT = fileURLToPath(new URL("../", import.meta.url));
const F16 = `${ROOT}models/tolstoy-6m-f16.gguf`;
const PROMPT = "Natasha looked at her mother and";
const N_GEN = 32;
/** Largest |logit| difference wasm vs cpu scalar (ROPE's libm ulps only). */
const LOGIT_TOL = 1e-3;
const ignore = WASM_SKIP !== undefined;

let files: Promise<{ dir: string; paths: Record<string, string> }> | undefined;
function models() {
  files ??= (async () => {
    await wasmModulePath();
    const dir = await Deno.makeTempDir({ prefix: "llm-edge-wasm-" });
    const paths: Record<string, string> = { f16: F16 };
    for (const t of ["q8_0", "q4_0", "q4_k"]) {
      paths[t] = `${dir}/tolstoy-6m-${t}.gguf`;
      await quantizeModel(F16, paths[t], t);
    }
    return { dir, paths };
  })();
  return files;
}

// The child: mod.ts with --allow-read only; its last stdout line as JSON.
async function child(args: string[]): Promise<unknown> {
  const out = await new Deno.Command(Deno.execPath(), {
    args: ["run", "--allow-read", "tests/wasm_greedy_child.ts", ...args],
    cwd: ROOT,
    stdout: "piped",
    stderr: "piped",
    env: { NO_COLOR: "1" },
  }).output();
  const text = new TextDecoder().decode(out.stdout).trim();
  assert.ok(out.success, `child failed: ${new TextDecoder().decode(out.stderr)}`);
  return JSON.parse(text.split("\n").at(-1)!);
}

function childTokens(
  path: string,
  threads?: number,
): Promise<{ backend: unknown; tokens: number[] }> {
  return child([path, PROMPT, String(N_GEN), ...(threads ? [String(threads)] : [])]) as Promise<
    { backend: unknown; tokens: number[] }
  >;
}

/** Greedy decode on `backend` at one thread: tokens, the top-2 gap and logits per step. */
async function greedy(path: string, backend: "cpu" | "wasm", n: number) {
  let prompt: number[];
  {
    using model = await Model.load(path);
    prompt = [...model.tokenizer.encode(PROMPT, { addSpecial: true })];
  }
  return ourGreedy(path, prompt, n, { backend, threads: 1 });
}

for (const type of ["f16", "q8_0", "q4_0", "q4_k"]) {
  Deno.test({
    name: wasmTestName(
      `wasm without --allow-ffi generates the cpu backend's greedy tokens, ` +
        `at 1 thread and at 2 on workers (${type})`,
    ),
    ignore,
    async fn() {
      const { paths } = await models();
      const [child, child2, cpu] = await Promise.all([
        childTokens(paths[type]),
        childTokens(paths[type], 2),
        greedy(paths[type], "cpu", N_GEN),
      ]);
      assert.equal(child.backend, "wasm", "the child did not pick the wasm backend by itself");
      // the workers parked for good must not keep the process alive: it ended
      assert.deepEqual(child2.tokens, child.tokens, `${type}: 2 threads differ from 1`);
      let k = cpu.gaps.findIndex((g) => g < NEAR_TIE);
      if (k < 0) k = N_GEN;
      assert.ok(
        k >= 8,
        `${type}: the cpu backend has a near tie at step ${k}: too few steps compared`,
      );
      assert.deepEqual(
        child.tokens.slice(0, k),
        cpu.tokens.slice(0, k),
        `${type}: first ${k} tokens`,
      );
      console.log(`${type}: ${k} of ${N_GEN} greedy tokens compared, equal`);
    },
  });
}

Deno.test({
  name: wasmTestName("wasm logits equal the cpu scalar level's (f16, q8_0, q4_0, q4_k)"),
  ignore,
  async fn() {
    const { paths } = await models();
    const lib = await loadLibrary();
    assert.equal(lib.symbols.le_set_simd_level(SimdLevel.SCALAR), SimdLevel.SCALAR);
    try {
      for (const [type, path] of Object.entries(paths)) {
        const w = await greedy(path, "wasm", 8), c = await greedy(path, "cpu", 8);
        assert.deepEqual(w.tokens, c.tokens, `${type}: tokens`);
        let max = 0, same = 0;
        for (let s = 0; s < c.logits.length; s++) {
          for (let i = 0; i < c.logits[s].length; i++) {
            const d = Math.abs(w.logits[s][i] - c.logits[s][i]);
            if (d === 0) same++;
            max = Math.max(max, d);
          }
        }
        console.log(`${type}: max |logit diff| ${max.toExponential(2)}, ${same} equal`);
        assert.ok(max <= LOGIT_TOL, `${type}: max |logit diff| ${max} > ${LOGIT_TOL}`);
      }
    } finally {
      lib.symbols.le_set_simd_level(SimdLevel.BEST);
    }
  },
});

Deno.test({
  name: wasmTestName("the edge handler without --allow-ffi answers the cpu backend's completion"),
  ignore,
  async fn() {
    await wasmModulePath();
    const [edge, cpu] = await Promise.all([
      child(["handler", F16, PROMPT, "16"]),
      handlerCompletion(F16, PROMPT, 16),
    ]);
    assert.ok(typeof cpu === "string" && cpu.length > 0, "empty cpu completion");
    assert.equal(edge, cpu);
  },
});

Deno.test({
  name: wasmTestName("wasm generate test: temporary models removed"),
  ignore,
  async fn() {
    const { dir } = await models();
    await Deno.remove(dir, { recursive: true });
    await assert.rejects(() => Deno.stat(dir), Deno.errors.NotFound);
  },
});
