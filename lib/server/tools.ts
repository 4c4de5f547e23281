/**
 * Tool calls: `tools` and `tool_choice` checked, the grammar that makes the
 * model's reply a call of a declared function (`required` or a named
 * function), and the reading of a reply as a call (`auto`).
 *
 * A call is the JSON object `{"name": …, "arguments": {…}}` (optionally in
 * Hermes' `<tool_call>…</tool_call>`), the format most templates teach;
 * several calls are several such objects (or blocks), or a JSON array of
 * them. With `required` or a named function the grammar allows nothing
 * else (an array of one or more calls when `parallel_tool_calls` is true),
 * and the arguments follow the function's `parameters` schema.
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
  /** Several calls may be made (`parallel_tool_calls`, OpenAI's default true). */
  parallel: boolean;
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
  const one = choice === "required"
    ? { anyOf: [...names].map(callOf) }
    : typeof choice === "object"
    ? callOf(choice.name)
    : undefined;
  // Forced parallel calls only when asked for explicitly: a JSON array of
  // calls (a single object stays the default, which every template knows).
  const schema = one && p === true ? { type: "array", items: one, minItems: 1 } : one;
  if (schema) {
    try {
      parseGrammar(jsonSchemaToGrammar(schema));
    } catch (e) {
      throw badField("tools", (e as Error).message, "invalid_schema");
    }
  }
  return { tools: t, choice, names, schema, parallel: p !== false };
}

const callId = () => `call_${crypto.randomUUID().replaceAll("-", "").slice(0, 24)}`;

// A declared call from a parsed value, else null.
function callOf(v: unknown, names: Set<string>): ToolCall | null {
  const o = v as { name?: unknown; arguments?: unknown; parameters?: unknown } | null;
  if (!o || typeof o !== "object" || typeof o.name !== "string" || !names.has(o.name)) return null;
  const args = o.arguments ?? o.parameters ?? {};
  return {
    id: callId(),
    type: "function",
    function: { name: o.name, arguments: typeof args === "string" ? args : JSON.stringify(args) },
  };
}

// Splits `s` into consecutive JSON values separated by whitespace; null if it is not that.
function jsonValues(s: string): unknown[] | null {
  const out: unknown[] = [];
  let i = 0;
  while (i < s.length) {
    while (i < s.length && /\s/.test(s[i])) i++;
    if (i === s.length) break;
    if (s[i] !== "{" && s[i] !== "[") return null;
    let depth = 0, str = false, esc = false, j = i;
    for (; j < s.length; j++) {
      const c = s[j];
      if (str) {
        if (esc) esc = false;
        else if (c === "\\") esc = true;
        else if (c === '"') str = false;
      } else if (c === '"') str = true;
      else if (c === "{" || c === "[") depth++;
      else if ((c === "}" || c === "]") && --depth === 0) break;
    }
    if (j === s.length) return null;
    try {
      out.push(JSON.parse(s.slice(i, j + 1)));
    } catch {
      return null;
    }
    i = j + 1;
  }
  return out;
}

/**
 * The calls `text` makes: one or more `{"name", "arguments"}` objects (each
 * optionally in `<tool_call>…</tool_call>`) or a JSON array of them, every
 * one of a declared function; else none (the text is a plain reply).
 * Without `parallel` only the first call is kept.
 */
export function parseToolCalls(text: string, names: Set<string>, parallel = true): ToolCall[] {
  const s = text.trim().replace(/<tool_call>([\s\S]*?)<\/tool_call>/g, "$1\n");
  const values = jsonValues(s);
  if (!values || values.length === 0) return [];
  const flat = values.length === 1 && Array.isArray(values[0]) ? values[0] : values;
  const calls = flat.map((v) => callOf(v, names));
  if (calls.length === 0 || calls.some((c) => c === null)) return [];
  return parallel ? calls as ToolCall[] : [calls[0]!];
}

