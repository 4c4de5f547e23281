/**
 * Token log-probabilities in OpenAI's two wire formats: chat's
 * `logprobs.content[{token, logprob, bytes, top_logprobs}]` and legacy
 * completions' `{tokens, token_logprobs, top_logprobs, text_offset}`.
 *
 * @module
 */
import type { Tokenizer } from "../tokenizer/mod.ts";
import type { StepLogprobs } from "../sample/logprobs.ts";

/** One token of chat's `logprobs.content`. */
export interface ChatLogprob {
  /** The token's text. */
  token: string;
  /** Its log-probability. */
  logprob: number;
  /** Its UTF-8 bytes (a piece may be part of a character). */
  bytes: number[];
  /** The most likely tokens at that step. */
  top_logprobs: { token: string; logprob: number; bytes: number[] }[];
}

/** Legacy completions' `logprobs` object. */
export interface LegacyLogprobs {
  /** Token texts. */
  tokens: string[];
  /** Their log-probabilities. */
  token_logprobs: number[];
  /** Per token, the most likely tokens' texts and log-probabilities. */
  top_logprobs: Record<string, number>[];
  /** Per token, its offset in the completion text. */
  text_offset: number[];
}

const dec = new TextDecoder();

// -∞ (a banned token) is not JSON: llama-server sends the lowest float instead.
const finite = (x: number) => Number.isFinite(x) ? x : -3.4028234663852886e38;

/** Renders log-probabilities with `tok`'s pieces (special tokens as text). */
export class LogprobFormatter {
  readonly #tok: Tokenizer;

  /** A formatter over `tok`. */
  constructor(tok: Tokenizer) {
    this.#tok = tok;
  }

  #piece(id: number): { token: string; bytes: number[] } {
    const b = this.#tok.pieceBytes(id, { special: true });
    return { token: dec.decode(b), bytes: [...b] };
  }

  /** Chat's entries for `steps`. */
  chat(steps: readonly StepLogprobs[]): ChatLogprob[] {
    return steps.map((s) => ({
      ...this.#piece(s.id),
      logprob: finite(s.logprob),
      top_logprobs: s.top.map((t) => ({ ...this.#piece(t.id), logprob: finite(t.logprob) })),
    }));
  }

  /** Legacy completions' object for `steps`, offsets counted from `offset`. */
  legacy(steps: readonly StepLogprobs[], offset = 0): LegacyLogprobs {
    const out: LegacyLogprobs = {
      tokens: [],
      token_logprobs: [],
      top_logprobs: [],
      text_offset: [],
    };
    for (const s of steps) {
      const { token } = this.#piece(s.id);
      out.tokens.push(token);
      out.token_logprobs.push(finite(s.logprob));
      const top: Record<string, number> = {};
      for (const t of s.top) top[this.#piece(t.id).token] ??= finite(t.logprob);
      out.top_logprobs.push(top);
      out.text_offset.push(offset);
      offset += token.length;
    }
    return out;
  }
}
