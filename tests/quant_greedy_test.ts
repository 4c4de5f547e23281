/**
 * Greedy 64-token continuations of tolstoy-6m quantized by llama.cpp to every
 * preset, in our engine and in llama.cpp, under the shared near-tie rule
 * (tests/oracle/oracle.ts NEAR_TIE): the same tokens and close logits at
 * every step before llama.cpp's first top-2 gap below NEAR_TIE.
 */
import { assertSameGreedy, llamaQuantized, N_GEN } from "./quant_util.ts";

// Every llama.cpp preset of tolstoy-6m. Q4_0/Q4_K (and Q2_K on AVX-512) weights
// run through llama.cpp's repacked kernels (ggml-cpu/repack.cpp) and the rest
// through its x86 vec_dot kernels; ours follow each one's float order
// (kernels/src/q_*.c), so the continuations agree token for token.
const PRESETS = [
  "Q8_0",
  "Q4_0",
  "Q4_1",
  "Q5_0",
  "Q5_1",
  "Q2_K",
  "Q3_K_S",
  "Q3_K_M",
  "Q4_K_S",
  "Q4_K_M",
  "Q5_K_S",
  "Q5_K_M",
  "Q6_K",
] as const;

for (const name of PRESETS) {
  Deno.test(`greedy 64 tokens match llama.cpp on tolstoy-6m ${name}`, async () => {
    for (const r of await assertSameGreedy(await llamaQuantized(name), name)) {
      console.log(
        `${name}: compared ${r.upto} steps` + (r.upto < N_GEN ? ` (near-tie at ${r.upto})` : "") +
          `, logits max |diff| ${r.worst.toExponential(2)}` +
          (r.firstDifferent < 0
            ? `, all ${N_GEN} tokens equal`
            : `, first token difference at ${r.firstDifferent}`),
      );
    }
  });
}
