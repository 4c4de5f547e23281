/**
 * gemma (1) against llama.cpp on random-weight files (tests/archs/gemma.ts):
 * multi-query attention with a head size (key_length 32) that is not
 * nEmbd / nHead (16), embeddings scaled by sqrt(nEmbd), queries scaled after
 * NeoX RoPE, GeGLU, and the head tied to the token embeddings. The llama
 * parity standard (tests/arch_parity.ts) for f32 and f16 weights, prompts
 * of 6 to 40 tokens; `deno task inspect` and the layouts refused at load.
 */
import assert from "node:assert/strict";
import { join } from "node:path";
import type { InspectReport } from "../lib/cli/inspect.ts";
import { ModelError } from "../lib/model/hparams.ts";
import { Model } from "../lib/model/model.ts";
import { checkDecoderParity, promptIds } from "./arch_parity.ts";
import { writeRandomGemma } from "./archs/gemma.ts";
import { ROOT } from "./gguf_util.ts";
import { loadOracle } from "./oracle/oracle.ts";

const N_VOCAB = 256;
const PROMPTS = [[6, 10], [40, 1], [13, 3], [24, 4]].map(([n, seed]) =>
  promptIds(n, 1, N_VOCAB, seed)
);

const dir = await Deno.makeTempDir({ prefix: "gemma-parity-" });
const F32 = join(dir, "gemma-f32.gguf"), F16 = join(dir, "gemma-f16.gguf");
await writeRandomGemma(F32, { type: "f32", nVocab: N_VOCAB });
await writeRandomGemma(F16, { type: "f16", nVocab: N_VOCAB });

Deno.test("gemma f32: logits and greedy tokens match llama.cpp", async () => {
  const worst = await checkDecoderParity(F32, {
    label: "gemma f32",
    tol: 1e-3,
    prompts: PROMPTS,
    arch: "gemma",
  });
  console.log(`gemma f32: max |diff| ${worst.toExponential(2)}`);
});

Deno.test("gemma f16: logits and greedy tokens match llama.cpp", async () => {
  const worst = await checkDecoderParity(F16, {
    label: "gemma f16",
    tol: 2e-2,
    prompts: PROMPTS,
    arch: "gemma",
  });
  console.log(`gemma f16: max |diff| ${worst.toExponential(2)}`);
});

Deno.test("gemma f32 in micro-batches of 16: prompt chunks without outputs only fill the cache", async () => {
  await checkDecoderParity(F32, {
    label: "gemma f32 nBatch 16",
    tol: 1e-3,
    prompts: PROMPTS,
    ctx: { nBatch: 16 },
  });
});

Deno.test("gemma: the model reports its architecture and `deno task inspect` names it as llama.cpp does", async () => {
  using model = await Model.load(F32);
  assert.equal(model.hparams.arch, "gemma");
  assert.ok(model.arch.names.includes("gemma"));
  assert.equal(model.hparams.headDimK, 32);
  assert.equal(model.hparams.nHeadKv, 1);
  const r = await new Deno.Command(Deno.execPath(), {
    args: ["run", "-A", join(ROOT, "lib", "cli", "inspect.ts"), F32, "--json"],
    stdout: "piped",
    stderr: "piped",
  }).output();
  assert.equal(r.code, 0, new TextDecoder().decode(r.stderr));
  const rep = JSON.parse(new TextDecoder().decode(r.stdout)) as InspectReport;
  using om = (await loadOracle()).load(F32, { vocabOnly: true });
  const meta = om.metadata();
  assert.equal(meta.get("general.architecture"), "gemma");
  assert.equal(rep.architecture, meta.get("general.architecture"));
  for (const [field, key] of [["headCount", "head_count"], ["headCountKv", "head_count_kv"]]) {
    assert.equal(rep.hparams[field], Number(meta.get(`gemma.attention.${key}`)), key);
  }
  const text = await new Deno.Command(Deno.execPath(), {
    args: ["run", "-A", join(ROOT, "lib", "cli", "inspect.ts"), F32],
    stdout: "piped",
  }).output();
  assert.match(new TextDecoder().decode(text.stdout), /^architecture: gemma\b/m);
});

Deno.test("gemma: layouts this engine does not build fail at load, naming the key or tensor", async () => {
  const path = join(dir, "refused.gguf");
  // llama.cpp requires the RMSNorm epsilon for gemma, and so do we.
  await writeRandomGemma(path, {
    type: "f32",
    nVocab: N_VOCAB,
    meta: { "attention.layer_norm_rms_epsilon": null },
  });
  const oracle = await loadOracle();
  assert.throws(() => oracle.load(path), /could not load/);
  await assert.rejects(
    Model.load(path),
    (e) =>
      e instanceof ModelError && /missing metadata key gemma\.attention\.layer_norm_rms_epsilon/
        .test(e.message),
  );
  // llama.cpp accepts q/k/v biases here; gemma checkpoints have none, and we refuse them.
  await writeRandomGemma(path, {
    type: "f32",
    nVocab: N_VOCAB,
    extraTensors: [{ name: "blk.1.attn_k.bias", ne: [32], kind: "bias" }],
  });
  await assert.rejects(
    Model.load(path),
    (e) => e instanceof ModelError && /blk\.1\.attn_k\.bias is not supported/.test(e.message),
  );
  // llama.cpp shapes q and k with the value head size: unequal sizes are refused.
  await writeRandomGemma(path, {
    type: "f32",
    nVocab: N_VOCAB,
    meta: { "attention.value_length": 16 },
  });
  await assert.rejects(
    Model.load(path),
    (e) => e instanceof ModelError && /value_length = 16 is not supported/.test(e.message),
  );
});

globalThis.addEventListener("unload", () => Deno.removeSync(dir, { recursive: true }));
