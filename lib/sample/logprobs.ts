/**
 * Log-probabilities of a step: the log-softmax of the model's logits (as
 * llama-server reports them by default: before any sampler, not after),
 * for the chosen token and the most likely ones.
 *
 * @module
 */

/** A token and its log-probability. */
export interface TokenLogprob {
  /** Token id. */
  readonly id: number;
  /** Natural log of its probability under the model's logits. */
  readonly logprob: number;
}

/** The chosen token's log-probability and the `nTop` most likely tokens (best first). */
export interface StepLogprobs extends TokenLogprob {
  /** The most likely tokens, best first (ties: lower id first). */
  readonly top: TokenLogprob[];
}

/**
 * `log softmax(logits)` at `id` and at the `nTop` largest logits. The sum
 * runs in double precision; a banned (-∞) logit gets -∞.
 */
export function stepLogprobs(logits: Float32Array, id: number, nTop: number): StepLogprobs {
  const n = logits.length;
  let max = -Infinity;
  for (let i = 0; i < n; i++) if (logits[i] > max) max = logits[i];
  let sum = 0;
  for (let i = 0; i < n; i++) sum += Math.exp(logits[i] - max);
  const lse = max + Math.log(sum);
  const top: TokenLogprob[] = [];
  if (nTop > 0) {
    // Insertion into a short sorted list: nTop is at most a few dozen.
    const ids: number[] = [];
    for (let i = 0; i < n; i++) {
      const l = logits[i];
      if (ids.length === nTop && l <= logits[ids[nTop - 1]]) continue;
      let k = ids.length < nTop ? ids.length : nTop - 1;
      while (k > 0 && logits[ids[k - 1]] < l) {
        if (k < nTop) ids[k] = ids[k - 1];
        k--;
      }
      ids[k] = i;
      if (ids.length > nTop) ids.length = nTop;
    }
    for (const t of ids) top.push({ id: t, logprob: logits[t] - lse });
  }
  return { id, logprob: logits[id] - lse, top };
}
