// Child of tests/wasm_generate_test.ts, run with --allow-read only (no FFI):
// greedy tokens of a model through mod.ts, printed as JSON; it must pick the
// WebAssembly backend by itself (`MODEL PROMPT N [THREADS]`: with THREADS, a
// context of that many threads, on workers). `handler MODEL PROMPT N` instead asks the
// edge handler (createHandler) for a greedy completion and prints its text.
import { Context, createHandler, generateText, Model } from "../mod.ts";

if (import.meta.main && Deno.args[0] === "handler") {
  const [, path, prompt, n] = Deno.args;
  console.log(JSON.stringify(await handlerCompletion(path, prompt, Number(n))));
} else if (import.meta.main) {
  const [path, prompt, n, threads] = Deno.args;
  using model = await Model.load(path);
  using ctx = await Context.create(model, {
    nCtx: 256,
    ...(threads ? { threads: Number(threads) } : {}),
  });
  const r = await generateText(ctx, prompt, {
    maxTokens: Number(n),
    temperature: 0,
    ignoreEos: true,
  });
  console.log(JSON.stringify({ backend: ctx.backendChoice, tokens: r.tokens }));
}

/** A greedy /v1/completions answer of the edge handler (also used in process by the test). */
export async function handlerCompletion(path: string, prompt: string, n: number): Promise<string> {
  const handler = createHandler({ model: path, parallel: 1 });
  try {
    await handler.ready;
    const res = await handler(
      new Request("http://edge/v1/completions", {
        method: "POST",
        body: JSON.stringify({ prompt, max_tokens: n, temperature: 0 }),
      }),
    );
    const body = await res.json();
    if (res.status !== 200) {
      throw new Error(`handler answered ${res.status}: ${JSON.stringify(body)}`);
    }
    return body.choices[0].text;
  } finally {
    await handler.close();
  }
}
