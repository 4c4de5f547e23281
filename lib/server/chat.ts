/**
 * Chat prompts: `messages` checked and rendered with the model's
 * `tokenizer.chat_template` (Jinja, via `@huggingface/jinja`), or with
 * ChatML when the model has none (llama.cpp's own fallback):
 *
 *   <|im_start|>system\n…<|im_end|>\n<|im_start|>user\n…<|im_end|>\n<|im_start|>assistant\n
 *
 * A model without a template was not trained on ChatML either, so the
 * fallback only gives it a readable, consistent layout.
 *
 * @module
 */
import { PyTemplate } from "./jinja.ts";
import { ApiError, badField } from "./errors.ts";

/** ChatML, used when the model carries no chat template. */
export const CHATML_TEMPLATE: string =
  "{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' }}{% endfor %}" +
  "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}";

/** One checked chat message. */
export interface ChatMessage {
  /** system, developer, user, assistant or tool. */
  role: string;
  /** Text content (parts joined). */
  content: string;
  /** Optional author name. */
  name?: string;
  /** An assistant's calls, arguments parsed to objects (as templates expect). */
  tool_calls?: { id: string; type: "function"; function: { name: string; arguments: unknown } }[];
  /** The call a tool message answers. */
  tool_call_id?: string;
}

const ROLES = ["system", "developer", "user", "assistant", "tool"];

/** Checks `v` as OpenAI `messages`. */
export function checkMessages(v: unknown): ChatMessage[] {
  if (!Array.isArray(v) || v.length === 0) throw badField("messages", "expected a non-empty array");
  if (v.length > 10000) throw badField("messages", "too many messages");
  return v.map((m, i) => {
    const at = `messages[${i}]`;
    if (typeof m !== "object" || m === null || Array.isArray(m)) {
      throw badField(at, "expected an object");
    }
    const r = m as Record<string, unknown>;
    const extra = Object.keys(r).filter((k) =>
      !["role", "content", "name", "tool_calls", "tool_call_id"].includes(k)
    );
    if (extra.length) {
      throw badField(`${at}.${extra[0]}`, "unknown or unsupported field", "unknown_field");
    }
    if (typeof r.role !== "string" || !ROLES.includes(r.role)) {
      throw badField(`${at}.role`, `expected one of ${ROLES.join(", ")}`);
    }
    let content: string;
    if (typeof r.content === "string") content = r.content;
    else if (r.content === null && r.role === "assistant") content = "";
    else if (Array.isArray(r.content)) {
      content = r.content.map((p, j) => {
        const pp = p as Record<string, unknown> | null;
        if (!pp || pp.type !== "text" || typeof pp.text !== "string") {
          throw badField(
            `${at}.content[${j}]`,
            `only {"type":"text","text":…} parts are supported`,
          );
        }
        return pp.text;
      }).join("");
    } else throw badField(`${at}.content`, "expected a string or an array of text parts");
    if (r.name !== undefined && typeof r.name !== "string") {
      throw badField(`${at}.name`, "expected a string");
    }
    const out: ChatMessage = { role: r.role, content };
    if (typeof r.name === "string") out.name = r.name;
    if (r.tool_call_id !== undefined && r.tool_call_id !== null) {
      if (typeof r.tool_call_id !== "string") {
        throw badField(`${at}.tool_call_id`, "expected a string");
      }
      out.tool_call_id = r.tool_call_id;
    }
    if (r.tool_calls !== undefined && r.tool_calls !== null) {
      if (r.role !== "assistant" || !Array.isArray(r.tool_calls)) {
        throw badField(`${at}.tool_calls`, "expected an array, on an assistant message");
      }
      out.tool_calls = r.tool_calls.map((c, j) => {
        const f = (c as { function?: { name?: unknown; arguments?: unknown } })?.function;
        if (!f || typeof f.name !== "string" || typeof f.arguments !== "string") {
          throw badField(
            `${at}.tool_calls[${j}]`,
            "expected {id, type, function:{name, arguments}}",
          );
        }
        let args: unknown;
        try {
          args = JSON.parse(f.arguments);
        } catch {
          throw badField(`${at}.tool_calls[${j}].function.arguments`, "is not JSON");
        }
        const id = (c as { id?: unknown }).id;
        return {
          id: typeof id === "string" ? id : `call_${j}`,
          type: "function" as const,
          function: { name: f.name, arguments: args },
        };
      });
    }
    return out;
  });
}

/** A compiled chat template with the model's special tokens. */
export class ChatTemplate {
  readonly #tpl: PyTemplate;
  readonly #bos: string;
  readonly #eos: string;
  /** The template source. */
  readonly source: string;

  /** Compiles `source` (throws on a syntax error). */
  constructor(source: string, bosToken: string, eosToken: string) {
    this.source = source;
    this.#tpl = new PyTemplate(source);
    this.#bos = bosToken;
    this.#eos = eosToken;
  }

  /**
   * The prompt for `messages` (and `tools`, OpenAI's definitions, for
   * templates that show them), ending with the assistant's turn opened. The
   * template's `raise_exception` (built into `@huggingface/jinja`) and any
   * render error become a 400 naming `messages`.
   */
  render(messages: ChatMessage[], tools?: unknown[]): string {
    try {
      return this.#tpl.render({
        messages,
        ...(tools ? { tools } : {}),
        add_generation_prompt: true,
        bos_token: this.#bos,
        eos_token: this.#eos,
      });
    } catch (e) {
      if (e instanceof ApiError) throw e;
      throw new ApiError(400, `chat template: ${(e as Error).message}`, { param: "messages" });
    }
  }
}
