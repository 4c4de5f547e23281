/**
 * `POST /v1/embeddings`: OpenAI's request and response over {@link embed},
 * on a second context created (with `embeddings: true` for a decoder) on
 * the first request. One vector per input: the model's pooling, or mean
 * pooling when the model declares none (llama-server refuses those; a
 * client of this endpoint always wants one vector). Vectors are
 * L2-normalized (OpenAI's are); `encoding_format: "base64"` sends the
 * little-endian float32 bytes, as OpenAI does.
 *
 * @module
 */
import { Context } from "../runtime/context.ts";
import { defaultPooling, embed } from "../runtime/embed.ts";
import type { Model } from "../model/model.ts";
import { ApiError, badField } from "./errors.ts";
import { checkKnown, str } from "./request.ts";

/** Most inputs in one request (OpenAI's limit). */
const MAX_INPUTS = 2048;

/** The embeddings endpoint of one model. */
export class EmbeddingService {
  readonly #model: Model;
  readonly #nCtx: number;
  readonly #threads?: number;
  #ctx: Promise<Context> | null = null;

  /** A service over `model`, inputs of at most `nCtx` tokens. */
  constructor(model: Model, nCtx: number, threads?: number) {
    this.#model = model;
    this.#nCtx = nCtx;
    this.#threads = threads;
  }

  /** Answers a checked-JSON request body. */
  async handle(
    body: Record<string, unknown>,
    modelId: string,
    signal: AbortSignal,
  ): Promise<Response> {
    checkKnown(body, ["input", "model", "encoding_format", "user", "dimensions"]);
    if (body.model !== undefined && body.model !== null && body.model !== modelId) {
      throw badField(
        "model",
        `unknown model ${JSON.stringify(body.model)}; this server has ${modelId}`,
      );
    }
    str(body, "user");
    const format = str(body, "encoding_format") ?? "float";
    if (format !== "float" && format !== "base64") {
      throw badField("encoding_format", `expected "float" or "base64"`);
    }
    if (body.dimensions !== undefined && body.dimensions !== null) {
      throw badField(
        "dimensions",
        "not supported (the model's size is returned)",
        "unsupported_value",
      );
    }
    const inputs = this.#inputs(body.input);
    const tok = this.#model.tokenizer;
    const ids = inputs.map((x) =>
      typeof x === "string" ? tok.encode(x, { addSpecial: true, parseSpecial: true }) : x
    );
    ids.forEach((t, i) => {
      if (t.length === 0) throw badField(`input[${i}]`, "has no tokens");
      if (t.length > this.#nCtx) {
        throw badField(
          `input[${i}]`,
          `has ${t.length} tokens; at most ${this.#nCtx} fit`,
          "context_length_exceeded",
        );
      }
    });
    const ctx = await this.#context();
    const pooling = defaultPooling(this.#model) === "none" ? "mean" : undefined;
    // Token ids go in as given: no second BOS.
    const rows = await embed(ctx, ids, { pooling, normalize: 2, signal });
    const n = ids.reduce((a, t) => a + t.length, 0);
    return Response.json({
      object: "list",
      data: rows.map((v, index) => ({
        object: "embedding",
        index,
        embedding: format === "float" ? Array.from(v) : base64(v),
      })),
      model: modelId,
      usage: { prompt_tokens: n, total_tokens: n },
    });
  }

  #inputs(v: unknown): (string | number[])[] {
    const nVocab = this.#model.tokenizer.nVocab;
    const isIds = (a: unknown): a is number[] =>
      Array.isArray(a) && a.length > 0 && a.every((x) => typeof x === "number");
    let list: unknown[];
    if (typeof v === "string") list = [v];
    else if (isIds(v)) list = [v];
    else if (Array.isArray(v) && v.length > 0) list = v;
    else throw badField("input", "expected a string, an array of strings or of token id arrays");
    if (list.length > MAX_INPUTS) throw badField("input", `more than ${MAX_INPUTS} inputs`);
    return list.map((x, i) => {
      if (typeof x === "string") {
        if (x.length === 0) throw badField(`input[${i}]`, "is empty");
        return x;
      }
      if (!isIds(x)) throw badField(`input[${i}]`, "expected a string or an array of token ids");
      for (const id of x) {
        if (!Number.isInteger(id) || id < 0 || id >= nVocab) {
          throw badField(`input[${i}]`, `${id} is not a token id in [0, ${nVocab})`);
        }
      }
      return x;
    });
  }

  #context(): Promise<Context> {
    this.#ctx ??= Context.create(this.#model, {
      embeddings: this.#model.arch.output !== "embeddings",
      nCtx: this.#nCtx,
      nBatch: this.#nCtx,
      nSeqMax: 8,
      threads: this.#threads,
    }).catch((e) => {
      this.#ctx = null;
      throw new ApiError(500, `embeddings context: ${(e as Error).message}`);
    });
    return this.#ctx;
  }

  /** Frees the context, if one was made. */
  async dispose(): Promise<void> {
    const c = await this.#ctx?.catch(() => null);
    c?.[Symbol.dispose]();
    this.#ctx = null;
  }
}

function base64(v: Float32Array): string {
  // Float32Array is little-endian on every platform Deno runs on.
  const b = new Uint8Array(v.buffer, v.byteOffset, v.byteLength);
  let s = "";
  for (let i = 0; i < b.length; i += 0x8000) s += String.fromCharCode(...b.subarray(i, i + 0x8000));
  return btoa(s);
}
