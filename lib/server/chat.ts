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
import { Template } from "@huggingface/jinja";
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
    const extra = Object.keys(r).filter((k) => !["role", "content", "name"].includes(k));
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
    return out;
  });
}

/** A compiled chat template with the model's special tokens. */
export class ChatTemplate {
  readonly #tpl: Template;
  readonly #bos: string;
  readonly #eos: string;
  /** The template source. */
  readonly source: string;

  /** Compiles `source` (throws on a syntax error). */
  constructor(source: string, bosToken: string, eosToken: string) {
    this.source = source;
    this.#tpl = new Template(source);
    this.#bos = bosToken;
    this.#eos = eosToken;
  }

  /**
   * The prompt for `messages`, ending with the assistant's turn opened. The
   * template's `raise_exception` (built into `@huggingface/jinja`) and any
   * render error become a 400 naming `messages`.
   */
  render(messages: ChatMessage[]): string {
    try {
      return this.#tpl.render({
        messages,
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
