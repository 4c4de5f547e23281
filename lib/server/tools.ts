/**
 * Tool calls: `tools` and `tool_choice` checked, the grammar that makes the
 * model's reply a call of a declared function (`required` or a named
 * function), and the reading of a reply as a call (`auto`).
 *
 * A call is the JSON object `{"name": …, "arguments": {…}}` (optionally in
 * Hermes' `<tool_call>…</tool_call>`), the format most templates teach;
 * with `required` or a named function the grammar allows nothing else, and
 * the arguments follow the function's `parameters` schema.
 *
 * @module
 */
import { type JsonSchema, jsonSchemaToGrammar } from "../grammar/json_schema.ts";
import { parseGrammar } from "../grammar/parser.ts";
import { badField } from "./errors.ts";

/** Checked tools of a request. */
export interface ToolRequest {
  /** The definitions as sent (for the template). */
  tools: unknown[];
  /** none, auto, required, or one function's name. */
  choice: "none" | "auto" | "required" | { name: string };
  /** Declared function names. */
  names: Set<string>;
  /** Schema a forced reply follows (required / named), else undefined. */
  schema?: JsonSchema;
}

/** One call in OpenAI's response shape. */
export interface ToolCall {
  /** Call id (`call_…`). */
  id: string;
  /** Always "function". */
  type: "function";
  /** The function and its arguments as a JSON string. */
  function: { name: string; arguments: string };
}

/** Checks `tools`, `tool_choice` and `parallel_tool_calls` of `body`; null without tools. */
export function checkTools(body: Record<string, unknown>): ToolRequest | null {
  const t = body.tools;
  const c = body.tool_choice;
  const p = body.parallel_tool_calls;
  if (p !== undefined && p !== null && typeof p !== "boolean") {
    throw badField("parallel_tool_calls", "expected a boolean");
  }
  if (t === undefined || t === null) {
    if (c !== undefined && c !== null && c !== "none") {
      throw badField("tool_choice", "needs tools");
    }
    return null;
  }
  if (!Array.isArray(t) || t.length === 0 || t.length > 128) {
    throw badField("tools", "expected a non-empty array of at most 128 tools");
  }
  const names = new Set<string>();
  const params = new Map<string, JsonSchema>();
  t.forEach((x, i) => {
    const f = x as { type?: unknown; function?: Record<string, unknown> } | null;
    if (!f || f.type !== "function" || typeof f.function !== "object" || f.function === null) {
      throw badField(`tools[${i}]`, `expected {"type":"function","function":{…}}`);
    }
    const name = f.function.name;
    if (typeof name !== "string" || !/^[A-Za-z0-9_.-]{1,64}$/.test(name)) {
      throw badField(`tools[${i}].function.name`, "expected 1-64 letters, digits, _ . -");
    }
    if (names.has(name)) throw badField(`tools[${i}].function.name`, `${name} is declared twice`);
    names.add(name);
    const ps = f.function.parameters ?? { type: "object" };
    if (typeof ps !== "object" && typeof ps !== "boolean") {
      throw badField(`tools[${i}].function.parameters`, "expected a JSON schema");
    }
    try {
      parseGrammar(jsonSchemaToGrammar(ps as JsonSchema));
    } catch (e) {
      throw badField(`tools[${i}].function.parameters`, (e as Error).message, "invalid_schema");
    }
    params.set(name, ps as JsonSchema);
  });
  let choice: ToolRequest["choice"];
  if (c === undefined || c === null || c === "auto") choice = "auto";
  else if (c === "none" || c === "required") choice = c;
  else {
    const n = (c as { type?: unknown; function?: { name?: unknown } }).function?.name;
    if (typeof n !== "string" || !names.has(n)) {
      throw badField("tool_choice", `expected "none", "auto", "required" or a declared function`);
    }
    choice = { name: n };
  }
  const callOf = (n: string) => ({
    type: "object",
    properties: { name: { const: n }, arguments: params.get(n)! },
    required: ["name", "arguments"],
    additionalProperties: false,
  });
  const schema = choice === "required"
    ? { anyOf: [...names].map(callOf) }
    : typeof choice === "object"
    ? callOf(choice.name)
    : undefined;
  if (schema) {
    try {
      parseGrammar(jsonSchemaToGrammar(schema));
    } catch (e) {
      throw badField("tools", (e as Error).message, "invalid_schema");
    }
  }
  return { tools: t, choice, names, schema };
}

/** The call `text` makes, when it is one of a declared function; else null. */
export function parseToolCall(text: string, names: Set<string>): ToolCall | null {
  let s = text.trim();
  const m = s.match(/^<tool_call>([\s\S]*)<\/tool_call>$/);
  if (m) s = m[1].trim();
  let v: unknown;
  try {
    v = JSON.parse(s);
  } catch {
    return null;
  }
  const o = v as { name?: unknown; arguments?: unknown; parameters?: unknown } | null;
  if (!o || typeof o !== "object" || typeof o.name !== "string" || !names.has(o.name)) return null;
  const args = o.arguments ?? o.parameters ?? {};
  return {
    id: `call_${crypto.randomUUID().replaceAll("-", "").slice(0, 24)}`,
    type: "function",
    function: { name: o.name, arguments: typeof args === "string" ? args : JSON.stringify(args) },
  };
}

/**
 * Streams a forced call as OpenAI does: the function's name once it is
 * known, then the arguments' JSON in fragments. The grammar writes
 * `{"name": …, "arguments": …}` in that order; the closing brace of the
 * outer object (and the whitespace and braces that may precede it) is
 * held back until the end, when the last one is dropped.
 */
export class ToolCallStreamer {
  /** The call's id. */
  readonly id: string = `call_${crypto.randomUUID().replaceAll("-", "").slice(0, 24)}`;
  #text = "";
  #start = -1;
  #sent = 0;

  /** Adds generated text; returns the name when it just became known and new argument text. */
  push(piece: string): { name?: string; args: string } {
    this.#text += piece;
    let name: string | undefined;
    if (this.#start < 0) {
      const m = /^\s*\{\s*"name"\s*:\s*("(?:[^"\\]|\\.)*")\s*,\s*"arguments"\s*:\s*/
        .exec(this.#text);
      if (!m) return { args: "" };
      name = JSON.parse(m[1]) as string;
      this.#start = m[0].length;
    }
    const region = this.#text.slice(this.#start);
    const held = /[\s}]*$/.exec(region)![0].length;
    const end = Math.max(this.#sent, region.length - held);
    const args = region.slice(this.#sent, end);
    this.#sent = end;
    return name === undefined ? { args } : { name, args };
  }

  /** The rest of the arguments at the end (the outer brace dropped); null if no call began. */
  end(): string | null {
    if (this.#start < 0) return null;
    const region = this.#text.slice(this.#start).replace(/\s*\}\s*$/, "");
    return region.slice(this.#sent);
  }
}
