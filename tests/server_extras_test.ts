/**
 * The handler's OpenAI extras through the official `openai` client on
 * loopback: log-probabilities (chat and legacy formats, plain and streamed)
 * against llama.cpp's logits, `n` choices equal to `generateText` with
 * seeds seed + i, llama.cpp's `cfg_negative_prompt`/`cfg_scale` equal to
 * `generate`'s guidance, forced parallel tool calls (plain and streamed
 * deltas per call), and a long prompt read in chunks beside a running
 * stream, which keeps receiving tokens; and sequences stepping at once
 * sharing every decode (the batch is not split by whoever samples first).
 */
import assert from "node:assert/strict";
import OpenAI from "openai";
import { Model } from "../lib/model/model.ts";
import { Context } from "../lib/runtime/context.ts";
import { generateText } from "../lib/runtime/generate.ts";
import { createHandler } from "../lib/server/handler.ts";
import { loadOracle, NEAR_TIE } from "./oracle/oracle.ts";
import { MODEL, SLOT } from "./server_util.ts";

const PARALLEL = 4;
const model = "tolstoy-6m-f16";

// log softmax in double precision, computed here independently of the server.
function logSoftmax(l: Float32Array): number[] {
  let max = -Infinity;
  for (const x of l) max = Math.max(max, x);
  let sum = 0;
  for (const x of l) sum += Math.exp(x - max);
  const lse = max + Math.log(sum);
  return [...l].map((x) => x - lse);
}

async function serve(handler: ReturnType<typeof createHandler>) {
  await handler.ready;
  const ac = new AbortController();
  const { promise, resolve } = Promise.withResolvers<Deno.NetAddr>();
  const server = Deno.serve(
    { hostname: "127.0.0.1", port: 0, signal: ac.signal, onListen: resolve },
    handler,
  );
  const base = `http://127.0.0.1:${(await promise).port}`;
  return {
    base,
    client: new OpenAI({ baseURL: `${base}/v1`, apiKey: "none", maxRetries: 0 }),
    async close() {
      ac.abort();
      await server.finished;
      await handler.close();
    },
  };
}

