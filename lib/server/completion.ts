/**
 * `POST /v1/completions` and `POST /v1/chat/completions`: the request
 * checked and turned into `n` jobs (one slot each), the answers as OpenAI
 * JSON or server-sent events, with log-probabilities and tool calls.
 *
 * @module
 */
import type { GenerateOptions } from "../runtime/generate.ts";
import type { StepLogprobs } from "../sample/logprobs.ts";
import { ApiError, badField } from "./errors.ts";
import { checkKnown, COMMON_FIELDS, readJson, samplingRequest } from "./request.ts";
import { checkMessages } from "./chat.ts";
import { type JobEvent, type JobResult, runJob, type ServerState } from "./job.ts";
import { LogprobFormatter } from "./logprobs.ts";
import {
  checkTools,
  parseToolCalls,
  type ToolCall,
  type ToolCallDelta,
  ToolCallStreamer,
} from "./tools.ts";

/** What a completion endpoint needs from the handler. */
export interface CompletionSetup {
  /** The loaded state. */
  s: ServerState;
  /** The model id reported and accepted. */
  modelId: string;
  /** Largest request body in bytes. */
  limit: number;
}

const SSE_HEADERS = { "content-type": "text/event-stream", "cache-control": "no-cache" };
const enc = new TextEncoder();
const sse = (o: unknown) => enc.encode(`data: ${JSON.stringify(o)}\n\n`);

/** One choice's job: its events, then its result. */
type Job = AsyncGenerator<JobEvent, JobResult, undefined>;

