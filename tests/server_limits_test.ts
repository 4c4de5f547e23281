/**
 * The server's edges: `deno task serve` (its URL, the API key), 503 while
 * the model loads and when the queue is full, a queued request's abort,
 * and 300 hostile field values and bodies each answered with a proper
 * status and OpenAI error body, the slot free at the end.
 */
import assert from "node:assert/strict";
import { fileURLToPath } from "node:url";
import { createHandler } from "../lib/server/handler.ts";
import { KEY, MODEL, SLOT } from "./server_util.ts";

Deno.test({
  name: "server: deno task serve prints its URL, asks for the API key, warns of nothing",
  sanitizeResources: false,
  async fn() {
    const cli = fileURLToPath(new URL("../lib/cli/serve.ts", import.meta.url));
    const proc = new Deno.Command(Deno.execPath(), {
      args: [
        "run",
        "-A",
        cli,
        "--model",
        MODEL,
        "--port",
        "0",
        "--parallel",
        "1",
        "--api-key",
        KEY,
      ],
      stdout: "piped",
      stderr: "piped",
    }).spawn();
    const stderr = new Response(proc.stderr).text();
    try {
      const reader = proc.stdout.pipeThrough(new TextDecoderStream()).getReader();
      let out = "";
      while (!out.includes("\n")) {
        const { done, value } = await reader.read();
        if (done) break;
        out += value;
      }
      const url = out.match(/^listening on (http:\/\/127\.0\.0\.1:\d+)$/m)?.[1];
      assert.ok(url, `no URL in ${JSON.stringify(out)}`);
      const no = await fetch(`${url}/v1/models`);
      assert.equal(no.status, 401);
      assert.equal((await no.json()).error.type, "authentication_error");
      const yes = await fetch(`${url}/v1/models`, { headers: { authorization: `Bearer ${KEY}` } });
      assert.equal(yes.status, 200);
      assert.equal((await yes.json()).object, "list");
      // A finished request whose signal the handler watched: Deno.serve's
      // legacy mode would abort that signal and print a warning.
      const done = await fetch(`${url}/v1/completions`, {
        method: "POST",
        headers: { authorization: `Bearer ${KEY}` },
        body: JSON.stringify({ prompt: "The prince", max_tokens: 2 }),
      });
      assert.equal(done.status, 200);
      await done.json();
      reader.releaseLock();
    } finally {
      proc.kill("SIGTERM");
      assert.equal((await proc.status).code, 0);
      await proc.stdout.cancel().catch(() => {});
    }
    assert.equal(await stderr, "");
  },
});

Deno.test({
  name: "server: 503 while loading or with a full queue, a queued abort, 300 hostile requests",
  sanitizeOps: false,
  sanitizeResources: false,
  async fn() {
    const handler = createHandler({ model: MODEL, parallel: 1, ctxSize: SLOT, maxQueue: 1 });
    const loading = await handler(new Request("http://x/health"));
    assert.equal(loading.status, 503);
    assert.equal((await loading.json()).error.type, "unavailable_error");
    await handler.ready;
    try {
      const url = "http://x/v1/completions";
      const req = (body: unknown, signal?: AbortSignal) =>
        new Request(url, { method: "POST", body: JSON.stringify(body), signal });
      // One slot: a streaming request holds it, a second waits, its abort frees the wait.
      // The holder must outlast the checks below: streams generate ahead of
      // their reader and a short decode runs on this thread, so 200 tokens
      // with the end-of-generation token banned (tolstoy's eos is 2).
      const first = await handler(
        req({ prompt: "The prince", max_tokens: 200, stream: true, logit_bias: { "2": -100 } }),
      );
      const reader = first.body!.getReader();
      await reader.read();
      const ac = new AbortController();
      const waiting = handler(req({ prompt: "He", max_tokens: 2 }, ac.signal));
      for (let i = 0; i < 200 && handler.stats().queued !== 1; i++) {
        await new Promise((r) => setTimeout(r, 5));
      }
      assert.equal(handler.stats().queued, 1);
      assert.equal(handler.stats().free, 0, "the holder finished before the checks");
      // The queue holds one: a third request is refused at once.
      const full = await handler(req({ prompt: "He", max_tokens: 2 }));
      assert.equal(full.status, 503);
      assert.equal(full.headers.get("retry-after"), "1");
      assert.equal((await full.json()).error.code, "server_busy");
      ac.abort();
      assert.notEqual((await waiting).status, 200);
      assert.equal(handler.stats().queued, 0);
      await reader.cancel();
      assert.equal(handler.stats().free, 1);

      // Hostile field values, each alone in an otherwise valid request.
      const hostile = [
        null,
        -1,
        0,
        1e308,
        -1e308,
        2.5,
        "3",
        "",
        true,
        [],
        {},
        [1, "a"],
        "x".repeat(5000),
      ];
      const fields = [
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
        "prompt",
        "model",
        "user",
      ];
      let seen = 0;
      const statuses = new Set<number>();
      for (const f of fields) {
        for (const v of hostile) {
          const body: Record<string, unknown> = {
            prompt: "He",
            max_tokens: 2,
            stream: false,
            [f]: v,
          };
          if (f !== "max_tokens" && f !== "stream") body.max_tokens = 2;
          const r = await handler(req(body));
          statuses.add(r.status);
          if (r.status === 200) {
            await r.body?.cancel(); // a stream we do not need
          } else {
            const e = (await r.json()).error;
            assert.equal(r.status, 400, `${f}=${JSON.stringify(v)}: ${e?.message}`);
            assert.ok(typeof e.message === "string" && "param" in e && "code" in e);
          }
          seen++;
        }
      }
      for (let i = 0; i < 80; i++) {
        const bytes = crypto.getRandomValues(new Uint8Array(1 + (i * 37) % 300));
        const r = await handler(new Request(url, { method: "POST", body: bytes }));
        assert.equal(r.status, 400);
        assert.equal(typeof (await r.json()).error.message, "string");
        seen++;
      }
      assert.ok(seen >= 300 && statuses.has(200) && statuses.has(400));
      for (let i = 0; i < 100 && handler.stats().free < 1; i++) {
        await new Promise((r) => setTimeout(r, 10));
      }
      assert.deepEqual(handler.stats(), { slots: 1, free: 1, queued: 0 });
    } finally {
      await handler.close();
    }
  },
});
