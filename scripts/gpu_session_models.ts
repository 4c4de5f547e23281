/**
 * For scripts/gpu_session.sh: writes the random llama that `deno task bench
 * --shape S` uses and llama.cpp's Q8_0, Q4_0 and Q4_K_M quantizations of it
 * (bench/models.ts, so the bench finds them made) while the GPU tests run.
 *
 *   deno run -A scripts/gpu_session_models.ts [1.1b|125m] [threads] [q8_0,q4_0,q4_k_m]
 *
 * @module
 */
import { benchModel, quantizedModel } from "../bench/models.ts";

const shape = Deno.args[0] ?? "1.1b";
const threads = Number(Deno.args[1] ?? navigator.hardwareConcurrency);
let t = performance.now();
const f16 = await benchModel(shape);
console.log(`models: ${f16} in ${(performance.now() - t).toFixed(0)} ms`);
for (const type of (Deno.args[2] ?? "q8_0,q4_0,q4_k_m").split(",")) {
  t = performance.now();
  await quantizedModel(f16, type, threads);
  console.log(`models: ${type} in ${(performance.now() - t).toFixed(0)} ms`);
}
