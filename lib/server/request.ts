/**
 * Reading and checking request bodies before any work: the body size limit
 * (413), UTF-8 and JSON (400), and every field of the completion requests,
 * each error naming its field. Unknown fields are refused rather than
 * silently ignored, so a client never believes an option took effect.
 *
 * @module
 */
import { type JsonSchema, jsonSchemaToGrammar } from "../grammar/json_schema.ts";
import { parseGrammar } from "../grammar/parser.ts";
import type { GenerateOptions } from "../runtime/generate.ts";
import { ApiError, badField } from "./errors.ts";

/** Reads `req`'s body as a JSON object, at most `limit` bytes. */
export async function readJson(req: Request, limit: number): Promise<Record<string, unknown>> {
  const len = Number(req.headers.get("content-length") ?? NaN);
  const tooLarge = () =>
    new ApiError(413, `request body exceeds ${limit} bytes`, { code: "request_too_large" });
  if (len > limit) {
    await req.body?.cancel().catch(() => {});
    throw tooLarge();
  }
  const chunks: Uint8Array[] = [];
  let total = 0;
  if (req.body) {
    const reader = req.body.getReader();
    for (;;) {
      const { done, value } = await reader.read();
      if (done) break;
      total += value.byteLength;
      if (total > limit) {
        await reader.cancel().catch(() => {});
        throw tooLarge();
      }
      chunks.push(value);
    }
  }
  const bytes = new Uint8Array(total);
  let o = 0;
  for (const c of chunks) bytes.set(c, (o += c.byteLength) - c.byteLength);
  let text: string;
  try {
    text = new TextDecoder("utf-8", { fatal: true }).decode(bytes);
  } catch {
    throw new ApiError(400, "request body is not valid UTF-8", { code: "invalid_body" });
  }
  let v: unknown;
  try {
    v = JSON.parse(text);
  } catch (e) {
    throw new ApiError(400, `request body is not valid JSON: ${(e as Error).message}`, {
      code: "invalid_json",
    });
  }
  if (typeof v !== "object" || v === null || Array.isArray(v)) {
    throw new ApiError(400, "request body must be a JSON object", { code: "invalid_body" });
  }
  return v as Record<string, unknown>;
}

/** Refuses fields of `body` not in `known`, naming them. */
export function checkKnown(body: Record<string, unknown>, known: readonly string[]): void {
  const unknown = Object.keys(body).filter((k) => !known.includes(k));
  if (unknown.length) {
    throw new ApiError(400, `unknown field(s): ${unknown.join(", ")}`, {
      param: unknown[0],
      code: "unknown_field",
    });
  }
}

const isNum = (v: unknown): v is number => typeof v === "number" && Number.isFinite(v);

/** A number field in [min, max], or undefined when absent/null. */
export function num(
  body: Record<string, unknown>,
  key: string,
  min: number,
  max: number,
  integer = false,
): number | undefined {
  const v = body[key];
  if (v === undefined || v === null) return undefined;
  if (!isNum(v) || (integer && !Number.isInteger(v))) {
    throw badField(
      key,
      `expected ${integer ? "an integer" : "a number"}, got ${JSON.stringify(v)}`,
    );
  }
  if (v < min || v > max) throw badField(key, `${v} is outside [${min}, ${max}]`);
  return v;
}

/** A boolean field, or undefined when absent/null. */
export function bool(body: Record<string, unknown>, key: string): boolean | undefined {
  const v = body[key];
  if (v === undefined || v === null) return undefined;
  if (typeof v !== "boolean") throw badField(key, `expected a boolean, got ${JSON.stringify(v)}`);
  return v;
}

/** A string field, or undefined when absent/null. */
export function str(body: Record<string, unknown>, key: string): string | undefined {
  const v = body[key];
  if (v === undefined || v === null) return undefined;
  if (typeof v !== "string") throw badField(key, `expected a string, got ${typeof v}`);
  return v;
}

