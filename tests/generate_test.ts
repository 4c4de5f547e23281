/**
 * End-to-end generation: our runtime's generate() and the CLI against
 * llama.cpp contexts on the same model (greedy, CFG), grammar-constrained
 * output, and cancellation.
 */
import assert from "node:assert/strict";
import { Model } from "../lib/model/model.ts";
import { Context } from "../lib/runtime/context.ts";
import { generate, generateStream, generateText } from "../lib/runtime/generate.ts";
import { loadOracle, nearTieStep, top2 } from "./oracle/oracle.ts";
import { TOLSTOY_F16, TOLSTOY_F32 } from "./oracle/models.ts";

function logSoftmax64(x: Float32Array): Float64Array {
  let max = -Infinity;
  for (const v of x) if (v > max) max = v;
  let sum = 0;
  for (const v of x) sum += Math.exp(v - max);
  const lse = max + Math.log(sum);
  return Float64Array.from(x, (v) => v - lse);
}

async function open(path: string) {
  const model = await Model.load(path);
  const ctx = await Context.create(model, { nCtx: 256, threads: 2 });
  return {
    model,
    ctx,
    [Symbol.dispose]() {
      ctx[Symbol.dispose]();
      model[Symbol.dispose]();
    },
  };
}

Deno.test("generate: CFG (scale 1.5) follows llama.cpp's two contexts through the formula", async () => {
  const prompt = "The prince looked at Natasha and said";
  const negative = "The war was cold and the soldiers";
  const scale = 1.5, n = 16;
  const oracle = await loadOracle();
  using om = oracle.load(TOLSTOY_F32);
  using main = om.context({ nCtx: 128 });
  using guide = om.context({ nCtx: 128 });
  let l = main.decode(om.tokenize(prompt, { addSpecial: true }))[0];
  let g = guide.decode(om.tokenize(negative, { addSpecial: true }))[0];
  const want: number[] = [];
  const gaps: number[] = [];
  for (let s = 0; s < n; s++) {
    const a = logSoftmax64(l), b = logSoftmax64(g);
    const mixed = Float64Array.from(a, (v, i) => scale * (v - b[i]) + b[i]);
    const [best, gap] = top2(Float32Array.from(mixed));
    want.push(best);
    gaps.push(gap);
    l = main.decode([best])[0];
    g = guide.decode([best])[0];
  }
  using m = await open(TOLSTOY_F32);
  const res = await generateText(m.ctx, prompt, {
    maxTokens: n,
    temperature: 0,
    cfg: { negativePrompt: negative, scale },
    stopAtEog: false,
  });
  // the shared near-tie rule, on the gaps of llama.cpp's mixed logits
  const upto = nearTieStep(gaps);
  assert.deepEqual(res.tokens.slice(0, upto), want.slice(0, upto));
  assert.ok(upto >= 8, `near-tie at step ${upto}`);
});

Deno.test("generate: greedy tokens equal llama.cpp's up to the first near-tie", async () => {
  const prompt = "Natasha looked at her mother and";
  const oracle = await loadOracle();
  using om = oracle.load(TOLSTOY_F16);
  using oc = om.context({ nCtx: 256 });
  const g = oc.greedy(om.tokenize(prompt, { addSpecial: true }), 32);
  using m = await open(TOLSTOY_F16);
  const res = await generateText(m.ctx, prompt, {
    maxTokens: 32,
    temperature: 0,
    stopAtEog: false,
  });
  const upto = nearTieStep(g.gaps);
  assert.deepEqual(res.tokens.slice(0, upto), g.tokens.slice(0, upto));
  // streamed text is the concatenation of the pieces (common_token_to_piece)
  const pieces = res.tokens.map((t) => om.pieceBytes(t));
  const bytes = new Uint8Array(pieces.reduce((n, p) => n + p.length, 0));
  pieces.reduce((o, p) => (bytes.set(p, o), o + p.length), 0);
  assert.equal(res.text, new TextDecoder().decode(bytes));
  assert.ok(res.timings.genTps > 0 && res.timings.promptTps > 0);
});

