/**
 * `deno task bench:server`: the edge handler under load. N streaming chat
 * clients on loopback, each asking again as soon as its answer ends, for a
 * fixed time; prints the aggregate generated tokens/s for each N, the ratio
 * to one client, how many requests completed or failed, and the server's
 * RSS sampled every second (the curve after warm-up should be flat).
 *
 *   deno task bench:server [--model FILE] [--clients 1,16] [--seconds 20] [--tokens 64]
 *
 * @module
 */
import { flag, runCommand } from "../lib/cli/args.ts";
import { DEFAULT_MODEL } from "../lib/cli/generate.ts";
import { createHandler } from "../lib/server/handler.ts";

const SPEC = {
  name: "bench:server",
  summary: "Aggregate tokens/s of N concurrent streaming clients of the OpenAI handler.",
  flags: {
    model: flag.string({ default: DEFAULT_MODEL, description: "GGUF model file" }),
    clients: flag.string({ default: "1,16", description: "client counts, comma-separated" }),
    seconds: flag.number({ above: 0, default: 20, description: "seconds per client count" }),
    tokens: flag.int({ min: 1, default: 64, description: "max_tokens per request" }),
  },
};

const PROMPTS = ["The prince", "Natasha", "Pierre said", "In the morning", "The old count"];

async function client(base: string, i: number, tokens: number, until: number) {
  let done = 0, failed = 0, generated = 0, k = i;
  while (performance.now() < until) {
    try {
      const r = await fetch(`${base}/v1/chat/completions`, {
        method: "POST",
        body: JSON.stringify({
          messages: [{ role: "user", content: PROMPTS[k++ % PROMPTS.length] }],
          max_tokens: tokens,
          stream: true,
          stream_options: { include_usage: true },
          seed: k,
        }),
      });
      if (!r.ok) throw new Error(`status ${r.status}`);
      const text = await r.text();
      const usage = text.split("\n").filter((l) => l.startsWith("data: {"))
        .map((l) => JSON.parse(l.slice(6))).find((c) => c.usage)?.usage;
      if (!usage || !text.endsWith("data: [DONE]\n\n")) throw new Error("stream ended early");
      generated += usage.completion_tokens;
      done++;
    } catch {
      failed++;
    }
  }
  return { done, failed, generated };
}

if (import.meta.main) {
  Deno.exit(
    await runCommand(SPEC, Deno.args, async ({ values: a }) => {
      const counts = a.clients.split(",").map(Number);
      const handler = createHandler({ model: a.model, parallel: Math.max(...counts) });
      await handler.ready;
      const ac = new AbortController();
      const { promise, resolve } = Promise.withResolvers<Deno.NetAddr>();
      const server = Deno.serve({
        port: 0,
        hostname: "127.0.0.1",
        signal: ac.signal,
        onListen: resolve,
      }, handler);
      const base = `http://127.0.0.1:${(await promise).port}`;
      let single = 0;
      for (const n of counts) {
        const rss: number[] = [];
        const timer = setInterval(() => rss.push(Deno.memoryUsage().rss / 2 ** 20), 1000);
        const t0 = performance.now();
        const until = t0 + a.seconds * 1000;
        const res = await Promise.all(
          Array.from({ length: n }, (_, i) => client(base, i, a.tokens, until)),
        );
        const secs = (performance.now() - t0) / 1000;
        clearInterval(timer);
        const tok = res.reduce((s, r) => s + r.generated, 0);
        const tps = tok / secs;
        if (n === 1) single = tps;
        console.log(
          `clients ${n}: ${tps.toFixed(1)} tok/s aggregate` +
            (single && n !== 1 ? ` (${(tps / single).toFixed(2)}x one client)` : "") +
            `, ${res.reduce((s, r) => s + r.done, 0)} requests done, ` +
            `${res.reduce((s, r) => s + r.failed, 0)} failed; RSS MiB ${
              rss.map((x) => x.toFixed(0)).join(" ")
            }`,
        );
        console.log(`  slots after: ${JSON.stringify(handler.stats())}`);
      }
      ac.abort();
      await server.finished;
      await handler.close();
      return 0;
    }),
  );
}
