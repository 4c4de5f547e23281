/**
 * `deno task serve`: an OpenAI-compatible HTTP server over one model.
 *
 *   deno task serve [--model F] [--host H] [--port N] [--parallel N] [--ctx-size N] [--api-key K]
 *
 * Prints `listening on http://HOST:PORT` once the model is loaded and the
 * port is open. Endpoints and defaults: lib/server/handler.ts.
 *
 * @module
 */
import { flag, runCommand } from "./args.ts";
import {
  cacheTypeFlag,
  flashAttnFlag,
  flashAttnPrecisionFlag,
  matmulOrderFlag,
  modelFlag,
  threadsFlag,
} from "./common_flags.ts";

/** The flags of `deno task serve` (llama-server's names). */
export const SERVE_FLAGS = {
  model: modelFlag(),
  host: flag.string({ default: "127.0.0.1", description: "address to listen on" }),
  port: flag.int({ min: 0, max: 65535, default: 8080, description: "port; 0 = any free port" }),
  parallel: flag.int({
    aliases: ["np"],
    min: 1,
    max: 256,
    default: 4,
    description: "requests served at once (sequences)",
  }),
  "ctx-size": flag.int({
    short: "c",
    min: 0,
    default: 0,
    defaultText: "per slot the training context, at most 4096",
    description: "context size in tokens, split between the slots",
  }),
  "batch-size": flag.int({
    short: "b",
    min: 1,
    default: 512,
    description: "tokens per decode: a long prompt goes in chunks of this size beside the streams",
  }),
  "api-key": flag.string({ description: "require Authorization: Bearer KEY" }),
  "chat-template-file": flag.string({
    value: "FILE",
    description: "Jinja chat template overriding the model's",
  }),
  "flash-attn": flashAttnFlag(),
  "fa-precision": flashAttnPrecisionFlag(),
  "matmul-order": matmulOrderFlag(),
  "kv-unified": flag.boolean({
    aliases: ["kvu"],
    description:
      "one KV pool shared by all slots (llama-server's -kvu); default one stream per slot",
  }),
  "cache-type": cacheTypeFlag(),
  threads: threadsFlag(),
};

const SPEC = {
  name: "serve",
  summary: "Serves a GGUF model over OpenAI-compatible HTTP endpoints (llama-server's flags).",
  flags: SERVE_FLAGS,
  notes: ["Exit codes: 0 stopped by a signal, 1 a load or listen failure, 2 a bad command line."],
};

/** Runs the server with `args` until SIGINT/SIGTERM; returns the exit code. */
export function main(args: string[]): Promise<number> {
  return runCommand(SPEC, args, async ({ values: a }) => {
    const { createHandler } = await import("../server/handler.ts");
    const tpl = a["chat-template-file"];
    const handler = createHandler({
      model: a.model,
      parallel: a.parallel,
      ctxSize: a["ctx-size"] || undefined,
      apiKey: a["api-key"],
      batchSize: a["batch-size"],
      threads: a.threads,
      flashAttn: a["flash-attn"],
      flashAttnPrecision: a["fa-precision"] as "default" | "f32",
      matmulOrder: a["matmul-order"] as "default" | "fast",
      kvUnified: a["kv-unified"],
      kvType: a["cache-type"] as "f16" | "f32" | "q8_0",
      chatTemplate: tpl === undefined ? undefined : await Deno.readTextFile(tpl),
    });
    await handler.ready;
    const ac = new AbortController();
    const { promise: listening, resolve } = Promise.withResolvers<Deno.NetAddr>();
    const server = Deno.serve({
      hostname: a.host,
      port: a.port,
      signal: ac.signal,
      onListen: resolve,
    }, handler);
    const addr = await listening;
    const host = addr.hostname.includes(":") ? `[${addr.hostname}]` : addr.hostname;
    console.log(`listening on http://${host}:${addr.port}`);
    const stop = () => ac.abort();
    Deno.addSignalListener("SIGINT", stop);
    Deno.addSignalListener("SIGTERM", stop);
    try {
      await server.finished;
    } finally {
      Deno.removeSignalListener("SIGINT", stop);
      Deno.removeSignalListener("SIGTERM", stop);
      await handler.close();
    }
    return 0;
  });
}

if (import.meta.main) Deno.exit(await main(Deno.args));