/** One `tool_calls` delta of a stream (OpenAI's shape). */
export interface ToolCallDelta {
  /** Which call of the reply. */
  index: number;
  /** The call's id, in its first delta. */
  id?: string;
  /** "function", in its first delta. */
  type?: "function";
  /** The name (first delta), then argument fragments. */
  function: { name?: string; arguments: string };
}

const HEAD = /\s*\{\s*"name"\s*:\s*("(?:[^"\\]|\\.)*")\s*,\s*"arguments"\s*:\s*/y;

/**
 * Streams forced calls as OpenAI does: each call's name once it is known,
 * then its arguments' JSON in fragments. The grammar writes
 * `{"name": …, "arguments": …}` in that order, one object or a JSON array
 * of them; the arguments' end is found by following the JSON (strings and
 * escapes included), so the outer braces never leak into them.
 */
export class ToolCallStreamer {
  #text = "";
  #pos = 0;
  #state: "start" | "head" | "args" | "after" | "done" = "start";
  #array = false;
  #calls: string[] = [];
  #depth = 0;
  #str = false;
  #esc = false;
  #prim = false;

  /** Calls begun so far. */
  get count(): number {
    return this.#calls.length;
  }

  /** Adds generated text; returns the deltas it completes. */
  push(piece: string): ToolCallDelta[] {
    this.#text += piece;
    const out: ToolCallDelta[] = [];
    const emit = (args: string, head?: string) => {
      const index = this.#calls.length - 1;
      const last = out[out.length - 1];
      if (last && last.index === index && head === undefined) last.function.arguments += args;
      else if (head !== undefined) {
        out.push({
          index,
          id: this.#calls[index],
          type: "function",
          function: { name: head, arguments: args },
        });
      } else if (args) out.push({ index, function: { arguments: args } });
    };
    const t = this.#text;
    while (this.#pos < t.length && this.#state !== "done") {
      if (this.#state === "start") {
        while (this.#pos < t.length && /\s/.test(t[this.#pos])) this.#pos++;
        if (this.#pos === t.length) break;
        if (t[this.#pos] === "[") {
          this.#array = true;
          this.#pos++;
        }
        this.#state = "head";
      } else if (this.#state === "head") {
        HEAD.lastIndex = this.#pos;
        const m = HEAD.exec(t);
        // The head may still be arriving; the value must have begun after it.
        if (!m || m.index + m[0].length === t.length) break;
        this.#calls.push(callId());
        this.#pos += m[0].length;
        this.#state = "args";
        this.#depth = 0;
        this.#str = this.#esc = this.#prim = false;
        emit("", JSON.parse(m[1]) as string);
      } else if (this.#state === "args") {
        const from = this.#pos;
        let ended = false;
        for (; this.#pos < t.length; this.#pos++) {
          const c = t[this.#pos];
          if (this.#str) {
            if (this.#esc) this.#esc = false;
            else if (c === "\\") this.#esc = true;
            else if (c === '"') {
              this.#str = false;
              if (this.#depth === 0) {
                this.#pos++;
                ended = true;
                break;
              }
            }
          } else if (this.#prim) {
            if (/[\s,}\]]/.test(c)) {
              ended = true;
              break;
            }
          } else if (c === '"') this.#str = true;
          else if (c === "{" || c === "[") this.#depth++;
          else if (c === "}" || c === "]") {
            if (--this.#depth === 0) {
              this.#pos++;
              ended = true;
              break;
            }
          } else if (this.#depth === 0) this.#prim = true;
        }
        emit(t.slice(from, this.#pos));
        if (ended) this.#state = "after";
      } else {
        // After the arguments: the call's "}", then "," (next call), "]" or the end.
        const m = /^\s*\}\s*(,|\])?/.exec(t.slice(this.#pos));
        if (!m) break;
        if (m[1] === undefined && this.#array) break;
        this.#pos += m[0].length;
        this.#state = m[1] === "," ? "head" : "done";
      }
    }
    return out;
  }

  /** The deltas left at the end of the text (a bare value's last characters); none if no call began. */
  end(): ToolCallDelta[] {
    return this.push("");
  }
}
