/**
 * `deno task chat`: an interactive chat with a model in the terminal.
 *
 *   deno task chat [--model F] [--system TEXT] [--temp T] [-n N] [--seed S]
 *
 * Each line you type is a user turn; the reply streams on stdout. The
 * conversation is rendered with the model's chat template (ChatML when it
 * has none, as the server does) and kept on one sequence, so each turn
 * evaluates only its new tokens. Ctrl-C stops a reply; Ctrl-C while no
 * reply runs exits; `/reset` clears the history, `/exit` (or end of input)
 * quits. Notices go to stderr, replies (one line each) to stdout.
 *
 * @module
 */
import { flag, runCommand } from "./args.ts";
import { modelFlag, threadsFlag } from "./common_flags.ts";

/** The flags of `deno task chat`. */
export const CHAT_FLAGS = {
  model: modelFlag(),
  system: flag.string({ description: "system prompt" }),
  temp: flag.number({ default: 0.8, description: "temperature; <= 0 is greedy" }),
  "n-predict": flag.int({
    short: "n",
    min: 1,
    default: 256,
    description: "most tokens per reply",
  }),
  seed: flag.int({ short: "s", min: -1, max: 0xffffffff, default: -1, description: "random seed" }),
  ctx: flag.int({
    short: "c",
    aliases: ["ctx-size"],
    min: 0,
    default: 0,
    defaultText: "training context, at most 4096",
    description: "context size in tokens",
  }),
  "chat-template-file": flag.string({ value: "FILE", description: "Jinja chat template" }),
  threads: threadsFlag(),
};

const SPEC = {
  name: "chat",
  summary: "Chats with a GGUF model on the terminal (its chat template, history kept in cache).",
  flags: CHAT_FLAGS,
  notes: ["Commands: /reset clears the history, /exit quits. Ctrl-C stops a reply."],
};

async function* lines(stream: ReadableStream<Uint8Array>): AsyncGenerator<string> {
  let buf = "";
  for await (const chunk of stream.pipeThrough(new TextDecoderStream())) {
    buf += chunk;
    let i;
    while ((i = buf.indexOf("\n")) >= 0) {
      yield buf.slice(0, i).replace(/\r$/, "");
      buf = buf.slice(i + 1);
    }
  }
  if (buf) yield buf;
}

/** Runs the chat with `args` until /exit, end of input or Ctrl-C while idle. */
export function main(args: string[]): Promise<number> {
  return runCommand(SPEC, args, async ({ values: a }) => {
    const { Model } = await import("../model/model.ts");
    const { Context } = await import("../runtime/context.ts");
    const { generate } = await import("../runtime/generate.ts");
    const { CHATML_TEMPLATE, ChatTemplate } = await import("../server/chat.ts");
    const { StopScanner } = await import("../server/stop.ts");
    using model = await Model.load(a.model);
    const nCtx = a.ctx || Math.min(model.hparams.nCtxTrain, 4096);
    using ctx = await Context.create(model, { nCtx, threads: a.threads });
    using seq = ctx.sequence();
    const tok = model.tokenizer;
    const piece = (id: number) => id >= 0 ? tok.tokenToPiece(id, { special: true }) : "";
    const file = a["chat-template-file"];
    const own = model.file.header.get("tokenizer.chat_template")?.value as string | undefined;
    const src = file !== undefined ? await Deno.readTextFile(file) : own ?? CHATML_TEMPLATE;
    const template = new ChatTemplate(src, piece(tok.bos), piece(tok.eos));
    // Without a template of its own the model never learnt ChatML's end
    // marker as a token: stop at its text instead.
    const stops = src === CHATML_TEMPLATE ? ["<|im_end|>", "<|im_start|>"] : [];
    const start = a.system !== undefined ? [{ role: "system", content: a.system }] : [];
    let history = [...start];
    const tty = Deno.stdin.isTerminal();
    const out = new TextEncoder();
    const write = (s: string) => Deno.stdout.write(out.encode(s));
    let reply: AbortController | null = null;
    const onSigint = () => {
      if (reply && !reply.signal.aborted) reply.abort(new Error("stopped"));
      else Deno.exit(130);
    };
    Deno.addSignalListener("SIGINT", onSigint);
    try {
      if (tty) console.error("chat: /reset clears the history, /exit quits, Ctrl-C stops a reply");
      if (tty) await write("> ");
      for await (const line of lines(Deno.stdin.readable)) {
        if (line === "/exit") break;
        if (line === "/reset") {
          history = [...start];
          await seq.clear();
          console.error("chat: history cleared");
        } else if (line.trim()) {
          const turn = [...history, { role: "user", content: line }];
          let prompt: string;
          try {
            prompt = template.render(turn);
          } catch (e) {
            console.error(`chat: ${(e as Error).message}`);
            continue;
          }
          const bos = piece(tok.bos);
          reply = new AbortController();
          const scan = new StopScanner(stops);
          let text = "";
          try {
            const it = generate(seq, prompt, {
              maxTokens: a["n-predict"],
              temperature: a.temp,
              seed: a.seed,
              parseSpecial: true,
              addSpecial: !(bos && prompt.startsWith(bos)),
              signal: reply.signal,
            });
            for await (const t of it) {
              const r = scan.push(t.text);
              text += r.text;
              await write(r.text);
              if (r.stopped) break;
            }
            const rest = scan.flush();
            text += rest;
            await write(rest);
          } catch (e) {
            if (!reply.signal.aborted) {
              console.error(`\nchat: ${(e as Error).message} (/reset starts over)`);
              continue;
            }
          } finally {
            reply = null;
          }
          await write("\n");
          history = [...turn, { role: "assistant", content: text }];
        }
        if (tty) await write("> ");
      }
      return 0;
    } finally {
      Deno.removeSignalListener("SIGINT", onSigint);
    }
  });
}

if (import.meta.main) Deno.exit(await main(Deno.args));