/** Fields shared by /v1/completions and /v1/chat/completions. */
export const COMMON_FIELDS = [
  "model",
  "max_tokens",
  "temperature",
  "top_p",
  "top_k",
  "min_p",
  "seed",
  "stop",
  "presence_penalty",
  "frequency_penalty",
  "repeat_penalty",
  "stream",
  "stream_options",
  "response_format",
  "n",
  "user",
  "logprobs",
  "logit_bias",
  "mirostat",
  "mirostat_tau",
  "mirostat_eta",
  "grammar",
  "cfg_negative_prompt",
  "cfg_scale",
] as const;

/** A checked generation request (the parts common to both endpoints). */
export interface SamplingRequest {
  /** Generation options for `generate` (no signal, no maxTokens yet). */
  options: GenerateOptions;
  /** Tokens asked for, or undefined for the endpoint's default. */
  maxTokens?: number;
  /** Stop strings (never emitted). */
  stop: string[];
  /** Stream as server-sent events. */
  stream: boolean;
  /** Send a final usage chunk when streaming. */
  includeUsage: boolean;
  /** Choices asked for (`n`). */
  n: number;
  /** Alternatives per token when log-probabilities were asked (0: the token's only), else null. */
  logprobs: number | null;
}

/** Most alternatives per token (`top_logprobs`, completions' `logprobs`), llama-server's default. */
export const MAX_TOP_LOGPROBS = 20;

/** Largest accepted token count: beyond it a request is a mistake, not a wish. */
const MAX_TOKENS = 2 ** 31 - 1;

/**
 * Checks the common fields of `body` for chat or completions (`nVocab`
 * bounds `logit_bias` token ids).
 */
export function samplingRequest(
  body: Record<string, unknown>,
  chat: boolean,
  nVocab: number,
): SamplingRequest {
  let maxTokens: number | undefined;
  for (const k of chat ? ["max_completion_tokens", "max_tokens"] : ["max_tokens"]) {
    maxTokens ??= num(body, k, 1, MAX_TOKENS, true);
  }
  const n = num(body, "n", 1, 128, true) ?? 1;
  let logprobs: number | null = null;
  if (chat) {
    // Chat: logprobs is a switch, top_logprobs the count (which needs it).
    const top = num(body, "top_logprobs", 0, MAX_TOP_LOGPROBS, true);
    if (bool(body, "logprobs")) logprobs = top ?? 0;
    else if (top !== undefined) throw badField("top_logprobs", "needs logprobs: true");
  } else {
    // Completions (legacy): logprobs is the count of alternatives.
    logprobs = num(body, "logprobs", 0, MAX_TOP_LOGPROBS, true) ?? null;
  }
  str(body, "user");
  const negative = str(body, "cfg_negative_prompt");
  const scale = num(body, "cfg_scale", 0, 100);
  if (scale !== undefined && scale !== 1 && negative === undefined) {
    throw badField("cfg_scale", "needs cfg_negative_prompt");
  }
  const opts: GenerateOptions = {
    temperature: num(body, "temperature", 0, 100),
    topP: num(body, "top_p", 0, 1),
    topK: num(body, "top_k", 0, MAX_TOKENS, true),
    minP: num(body, "min_p", 0, 1),
    seed: num(body, "seed", 0, 0xffffffff, true),
    presencePenalty: num(body, "presence_penalty", -2, 2),
    frequencyPenalty: num(body, "frequency_penalty", -2, 2),
    repeatPenalty: num(body, "repeat_penalty", 0, 100),
    mirostat: num(body, "mirostat", 0, 2, true) as 0 | 1 | 2 | undefined,
    mirostatTau: num(body, "mirostat_tau", 0, 100),
    mirostatEta: num(body, "mirostat_eta", 0, 100),
    logitBias: logitBias(body.logit_bias, nVocab),
    grammar: grammar(body.grammar),
    cfg: negative !== undefined ? { negativePrompt: negative, scale: scale ?? 1 } : undefined,
    logprobs: logprobs ?? undefined,
  };
  for (const k of Object.keys(opts) as (keyof GenerateOptions)[]) {
    if (opts[k] === undefined) delete opts[k];
  }
  // OpenAI's 0 temperature means greedy; llama.cpp's greedy is temperature <= 0.
  const stop = stopStrings(body.stop);
  const stream = bool(body, "stream") ?? false;
  let includeUsage = false;
  const so = body.stream_options;
  if (so !== undefined && so !== null) {
    if (typeof so !== "object" || Array.isArray(so)) {
      throw badField("stream_options", "expected an object");
    }
    const s = so as Record<string, unknown>;
    const extra = Object.keys(s).filter((k) => k !== "include_usage");
    if (extra.length) {
      throw badField(`stream_options.${extra[0]}`, "unknown field", "unknown_field");
    }
    const iu = s.include_usage;
    if (iu !== undefined && iu !== null && typeof iu !== "boolean") {
      throw badField("stream_options.include_usage", "expected a boolean");
    }
    includeUsage = iu === true;
  }
  const rf = responseFormat(body.response_format);
  if (rf.jsonSchema !== undefined && opts.grammar !== undefined) {
    throw badField("grammar", "grammar and a JSON response_format exclude each other");
  }
  Object.assign(opts, rf);
  return { options: opts, maxTokens, stop, stream, includeUsage, n, logprobs };
}

