/**
 * The OpenAI-compatible handler over HTTP on loopback, driven by the
 * official `openai` client: models, completions and chat (plain and
 * streamed), greedy output equal to `generateText` on a fresh context (one
 * request and 8 at once), a JSON-schema response format checked by ajv, an
 * aborted stream freeing its slot, and malformed requests each answered
 * with a proper OpenAI error body.
 */
import assert from "node:assert/strict";
import OpenAI from "openai";
import { Ajv } from "ajv";
import { Model } from "../lib/model/model.ts";
import { Context } from "../lib/runtime/context.ts";
import { generateText } from "../lib/runtime/generate.ts";
import { embed } from "../lib/runtime/embed.ts";
import { createHandler } from "../lib/server/handler.ts";
import { CHATML_TEMPLATE, ChatTemplate } from "../lib/server/chat.ts";
import { StopScanner } from "../lib/server/stop.ts";
import { parseToolCalls, type ToolCallDelta, ToolCallStreamer } from "../lib/server/tools.ts";

import { KEY, MODEL, SLOT } from "./server_util.ts";

const PARALLEL = 8;

/** Greedy reference: `generateText` on a fresh context. */
async function reference(model: Model, prompt: string, n: number, parseSpecial = false) {
  using ctx = await Context.create(model, { nCtx: SLOT });
  return (await generateText(ctx, prompt, { temperature: 0, maxTokens: n, parseSpecial })).text;
}

Deno.test("server: stop strings are cut across pieces and never emitted", () => {
  const s = new StopScanner(["END", "\n\n"]);
  const out: string[] = [];
  for (const p of ["ab", "cE", "N", "x E", "N", "D tail"]) {
    const r = s.push(p);
    out.push(r.text);
    if (r.stopped) break;
  }
  assert.equal(out.join(""), "abcENx ");
  const t = new StopScanner(["xyz"]);
  assert.deepEqual(t.push("axy"), { text: "a", stopped: false });
  assert.deepEqual(t.push("q"), { text: "xyq", stopped: false });
  assert.equal(t.flush(), "");
});

Deno.test("server: forced tool calls stream each name, then argument fragments", () => {
  const cases: [string, { name: string; args: unknown }[]][] = [
    ['{ "name" : "get_weather", "arguments": {"city": {"a": "}"}} \n}', [
      { name: "get_weather", args: { city: { a: "}" } } },
    ]],
    ['[{"name":"f","arguments":{"a":"x\\"}]"}} ,{ "name":"g","arguments": {"n": [1, {}]} }]', [
      { name: "f", args: { a: 'x"}]' } },
      { name: "g", args: { n: [1, {}] } },
    ]],
  ];
  for (const [text, want] of cases) {
    for (const size of [1, 3, 7, text.length]) {
      const s = new ToolCallStreamer();
      const got: { id: string; name: string; args: string }[] = [];
      const take = (ds: ToolCallDelta[]) => {
        for (const d of ds) {
          if (d.id) got[d.index] = { id: d.id, name: d.function.name!, args: "" };
          got[d.index].args += d.function.arguments;
        }
      };
      for (let i = 0; i < text.length; i += size) take(s.push(text.slice(i, i + size)));
      take(s.end());
      assert.deepEqual(got.map((g) => ({ name: g.name, args: JSON.parse(g.args) })), want);
      assert.equal(new Set(got.map((g) => g.id)).size, want.length);
    }
  }
  assert.deepEqual(new ToolCallStreamer().end(), []);
  const names = new Set(["f", "g"]);
  const fns = (text: string, parallel = true) =>
    parseToolCalls(text, names, parallel).map((c) => c.function);
  assert.deepEqual(fns('<tool_call>{"name":"f","arguments":{"x":1}}</tool_call>'), [
    { name: "f", arguments: '{"x":1}' },
  ]);
  const two = [{ name: "f", arguments: '{"x":1}' }, { name: "g", arguments: '{"y":"]"}' }];
  assert.deepEqual(
    fns(
      '<tool_call>\n{"name":"f","arguments":{"x":1}}\n</tool_call>\n<tool_call>{"name":"g",' +
        '"arguments":{"y":"]"}}</tool_call>',
    ),
    two,
  );
  assert.deepEqual(
    fns('[{"name":"f","arguments":{"x":1}}, {"name":"g","arguments":{"y":"]"}}]'),
    two,
  );
  assert.deepEqual(fns('{"name":"f","arguments":{"x":1}} {"name":"g","arguments":{"y":"]"}}'), two);
  assert.deepEqual(fns('{"name":"f","arguments":{"x":1}} {"name":"g","arguments":{}}', false), [
    two[0],
  ]);
  assert.deepEqual(fns('{"name":"f","arguments":{}} {"name":"h","arguments":{}}'), []);
  assert.deepEqual(fns('{"name":"g","arguments":{}} and text'), []);
  assert.deepEqual(fns("just text"), []);
});