Deno.test({
  name: "server extras: logprobs, n, cfg and parallel tool calls through the openai client",
  sanitizeOps: false,
  sanitizeResources: false,
  async fn(t) {
    using lm = await Model.load(MODEL);
    const handler = createHandler({ model: lm, parallel: PARALLEL, ctxSize: SLOT * PARALLEL });
    const srv = await serve(handler);
    const { client } = srv;
    try {
      await t.step("logprobs equal the log-softmax of llama.cpp's logits", async () => {
        const prompt = "The prince";
        const n = 8;
        const oracle = await loadOracle();
        using om = oracle.load(MODEL);
        using oc = om.context({ nCtx: SLOT });
        const ids = lm.tokenizer.encode(prompt, { addSpecial: true });
        const want = oc.greedy(ids, n);
        // Up to llama.cpp's first near-tie, tokens and values must agree.
        let upTo = want.gaps.findIndex((g) => g < NEAR_TIE);
        if (upTo < 0) upTo = n;
        assert.ok(upTo >= 2, `llama.cpp's top-2 gap is tiny at step ${upTo}`);
        const pieceOf = (id: number) => lm.tokenizer.tokenToPiece(id, { special: true });
        const check = (i: number, token: string, logprob: number, top: [string, number][]) => {
          const ls = logSoftmax(want.logits[i]);
          assert.equal(token, pieceOf(want.tokens[i]), `step ${i}`);
          assert.ok(Math.abs(logprob - ls[want.tokens[i]]) < 1e-3, `step ${i}: ${logprob}`);
          const order = [...ls.keys()].sort((a, b) => ls[b] - ls[a]).slice(0, top.length);
          top.forEach(([tok, lp], k) => {
            assert.equal(tok, pieceOf(order[k]), `step ${i} top ${k}`);
            assert.ok(Math.abs(lp - ls[order[k]]) < 1e-3, `step ${i} top ${k}: ${lp}`);
          });
        };
        // Legacy completions: {tokens, token_logprobs, top_logprobs, text_offset}.
        const r = await client.completions.create({
          model,
          prompt,
          max_tokens: n,
          temperature: 0,
          logprobs: 3,
        });
        const lp = r.choices[0].logprobs!;
        assert.equal(lp.tokens!.length, n);
        assert.equal(lp.tokens!.join(""), r.choices[0].text);
        assert.deepEqual(lp.text_offset!.slice(0, 2), [0, lp.tokens![0].length]);
        for (let i = 0; i < upTo; i++) {
          const top = Object.entries(lp.top_logprobs![i]);
          assert.equal(top.length, 3);
          check(i, lp.tokens![i], lp.token_logprobs![i], top);
        }
        // Chat, streamed: one content entry per token, with bytes.
        const rendered = await client.chat.completions.create({
          model,
          messages: [{ role: "user", content: "Who is Pierre?" }],
          max_tokens: n,
          temperature: 0,
          logprobs: true,
          top_logprobs: 2,
          stream: true,
        });
        const entries = [];
        let text = "";
        for await (const c of rendered) {
          text += c.choices[0]?.delta.content ?? "";
          entries.push(...c.choices[0]?.logprobs?.content ?? []);
        }
        assert.equal(entries.length, n);
        assert.equal(entries.map((e) => e.token).join(""), text);
        for (const e of entries) {
          assert.deepEqual(e.bytes, [...new TextEncoder().encode(e.token)]);
          assert.equal(e.top_logprobs.length, 2);
          assert.ok(e.top_logprobs[0].logprob >= e.top_logprobs[1].logprob);
          assert.ok(e.logprob <= e.top_logprobs[0].logprob + 1e-6);
        }
        // Greedy: the chosen token is the most likely one.
        assert.ok(entries.every((e) => e.token === e.top_logprobs[0].token));
      });

      await t.step("n choices: each equals generateText with seed + i; usage sums", async () => {
        const prompt = "Natasha";
        const opts = { temperature: 0.9, max_tokens: 12, seed: 7 };
        const r = await client.completions.create({ model, prompt, n: 3, ...opts });
        assert.deepEqual(r.choices.map((c) => c.index), [0, 1, 2]);
        let total = 0;
        for (let i = 0; i < 3; i++) {
          using ctx = await Context.create(lm, { nCtx: SLOT });
          const want = await generateText(ctx, prompt, {
            temperature: 0.9,
            maxTokens: 12,
            seed: 7 + i,
          });
          assert.equal(r.choices[i].text, want.text, `choice ${i}`);
          total += want.tokens.length;
        }
        assert.ok(new Set(r.choices.map((c) => c.text)).size > 1, "the seeds differ");
        assert.equal(r.usage!.completion_tokens, total);
        assert.equal(r.usage!.prompt_tokens, lm.tokenizer.encode(prompt).length);
        // Streamed: the chunks of each index put together give the same texts.
        const s = await client.completions.create({ model, prompt, n: 3, ...opts, stream: true });
        const texts = ["", "", ""];
        const finishes: (string | null)[] = [null, null, null];
        for await (const c of s) {
          for (const ch of c.choices) {
            texts[ch.index] += ch.text;
            finishes[ch.index] = ch.finish_reason ?? finishes[ch.index];
          }
        }
        assert.deepEqual(texts, r.choices.map((c) => c.text));
        assert.deepEqual(finishes, r.choices.map((c) => c.finish_reason));
        // A dropped stream of n choices gives every one of its slots back.
        const ac = new AbortController();
        const dropped = await fetch(`${srv.base}/v1/completions`, {
          method: "POST",
          // eos (2) banned: no choice may end before the slots are counted
          body: JSON.stringify({
            prompt,
            n: 3,
            max_tokens: 200,
            stream: true,
            logit_bias: { "2": -100 },
          }),
          signal: ac.signal,
        });
        const reader = dropped.body!.getReader();
        await reader.read();
        assert.equal(handler.stats().free, PARALLEL - 3);
        ac.abort();
        await reader.cancel().catch(() => {});
        for (let i = 0; i < 200 && handler.stats().free < PARALLEL; i++) {
          await new Promise((r) => setTimeout(r, 10));
        }
        assert.equal(handler.stats().free, PARALLEL);
        const tooMany = await fetch(`${srv.base}/v1/completions`, {
          method: "POST",
          body: JSON.stringify({ prompt, n: PARALLEL + 1 }),
        });
        assert.equal(tooMany.status, 400);
        assert.equal((await tooMany.json()).error.param, "n");
      });

      await t.step("cfg_negative_prompt and cfg_scale: generate's guidance", async () => {
        const prompt = "The prince said";
        const cfg = { negativePrompt: "war and peace", scale: 2 };
        using ctx = await Context.create(lm, { nCtx: SLOT, nSeqMax: 2 });
        using seq = ctx.sequence();
        const want = await generateText(seq, prompt, { temperature: 0, maxTokens: 16, cfg });
        const plain = await generateText(seq, prompt, { temperature: 0, maxTokens: 16 });
        assert.notEqual(want.text, plain.text, "guidance changes this reply");
        const r = await client.completions.create({
          model,
          prompt,
          max_tokens: 16,
          temperature: 0,
          cfg_negative_prompt: cfg.negativePrompt,
          cfg_scale: cfg.scale,
        } as unknown as OpenAI.CompletionCreateParamsNonStreaming);
        assert.equal(r.choices[0].text, want.text);
      });

      await t.step(
        "parallel tool calls: forced (an array) and auto (Hermes blocks), streamed per call",
        async () => {
          const tools = [
            {
              type: "function" as const,
              function: {
                name: "get_weather",
                parameters: {
                  type: "object",
                  properties: { city: { enum: ["Moscow", "Petersburg"] } },
                  required: ["city"],
                  additionalProperties: false,
                },
              },
            },
            {
              type: "function" as const,
              function: { name: "get_time", parameters: { type: "object", properties: {} } },
            },
          ];
          const body = {
            model,
            messages: [{ role: "user" as const, content: "Weather and time in Moscow?" }],
            tools,
            tool_choice: "required" as const,
            parallel_tool_calls: true,
            temperature: 0,
            max_tokens: 300,
          };
          const r = await client.chat.completions.create(body);
          const calls = r.choices[0].message.tool_calls ?? [];
          assert.equal(r.choices[0].finish_reason, "tool_calls");
          assert.ok(calls.length >= 1);
          for (const c of calls) {
            assert.ok(["get_weather", "get_time"].includes(c.function.name));
            assert.equal(typeof JSON.parse(c.function.arguments), "object");
            assert.match(c.id, /^call_/);
          }
          const s = await client.chat.completions.create({ ...body, stream: true });
          const got: { id: string; name: string; args: string }[] = [];
          let finish = null;
          for await (const c of s) {
            for (const d of c.choices[0]?.delta.tool_calls ?? []) {
              if (d.id) got[d.index] = { id: d.id, name: d.function!.name!, args: "" };
              got[d.index].args += d.function?.arguments ?? "";
            }
            finish = c.choices[0]?.finish_reason ?? finish;
          }
          assert.equal(finish, "tool_calls");
          assert.deepEqual(
            got.map((g) => [g.name, JSON.parse(g.args)]),
            calls.map((c) => [c.function.name, JSON.parse(c.function.arguments)]),
          );
          // tool_choice auto: a reply of two Hermes blocks (written by a grammar
          // here) is two calls, plain and streamed as one delta per call.
          const reply = '<tool_call>{"name":"get_time","arguments":{}}</tool_call>\n' +
            '<tool_call>{"name":"get_weather","arguments":{"city":"Moscow"}}</tool_call>';
          const auto = {
            ...body,
            tool_choice: "auto" as const,
            parallel_tool_calls: undefined,
            grammar: `root ::= ${JSON.stringify(reply)}`,
          };
          const want = [["get_time", {}], ["get_weather", { city: "Moscow" }]];
          const a = await client.chat.completions.create(auto);
          assert.equal(a.choices[0].finish_reason, "tool_calls");
          const ac = a.choices[0].message.tool_calls!;
          assert.deepEqual(
            ac.map((c) => [c.function.name, JSON.parse(c.function.arguments)]),
            want,
          );
          const as = await client.chat.completions.create({ ...auto, stream: true });
          const deltas = [];
          for await (const c of as) deltas.push(...c.choices[0]?.delta.tool_calls ?? []);
          assert.deepEqual(deltas.map((d) => d.index), [0, 1]);
          assert.deepEqual(
            deltas.map((d) => [d.function!.name, JSON.parse(d.function!.arguments!)]),
            want,
          );
          // parallel_tool_calls: false keeps the first call only.
          const first = await client.chat.completions.create({
            ...auto,
            parallel_tool_calls: false,
          });
          assert.deepEqual(first.choices[0].message.tool_calls!.map((c) => c.function.name), [
            "get_time",
          ]);
        },
      );
    } finally {
      await srv.close();
    }
  },
});

