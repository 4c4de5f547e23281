/**
 * Stream a completion as a ReadableStream of text, piped to stdout (the same
 * stream can be a `Response` body). Cancelling the stream ends the
 * generator, which stops generation.
 *
 *   deno run --allow-read --allow-env --allow-ffi examples/stream.ts [model.gguf]
 */
import { Context, generate, Model } from "@llm-edge/llm-edge";

const path = Deno.args[0] ?? new URL("../models/tolstoy-6m-f16.gguf", import.meta.url).pathname;

using model = await Model.load(path);
using ctx = await Context.create(model, { nCtx: 256 });

async function* pieces() {
  for await (const token of generate(ctx, "Natasha", { maxTokens: 32, temperature: 0, seed: 42 })) {
    if (token.text) yield token.text;
  }
}
await ReadableStream.from(pieces())
  .pipeThrough(new TextEncoderStream())
  .pipeTo(Deno.stdout.writable, { preventClose: true });
console.log();
