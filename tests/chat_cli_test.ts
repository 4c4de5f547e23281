/**
 * `deno task chat` with piped input: each reply equals `generateText` on
 * a fresh context for the rendered conversation so far (greedy), `/reset`
 * starts over, and the history of earlier turns is kept in the prompt.
 */
import assert from "node:assert/strict";
import { fileURLToPath } from "node:url";
import { Model } from "../lib/model/model.ts";
import { Context } from "../lib/runtime/context.ts";
import { generateText } from "../lib/runtime/generate.ts";
import { type ChatMessage, CHATML_TEMPLATE, ChatTemplate } from "../lib/server/chat.ts";

const MODEL = fileURLToPath(new URL("../../shared/models/tolstoy-6m-f16.gguf", import.meta.url));
const CLI = fileURLToPath(new URL("../lib/cli/chat.ts", import.meta.url));

Deno.test("chat cli: greedy replies equal generateText on the rendered history; /reset", async () => {
  const sys = "You are Tolstoy.";
  const p = new Deno.Command(Deno.execPath(), {
    args: ["run", "-A", CLI, "--model", MODEL, "--temp", "0", "-n", "8", "--system", sys],
    stdin: "piped",
    stdout: "piped",
    stderr: "piped",
  }).spawn();
  const w = p.stdin.getWriter();
  await w.write(new TextEncoder().encode("Hello\n/reset\nHello\nWho is Pierre?\n"));
  await w.close();
  const r = await p.output();
  const err = new TextDecoder().decode(r.stderr);
  assert.equal(r.code, 0, err);
  assert.match(err, /history cleared/);
  const got = new TextDecoder().decode(r.stdout).split("\n");
  assert.equal(got.length, 4, JSON.stringify(got)); // three replies and the final newline

  using model = await Model.load(MODEL);
  const tpl = new ChatTemplate(CHATML_TEMPLATE, "", "");
  const reply = async (messages: ChatMessage[]) => {
    using ctx = await Context.create(model, { nCtx: 512 });
    const opts = { temperature: 0, maxTokens: 8, parseSpecial: true };
    return (await generateText(ctx, tpl.render(messages), opts)).text;
  };
  const first = [{ role: "system", content: sys }, { role: "user", content: "Hello" }];
  const a = await reply(first);
  const b = await reply([...first, { role: "assistant", content: a }, {
    role: "user",
    content: "Who is Pierre?",
  }]);
  assert.deepEqual(got.slice(0, 3), [a, a, b]);
});