Deno.test({
  name: "server extras: a long prompt is read in chunks while a stream keeps receiving tokens",
  sanitizeOps: false,
  sanitizeResources: false,
  async fn() {
    using lm = await Model.load(MODEL);
    const batch = 16;
    const srv = await serve(
      createHandler({ model: lm, parallel: 2, ctxSize: 2 * SLOT, batchSize: batch }),
    );
    try {
      const eos = lm.tokenizer.eos;
      // A stream that runs well past the long prompt's processing (which
      // reaches the server within a few event-loop turns: cpu_sync_test).
      const nStream = 250;
      const stream = await srv.client.completions.create({
        model,
        prompt: "The prince",
        max_tokens: nStream,
        temperature: 0,
        logit_bias: { [eos]: -100 },
        stream: true,
      });
      // The long prompt goes in once the stream is under way.
      const it = stream[Symbol.asyncIterator]();
      let received = 0;
      for (let i = 0; i < 3; i++) if (!(await it.next()).done) received++;
      const done = (async () => {
        for (let r = await it.next(); !r.done; r = await it.next()) received++;
      })();
      const long = "Pierre walked along the road and thought about the war. ".repeat(14);
      const nLong = lm.tokenizer.encode(long, { addSpecial: true }).length;
      const chunks = Math.ceil(nLong / (batch - 1));
      assert.ok(nLong > 8 * batch && nLong < SLOT - 4, `${nLong} prompt tokens`);
      const r = await srv.client.completions.create({ model, prompt: long, max_tokens: 1 });
      assert.equal(r.usage!.prompt_tokens, nLong);
      await done;
      assert.equal(received, nStream, "every token of the stream came");
      // Counted by the server (the client's arrival times in this process
      // say more about its own event loop): each chunk of the long prompt
      // shared its decode with one token of the stream, so the stream's
      // decodes were all there were (a prompt read in one go, or chunks
      // decoded on their own, would add decodes and starve the stream).
      const m = await (await fetch(`${srv.base}/metrics`)).text();
      const decodes = Number(m.match(/^llmedge:n_decode_total (\S+)$/m)?.[1]);
      const per = Number(m.match(/^llmedge:n_busy_slots_per_decode (\S+)$/m)?.[1]);
      // The stream: its prompt, then one decode per token but the last; at
      // most one chunk may go alone (the stream between two tokens).
      assert.ok(decodes >= nStream && decodes <= nStream + 1, `${decodes} decodes`);
      assert.ok(per >= (nStream + chunks - 1) / decodes, `${per} slots per decode`);
    } finally {
      await srv.close();
    }
  },
});