// OpenAI's {"token id": bias in [-100, 100]}; -100 bans the token, as llama-server does.
function logitBias(v: unknown, nVocab: number): Map<number, number> | undefined {
  if (v === undefined || v === null) return undefined;
  if (typeof v !== "object" || Array.isArray(v)) {
    throw badField("logit_bias", "expected an object of token id -> bias");
  }
  const m = new Map<number, number>();
  for (const [k, b] of Object.entries(v)) {
    const id = Number(k);
    if (!/^\d+$/.test(k) || id >= nVocab) {
      throw badField("logit_bias", `${JSON.stringify(k)} is not a token id in [0, ${nVocab})`);
    }
    if (!isNum(b) || b < -100 || b > 100) {
      throw badField("logit_bias", `the bias of token ${k} must be a number in [-100, 100]`);
    }
    m.set(id, b === -100 ? -Infinity : b);
  }
  return m;
}

// llama.cpp's extra: a GBNF grammar, parsed now so that a bad one is a 400.
function grammar(v: unknown): string | undefined {
  if (v === undefined || v === null) return undefined;
  if (typeof v !== "string") throw badField("grammar", "expected a GBNF string");
  try {
    parseGrammar(v);
  } catch (e) {
    throw badField("grammar", (e as Error).message, "invalid_grammar");
  }
  return v;
}

function stopStrings(v: unknown): string[] {
  if (v === undefined || v === null) return [];
  const list = typeof v === "string" ? [v] : v;
  if (!Array.isArray(list) || list.length > 16) {
    throw badField("stop", "expected a string or an array of at most 16 strings");
  }
  for (const s of list) {
    if (typeof s !== "string" || s.length === 0 || s.length > 1000) {
      throw badField("stop", "each stop sequence must be a non-empty string of at most 1000 chars");
    }
  }
  return list as string[];
}

/** `response_format` → a JSON schema for the grammar, compiled now so that a bad one is a 400. */
function responseFormat(v: unknown): { jsonSchema?: JsonSchema } {
  if (v === undefined || v === null) return {};
  if (typeof v !== "object" || Array.isArray(v)) {
    throw badField("response_format", "expected an object");
  }
  const rf = v as Record<string, unknown>;
  let schema: JsonSchema;
  if (rf.type === "text") return {};
  if (rf.type === "json_object") {
    schema = rf.schema && typeof rf.schema === "object"
      ? rf.schema as JsonSchema
      : { type: "object" };
  } else if (rf.type === "json_schema") {
    const js = rf.json_schema;
    if (typeof js !== "object" || js === null || Array.isArray(js)) {
      throw badField("response_format.json_schema", "expected an object with a schema");
    }
    const s = (js as Record<string, unknown>).schema;
    if (typeof s !== "object" && typeof s !== "boolean" || s === null) {
      throw badField("response_format.json_schema.schema", "expected a JSON schema object");
    }
    schema = s as JsonSchema;
  } else {
    throw badField("response_format.type", `expected "text", "json_object" or "json_schema"`);
  }
  try {
    parseGrammar(jsonSchemaToGrammar(schema));
  } catch (e) {
    throw badField(
      rf.type === "json_schema" ? "response_format.json_schema.schema" : "response_format",
      `the schema cannot be turned into a grammar: ${(e as Error).message}`,
      "invalid_schema",
    );
  }
  return { jsonSchema: schema };
}