Deno.test({
  name: "server: the openai client over loopback",
  sanitizeOps: false,
  sanitizeResources: false,
  async fn(t) {
    using model = await Model.load(MODEL);
    const handler = createHandler({
      model,
      parallel: PARALLEL,
      ctxSize: SLOT * PARALLEL,
      apiKey: KEY,
      maxBodyBytes: 1 << 20,
    });
    await handler.ready;
    const ac = new AbortController();
    const { promise, resolve } = Promise.withResolvers<Deno.NetAddr>();
    const server = Deno.serve(
      { hostname: "127.0.0.1", port: 0, signal: ac.signal, onListen: resolve },
      handler,
    );
    const addr = await promise;
    const base = `http://127.0.0.1:${addr.port}`;
    const client = new OpenAI({ baseURL: `${base}/v1`, apiKey: KEY, maxRetries: 0 });
    const id = "tolstoy-6m-f16";
    try {
      await t.step("models.list and /health", async () => {
        const list = await client.models.list();
        assert.deepEqual(list.data.map((m) => [m.id, m.object]), [[id, "model"]]);
        const h = await fetch(`${base}/health`);
        assert.deepEqual([h.status, await h.json()], [200, { status: "ok" }]);
      });

      await t.step("completions: greedy equals generateText, plain and streamed", async () => {
        const prompt = "The prince";
        const want = await reference(model, prompt, 24);
        const r = await client.completions.create({
          model: id,
          prompt,
          max_tokens: 24,
          temperature: 0,
        });
        assert.equal(r.object, "text_completion");
        assert.match(r.id, /^cmpl-/);
        assert.equal(r.choices[0].text, want);
        assert.equal(r.choices[0].finish_reason, "length");
        assert.equal(r.usage?.completion_tokens, 24);
        assert.equal(r.usage?.total_tokens, r.usage!.prompt_tokens + 24);

        const stream = await client.completions.create({
          model: id,
          prompt,
          max_tokens: 24,
          temperature: 0,
          stream: true,
          stream_options: { include_usage: true },
        });
        let text = "", finish = null, usage = null;
        for await (const c of stream) {
          assert.equal(c.object, "text_completion");
          if (c.choices[0]) {
            text += c.choices[0].text;
            finish = c.choices[0].finish_reason ?? finish;
          }
          if (c.usage) usage = c.usage;
        }
        assert.equal(text, want);
        assert.equal(finish, "length");
        assert.equal(usage?.completion_tokens, 24);
      });

      await t.step("completions: a stop string is cut and never emitted", async () => {
        const prompt = "The prince";
        const full = await reference(model, prompt, 24);
        const stop = full.slice(6, 10); // likely spans a token boundary
        const r = await client.completions.create({
          model: id,
          prompt,
          max_tokens: 24,
          temperature: 0,
          stop: [stop],
        });
        assert.equal(r.choices[0].text, full.slice(0, full.indexOf(stop)));
        assert.equal(r.choices[0].finish_reason, "stop");
      });

      await t.step("8 different requests at once equal their references", async () => {
        const prompts = [
          "The old prince",
          "Natasha said",
          "Pierre looked at",
          "In the morning",
          "The soldiers",
          "Princess Mary",
          "He was",
          "Moscow",
        ];
        const want = [];
        for (const p of prompts) want.push(await reference(model, p, 20));
        const got = await Promise.all(
          prompts.map((prompt) =>
            client.completions.create({ model: id, prompt, max_tokens: 20, temperature: 0 })
          ),
        );
        assert.deepEqual(got.map((r) => r.choices[0].text), want);
      });

      await t.step("chat: greedy equals generateText on the rendered prompt", async () => {
        const messages = [
          { role: "system" as const, content: "You are Tolstoy." },
          { role: "user" as const, content: "Tell me about the prince." },
        ];
        const tpl = new ChatTemplate(CHATML_TEMPLATE, "", "");
        const want = await reference(model, tpl.render(messages), 16, true);
        const r = await client.chat.completions.create({
          model: id,
          messages,
          max_tokens: 16,
          temperature: 0,
        });
        assert.equal(r.object, "chat.completion");
        assert.match(r.id, /^chatcmpl-/);
        assert.equal(r.choices[0].message.role, "assistant");
        assert.equal(r.choices[0].message.content, want);
        const stream = await client.chat.completions.create({
          model: id,
          messages,
          max_completion_tokens: 16,
          temperature: 0,
          stream: true,
        });
        let text = "", role = "", finish = null;
        for await (const c of stream) {
          assert.equal(c.object, "chat.completion.chunk");
          role ||= c.choices[0]?.delta.role ?? "";
          text += c.choices[0]?.delta.content ?? "";
          finish = c.choices[0]?.finish_reason ?? finish;
        }
        assert.equal(role, "assistant");
        assert.equal(text, want);
        assert.equal(finish, "length");
        // The next turn goes to the slot that holds the conversation and reuses it.
        const next = await fetch(`${base}/v1/chat/completions`, {
          method: "POST",
          headers: { authorization: `Bearer ${KEY}` },
          body: JSON.stringify({
            model: id,
            messages: [...messages, { role: "assistant", content: want }, {
              role: "user",
              content: "And the princess?",
            }],
            max_tokens: 4,
            temperature: 0,
          }),
        });
        const nt = (await next.json()).timings;
        const turn1 = (await (await fetch(`${base}/tokenize`, {
          method: "POST",
          headers: { authorization: `Bearer ${KEY}` },
          body: JSON.stringify({ content: tpl.render(messages), add_special: true }),
        })).json()).tokens.length;
        assert.ok(nt.cache_n >= turn1, `reused ${nt.cache_n} of the first turn's ${turn1}`);
      });

      await t.step("response_format json_schema: the output parses and validates", async () => {
        const schema = {
          type: "object",
          properties: { answer: { enum: ["yes", "no"] }, sure: { type: "boolean" } },
          required: ["answer", "sure"],
          additionalProperties: false,
        };
        const r = await client.chat.completions.create({
          model: id,
          messages: [{ role: "user", content: "Is Pierre rich?" }],
          max_tokens: 200,
          seed: 7,
          response_format: {
            type: "json_schema",
            json_schema: { name: "a", schema, strict: true },
          },
        });
        assert.equal(r.choices[0].finish_reason, "stop");
        const v = JSON.parse(r.choices[0].message.content!);
        const validate = new Ajv().compile(schema);
        assert.ok(validate(v), JSON.stringify(validate.errors));
      });

      await t.step(
        "tools: a forced call names a declared function, arguments validate",
        async () => {
          const weather = {
            type: "object",
            properties: { city: { enum: ["Moscow", "Petersburg"] }, days: { type: "integer" } },
            required: ["city"],
            additionalProperties: false,
          };
          const tools = [
            { type: "function" as const, function: { name: "get_weather", parameters: weather } },
            {
              type: "function" as const,
              function: { name: "get_time", parameters: { type: "object", properties: {} } },
            },
          ];
          const messages = [{ role: "user" as const, content: "Weather in Moscow?" }];
          const r = await client.chat.completions.create({
            model: id,
            messages,
            tools,
            tool_choice: { type: "function", function: { name: "get_weather" } },
            max_tokens: 200,
            seed: 3,
          });
          assert.equal(r.choices[0].finish_reason, "tool_calls");
          const call = r.choices[0].message.tool_calls![0];
          assert.equal(call.type, "function");
          assert.equal(call.function.name, "get_weather");
          const validate = new Ajv().compile(weather);
          const args = JSON.parse(call.function.arguments);
          assert.ok(validate(args), JSON.stringify(validate.errors));

          const stream = await client.chat.completions.create({
            model: id,
            messages,
            tools,
            tool_choice: "required",
            max_tokens: 200,
            seed: 4,
            stream: true,
          });
          let name = "", argText = "", finish = null;
          for await (const c of stream) {
            for (const tc of c.choices[0]?.delta.tool_calls ?? []) {
              name += tc.function?.name ?? "";
              argText += tc.function?.arguments ?? "";
            }
            finish = c.choices[0]?.finish_reason ?? finish;
          }
          assert.equal(finish, "tool_calls");
          assert.ok(["get_weather", "get_time"].includes(name), name);
          assert.equal(typeof JSON.parse(argText), "object");

          // A follow-up turn carrying the call and its result renders and runs.
          const next = await client.chat.completions.create({
            model: id,
            messages: [
              ...messages,
              { role: "assistant", content: null, tool_calls: [call] },
              { role: "tool", tool_call_id: call.id, content: "snow" },
            ],
            tools,
            tool_choice: "none",
            max_tokens: 4,
          });
          assert.equal(typeof next.choices[0].message.content, "string");
        },
      );

      await t.step("logit_bias, llama.cpp's grammar, /metrics", async () => {
        using ctx = await Context.create(model, { nCtx: SLOT });
        const plain = await generateText(ctx, "The prince", { temperature: 0, maxTokens: 6 });
        const banned = plain.tokens[0];
        const want = await generateText(ctx, "The prince", {
          temperature: 0,
          maxTokens: 6,
          logitBias: [[banned, -Infinity]],
        });
        const r = await client.completions.create({
          model: id,
          prompt: "The prince",
          max_tokens: 6,
          temperature: 0,
          logit_bias: { [banned]: -100 },
        });
        assert.equal(r.choices[0].text, want.text);
        assert.notEqual(want.tokens[0], banned);
        const g = await client.completions.create({
          model: id,
          prompt: "Is he rich?",
          max_tokens: 10,
          // @ts-expect-error: llama.cpp's extra field
          grammar: 'root ::= "yes" | "no"',
        });
        assert.ok(["yes", "no"].includes(g.choices[0].text), g.choices[0].text);
        assert.equal(g.choices[0].finish_reason, "stop");
        const m = await (await fetch(`${base}/metrics`, {
          headers: { authorization: `Bearer ${KEY}` },
        })).text();
        const metric = (name: string) =>
          Number(m.match(new RegExp(`^llmedge:${name} (\\S+)$`, "m"))?.[1]);
        assert.ok(metric("tokens_predicted_total") > 100, m);
        assert.ok(metric("requests_total") >= 10, m);
        assert.equal(metric("requests_processing"), 0);
      });

      await t.step("embeddings.create equals embed() with mean pooling", async () => {
        using ctx = await Context.create(model, { embeddings: true, nCtx: SLOT, nSeqMax: 2 });
        const input = ["Natasha danced", "Pierre laughed"];
        const want = await embed(ctx, input, { pooling: "mean", normalize: 2 });
        const r = await client.embeddings.create({ model: id, input }); // base64 on the wire
        assert.equal(r.object, "list");
        assert.deepEqual(r.data.map((d) => d.index), [0, 1]);
        assert.deepEqual(r.data.map((d) => d.embedding), want.map((v) => Array.from(v)));
        const f = await client.embeddings.create({
          model: id,
          input: input[1],
          encoding_format: "float",
        });
        assert.deepEqual(f.data[0].embedding, Array.from(want[1]));
        assert.ok(r.usage.prompt_tokens > 2);
      });

      await t.step("an aborted stream frees its slot", async () => {
        const abort = new AbortController();
        const stream = await client.completions.create({
          model: id,
          prompt: "The prince",
          max_tokens: 200,
          // eos banned: a sampled early eos ends the generation (and frees the
          // slot) inside one synchronous run, before the client reads chunk 3.
          logit_bias: { "2": -100 },
          stream: true,
        }, { signal: abort.signal });
        // The client ends the iteration quietly on its own abort.
        let n = 0, busy = 0;
        for await (const _ of stream) {
          if (++n === 3) {
            busy = PARALLEL - handler.stats().free;
            abort.abort();
          }
        }
        assert.equal(busy, 1);
        assert.ok(n < 10, `${n} chunks arrived after the abort`);
        for (let i = 0; i < 200 && handler.stats().free < PARALLEL; i++) {
          await new Promise((r) => setTimeout(r, 10));
        }
        assert.equal(handler.stats().free, PARALLEL);
        const r = await client.completions.create({ model: id, prompt: "He", max_tokens: 4 });
        assert.equal(r.usage?.completion_tokens, 4);
      });

      await t.step("malformed requests: OpenAI error bodies, proper statuses", async () => {
        const auth = { authorization: `Bearer ${KEY}`, "content-type": "application/json" };
        const post = (path: string, body: BodyInit, headers: HeadersInit = auth) =>
          fetch(`${base}${path}`, { method: "POST", headers, body });
        const json = (o: unknown) => JSON.stringify(o);
        const ok = { model: id, prompt: "Hi", max_tokens: 2 };
        const chat = { model: id, messages: [{ role: "user", content: "Hi" }], max_tokens: 2 };
        const bad = new Uint8Array([0x7b, 0x22, 0x70, 0x22, 0x3a, 0x22, 0xff, 0xfe, 0x22, 0x7d]);
        const cases: [string, Promise<Response>, number, string | null][] = [
          ["bad JSON", post("/v1/completions", "{nope"), 400, null],
          ["not an object", post("/v1/completions", "[1,2]"), 400, null],
          ["invalid UTF-8", post("/v1/completions", bad), 400, null],
          [
            "temperature type",
            post("/v1/completions", json({ ...ok, temperature: "hot" })),
            400,
            "temperature",
          ],
          [
            "huge max_tokens",
            post("/v1/completions", json({ ...ok, max_tokens: 1e300 })),
            400,
            "max_tokens",
          ],
          ["huge seed", post("/v1/completions", json({ ...ok, seed: 2 ** 60 })), 400, "seed"],
          ["negative top_k", post("/v1/completions", json({ ...ok, top_k: -3 })), 400, "top_k"],
          [
            "unknown field",
            post("/v1/completions", json({ ...ok, frobnicate: 1 })),
            400,
            "frobnicate",
          ],
          ["prompt type", post("/v1/completions", json({ ...ok, prompt: 42 })), 400, "prompt"],
          ["stop type", post("/v1/completions", json({ ...ok, stop: [1] })), 400, "stop"],
          ["unknown model", post("/v1/completions", json({ ...ok, model: "gpt-9" })), 400, "model"],
          ["no messages", post("/v1/chat/completions", json({ model: id })), 400, "messages"],
          [
            "bad role",
            post("/v1/chat/completions", json({ ...chat, messages: [{ role: "x", content: "" }] })),
            400,
            "messages[0].role",
          ],
          [
            "bad schema",
            post(
              "/v1/chat/completions",
              json({
                ...chat,
                response_format: {
                  type: "json_schema",
                  json_schema: { name: "x", schema: { type: "foo" } },
                },
              }),
            ),
            400,
            "response_format.json_schema.schema",
          ],
          [
            "prompt too long",
            post("/v1/completions", json({ ...ok, prompt: "the prince ".repeat(400) })),
            400,
            "prompt",
          ],
          ["body too large", post("/v1/completions", "x".repeat(3 << 20)), 413, null],
          [
            "no API key",
            post("/v1/completions", json(ok), { "content-type": "application/json" }),
            401,
            null,
          ],
          ["wrong method", fetch(`${base}/v1/completions`, { headers: auth }), 405, null],
          ["no endpoint", fetch(`${base}/v1/nope`, { headers: auth }), 404, null],
          [
            "bad grammar",
            post("/v1/completions", json({ ...ok, grammar: "root ::= (" })),
            400,
            "grammar",
          ],
          [
            "bias id",
            post("/v1/completions", json({ ...ok, logit_bias: { "x": 1 } })),
            400,
            "logit_bias",
          ],
          [
            "undeclared tool",
            post(
              "/v1/chat/completions",
              json({
                ...chat,
                tools: [{ type: "function", function: { name: "f" } }],
                tool_choice: { type: "function", function: { name: "g" } },
              }),
            ),
            400,
            "tool_choice",
          ],
          [
            "bad tool schema",
            post(
              "/v1/chat/completions",
              json({
                ...chat,
                tools: [{ type: "function", function: { name: "f", parameters: { type: "foo" } } }],
              }),
            ),
            400,
            "tools[0].function.parameters",
          ],
          ["empty input", post("/v1/embeddings", json({ model: id, input: [] })), 400, "input"],
          [
            "input id",
            post("/v1/embeddings", json({ model: id, input: [[1e9]] })),
            400,
            "input[0]",
          ],
          ["detokenize range", post("/detokenize", json({ tokens: [-1] })), 400, "tokens[0]"],
        ];
        for (const [what, p, status, param] of cases) {
          const r = await p;
          const body = await r.json();
          assert.equal(r.status, status, `${what}: ${JSON.stringify(body)}`);
          assert.equal(typeof body.error?.message, "string", what);
          assert.equal(typeof body.error?.type, "string", what);
          assert.ok("param" in body.error && "code" in body.error, what);
          if (param) assert.equal(body.error.param, param, `${what}: ${body.error.message}`);
        }
        // Still serving, every slot free.
        const r = await post("/v1/completions", json(ok));
        assert.equal(r.status, 200);
        assert.equal((await r.json()).usage.completion_tokens, 2);
        assert.equal(handler.stats().free, PARALLEL);
        const tk = await (await post("/tokenize", json({ content: "The prince" }))).json();
        const dt = await (await post("/detokenize", json({ tokens: tk.tokens }))).json();
        assert.equal(dt.content, "The prince");
      });
    } finally {
      ac.abort();
      await server.finished;
      await handler.close();
    }
  },
});