Deno.test("server extras: sequences stepping together share every decode", async () => {
  using lm = await Model.load(MODEL);
  const n = 8, steps = 12;
  using ctx = await Context.create(lm, { nCtx: n * 64, nSeqMax: n });
  const seqs = Array.from({ length: n }, () => ctx.sequence());
  try {
    const before = { ...seqs[0].batchStats };
    await Promise.all(seqs.map(async (seq, i) => {
      let logits = (await seq.evaluate([1, 100 + i])).logits[0];
      for (let k = 0; k < steps; k++) {
        let best = 0;
        for (let t = 1; t < logits.length; t++) if (logits[t] > logits[best]) best = t;
        // A consumer's promise hops between sampling and the next evaluation.
        for (let h = 0; h < 2 + i * 3; h++) await null;
        logits = (await seq.evaluate([best])).logits[0];
      }
    }));
    const st = seqs[0].batchStats;
    const decodes = st.decodes - before.decodes;
    // The prompts and every step: one decode each, all sequences in it.
    assert.ok(decodes <= steps + 2, `${decodes} decodes for ${steps + 1} steps`);
    assert.equal(st.tokens - before.tokens, n * (steps + 2));
  } finally {
    for (const s of seqs) s[Symbol.dispose]();
  }
});

// flashAttnPrecision "f32" with a KV stream per slot (the default layout):
// several slots' decode steps take the f32 kernel stream by stream
// (flash_attn_f32_test holds its bits); through the server, 8 requests at
// once keep generateText's greedy text on a context with the same options.
Deno.test({
  name: "server extras: f32 flash attention, 8 requests at once equal generateText",
  sanitizeOps: false,
  sanitizeResources: false,
  async fn() {
    using lm = await Model.load(MODEL);
    const fa = { flashAttn: true, flashAttnPrecision: "f32" as const };
    const prompts = ["The old prince", "Natasha said", "Pierre looked at", "In the morning"]
      .concat(["The soldiers", "Princess Mary", "He was", "Moscow"]);
    const want: string[] = [];
    for (const p of prompts) {
      using ctx = await Context.create(lm, { nCtx: SLOT, ...fa });
      want.push((await generateText(ctx, p, { temperature: 0, maxTokens: 40 })).text);
    }
    const s = await serve(createHandler({ model: lm, parallel: 8, ctxSize: 8 * SLOT, ...fa }));
    try {
      const got = await Promise.all(
        prompts.map((prompt) =>
          s.client.completions.create({ model, prompt, max_tokens: 40, temperature: 0 })
        ),
      );
      assert.deepEqual(got.map((r) => r.choices[0].text), want);
    } finally {
      await s.close();
    }
  },
});
