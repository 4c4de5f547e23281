// Every script in examples/ runs as a user would run it (a subprocess,
// importing "@llm-edge/llm-edge") and its output is checked against the same
// work done here through the API, or an independent computation: ajv for the
// JSON schema, cosines computed here from unnormalized embeddings.
import assert from "node:assert/strict";
import { fileURLToPath } from "node:url";
import { Ajv } from "ajv";
import { Context, embed, generateText, Model } from "../mod.ts";
import { loadLibrary } from "../ffi/library.ts";

const ROOT = fileURLToPath(new URL("../", import.meta.url)).replace(/\/$/, "");
const MODEL = `${ROOT}/models/tolstoy-6m-f16.gguf`;
const lib = await loadLibrary();
const env = { LLM_EDGE_LIB: lib.path, NO_COLOR: "1" };

async function run(name: string) {
  const out = await new Deno.Command(Deno.execPath(), {
    args: ["run", "-A", `examples/${name}`],
    cwd: ROOT,
    env,
    stdout: "piped",
    stderr: "piped",
  }).output();
  const stdout = new TextDecoder().decode(out.stdout);
  const stderr = new TextDecoder().decode(out.stderr);
  assert.equal(out.code, 0, `examples/${name} failed:\n${stderr}`);
  return { stdout, stderr };
}

async function greedy(prompt: string, maxTokens: number, nCtx = 256): Promise<string> {
  using model = await Model.load(MODEL);
  using ctx = await Context.create(model, { nCtx });
  return (await generateText(ctx, prompt, { maxTokens, temperature: 0 })).text;
}

Deno.test("every example has a test here", () => {
  const tested = [
    "generate.ts",
    "stream.ts",
    "chat.ts",
    "json_schema.ts",
    "embeddings.ts",
    "serve.ts",
  ];
  const found = [...Deno.readDirSync(`${ROOT}/examples`)].map((e) => e.name).sort();
  assert.deepEqual(found, [...tested].sort());
});

Deno.test("examples/generate.ts prints the greedy completion", async () => {
  const { stdout, stderr } = await run("generate.ts");
  assert.equal(stdout, (await greedy("The prince", 24)) + "\n");
  assert.match(stderr, /^24 tokens, stopped by length$/m);
});

Deno.test("examples/stream.ts streams the same text generateText returns", async () => {
  const { stdout } = await run("stream.ts");
  assert.equal(stdout, (await greedy("Natasha", 32)) + "\n");
});

Deno.test("examples/chat.ts keeps the history on one sequence", async () => {
  const { stdout, stderr } = await run("chat.ts");
  const reused = [...stderr.matchAll(/reused (\d+) tokens/g)].map((m) => Number(m[1]));
  assert.equal(reused.length, 2);
  assert.equal(reused[0], 0);
  // the second turn re-evaluates nothing of the first: at least the first prompt is reused
  using model = await Model.load(MODEL);
  const firstPrompt = "A conversation in Moscow.\nGuest: Where is the prince?\nHost:";
  assert.ok(reused[1] >= model.tokenizer.encode(firstPrompt).length, `reused ${reused[1]}`);
  const first = "Host:" + (await greedy(firstPrompt, 16, 512)).split("\n")[0];
  assert.equal(stdout.split("\n")[1], first);
});

Deno.test("examples/json_schema.ts prints JSON that the schema validates (ajv)", async () => {
  const { stdout } = await run("json_schema.ts");
  const src = await Deno.readTextFile(`${ROOT}/examples/json_schema.ts`);
  const schema = new Function(
    `return (${/const schema: JsonSchema = (\{[\s\S]*?\n\});/.exec(src)![1]})`,
  )();
  const validate = new Ajv().compile(schema);
  const value = JSON.parse(stdout);
  assert.ok(validate(value), JSON.stringify(validate.errors));
});

Deno.test("examples/embeddings.ts ranks passages by cosine similarity", async () => {
  const { stdout } = await run("embeddings.ts");
  const rows = stdout.trim().split("\n").map((l) => {
    const m = /^(-?\d\.\d{4}) {2}(.*)$/.exec(l)!;
    return { score: Number(m[1]), passage: m[2] };
  });
  assert.equal(rows.length, 3);
  // the same ranking from raw (unnormalized) mean-pooled vectors and a cosine computed here
  using model = await Model.load(MODEL);
  using ctx = await Context.create(model, { embeddings: true, nSeqMax: 4, nCtx: 512 });
  const query = "soldiers and battles";
  const [q, ...docs] = await embed(ctx, [query, ...rows.map((r) => r.passage)], {
    pooling: "mean",
    normalize: -1,
  });
  const norm = (a: Float32Array) => Math.sqrt(a.reduce((s, x) => s + x * x, 0));
  const cos = docs.map((d) => d.reduce((s, x, i) => s + x * q[i], 0) / (norm(d) * norm(q)));
  for (let i = 0; i < 3; i++) assert.ok(Math.abs(cos[i] - rows[i].score) < 1e-3, `row ${i}`);
  for (let i = 1; i < 3; i++) assert.ok(rows[i - 1].score >= rows[i].score);
});

Deno.test("examples/serve.ts answers /v1/completions like generateText", async () => {
  const child = new Deno.Command(Deno.execPath(), {
    args: ["run", "-A", "examples/serve.ts"],
    cwd: ROOT,
    env: { ...env, PORT: "0" },
    stdout: "piped",
    stderr: "null",
  }).spawn();
  try {
    const reader = child.stdout.pipeThrough(new TextDecoderStream()).getReader();
    let seen = "";
    let url: string | undefined;
    while (!url) {
      const { value, done } = await reader.read();
      if (done) throw new Error(`examples/serve.ts exited: ${seen}`);
      seen += value;
      url = /listening on (http:\/\/\S+)/.exec(seen)?.[1];
    }
    reader.releaseLock();
    const res = await fetch(`${url}/v1/completions`, {
      method: "POST",
      body: JSON.stringify({ prompt: "The prince", max_tokens: 8, temperature: 0 }),
    });
    assert.equal(res.status, 200);
    const body = await res.json();
    assert.equal(body.choices[0].text, await greedy("The prince", 8));
    child.kill("SIGINT");
    assert.equal((await child.status).code, 0);
  } finally {
    try {
      child.kill("SIGKILL");
    } catch {
      // already exited
    }
    await child.stdout.cancel().catch(() => {});
  }
});
