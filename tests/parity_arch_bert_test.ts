/**
 * bert, the non-causal encoder behind most embedding models, against
 * llama.cpp on random-weight GGUFs (tests/archs/bert.ts, with the bge WPM
 * vocabulary): every token's final hidden state, unpooled (llama.cpp with
 * embeddings on and pooling NONE, tests/oracle/oracle_embd.ts), within the
 * llama tolerances (1e-3 f32, 2e-2 f16) on both backends, and bit-identical
 * on the CPU backend where our kernels follow llama.cpp's CPU variant.
 * Also what a context does with an encoder: one graph per input (a longer
 * one is a one-line ContextError), non-causal whatever attention.causal
 * says, nothing cached, no text generation.
 */
import assert from "node:assert/strict";
import { join } from "node:path";
import { type GGUFKV, GGUFValueType, openGGUF, writeGGUFFile } from "../lib/gguf/mod.ts";
import { ModelError } from "../lib/model/hparams.ts";
import { Model } from "../lib/model/model.ts";
import { Context, ContextError, type ContextOptions } from "../lib/runtime/context.ts";
import { generateText } from "../lib/runtime/generate.ts";
import { promptIds } from "./arch_parity.ts";
import { writeRandomBert } from "./archs/bert.ts";
import { ROOT } from "./gguf_util.ts";
import { loadOracle, maxAbsDiff, ORACLE_CPU_ENV, variantScore } from "./oracle/oracle.ts";
import { OracleEmbdContext } from "./oracle/oracle_embd.ts";
import { parityGate } from "./parity_util.ts";

const DIR = Deno.makeTempDirSync({ prefix: "llm-edge-bert-" });
const F32 = join(DIR, "bert-f32.gguf");
const F16 = join(DIR, "bert-f16-gqa.gguf");
const CAUSAL = join(DIR, "bert-f32-causal-key.gguf");
const N_CTX_TRAIN = 128;
await writeRandomBert(F32, { type: "f32", nCtxTrain: N_CTX_TRAIN });
// Grouped-query attention too (llama.cpp broadcasts K/V heads; real bert files have none).
await writeRandomBert(F16, { type: "f16", nHeadKv: 2, seed: 2, nCtxTrain: N_CTX_TRAIN });
await writeRandomBert(CAUSAL, { type: "f32", causal: true, seed: 3, nCtxTrain: N_CTX_TRAIN });

const TEXTS = [
  "Hello world!",
  "  Leading spaces, ümlauts, CamelCase, 中文字符 and punctuation?!",
  "An embedding model reads the whole sentence at once: every token attends to every " +
  "other one, before and after it, so the input cannot be split into micro-batches " +
  "the way a decoder's prompt can.",
];

const cpu = (await loadOracle()).cpu;
const gate = parityGate(cpu);
/** Largest difference from llama.cpp allowed for f32 weights on the CPU backend here. */
const F32_BOUND = gate.skip ? 1e-3 : 0;

/** The inputs of every check: tokenized texts (asserted equal to llama.cpp's) and random ids. */
function inputs(model: Model, tokenize: (text: string) => number[]): number[][] {
  const out: number[][] = [];
  for (const text of TEXTS) {
    const ours = model.tokenizer.encode(text, { addSpecial: true });
    assert.deepEqual(ours, tokenize(text), `tokenization of ${JSON.stringify(text)}`);
    out.push(ours);
  }
  assert.ok(out[2].length > 32, `the long text has ${out[2].length} tokens`);
  const nVocab = model.hparams.nVocab;
  for (const [i, n] of [1, 7, 33, 100].entries()) out.push(promptIds(n, 999, nVocab, 11 + i));
  return out;
}

/**
 * Every token's hidden state of each input against llama.cpp's; returns the
 * largest difference.
 */
async function checkEncoder(
  path: string,
  o: { label: string; tol: number; backend: NonNullable<ContextOptions["backend"]> },
): Promise<number> {
  const oracle = await loadOracle();
  using om = oracle.load(path);
  using oc = await OracleEmbdContext.create(om, { nCtx: 256, nBatch: 256 });
  using model = await Model.load(path);
  assert.equal(model.hparams.arch, "bert");
  assert.equal(model.arch.output, "embeddings");
  using ctx = await Context.create(model, { threads: 2, backend: o.backend });
  let worst = 0;
  for (const [p, ids] of inputs(model, (t) => om.tokenize(t, { addSpecial: true })).entries()) {
    const want = oc.encode(ids);
    const r = await ctx.decode(ids, { allLogits: true });
    assert.equal(r.logits.length, 0);
    const got = r.embeddings!;
    assert.equal(got.length, ids.length);
    let d = 0;
    for (let i = 0; i < ids.length; i++) {
      assert.equal(got[i].length, oc.nEmbd);
      const di = maxAbsDiff(got[i], want[i]);
      assert.ok(di <= o.tol, `${o.label}: input ${p} token ${i}: hidden states differ by ${di}`);
      d = Math.max(d, di);
    }
    worst = Math.max(worst, d);
    console.log(`${o.label}: input ${p} (${ids.length} tokens) max |diff| ${d.toExponential(2)}`);
  }
  return worst;
}

