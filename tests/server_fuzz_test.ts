/**
 * 2,000 malformed or hostile requests to the handler on loopback, 16 at a
 * time: random bytes, broken and deep JSON, hostile field values, bodies
 * of 10 MB, invalid UTF-8, wrong methods and paths, and streams the client
 * drops after the first event. Every answer is a proper status with an
 * OpenAI error body (or a 200 for a request that happens to be valid), the
 * process stays up, and every slot is free at the end.
 */
import assert from "node:assert/strict";
import { createHandler } from "../lib/server/handler.ts";
import { mulberry32 } from "./rng.ts";

import { MODEL } from "./server_util.ts";
const N = 2000;

const HOSTILE = [
  null,
  -1,
  0,
  1e308,
  -1e308,
  2 ** 53 + 1,
  2.5,
  "3",
  "",
  true,
  [],
  {},
  [1, "a"],
  { a: { b: [] } },
  "x".repeat(3000),
  "\u0000\ud800",
];
const FIELDS = [
  "max_tokens",
  "temperature",
  "top_p",
  "top_k",
  "min_p",
  "seed",
  "stop",
  "presence_penalty",
  "frequency_penalty",
  "stream",
  "stream_options",
  "response_format",
  "n",
  "logprobs",
  "top_logprobs",
  "cfg_negative_prompt",
  "cfg_scale",
  "parallel_tool_calls",
  "logit_bias",
  "grammar",
  "prompt",
  "messages",
  "model",
  "tools",
  "tool_choice",
  "mirostat",
  "nonsense",
];

Deno.test({
  name: "server fuzz: 2,000 hostile requests, no crash, OpenAI error bodies, all slots free",
  sanitizeOps: false,
  sanitizeResources: false,
  async fn() {
    const handler = createHandler({ model: MODEL, parallel: 4, ctxSize: 4 * 128 });
    await handler.ready;
    const ac = new AbortController();
    const { promise, resolve } = Promise.withResolvers<Deno.NetAddr>();
    const server = Deno.serve(
      { hostname: "127.0.0.1", port: 0, signal: ac.signal, onListen: resolve },
      handler,
    );
    const base = `http://127.0.0.1:${(await promise).port}`;
    const rand = mulberry32(1234);
    const int = (n: number) => Math.floor(rand() * n);
    const pick = <T>(a: readonly T[]) => a[int(a.length)];
    const counts: Record<string, number> = {};
    const one = async (k: number) => {
      const kind = k % 10;
      let init: RequestInit & { path?: string } = { method: "POST" };
      let path = pick(["/v1/completions", "/v1/chat/completions"]);
      const chat = path.includes("chat");
      const valid = chat
        ? { messages: [{ role: "user", content: "Hi" }], max_tokens: 2 }
        : { prompt: "Hi", max_tokens: 2 };
      if (kind === 0) {
        init.body = crypto.getRandomValues(new Uint8Array(1 + int(500)));
      } else if (kind === 1) {
        init.body = JSON.stringify(valid).slice(0, int(20));
      } else if (kind === 2) {
        init.body = "[".repeat(50000) + "]".repeat(50000); // deep JSON
      } else if (kind === 3 && k % 100 === 3) {
        init.body = new Uint8Array(10 << 20); // 10 MB
      } else if (kind === 4) {
        init = { method: pick(["GET", "PUT", "DELETE"]) };
        path = pick([path, "/health", "/nope", "/v1/models", "/tokenize"]);
      } else if (kind === 5) {
        // a stream dropped after its first event
        const ctl = new AbortController();
        const r = await fetch(`${base}${path}`, {
          method: "POST",
          body: JSON.stringify({ ...valid, max_tokens: 50, stream: true }),
          signal: ctl.signal,
        });
        counts[r.status] = (counts[r.status] ?? 0) + 1;
        if (r.ok) {
          await r.body!.getReader().read();
          ctl.abort();
        } else await r.body?.cancel();
        return;
      } else {
        const body: Record<string, unknown> = { ...valid };
        for (let j = 0; j < 1 + int(3); j++) body[pick(FIELDS)] = pick(HOSTILE);
        if (body.stream === true) body.stream = false;
        init.body = JSON.stringify(body);
      }
      let r: Response;
      try {
        r = await fetch(`${base}${path}`, init);
      } catch (e) {
        // The server may answer 413 and close before a 10 MB upload ends.
        assert.equal(kind, 3, `${path}: ${(e as Error).message}`);
        counts.reset = (counts.reset ?? 0) + 1;
        return;
      }
      counts[r.status] = (counts[r.status] ?? 0) + 1;
      const text = await r.text();
      assert.ok([200, 400, 404, 405, 413].includes(r.status), `${r.status} ${text.slice(0, 200)}`);
      if (r.status !== 200) {
        const e = JSON.parse(text).error;
        assert.ok(typeof e.message === "string" && typeof e.type === "string", text);
        assert.ok("param" in e && "code" in e, text);
      }
    };
    try {
      for (let k = 0; k < N; k += 16) {
        await Promise.all(Array.from({ length: Math.min(16, N - k) }, (_, j) => one(k + j)));
      }
      console.log(`statuses: ${JSON.stringify(counts)}`);
      for (let i = 0; i < 200 && handler.stats().free < 4; i++) {
        await new Promise((r) => setTimeout(r, 10));
      }
      assert.deepEqual(handler.stats(), { slots: 4, free: 4, queued: 0 });
      const h = await fetch(`${base}/health`);
      assert.equal(h.status, 200);
      await h.body?.cancel();
      assert.ok((counts[200] ?? 0) > 100 && (counts[400] ?? 0) > 1000);
    } finally {
      ac.abort();
      await server.finished;
      await handler.close();
    }
  },
});
