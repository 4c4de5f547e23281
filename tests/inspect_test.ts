/**
 * `deno task inspect`: the report's fields equal what llama.cpp reports for
 * the same file (llama_model_meta_* and the gguf API).
 */
import assert from "node:assert/strict";
import { join } from "node:path";
import { ggmlTypeName } from "../lib/ggml/types.ts";
import type { InspectReport } from "../lib/cli/inspect.ts";
import { loadOracle } from "./oracle/oracle.ts";
import { oracleReadGGUF } from "./oracle/oracle_gguf.ts";
import { ROOT, TINY, TOLSTOY } from "./gguf_util.ts";

async function inspect(...args: string[]): Promise<{ code: number; out: string; err: string }> {
  const r = await new Deno.Command(Deno.execPath(), {
    args: ["run", "-A", join(ROOT, "lib", "cli", "inspect.ts"), ...args],
    stdout: "piped",
    stderr: "piped",
  }).output();
  const dec = new TextDecoder();
  return { code: r.code, out: dec.decode(r.stdout), err: dec.decode(r.stderr) };
}

Deno.test("inspect --json: tolstoy's report matches llama.cpp", async () => {
  const r = await inspect(TOLSTOY, "--json");
  assert.equal(r.code, 0, r.err);
  const rep = JSON.parse(r.out) as InspectReport;
  const oracle = await loadOracle();
  using model = oracle.load(TOLSTOY, { vocabOnly: true });
  const meta = model.metadata();
  const arch = meta.get("general.architecture")!;
  assert.equal(rep.architecture, arch);
  assert.equal(rep.name, meta.get("general.name"));
  const hp: [keyof InspectReport["hparams"], string][] = [
    ["contextLength", "context_length"],
    ["embeddingLength", "embedding_length"],
    ["blockCount", "block_count"],
    ["feedForwardLength", "feed_forward_length"],
    ["headCount", "attention.head_count"],
    ["headCountKv", "attention.head_count_kv"],
    ["ropeDimensionCount", "rope.dimension_count"],
    ["ropeFreqBase", "rope.freq_base"],
  ];
  for (const [field, key] of hp) {
    const want = meta.get(`${arch}.${key}`);
    assert.ok(want !== undefined, key);
    assert.equal(rep.hparams[field], Number(want), key);
  }
  assert.equal(rep.tokenizer.model, meta.get("tokenizer.ggml.model"));
  assert.equal(rep.tokenizer.vocabSize, model.nVocab);
  assert.equal(rep.tokenizer.bos, model.bos);
  assert.equal(rep.tokenizer.eos, model.eos);
  assert.equal(rep.chatTemplate, meta.has("tokenizer.chat_template"));
  // llama_model_meta_* lists the scalar pairs only (arrays are left out).
  const scalars = Object.entries(rep.metadata).filter(([, m]) => !m.type.startsWith("arr"));
  assert.equal(scalars.length, meta.size);
  for (const [k, v] of meta) {
    const m = rep.metadata[k];
    assert.ok(m, k);
    if (m.type === "u32" || m.type === "i32" || m.type === "str") {
      assert.equal(String(m.value), v, k);
    }
  }

  const o = (await oracleReadGGUF(TOLSTOY))!;
  assert.equal(rep.tensors.length, o.tensors.length);
  assert.equal(rep.dataOffset, o.dataOffset);
  assert.equal(rep.alignment, o.alignment);
  rep.tensors.forEach((t, i) => {
    const ot = o.tensors[i];
    assert.equal(t.name, ot.name);
    assert.equal(t.type, ggmlTypeName(ot.type));
    assert.deepEqual([...t.shape, 1, 1, 1].slice(0, 4), ot.ne);
    assert.equal(t.bytes, ot.size);
    assert.equal(t.offset, o.dataOffset + ot.offset);
  });
  assert.equal(rep.totals.bytes, o.tensors.reduce((s, t) => s + t.size, 0));
});

Deno.test("inspect: text report and errors", async () => {
  const r = await inspect(TINY);
  assert.equal(r.code, 0, r.err);
  assert.match(r.out, /^architecture: llama/m);
  assert.match(r.out, /tokenizer: llama, 32000 tokens, bos 1, eos 2/);
  assert.match(r.out, /token_embd\.weight/);
  assert.match(r.out, /chat template: (yes|no)/);

  const bad = Deno.makeTempFileSync({ suffix: ".gguf" });
  Deno.writeFileSync(bad, new TextEncoder().encode("GGUF\x01\x00\x00\x00"));
  const e = await inspect(bad);
  assert.equal(e.code, 1);
  assert.match(e.err, /byte 4: version: GGUF v1 is not supported/);
  Deno.removeSync(bad);
  assert.equal((await inspect()).code, 2);
});