for (const [file, type, tol] of [[F32, "f32", 1e-3], [F16, "f16", 2e-2]] as const) {
  Deno.test(`bert ${type}: hidden states of every token match llama.cpp (cpu, ref)`, async () => {
    const worst = await checkEncoder(file, { label: `bert ${type} cpu`, tol, backend: "cpu" });
    // Same ops in the same order as llama.cpp, so the same bits where our
    // kernels follow the loaded CPU variant (tests/parity_util.ts).
    if (!gate.skip) assert.equal(worst, 0, `bert ${type}: not bit-identical at ${gate.level}`);
    await checkEncoder(file, { label: `bert ${type} ref`, tol, backend: "ref" });
  });
}

// The other CPU variants our kernels follow, each in a child process (the
// oracle loads one variant per process): LayerNorm's variance and the GELU
// table differ between them (tests/parity_ops_test.ts does the same).
const others = Deno.env.get(ORACLE_CPU_ENV)
  ? []
  : ["icelake", "haswell", "x64"].filter((v) => v !== cpu.name);
for (const variant of others) {
  const score = await variantScore(variant);
  const why = score < 0 ? "no such library" : score === 0 ? "this CPU cannot run it" : "";
  Deno.test({
    name: `bert hidden states also match llama.cpp's ${variant} variant (child process)` +
      (why ? ` [skipped: ${why}]` : ""),
    ignore: why !== "",
    fn: async () => {
      const out = await new Deno.Command(Deno.execPath(), {
        args: [
          "test",
          "-A",
          "--no-check",
          "--filter",
          "match llama.cpp (cpu",
          import.meta.filename!,
        ],
        env: { [ORACLE_CPU_ENV]: variant, NO_COLOR: "1" },
        stdout: "piped",
        stderr: "piped",
      }).output();
      const text = new TextDecoder().decode(out.stdout) + new TextDecoder().decode(out.stderr);
      assert.ok(out.success, `${variant} child run failed:\n${text.slice(-4000)}`);
      assert.match(text, /ok \| 2 passed/, `${variant}: the child did not run both tests`);
      console.log(text.split("\n").filter((l) => /cpu: input 6/.test(l)).join("\n"));
    },
  });
}

Deno.test("bert: attention.causal = true still attends both ways, as llama.cpp's encode", async () => {
  await checkEncoder(CAUSAL, { label: "bert causal-key cpu", tol: 1e-3, backend: "cpu" });
  // The first token's state depends on the last token, in both engines.
  const oracle = await loadOracle();
  using om = oracle.load(CAUSAL);
  using oc = await OracleEmbdContext.create(om);
  using model = await Model.load(CAUSAL);
  using ctx = await Context.create(model, { threads: 2 });
  const a = [2000, 3000, 4000], b = [2000, 3000, 5000];
  assert.ok(maxAbsDiff(oc.encode(a)[0], oc.encode(b)[0]) > 1e-3);
  const ours = async (ids: number[]) => (await ctx.decode(ids, { allLogits: true })).embeddings![0];
  assert.ok(maxAbsDiff(await ours(a), await ours(b)) > 1e-3);
});

/** Asserts `f` rejects with a one-line ContextError matching `re`. */
async function rejectsContext(f: () => Promise<unknown>, re: RegExp): Promise<void> {
  await assert.rejects(f, (e: unknown) => {
    assert.ok(e instanceof ContextError, String(e));
    assert.ok(!e.message.includes("\n"), e.message);
    assert.match(e.message, re);
    return true;
  });
}

