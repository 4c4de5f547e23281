// Child of tests/wasm_generate_test.ts: greedy tokens of a model through
// mod.ts, printed as JSON. Run with --allow-read only (no FFI), it must pick
// the WebAssembly backend by itself; a 4th argument names a backend.
import { Context, generateText, Model } from "../mod.ts";

const [path, prompt, n, backend] = Deno.args;
using model = await Model.load(path);
using ctx = await Context.create(model, {
  nCtx: 256,
  ...(backend ? { backend: backend as "cpu" | "wasm" } : {}),
});
const r = await generateText(ctx, prompt, {
  maxTokens: Number(n),
  temperature: 0,
  ignoreEos: true,
});
console.log(JSON.stringify({ backend: ctx.backendChoice, tokens: r.tokens }));