/** Answers a completion (`chat` false) or chat completion request. */
export async function completion(
  req: Request,
  { s, modelId, limit }: CompletionSetup,
  chat: boolean,
): Promise<Response> {
  const body = await readJson(req, limit);
  if (s.model.arch.output !== "logits") {
    throw new ApiError(400, `${modelId} is an embedding model: it cannot generate text`, {
      code: "model_not_supported",
    });
  }
  checkKnown(
    body,
    chat
      ? [
        ...COMMON_FIELDS,
        "messages",
        "max_completion_tokens",
        "top_logprobs",
        "tools",
        "tool_choice",
        "parallel_tool_calls",
      ]
      : [...COMMON_FIELDS, "prompt"],
  );
  const model = body.model;
  if (model !== undefined && model !== null && model !== modelId) {
    throw badField(
      "model",
      `unknown model ${JSON.stringify(model)}; this server has ${modelId}`,
      "model_not_found",
    );
  }
  const tok = s.model.tokenizer;
  const sr = samplingRequest(body, chat, tok.nVocab);
  if (sr.n > s.pool.size) {
    throw badField("n", `${sr.n} choices need ${sr.n} slots; this server has ${s.pool.size}`);
  }
  const tools = chat ? checkTools(body) : null;
  // With tools, the reply is a call or text.
  const toolMode = tools !== null && tools.choice !== "none";
  if (tools?.schema) {
    if (sr.options.jsonSchema !== undefined || sr.options.grammar !== undefined) {
      throw badField("tool_choice", "a forced tool call excludes response_format and grammar");
    }
    sr.options.jsonSchema = tools.schema;
  }
  if (toolMode && sr.logprobs !== null && sr.stream) {
    throw badField("logprobs", "logprobs is not supported with tools and stream (llama-server)");
  }
  let prompt: string, opts: GenerateOptions;
  if (chat) {
    const messages = checkMessages(body.messages);
    prompt = s.template.render(messages, toolMode ? tools!.tools : undefined);
    const bos = tok.bos >= 0 ? tok.tokenToPiece(tok.bos, { special: true }) : "";
    // A template that writes BOS itself must not get a second one.
    opts = { addSpecial: !(bos && prompt.startsWith(bos)), parseSpecial: true };
  } else {
    const p = Array.isArray(body.prompt) && body.prompt.length === 1 ? body.prompt[0] : body.prompt;
    if (typeof p !== "string") {
      throw badField("prompt", "expected a string (or an array of one string)");
    }
    prompt = p;
    opts = {};
  }
  const ids = tok.encode(prompt, {
    addSpecial: opts.addSpecial ?? true,
    parseSpecial: opts.parseSpecial,
  });
  const field = chat ? "messages" : "prompt";
  if (ids.length === 0) throw badField(field, "the prompt has no tokens");
  if (ids.length >= s.slotCtx) {
    throw badField(
      field,
      `the prompt has ${ids.length} tokens; a slot holds ${s.slotCtx} (prompt + output)`,
      "context_length_exceeded",
    );
  }
  if (sr.options.cfg) {
    const neg = tok.encode(sr.options.cfg.negativePrompt, {
      addSpecial: opts.addSpecial ?? true,
      parseSpecial: opts.parseSpecial,
    });
    if (neg.length === 0 || neg.length >= s.slotCtx) {
      throw badField(
        "cfg_negative_prompt",
        `the negative prompt has ${neg.length} tokens; it needs 1 to ${s.slotCtx - 1}`,
      );
    }
  }
  const room = s.slotCtx - ids.length;
  const maxTokens = Math.min(sr.maxTokens ?? (chat ? room : 16), room);
  const gen: GenerateOptions = { ...sr.options, ...opts, maxTokens };
  const id = `${chat ? "chatcmpl" : "cmpl"}-${crypto.randomUUID().replaceAll("-", "")}`;
  const head = { id, object: "", created: Math.floor(Date.now() / 1000), model: modelId };
  const usage = (rs: JobResult[]) => {
    const n = rs.reduce((a, r) => a + r.nTokens, 0);
    return { prompt_tokens: ids.length, completion_tokens: n, total_tokens: ids.length + n };
  };
  const ac = new AbortController();
  const signal = AbortSignal.any([req.signal, ac.signal]);
  // Each choice its own sequence; with a seed, choice i samples with seed + i
  // (0xffffffff is llama.cpp's "random" for every choice).
  const seeded = gen.seed !== undefined && gen.seed !== 0xffffffff;
  const jobs: Job[] = Array.from({ length: sr.n }, (_, i) => {
    const g = seeded ? { ...gen, seed: (gen.seed! + i) % 2 ** 32 } : gen;
    return runJob(s, prompt, ids, g, sr.stop, signal);
  });
  const lp = new LogprobFormatter(tok);
  const object = chat ? "chat.completion" : "text_completion";

  if (!sr.stream || (toolMode && !tools!.schema)) {
    let results: { text: string; steps: StepLogprobs[]; r: JobResult }[];
    try {
      results = await Promise.all(jobs.map(collect));
    } catch (e) {
      ac.abort(e);
      throw e;
    }
    const parts = results.map(({ text, steps, r }, index) => {
      const calls = toolMode ? parseToolCalls(text, tools!.names, tools!.parallel) : [];
      return { index, text, steps, calls, finish: calls.length ? "tool_calls" : r.finish };
    });
    const choices = parts.map(({ index, text, steps, calls, finish }) => {
      if (!chat) {
        const logprobs = sr.logprobs !== null ? lp.legacy(steps) : null;
        return { index, text, logprobs, finish_reason: finish };
      }
      const message = calls.length
        ? { role: "assistant", content: null, tool_calls: calls }
        : { role: "assistant", content: text };
      const logprobs = sr.logprobs !== null ? { content: lp.chat(steps) } : null;
      return { index, message, logprobs, finish_reason: finish };
    });
    const all = {
      ...head,
      object,
      choices,
      usage: usage(results.map((x) => x.r)),
      timings: results[0].r.timings,
    };
    if (!sr.stream) return Response.json(all);
    // Tools read whole, then streamed: per choice, its role, then each call
    // (or the text) as one delta, then its finish.
    const chunkOf = (index: number, delta: unknown, finish: string | null) => ({
      ...head,
      object: "chat.completion.chunk",
      choices: [{ index, delta, logprobs: null, finish_reason: finish }],
    });
    const events: unknown[] = [];
    for (const { index, text, calls, finish } of parts) {
      events.push(chunkOf(index, { role: "assistant", content: calls.length ? null : "" }, null));
      calls.forEach((call: ToolCall, k) =>
        events.push(chunkOf(index, { tool_calls: [{ index: k, ...call }] }, null))
      );
      if (!calls.length) events.push(chunkOf(index, { content: text }, null));
      events.push(chunkOf(index, {}, finish));
    }
    if (sr.includeUsage) {
      events.push({
        ...head,
        object: "chat.completion.chunk",
        choices: [],
        usage: all.usage,
        timings: all.timings,
      });
    }
    const text = events.map((e) => `data: ${JSON.stringify(e)}\n\n`).join("") +
      "data: [DONE]\n\n";
    return new Response(text, { headers: SSE_HEADERS });
  }

  const chunkObject = chat ? "chat.completion.chunk" : "text_completion";
  // Every choice runs from now on, its chunks queued in the stream until the
  // response is read (no choice waits for the reader: two requests holding
  // some slots each and waiting for more would never finish otherwise).
  // The response waits for every choice's first step (slot, prompt, first
  // text): a full queue or a bad request is then a status, not a broken
  // stream, and each started job releases its slot however the stream ends.
  let c!: ReadableStreamDefaultController<Uint8Array>;
  let all: Promise<unknown> = Promise.resolve();
  const stream = new ReadableStream<Uint8Array>({
    start(controller) {
      c = controller;
    },
    // Settles once every job has stopped and given its slot back.
    async cancel() {
      ac.abort(new DOMException("client went away", "AbortError"));
      await all.catch(() => {});
    },
  });
  const results: JobResult[] = [];
  const begun = jobs.map(() => Promise.withResolvers<void>());
  let responded = false;
  let failed: { e: unknown } | null = null;
  const one = async (index: number) => {
    const job = jobs[index];
    const calls = toolMode ? new ToolCallStreamer() : null;
    let offset = 0;
    const put = (choice: Record<string, unknown>) =>
      c.enqueue(sse({ ...head, object: chunkObject, choices: [{ index, ...choice }] }));
    const putCalls = (ds: ToolCallDelta[]) => {
      if (ds.length) put({ delta: { tool_calls: ds }, logprobs: null, finish_reason: null });
    };
    // However this ends (a put that throws once the reader left, an
    // error), the job is closed: its finally gives the slot back. A job left
    // suspended at a yield would hold its slot forever.
    try {
      let r = await job.next();
      begun[index].resolve();
      if (chat) {
        put({
          delta: { role: "assistant", content: calls ? null : "" },
          logprobs: null,
          finish_reason: null,
        });
      }
      while (!r.done) {
        const e = r.value;
        if (calls) putCalls(calls.push(e.text));
        else if (chat) {
          const logprobs = e.logprobs.length ? { content: lp.chat(e.logprobs) } : null;
          put({ delta: { content: e.text }, logprobs, finish_reason: null });
        } else {
          const logprobs = sr.logprobs !== null ? lp.legacy(e.logprobs, offset) : null;
          offset += e.text.length;
          put({ text: e.text, logprobs, finish_reason: null });
        }
        r = await job.next();
      }
      if (calls) {
        putCalls(calls.end());
        if (r.value.finish === "stop" && calls.count > 0) r.value.finish = "tool_calls";
      }
      results[index] = r.value;
      put(
        chat
          ? { delta: {}, logprobs: null, finish_reason: r.value.finish }
          : { text: "", logprobs: null, finish_reason: r.value.finish },
      );
    } finally {
      await job.return(undefined as never).catch(() => {});
    }
  };
  all = Promise.all(jobs.map((_, i) => one(i)));
  all.then(() => {
    if (sr.includeUsage) {
      c.enqueue(sse({
        ...head,
        object: chunkObject,
        choices: [],
        usage: usage(results),
        timings: results[0].timings,
      }));
    }
    c.enqueue(enc.encode("data: [DONE]\n\n"));
    c.close();
  }, (e) => {
    ac.abort(e);
    if (!responded) {
      failed = { e }; // answered with the error's status instead
      return;
    }
    if (signal.aborted && !(e instanceof ApiError)) return c.close();
    const err = e instanceof ApiError ? e : new ApiError(500, (e as Error).message);
    c.enqueue(sse({
      error: { message: err.message, type: err.type, param: err.param, code: err.code },
    }));
    c.close();
  }).catch(() => {}); // the reader left: enqueue and close throw; the jobs were aborted
  await Promise.race([Promise.all(begun.map((b) => b.promise)), all]);
  if (failed) throw (failed as { e: unknown }).e;
  responded = true;
  return new Response(stream, { headers: SSE_HEADERS });
}

// Runs a job to its end: the whole text, every token's log-probabilities, the result.
async function collect(job: Job): Promise<{ text: string; steps: StepLogprobs[]; r: JobResult }> {
  let text = "";
  const steps: StepLogprobs[] = [];
  let r = await job.next();
  while (!r.done) {
    text += r.value.text;
    for (const x of r.value.logprobs) steps.push(x);
    r = await job.next();
  }
  return { text, steps, r: r.value };
}