Deno.test("bert context: one graph per input, nothing cached, no generation", async () => {
  const oracle = await loadOracle();
  using om = oracle.load(F32);
  using oc = await OracleEmbdContext.create(om);
  using model = await Model.load(F32);
  const ids = promptIds(20, 999, model.hparams.nVocab, 5);
  const want = oc.encode(ids);

  // Longer than nBatch: llama.cpp asserts n_ubatch >= n_tokens; ours is an error.
  using small = await Context.create(model, { threads: 2, nBatch: 64 });
  await rejectsContext(
    () => small.decode(promptIds(65, 999, 30000, 1)),
    /^decode: 65 tokens exceed the 64 this encoder context evaluates at once \(nUbatch 64, /,
  );
  // Longer than the position table (nCtx rounds 128 up to 256, nBatch is 512).
  using ctx = await Context.create(model, { threads: 2 });
  assert.equal(ctx.nCtx, 256);
  await rejectsContext(
    () => ctx.decode(promptIds(N_CTX_TRAIN + 1, 999, 30000, 1)),
    /129 tokens of one sequence exceed the 128 positions .*training context 128/,
  );
  // Still usable, and every decode starts afresh: clear and truncate change nothing.
  const full = (await ctx.decode(ids, { allLogits: true })).embeddings!;
  assert.ok(maxAbsDiff(full[19], want[19]) <= F32_BOUND);
  await ctx.decode(promptIds(N_CTX_TRAIN, 999, 30000, 2)); // a full-length input in between
  for (const reset of [() => ctx.clear(), () => ctx.truncate(0), () => ctx.truncate(7)]) {
    reset();
    assert.equal(ctx.nPast, 0);
    const again = (await ctx.decode(ids, { allLogits: true })).embeddings!;
    full.forEach((row, i) => assert.equal(maxAbsDiff(again[i], row), 0));
  }
  // Without allLogits only the last token's state, computed as in the
  // full decode (llama.cpp's encode computes every row whatever the flags).
  const last = (await ctx.decode(ids)).embeddings!;
  assert.equal(last.length, 1);
  assert.ok(maxAbsDiff(last[0], want[19]) <= F32_BOUND);
  // Hidden states are no logits to sample from.
  await rejectsContext(
    () => generateText(ctx, "hello", { maxTokens: 4 }),
    /^generate: .*bert-f32\.gguf is a bert model, which outputs hidden states/,
  );
});

Deno.test("bert: `deno task inspect` names the architecture", async () => {
  const r = await new Deno.Command(Deno.execPath(), {
    args: ["run", "-A", join(ROOT, "lib", "cli", "inspect.ts"), F32],
    stdout: "piped",
    stderr: "piped",
  }).output();
  const out = new TextDecoder().decode(r.stdout);
  assert.equal(r.code, 0, new TextDecoder().decode(r.stderr));
  assert.match(out, /^architecture: bert/m);
  assert.match(out, /^tokenizer: bert \(pre bert-bge\), 30522 tokens/m);
});

/** A copy of F32 with its metadata edited. */
async function variant(name: string, edit: (kv: GGUFKV[]) => GGUFKV[]): Promise<string> {
  using src = await openGGUF(F32);
  const h = src.header;
  const tensors = h.tensors.map((t) => ({
    name: t.name,
    type: t.type,
    ne: [...t.ne],
    data: src.tensorBytes(t.name).slice(),
  }));
  const path = join(DIR, name);
  await writeGGUFFile(path, {
    kv: edit(h.kv.filter((x) => x.key !== "general.alignment")),
    tensors,
  });
  return path;
}

Deno.test("bert: files the graph cannot run fail at load with one ModelError", async () => {
  const noTypes = await variant(
    "no-types.gguf",
    (kv) => kv.filter((x) => x.key !== "tokenizer.ggml.token_type_count"),
  );
  // llama.cpp refuses it too ("model needs to define token type count").
  const oracle = await loadOracle();
  assert.throws(() => oracle.load(noTypes), /could not load/);
  await assert.rejects(() => Model.load(noTypes), (e: unknown) => {
    assert.ok(e instanceof ModelError);
    assert.match(e.message, /no-types\.gguf: tokenizer\.ggml\.token_type_count = 0 is invalid/);
    return true;
  });
  const headDim = await variant("key-length.gguf", (kv) => [
    ...kv,
    { key: "bert.attention.key_length", type: GGUFValueType.UINT32, value: 8 },
    { key: "bert.attention.value_length", type: GGUFValueType.UINT32, value: 8 },
  ]);
  await assert.rejects(() => Model.load(headDim), (e: unknown) => {
    assert.ok(e instanceof ModelError);
    assert.match(e.message, /key-length\.gguf: bert\.attention\.key_length 8 .* is not supported/);
    return true;
  });
});