Deno.test("generate: a JSON schema constrains a real model's output", async () => {
  using m = await open(TOLSTOY_F16);
  const schema = {
    type: "object",
    properties: { alive: { type: "boolean" }, rank: { enum: ["prince", "count", "general"] } },
    required: ["alive", "rank"],
    additionalProperties: false,
  };
  for (const seed of [1, 2, 3, 4, 5]) {
    const res = await generateText(m.ctx, "Pierre:", { maxTokens: 200, seed, jsonSchema: schema });
    assert.equal(res.stopReason, "eog", `seed ${seed}: ${res.text}`);
    const v = JSON.parse(res.text);
    assert.equal(typeof v.alive, "boolean");
    assert.ok(["prince", "count", "general"].includes(v.rank), res.text);
    assert.deepEqual(Object.keys(v).sort(), ["alive", "rank"]);
  }
});

Deno.test("generate: an AbortSignal stops generation between tokens", async () => {
  using m = await open(TOLSTOY_F16);
  const ac = new AbortController();
  const got: number[] = [];
  await assert.rejects(async () => {
    for await (const t of generate(m.ctx, "The prince", { maxTokens: 64, signal: ac.signal })) {
      got.push(t.id);
      if (got.length === 3) ac.abort(new Error("stop here"));
    }
  }, /stop here/);
  assert.equal(got.length, 3);
});

Deno.test("generate CLI: --format json prints llama.cpp's greedy tokens for the embedded model", async () => {
  const out = await new Deno.Command(Deno.execPath(), {
    args: [
      "run",
      "-A",
      "lib/cli/generate.ts",
      "--format",
      "json",
      "--temp",
      "0",
      "-n",
      "12",
      "--prompt",
      "The prince said that",
    ],
    stdout: "piped",
    stderr: "piped",
  }).output();
  assert.ok(out.success, new TextDecoder().decode(out.stderr));
  const r = JSON.parse(new TextDecoder().decode(out.stdout));
  const oracle = await loadOracle();
  using om = oracle.load(TOLSTOY_F16);
  using oc = om.context({ nCtx: 256 });
  const g = oc.greedy(om.tokenize("The prince said that", { addSpecial: true }), 12);
  const upto = nearTieStep(g.gaps);
  assert.deepEqual(r.tokens.slice(0, upto), g.tokens.slice(0, upto));
  assert.equal(typeof r.text, "string");
  assert.ok(r.timings.prompt_tps > 0 && r.timings.gen_tps > 0);
});

Deno.test("generateStream: tokens without text of their own do not stall the stream", async () => {
  using m = await open(TOLSTOY_F16);
  // This seeded run has tokens whose text is empty (held back), which once
  // left the stream waiting for a pull that never came.
  const opts = { maxTokens: 32, temperature: 0.8, seed: 42, stopAtEog: false };
  const want = await generateText(m.ctx, "Natasha", opts);
  let text = "";
  for await (const chunk of generateStream(m.ctx, "Natasha", opts)) text += chunk;
  assert.equal(text, want.text);
  assert.equal(want.tokens.length, 32);
});

Deno.test("generateStream: text chunks concatenate to generate()'s text; cancel stops it", async () => {
  using m = await open(TOLSTOY_F16);
  const want = await generateText(m.ctx, "The prince", {
    maxTokens: 20,
    temperature: 0,
    stopAtEog: false,
  });
  let text = "";
  for await (
    const chunk of generateStream(m.ctx, "The prince", {
      maxTokens: 20,
      temperature: 0,
      stopAtEog: false,
    })
  ) {
    text += chunk;
  }
  assert.equal(text, want.text);
  const reader = generateStream(m.ctx, "The prince", { maxTokens: 200 }).getReader();
  await reader.read();
  await reader.cancel();
  // the context is free again: a new generation runs
  const again = await generateText(m.ctx, "The prince", {
    maxTokens: 4,
    temperature: 0,
    stopAtEog: false,
  });
  assert.equal(again.tokens.length, 4);
});
