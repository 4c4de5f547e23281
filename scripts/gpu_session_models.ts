/**
 * For scripts/gpu_session.sh: writes the random llama that `deno task bench
 * --shape S` uses and llama.cpp's Q8_0, Q4_0 and Q4_K_M quantizations of it,
 * under the names the bench looks for (so it skips this work), while the GPU
 * tests run.
 *
 *   deno run -A scripts/gpu_session_models.ts [1.1b|125m] [threads]
 *
 * @module
 */
import { writeRandomLlama } from "../lib/model/random.ts";
import { loadOracle } from "../tests/oracle/oracle.ts";
import { Ftype } from "../lib/quant/rules.ts";
import { BENCH_SHAPES } from "../bench/bench.ts";

const shape = Deno.args[0] ?? "1.1b";
const threads = Number(Deno.args[1] ?? navigator.hardwareConcurrency);
if (!(shape in BENCH_SHAPES)) throw new Error(`shape: ${shape} is not one of the bench's shapes`);
const dir = new URL("../.cache/bench/", import.meta.url).pathname;
Deno.mkdirSync(dir, { recursive: true });
const f16 = `${dir}random-${shape}-f16.gguf`;
let t = performance.now();
await writeRandomLlama(f16, {
  type: "f16",
  ...BENCH_SHAPES[shape],
  tokenizerFrom: new URL("../../shared/fixtures/models/llama-2-tiny-random.gguf", import.meta.url)
    .pathname,
});
console.log(`models: ${f16} in ${(performance.now() - t).toFixed(0)} ms`);
const oracle = await loadOracle();
const types = [["q8_0", Ftype.Q8_0], ["q4_0", Ftype.Q4_0], ["q4_k_m", Ftype.Q4_K_M]] as const;
for (const [name, ftype] of types) {
  t = performance.now();
  oracle.quantize(f16, f16.replace(/\.gguf$/, `-${name}.gguf`), ftype, threads);
  console.log(`models: ${name} in ${(performance.now() - t).toFixed(0)} ms`);
}
