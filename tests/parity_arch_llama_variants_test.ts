/**
 * The llama family's variants against llama.cpp on random-weight files
 * (tests/archs/llama_variants.ts), with the llama parity standard of
 * tests/arch_parity.ts: qwen2 (q/k/v and output biases, NeoX RoPE), mistral3
 * (llama's graph; YaRN with its own beta and log-multiplier keys), llama
 * with linear and YaRN rope scaling, llama/qwen2 with the output head
 * tied to the token embeddings, and llama with every optional bias and
 * llama3's `rope_freqs.weight`. Prompts of 96 and 128 tokens plus 32 greedy
 * steps reach position 160, so RoPE's scaled and ramped frequencies all
 * matter; YaRN's original context (1024) puts the ramp inside the 16
 * rotated pairs of a 32-wide head.
 */
import { join } from "node:path";
import { checkDecoderParity, promptIds } from "./arch_parity.ts";
import {
  type LlamaVariantOptions,
  VARIANT_SHAPE,
  writeLlamaVariant,
} from "./archs/llama_variants.ts";

const DIR = Deno.makeTempDirSync({ prefix: "llm-edge-llama-variants-" });
const PROMPTS = [
  promptIds(96, 0, VARIANT_SHAPE.nVocab, 7),
  promptIds(128, 0, VARIANT_SHAPE.nVocab, 11),
];

const YARN = {
  "rope.scaling.type": "yarn",
  "rope.scaling.factor": { f32: 4 },
  "rope.scaling.original_context_length": 1024,
};

/** mistral3 reads YaRN's beta and log-multiplier keys (llama does not). */
const MISTRAL3_YARN = {
  ...YARN,
  "rope.scaling.yarn_beta_fast": { f32: 16 },
  "rope.scaling.yarn_beta_slow": { f32: 2 },
  "rope.scaling.yarn_log_multiplier": { f32: 0.1 },
};

/** Writes a variant and compares it with llama.cpp. */
async function check(label: string, o: LlamaVariantOptions, tol = 1e-3): Promise<void> {
  const path = join(DIR, `${label}.gguf`);
  await writeLlamaVariant(path, o);
  const worst = await checkDecoderParity(path, { label, tol, prompts: PROMPTS, arch: o.arch });
  console.log(`${label}: max |diff| over every prompt position and greedy step ${worst}`);
}

Deno.test("llama variants: qwen2 (q/k/v biases, NeoX) f32", async () => {
  await check("qwen2-f32", { arch: "qwen2", qkvBias: true, outputBias: true });
});

Deno.test("llama variants: qwen2 tied output f16", async () => {
  await check("qwen2-tied-f16", { arch: "qwen2", qkvBias: true, tied: true, type: "f16" }, 2e-2);
});

Deno.test("llama variants: mistral3 f32", async () => {
  await check("mistral3-f32", { arch: "mistral3", seed: 2 });
});

Deno.test("llama variants: mistral3 YaRN with beta and log-multiplier keys f32", async () => {
  await check("mistral3-yarn-f32", {
    arch: "mistral3",
    meta: MISTRAL3_YARN,
  });
});

Deno.test("llama variants: llama linear rope scaling and attn_factor f32", async () => {
  await check("llama-linear-f32", {
    arch: "llama",
    meta: {
      "rope.scaling.type": "linear",
      "rope.scaling.factor": { f32: 4 },
      // Read for every architecture; scales cos and sin (so q·k by its square).
      "rope.scaling.attn_factor": { f32: 0.9 },
    },
  });
});

Deno.test("llama variants: llama YaRN f32 (llama.cpp ignores the beta keys for llama)", async () => {
  await check("llama-yarn-f32", {
    arch: "llama",
    seed: 3,
    meta: {
      ...YARN,
      "rope.scaling.yarn_beta_fast": { f32: 16 },
      "rope.scaling.yarn_beta_slow": { f32: 2 },
    },
  });
});

Deno.test("llama variants: llama tied output f32", async () => {
  await check("llama-tied-f32", { arch: "llama", tied: true });
});

Deno.test("llama variants: llama with every optional bias and rope_freqs f32", async () => {
  await check("llama-biases-freqs-f32", {
    arch: "llama",
    qkvBias: true,
    llamaBiases: true,
    ropeFreqs: true,
  });
});
