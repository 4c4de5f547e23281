/**
 * `GET /metrics`: Prometheus text of the handler's counters (llama-server's
 * names under the `llmedge:` prefix).
 *
 * @module
 */
import type { SlotPool } from "./pool.ts";

/** Counters of finished completion requests. */
export interface Metrics {
  /** Requests finished. */
  requests: number;
  /** Prompt tokens evaluated (cache hits excluded). */
  promptTokens: number;
  /** Tokens generated. */
  genTokens: number;
  /** Milliseconds of prompt processing. */
  promptMs: number;
  /** Milliseconds of generation. */
  genMs: number;
}

/** Zeroed counters. */
export function newMetrics(): Metrics {
  return { requests: 0, promptTokens: 0, genTokens: 0, promptMs: 0, genMs: 0 };
}

/** The Prometheus response for `m` and the slots of `pool`. */
export function metricsResponse(m: Metrics, pool: SlotPool): Response {
  const lines = [
    ["counter", "requests_total", "Completion requests finished.", m.requests],
    ["counter", "prompt_tokens_total", "Prompt tokens processed.", m.promptTokens],
    ["counter", "tokens_predicted_total", "Tokens generated.", m.genTokens],
    ["counter", "prompt_seconds_total", "Prompt processing time.", m.promptMs / 1000],
    ["counter", "tokens_predicted_seconds_total", "Generation time.", m.genMs / 1000],
    ["gauge", "requests_processing", "Requests holding a slot.", pool.size - pool.free],
    ["gauge", "requests_deferred", "Requests waiting for a slot.", pool.queued],
    ["counter", "n_decode_total", "Decodes run for the slots.", pool.batchStats.decodes],
    [
      "gauge",
      "n_busy_slots_per_decode",
      "Average slots per decode (continuous batching).",
      pool.batchStats.sequences / Math.max(1, pool.batchStats.decodes),
    ],
  ].map(([type, name, help, v]) =>
    `# HELP llmedge:${name} ${help}\n# TYPE llmedge:${name} ${type}\nllmedge:${name} ${v}\n`
  );
  return new Response(lines.join(""), {
    headers: { "content-type": "text/plain; version=0.0.4" },
  });
}
