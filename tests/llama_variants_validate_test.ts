/**
 * Load-time behaviour of the llama family's variants: what llama.cpp
 * refuses or does not implement for them fails at Model.load with one
 * ModelError line naming the file and key, and `deno task inspect` names
 * qwen2 and mistral3 files' architecture as llama.cpp reads it.
 */
import assert from "node:assert/strict";
import { join } from "node:path";
import { Model, ModelError } from "../mod.ts";
import { SUPPORTED_ARCHS } from "../lib/model/arch/registry.ts";
import { writeRandomGGUF } from "../lib/model/random.ts";
import { ROOT } from "./gguf_util.ts";
import { type LlamaVariantOptions, writeLlamaVariant } from "./archs/llama_variants.ts";
import { loadOracle } from "./oracle/oracle.ts";

const DIR = Deno.makeTempDirSync({ prefix: "llm-edge-llama-variants-validate-" });
let n = 0;

async function variant(o: LlamaVariantOptions): Promise<string> {
  const path = join(DIR, `${o.arch}-${n++}.gguf`);
  await writeLlamaVariant(path, o);
  return path;
}

/** Asserts Model.load(path) rejects with one ModelError line naming the file and `part`. */
async function rejectsLoad(path: string, part: string): Promise<void> {
  await assert.rejects(() => Model.load(path), (e: unknown) => {
    assert.ok(e instanceof ModelError, `not a ModelError: ${e}`);
    assert.ok(e.message.startsWith(`${path}: `), e.message);
    assert.ok(!e.message.includes("\n"), e.message);
    assert.ok(e.message.includes(part), `${e.message} lacks ${part}`);
    return true;
  });
}

Deno.test("llama variants: an unsupported architecture lists every supported one", async () => {
  for (const arch of ["llama", "mistral3", "qwen2"]) assert.ok(SUPPORTED_ARCHS.includes(arch));
  const path = join(DIR, "gpt2.gguf");
  await writeRandomGGUF(path, {
    arch: "gpt2",
    meta: { embedding_length: 64, "attention.head_count": 4 },
    tensors: [{ name: "token_embd.weight", ne: [64, 32], kind: "matrix" }],
    nVocab: 32,
  });
  await rejectsLoad(
    path,
    `architecture 'gpt2' is not supported (supported: ${SUPPORTED_ARCHS.join(", ")})`,
  );
});

Deno.test("llama variants: mistral3's attention temperature scaling is refused", async () => {
  const path = await variant({
    arch: "mistral3",
    meta: { "attention.temperature_scale": { f32: 0.1 } },
  });
  await rejectsLoad(path, "mistral3.attention.temperature_scale = 0.1");
  // 0 (the default) is llama's graph.
  using m = await Model.load(
    await variant({ arch: "mistral3", meta: { "attention.temperature_scale": { f32: 0 } } }),
  );
  assert.equal(m.hparams.arch, "mistral3");
});

Deno.test("llama variants: rope scaling types outside llama.cpp's list, and llama's longrope, are refused", async () => {
  await rejectsLoad(
    await variant({ arch: "llama", meta: { "rope.scaling.type": "ntk" } }),
    "llama.rope.scaling.type = 'ntk' is not supported (supported: none, linear, yarn, longrope)",
  );
  await rejectsLoad(
    await variant({ arch: "llama", meta: { "rope.scaling.type": "longrope" } }),
    "llama.rope.scaling.type = 'longrope' is not supported for llama",
  );
});

Deno.test("llama variants: partial rotation and K/V head sizes that differ are refused", async () => {
  await rejectsLoad(
    await variant({ arch: "qwen2", meta: { "rope.dimension_count": 16 } }),
    "qwen2.rope.dimension_count = 16 is invalid: expected 32 (the head size) for qwen2",
  );
  await rejectsLoad(
    await variant({ arch: "mistral3", meta: { "attention.value_length": 16 } }),
    "mistral3.attention.value_length = 16 is invalid: expected 32",
  );
});

Deno.test("llama variants: mistral3's YaRN betas must be positive", async () => {
  const meta = { "rope.scaling.type": "yarn", "rope.scaling.factor": { f32: 4 } };
  await rejectsLoad(
    await variant({
      arch: "mistral3",
      meta: { ...meta, "rope.scaling.yarn_beta_fast": { f32: 0 } },
    }),
    "mistral3.rope.scaling.yarn_beta_fast = 0 is invalid",
  );
});

Deno.test("llama variants: which YaRN keys each variant reads (the parity test proves the values)", async () => {
  const yarn = {
    "rope.scaling.type": "yarn",
    "rope.scaling.factor": { f32: 4 },
    "rope.scaling.original_context_length": 1024,
    "rope.scaling.yarn_beta_fast": { f32: 16 },
    "rope.scaling.yarn_beta_slow": { f32: 2 },
  };
  // llama reads no beta keys; mistral3 does.
  using l = await Model.load(await variant({ arch: "llama", meta: yarn }));
  assert.deepEqual([l.hparams.rope.betaFast, l.hparams.rope.betaSlow], [32, 1]);
  assert.equal(l.hparams.rope.freqScale, 0.25);
  assert.equal(l.hparams.rope.extFactor, 1);
  assert.equal(l.hparams.rope.nCtxOrig, 1024);
  using m = await Model.load(await variant({ arch: "mistral3", meta: yarn }));
  assert.deepEqual([m.hparams.rope.betaFast, m.hparams.rope.betaSlow], [16, 2]);
  // A tied head reads the token embeddings.
  using t = await Model.load(await variant({ arch: "qwen2", tied: true }));
  assert.ok(!t.weightRefs.some((r) => r.name === "output.weight"));
});

Deno.test("llama variants: inspect names qwen2 and mistral3 as llama.cpp does", async () => {
  const oracle = await loadOracle();
  for (const arch of ["qwen2", "mistral3"] as const) {
    const path = await variant({ arch, qkvBias: arch === "qwen2" });
    const r = await new Deno.Command(Deno.execPath(), {
      args: ["run", "-A", join(ROOT, "lib", "cli", "inspect.ts"), path],
      stdout: "piped",
      stderr: "piped",
    }).output();
    assert.equal(r.code, 0, new TextDecoder().decode(r.stderr));
    const out = new TextDecoder().decode(r.stdout);
    using om = oracle.load(path, { vocabOnly: true });
    const theirs = om.metadata().get("general.architecture");
    assert.equal(theirs, arch);
    assert.match(out, new RegExp(`^architecture: ${theirs}\\b`, "m"));
  }
});
