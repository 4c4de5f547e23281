/**
 * Chat with history: every turn is generated on one Sequence, which keeps
 * the conversation's tokens, so a turn evaluates only what is new
 * (`timings.reusedTokens`). The transcript format here is plain text; models
 * with a chat template get it through the OpenAI-style server
 * (examples/serve.ts, /v1/chat/completions).
 *
 *   deno run --allow-read --allow-env --allow-ffi examples/chat.ts [model.gguf]
 */
import { Context, generateText, Model } from "@llm-edge/llm-edge";

const path = Deno.args[0] ?? new URL("../models/tolstoy-6m-f16.gguf", import.meta.url).pathname;

using model = await Model.load(path);
using ctx = await Context.create(model, { nCtx: 512 });
using seq = ctx.sequence();

let transcript = "A conversation in Moscow.\n";
for (const question of ["Where is the prince?", "And what did he say?"]) {
  transcript += `Guest: ${question}\nHost:`;
  const r = await generateText(seq, transcript, { maxTokens: 16, temperature: 0 });
  // the whole reply stays in the history (it is what the sequence holds)
  transcript += `${r.text}\n`;
  console.log(`Guest: ${question}\nHost:${r.text.split("\n")[0]}`);
  console.error(`(reused ${r.timings.reusedTokens} tokens of history)`);
}
