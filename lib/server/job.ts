/**
 * One generation on a server slot: the slot taken and given back however
 * the generation ends, stop strings held back and cut, the token
 * log-probabilities passed along, llama-server's timings and the metrics.
 *
 * @module
 */
import type { Context } from "../runtime/context.ts";
import { generate, type GenerateOptions } from "../runtime/generate.ts";
import type { Model } from "../model/model.ts";
import type { StepLogprobs } from "../sample/logprobs.ts";
import { ApiError } from "./errors.ts";
import type { ChatTemplate } from "./chat.ts";
import type { EmbeddingService } from "./embeddings.ts";
import type { Metrics } from "./metrics.ts";
import type { SlotPool } from "./pool.ts";
import { StopScanner } from "./stop.ts";

/** What a loaded handler serves with. */
export interface ServerState {
  /** The model. */
  model: Model;
  /** The context whose sequences are the slots. */
  ctx: Context;
  /** The slots. */
  pool: SlotPool;
  /** Tokens per slot. */
  slotCtx: number;
  /** The chat template. */
  template: ChatTemplate;
  /** /v1/embeddings. */
  embeddings: EmbeddingService;
  /** Counters for /metrics. */
  metrics: Metrics;
}

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
export interface JobResult {
  /** OpenAI's finish_reason. */
  finish: "stop" | "length" | "tool_calls";
  /** Tokens generated. */
  nTokens: number;
  /** llama-server's timings. */
  timings: JobTimings;
}

/** One step of a job: the text now safe to send and the log-probabilities of its tokens. */
export interface JobEvent {
  /** Text (stop strings held back and cut). */
  text: string;
  /** Per token generated in this step, when log-probabilities were asked. */
  logprobs: StepLogprobs[];
}

/**
 * Runs `gen` on a slot for the prompt `ids` (the text `prompt`): yields
 * text deltas with stop strings held back and cut, returns why it finished
 * and how many tokens it generated. The slot is released however it ends
 * (done, stop, abort, error). A token that completes a stop string is not
 * reported (llama-server drops the stop word's probabilities too).
 */
export async function* runJob(
  s: ServerState,
  prompt: string,
  ids: number[],
  gen: GenerateOptions,
  stops: string[],
  signal: AbortSignal,
): AsyncGenerator<JobEvent, JobResult, undefined> {
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
      const m = s.metrics;
      m.requests++;
      m.promptTokens += timings.prompt_n;
      m.genTokens += nTokens;
      m.promptMs += timings.prompt_ms;
      m.genMs += timings.predicted_ms;
      return { finish, nTokens, timings };
    };
    for (;;) {
      const r = await it.next();
      t1 ||= performance.now();
      if (r.done) {
        const rest = scan.flush();
        if (rest) yield { text: rest, logprobs: [] };
        return done(r.value.stopReason === "eog" ? "stop" : "length");
      }
      if (r.value.id >= 0) nTokens++;
      const { text, stopped } = scan.push(r.value.text);
      const lp = r.value.logprobs && !stopped ? [r.value.logprobs] : [];
      if (text || lp.length) yield { text, logprobs: lp };
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
