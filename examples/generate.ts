/**
 * Generate a completion.
 *
 *   deno run --allow-read --allow-env --allow-ffi examples/generate.ts [model.gguf]
 *
 * (The first run may also need --allow-net and --allow-write to fetch the
 * native library into ~/.cache/llm-edge, or --allow-run to build it.)
 */
import { Context, generateText, Model } from "@llm-edge/llm-edge";

const path = Deno.args[0] ?? new URL("../models/tolstoy-6m-f16.gguf", import.meta.url).pathname;

using model = await Model.load(path);
using ctx = await Context.create(model, { nCtx: 256 });
const result = await generateText(ctx, "The prince", { maxTokens: 24, temperature: 0 });
console.log(result.text);
console.error(`${result.tokens.length} tokens, stopped by ${result.stopReason}`);
