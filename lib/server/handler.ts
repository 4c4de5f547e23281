/**
 * An OpenAI-compatible `fetch` handler: `(req: Request) => Promise<Response>`
 * for `Deno.serve`, `deno serve` (`export default { fetch }`) or any
 * framework speaking Request/Response.
 *
 * Endpoints: `GET /v1/models`, `POST /v1/completions`,
 * `POST /v1/chat/completions` (plain JSON or server-sent events),
 * `POST /v1/embeddings`, and llama-server's `GET /health` (503 while
 * loading), `POST /tokenize`, `POST /detokenize`, `GET /metrics`. Requests run on `parallel` sequences of one context:
 * concurrent generations share each decode batch (continuous batching),
 * and a request beyond the free slots waits for one. Each slot gets
 * `ctxSize / parallel` tokens of the context (llama-server's split).
 *
 * Sampling defaults are llama.cpp's (temperature 0.8, top-k 40, top-p 0.95,
 * min-p 0.05), not OpenAI's; `temperature: 0` is greedy. `max_tokens`
 * defaults to 16 for completions (OpenAI's) and to the rest of the slot
 * for chat, and is always capped by the slot.
 *
 * @example
 * ```ts ignore
 * const handler = createHandler({ model: "model.gguf", parallel: 4 });
 * await handler.ready;
 * Deno.serve({ port: 8080 }, handler);
 * ```
 *
 * @module
 */
import { basename } from "node:path";
import { Context } from "../runtime/context.ts";
import { generate, type GenerateOptions } from "../runtime/generate.ts";
import { Model } from "../model/model.ts";
import { ApiError, badField, errorResponse } from "./errors.ts";
import { bool, checkKnown, COMMON_FIELDS, readJson, samplingRequest, str } from "./request.ts";
import { CHATML_TEMPLATE, ChatTemplate, checkMessages } from "./chat.ts";
import { SlotPool } from "./pool.ts";
import { type Metrics, metricsResponse, newMetrics } from "./metrics.ts";
import { StopScanner } from "./stop.ts";
import { EmbeddingService } from "./embeddings.ts";
import { checkTools, parseToolCall, type ToolCall, ToolCallStreamer } from "./tools.ts";

/** Options of {@link createHandler}. */
export interface HandlerOptions {
  /** A GGUF path (loaded by the handler, which then owns it) or a loaded model (the caller's). */
  model: string | Model;
  /** Concurrent requests served (sequences of the context; default 4). */
  parallel?: number;
  /** Context size in tokens, shared by the slots (default: per slot the training context, at most 4096). */
  ctxSize?: number;
  /** When set, every endpoint but /health needs `Authorization: Bearer <apiKey>`. */
  apiKey?: string;
  /** The model id reported and accepted (default: the file name without .gguf). */
  modelName?: string;
  /** Largest request body in bytes (default 1 MiB). */
  maxBodyBytes?: number;
  /** Jinja chat template overriding the model's. */
  chatTemplate?: string;
  /** CPU threads for the context. */
  threads?: number;
  /** Flash attention (needed by a q8_0 cache). */
  flashAttn?: boolean;
  /** KV cache type (default f16). */
  kvType?: "f16" | "f32" | "q8_0";
  /** Requests that may wait for a slot; beyond them a 503 with Retry-After (default 64 per slot). */
  maxQueue?: number;
}

/** The request handler, with its load state. */
export interface Handler {
  /** Answers one HTTP request; never rejects. */
  (req: Request): Promise<Response>;
  /** Settles when the model and context are ready (rejects when loading failed). */
  readonly ready: Promise<void>;
  /** Free slots and queued requests (for tests and monitoring). */
  stats(): { slots: number; free: number; queued: number };
  /** Frees the context (and the model when the handler loaded it). */
  close(): Promise<void>;
}

interface Loaded {
  model: Model;
  ctx: Context;
  pool: SlotPool;
  slotCtx: number;
  template: ChatTemplate;
  embeddings: EmbeddingService;
}

