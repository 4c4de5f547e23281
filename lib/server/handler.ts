/**
 * An OpenAI-compatible `fetch` handler: `(req: Request) => Promise<Response>`
 * for `Deno.serve`, `deno serve` (`export default { fetch }`) or any
 * framework speaking Request/Response.
 *
 * Endpoints: `GET /v1/models`, `POST /v1/completions`,
 * `POST /v1/chat/completions` (plain JSON or server-sent events),
 * `POST /v1/embeddings`, and llama-server's `GET /health` (503 while
 * loading), `POST /tokenize`, `POST /detokenize`, `GET /metrics`.
 * Requests run on `parallel` sequences of one context: concurrent
 * generations share each decode batch (continuous batching), a long prompt
 * is read in `batchSize` chunks beside the running streams, and a request
 * beyond the free slots waits for one. Each slot gets `ctxSize / parallel`
 * tokens of the context (llama-server's split). `n` choices take a slot
 * each (usage sums them; with a seed, choice i samples with seed + i).
 *
 * Extras: `logprobs` (chat: with `top_logprobs`; completions: the count),
 * the log-softmax of the model's logits at each step as llama-server
 * reports by default, in OpenAI's chat and legacy formats; llama.cpp's
 * `cfg_negative_prompt` and `cfg_scale` (classifier-free guidance on a
 * second sequence); tool calls, several per reply (`parallel_tool_calls`;
 * forced ones as a JSON array of calls when it is true), streamed as
 * `tool_calls` deltas per call.
 *
 * Sampling defaults are llama.cpp's (temperature 0.8, top-k 40, top-p 0.95,
 * min-p 0.05), not OpenAI's; `temperature: 0` is greedy. `max_tokens`
 * defaults to 16 for completions (OpenAI's) and to the rest of the slot
 * for chat, and is always capped by the slot.
 *
 * A client that disconnects is seen through `req.signal`. Deno.serve's
 * legacy mode also aborts that signal after every successful response and
 * warns once that it does; this project opts into the new behaviour
 * (`"unstable": ["no-legacy-abort"]` in deno.json, or
 * `--unstable-no-legacy-abort`), and so should an application serving the
 * handler.
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
import { Context } from "../runtime/context.ts";
import { Model } from "../model/model.ts";
import { MAX_SEQ } from "../kv/cells.ts";
import { ApiError, badField, errorResponse } from "./errors.ts";
import { bool, checkKnown, readJson, str } from "./request.ts";
import { CHATML_TEMPLATE, ChatTemplate } from "./chat.ts";
import { SlotPool } from "./pool.ts";
import { metricsResponse, newMetrics } from "./metrics.ts";
import { EmbeddingService } from "./embeddings.ts";
import { completion } from "./completion.ts";
import type { ServerState } from "./job.ts";

export type { JobTimings } from "./job.ts";

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
  /** Threads for the context (see the context option `threads`; WebAssembly: 1 unless given). */
  threads?: number;
  /** Flash attention (needed by a q8_0 cache). */
  flashAttn?: boolean;
  /** Flash attention's arithmetic (the context option `flashAttnPrecision`). */
  flashAttnPrecision?: "default" | "f32";
  /** The matrix products' float order (the context option `matmulOrder`). */
  matmulOrder?: "default" | "fast";
  /** KV cache type (default f16). */
  kvType?: "f16" | "f32" | "q8_0";
  /**
   * One KV pool shared by all slots (true, llama-server's --kv-unified), or
   * one KV stream per sequence (false, the default): a decode step of many
   * slots attends each slot's own cells only, not every slot's. With
   * streams each sequence (the slots and the guidance sequences beside
   * them) gets the per-slot context.
   */
  kvUnified?: boolean;
  /** Requests that may wait for a slot; beyond them a 503 with Retry-After (default 64 per slot). */
  maxQueue?: number;
  /**
   * Tokens per decode (llama-server's --batch-size; default 512): a long
   * prompt is evaluated in chunks of this size, each shared with one token
   * of every running stream, so streams go on while it is read.
   */
  batchSize?: number;
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

type Loaded = ServerState;

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
  const metrics = newMetrics();
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
    // Twice the slots in sequence ids: a request with classifier-free
    // guidance runs its negative prompt on a second sequence.
    const nSeqMax = Math.min(2 * parallel, MAX_SEQ);
    const kvUnified = options.kvUnified ?? false;
    const ctx = await Context.create(model, {
      nSeqMax,
      kvUnified,
      // An idle slot between busy ones does not split a decode step in two.
      kvStreamGaps: !kvUnified,
      nBatch: options.batchSize,
      nCtx: perSlot * (kvUnified ? parallel : nSeqMax),
      threads: options.threads,
      flashAttn: options.flashAttn,
      flashAttnPrecision: options.flashAttnPrecision,
      matmulOrder: options.matmulOrder,
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
    state = { model, ctx, pool, slotCtx: perSlot, template, embeddings, metrics };
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
    "/v1/completions": ["POST", (r, s) => completion(r, { s, modelId, limit }, false)],
    "/completions": ["POST", (r, s) => completion(r, { s, modelId, limit }, false)],
    "/v1/chat/completions": ["POST", (r, s) => completion(r, { s, modelId, limit }, true)],
    "/chat/completions": ["POST", (r, s) => completion(r, { s, modelId, limit }, true)],
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

/** The last component of a path (either separator): node:path's basename without node:path, which a browser cannot import. */
function basename(path: string): string {
  return path.replace(/[\\/]+$/, "").replace(/^.*[\\/]/, "");
}