/** Builds the handler; the model loads in the background (`/health` answers 503 meanwhile). */
export function createHandler(options: HandlerOptions): Handler {
  const parallel = options.parallel ?? 4;
  if (!Number.isInteger(parallel) || parallel < 1 || parallel > 256) {
    throw new RangeError(`createHandler: parallel must be an integer in [1, 256], got ${parallel}`);
  }
  const limit = options.maxBodyBytes ?? 1 << 20;
  const ownsModel = typeof options.model === "string";
  const modelId = options.modelName ??
    (typeof options.model === "string"
      ? basename(options.model).replace(/\.gguf$/, "")
      : basename(options.model.file.header.path).replace(/\.gguf$/, ""));
  const created = Math.floor(Date.now() / 1000);
  let state: Loaded | null = null;
  let failure: Error | null = null;

  const ready = (async () => {
    const model = typeof options.model === "string"
      ? await Model.load(options.model)
      : options.model;
    const perSlot = options.ctxSize
      ? Math.floor(options.ctxSize / parallel)
      : Math.min(model.hparams.nCtxTrain, 4096);
    if (perSlot < 8) {
      throw new RangeError(`createHandler: ctxSize gives ${perSlot} tokens per slot`);
    }
    const ctx = await Context.create(model, {
      nSeqMax: parallel,
      nCtx: perSlot * parallel,
      threads: options.threads,
      flashAttn: options.flashAttn,
      kvType: options.kvType,
    });
    const seqs = Array.from({ length: parallel }, () => ctx.sequence());
    const tok = model.tokenizer;
    const piece = (id: number) => id >= 0 ? tok.tokenToPiece(id, { special: true }) : "";
    const src = options.chatTemplate ??
      (model.file.header.get("tokenizer.chat_template")?.value as string | undefined) ??
      CHATML_TEMPLATE;
    const template = new ChatTemplate(src, piece(tok.bos), piece(tok.eos));
    const pool = new SlotPool(seqs, options.maxQueue ?? 64 * parallel);
    const embeddings = new EmbeddingService(model, perSlot, options.threads);
    state = { model, ctx, pool, slotCtx: perSlot, template, embeddings };
  })();
  ready.catch((e) => failure = e as Error);

  const handler = async (req: Request): Promise<Response> => {
    try {
      return await route(req);
    } catch (e) {
      if (e instanceof ApiError) return errorResponse(e);
      return errorResponse(new ApiError(500, `internal error: ${(e as Error)?.message ?? e}`));
    }
  };

  const ROUTES: Record<string, [string, (req: Request, s: Loaded) => Promise<Response>]> = {
    "/v1/models": ["GET", () => Promise.resolve(models())],
    "/models": ["GET", () => Promise.resolve(models())],
    "/v1/completions": ["POST", (r, s) => completion(r, s, false)],
    "/completions": ["POST", (r, s) => completion(r, s, false)],
    "/v1/chat/completions": ["POST", (r, s) => completion(r, s, true)],
    "/chat/completions": ["POST", (r, s) => completion(r, s, true)],
    "/v1/embeddings": ["POST", embeddings],
    "/embeddings": ["POST", embeddings],
    "/metrics": ["GET", (_r, s) => Promise.resolve(metricsResponse(metrics, s.pool))],
    "/tokenize": ["POST", tokenize],
    "/detokenize": ["POST", detokenize],
  };

  async function route(req: Request): Promise<Response> {
    const path = new URL(req.url).pathname;
    if (path === "/health" || path === "/v1/health") {
      if (req.method !== "GET") throw notAllowed("GET");
      if (failure) throw new ApiError(500, `model failed to load: ${failure.message}`);
      if (!state) {
        throw new ApiError(503, "Loading model", {
          type: "unavailable_error",
          headers: { "Retry-After": "1" },
        });
      }
      return Response.json({ status: "ok" });
    }
    const r = ROUTES[path];
    if (!r) throw new ApiError(404, `no such endpoint: ${path}`, { code: "not_found" });
    if (req.method !== r[0]) throw notAllowed(r[0]);
    if (options.apiKey !== undefined) {
      const auth = req.headers.get("authorization") ?? "";
      if (auth !== `Bearer ${options.apiKey}`) {
        throw new ApiError(401, "invalid or missing API key", {
          type: "authentication_error",
          code: "invalid_api_key",
        });
      }
    }
    if (failure) throw new ApiError(500, `model failed to load: ${failure.message}`);
    if (!state) {
      throw new ApiError(503, "Loading model", {
        type: "unavailable_error",
        headers: { "Retry-After": "1" },
      });
    }
    return await r[1](req, state);
  }

  const notAllowed = (allow: string) =>
    new ApiError(405, `method not allowed; use ${allow}`, { headers: { Allow: allow } });

  const metrics = newMetrics();

  function models(): Response {
    return Response.json({
      object: "list",
      data: [{ id: modelId, object: "model", created, owned_by: "llm-edge" }],
    });
  }

  async function embeddings(req: Request, s: Loaded): Promise<Response> {
    return await s.embeddings.handle(await readJson(req, limit), modelId, req.signal);
  }

  async function tokenize(req: Request, s: Loaded): Promise<Response> {
    const body = await readJson(req, limit);
    checkKnown(body, ["content", "add_special", "parse_special", "with_pieces"]);
    const content = str(body, "content");
    if (content === undefined) throw badField("content", "required");
    const ids = s.model.tokenizer.encode(content, {
      addSpecial: bool(body, "add_special") ?? false,
      parseSpecial: bool(body, "parse_special") ?? true,
    });
    const tokens = bool(body, "with_pieces")
      ? ids.map((id) => ({ id, piece: s.model.tokenizer.tokenToPiece(id, { special: true }) }))
      : ids;
    return Response.json({ tokens });
  }

  async function detokenize(req: Request, s: Loaded): Promise<Response> {
    const body = await readJson(req, limit);
    checkKnown(body, ["tokens"]);
    const t = body.tokens;
    const nVocab = s.model.tokenizer.nVocab;
    if (!Array.isArray(t)) throw badField("tokens", "expected an array of token ids");
    t.forEach((id, i) => {
      if (!Number.isInteger(id) || id < 0 || id >= nVocab) {
        throw badField(`tokens[${i}]`, `expected a token id in [0, ${nVocab})`);
      }
    });
    return Response.json({
      content: s.model.tokenizer.decode(t as number[], { unparseSpecial: true }),
    });
  }

  async function completion(req: Request, s: Loaded, chat: boolean): Promise<Response> {
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
    const sr = samplingRequest(
      body,
      chat ? ["max_completion_tokens", "max_tokens"] : ["max_tokens"],
      s.model.tokenizer.nVocab,
    );
    const tok = s.model.tokenizer;
    let prompt: string, opts: GenerateOptions;
    const tools = chat ? checkTools(body) : null;
    // With tools, the reply is read whole: it is a call or text.
    const toolMode = tools !== null && tools.choice !== "none";
    if (tools?.schema) {
      if (sr.options.jsonSchema !== undefined || sr.options.grammar !== undefined) {
        throw badField("tool_choice", "a forced tool call excludes response_format and grammar");
      }
      sr.options.jsonSchema = tools.schema;
    }
    if (chat) {
      const messages = checkMessages(body.messages);
      prompt = s.template.render(messages, toolMode ? tools!.tools : undefined);
      const bos = tok.bos >= 0 ? tok.tokenToPiece(tok.bos, { special: true }) : "";
      // A template that writes BOS itself must not get a second one.
      opts = { addSpecial: !(bos && prompt.startsWith(bos)), parseSpecial: true };
    } else {
      const p = Array.isArray(body.prompt) && body.prompt.length === 1
        ? body.prompt[0]
        : body.prompt;
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
    if (ids.length === 0) throw badField(chat ? "messages" : "prompt", "the prompt has no tokens");
    if (ids.length >= s.slotCtx) {
      throw badField(
        chat ? "messages" : "prompt",
        `the prompt has ${ids.length} tokens; a slot holds ${s.slotCtx} (prompt + output)`,
        "context_length_exceeded",
      );
    }
    const room = s.slotCtx - ids.length;
    const maxTokens = Math.min(sr.maxTokens ?? (chat ? room : 16), room);
    const gen: GenerateOptions = { ...sr.options, ...opts, maxTokens };
    const id = `${chat ? "chatcmpl" : "cmpl"}-${crypto.randomUUID().replaceAll("-", "")}`;
    const now = Math.floor(Date.now() / 1000);
    const head = { id, object: "", created: now, model: modelId };
    const usage = (n: number) => ({
      prompt_tokens: ids.length,
      completion_tokens: n,
      total_tokens: ids.length + n,
    });
    const ac = new AbortController();
    const signal = AbortSignal.any([req.signal, ac.signal]);
    const run = runJob(s, prompt, ids, gen, sr.stop, signal, metrics);

    if (toolMode && !(tools!.schema && sr.stream)) {
      let text = "";
      let r = await run.next();
      while (!r.done) {
        text += r.value;
        r = await run.next();
      }
      const { nTokens, timings } = r.value;
      const call = parseToolCall(text, tools!.names);
      const finish = call ? "tool_calls" : r.value.finish;
      const message: { role: string; content: string | null; tool_calls?: ToolCall[] } = call
        ? { role: "assistant", content: null, tool_calls: [call] }
        : { role: "assistant", content: text };
      const all = {
        ...head,
        object: "chat.completion",
        choices: [{ index: 0, message, logprobs: null, finish_reason: finish }],
        usage: usage(nTokens),
        timings,
      };
      if (!sr.stream) return Response.json(all);
      // One delta with the whole call (or text): a valid OpenAI stream.
      const chunkOf = (delta: unknown, finish: string | null) => ({
        ...head,
        object: "chat.completion.chunk",
        choices: [{ index: 0, delta, logprobs: null, finish_reason: finish }],
      });
      const events = [
        chunkOf({ role: "assistant", content: call ? null : "" }, null),
        chunkOf(
          call ? { tool_calls: [{ index: 0, ...call }] } : { content: text },
          null,
        ),
        chunkOf({}, finish),
        ...(sr.includeUsage
          ? [{ ...head, object: "chat.completion.chunk", choices: [], usage: all.usage, timings }]
          : []),
      ];
      const sseText = events.map((e) => `data: ${JSON.stringify(e)}\n\n`).join("") +
        "data: [DONE]\n\n";
      return new Response(sseText, {
        headers: { "content-type": "text/event-stream", "cache-control": "no-cache" },
      });
    }
    if (!sr.stream) {
      let text = "";
      let r = await run.next();
      while (!r.done) {
        text += r.value;
        r = await run.next();
      }
      const { finish, nTokens, timings } = r.value;
      const choice = chat
        ? {
          index: 0,
          message: { role: "assistant", content: text },
          logprobs: null,
          finish_reason: finish,
        }
        : { index: 0, text, logprobs: null, finish_reason: finish };
      return Response.json({
        ...head,
        object: chat ? "chat.completion" : "text_completion",
        choices: [choice],
        usage: usage(nTokens),
        timings,
      });
    }
    const enc = new TextEncoder();
    const sse = (o: unknown) => enc.encode(`data: ${JSON.stringify(o)}\n\n`);
    const object = chat ? "chat.completion.chunk" : "text_completion";
    // A forced tool call streams as tool_calls deltas.
    const calls = toolMode ? new ToolCallStreamer() : null;
    const chunk = (delta: string | null, finish: string | null, role = false, tc?: unknown[]) => ({
      ...head,
      object,
      choices: [
        chat
          ? {
            index: 0,
            delta: finish
              ? {}
              : role
              ? { role: "assistant", content: calls ? null : "" }
              : tc
              ? { tool_calls: tc }
              : { content: delta },
            logprobs: null,
            finish_reason: finish,
          }
          : { index: 0, text: delta ?? "", logprobs: null, finish_reason: finish },
      ],
    });
    // The first step (slot, prompt, first text) runs before the response:
    // a full queue or a bad request is then a status, not a broken stream,
    // and the started generator releases its slot however the stream ends.
    let first: IteratorResult<string, JobResult> | null = await run.next();
    let started = false;
    const body2 = new ReadableStream<Uint8Array>({
      async pull(c) {
        try {
          if (!started && chat) c.enqueue(sse(chunk(null, null, true)));
          started = true;
          // A pull must enqueue something (or close), or the stream stalls.
          let r = first ?? await run.next();
          first = null;
          while (calls) {
            const d = r.done ? { args: calls.end() ?? "" } : calls.push(r.value);
            const f: Record<string, unknown> = { arguments: d.args };
            if (d.name !== undefined) f.name = d.name;
            const tc = {
              index: 0,
              ...(d.name !== undefined ? { id: calls.id, type: "function" } : {}),
              function: f,
            };
            if (d.name !== undefined || d.args) c.enqueue(sse(chunk(null, null, false, [tc])));
            if (r.done) {
              if (r.value.finish === "stop") r.value.finish = "tool_calls";
              break;
            }
            if (d.name !== undefined || d.args) return;
            r = await run.next();
          }
          if (!r.done) {
            if (r.value) c.enqueue(sse(chunk(r.value, null)));
            return;
          }
          c.enqueue(sse(chunk(chat ? null : "", r.value.finish)));
          if (sr.includeUsage) {
            c.enqueue(sse({
              ...head,
              object,
              choices: [],
              usage: usage(r.value.nTokens),
              timings: r.value.timings,
            }));
          }
          c.enqueue(enc.encode("data: [DONE]\n\n"));
          c.close();
        } catch (e) {
          if (signal.aborted) return c.close();
          const err = e instanceof ApiError ? e : new ApiError(500, (e as Error).message);
          c.enqueue(
            sse({
              error: { message: err.message, type: err.type, param: err.param, code: err.code },
            }),
          );
          c.close();
        }
      },
      async cancel() {
        ac.abort(new DOMException("client went away", "AbortError"));
        await run.return(undefined as never).catch(() => {});
      },
    }, { highWaterMark: STREAM_AHEAD });
    return new Response(body2, {
      headers: {
        "content-type": "text/event-stream",
        "cache-control": "no-cache",
      },
    });
  }

  return Object.assign(handler, {
    ready,
    stats: () =>
      state
        ? { slots: state.pool.size, free: state.pool.free, queued: state.pool.queued }
        : { slots: 0, free: 0, queued: 0 },
    async close() {
      await ready.catch(() => {});
      if (!state) return;
      await state.embeddings.dispose();
      state.pool.dispose();
      state.ctx[Symbol.dispose]();
      if (ownsModel) state.model[Symbol.dispose]();
      state = null;
    },
  });
}

/**
 * Chunks a stream generates ahead of its reader: generation does not wait
 * for each write to the socket, so every stream's next token is ready for
 * the next shared decode (a reader's pace would split the batch).
 */
const STREAM_AHEAD = 256;

/** llama-server's `timings` of a request (an extra field of its responses). */
export interface JobTimings {
  /** Prompt tokens reused from the slot's cache. */
  cache_n: number;
  /** Prompt tokens evaluated. */
  prompt_n: number;
  /** Milliseconds until the first token was sampled. */
  prompt_ms: number;
  /** Tokens generated. */
  predicted_n: number;
  /** Milliseconds of generation after the first token. */
  predicted_ms: number;
}

/** How a job ended. */
interface JobResult {
  finish: "stop" | "length" | "tool_calls";
  nTokens: number;
  timings: JobTimings;
}

/**
 * One generation on a slot: yields text deltas with stop strings held back
 * and cut, returns why it finished and how many tokens it generated. The
 * slot is released however it ends (done, stop, abort, error).
 */
async function* runJob(
  s: Loaded,
  prompt: string,
  ids: number[],
  gen: GenerateOptions,
  stops: string[],
  signal: AbortSignal,
  metrics: Metrics,
): AsyncGenerator<string, JobResult, undefined> {
  const seq = await s.pool.acquire(ids, signal);
  // What generate will reuse: the common prefix, less the last prompt token.
  const held = seq.tokens;
  let cached = 0;
  while (cached < held.length && cached < ids.length && held[cached] === ids[cached]) cached++;
  cached = Math.min(cached, ids.length - 1);
  const t0 = performance.now();
  let t1 = 0;
  const it = generate(seq, prompt, { ...gen, signal });
  try {
    const scan = new StopScanner(stops);
    let nTokens = 0;
    const done = (finish: "stop" | "length"): JobResult => {
      const t2 = performance.now();
      t1 ||= t2;
      const timings = {
        cache_n: cached,
        prompt_n: ids.length - cached,
        prompt_ms: t1 - t0,
        predicted_n: nTokens,
        predicted_ms: t2 - t1,
      };
      metrics.requests++;
      metrics.promptTokens += timings.prompt_n;
      metrics.genTokens += nTokens;
      metrics.promptMs += timings.prompt_ms;
      metrics.genMs += timings.predicted_ms;
      return { finish, nTokens, timings };
    };
    for (;;) {
      const r = await it.next();
      t1 ||= performance.now();
      if (r.done) {
        const rest = scan.flush();
        if (rest) yield rest;
        return done(r.value.stopReason === "eog" ? "stop" : "length");
      }
      if (r.value.id >= 0) nTokens++;
      const { text, stopped } = scan.push(r.value.text);
      if (text) yield text;
      if (stopped) return done("stop");
    }
  } catch (e) {
    if (e instanceof ApiError || signal.aborted) throw e;
    const name = (e as Error)?.name;
    if (name === "OptionError" || name === "RangeError") {
      throw new ApiError(400, (e as Error).message);
    }
    throw e;
  } finally {
    await it.return(undefined as never).catch(() => {});
    s.pool.release(seq);
  }
}
