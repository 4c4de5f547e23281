/**
 * Classifier-free guidance: the logits of the main context are combined with
 * those of a guidance context that decoded the negative prompt,
 * `l = s·(logsoftmax(l) − logsoftmax(g)) + logsoftmax(g)`, in float32 as
 * llama.cpp's llama_sample_apply_guidance did. s = 1 leaves the log-probs of
 * the main context; s > 1 pushes away from the negative prompt.
 *
 * @module
 */

const f = Math.fround;

/** log-softmax in place, float32 (max-shifted exponentials, then log of ratio). */
export function logSoftmax(x: Float32Array): void {
  let max = -Infinity;
  for (let i = 0; i < x.length; i++) if (x[i] > max) max = x[i];
  let sum = 0;
  for (let i = 0; i < x.length; i++) {
    const p = f(Math.exp(f(x[i] - max)));
    x[i] = p;
    sum = f(sum + p);
  }
  for (let i = 0; i < x.length; i++) x[i] = f(Math.log(f(x[i] / sum)));
}

/**
 * Applies guidance in place on `logits` (the guidance row is not modified).
 * Both rows must have the vocabulary's length.
 */
export function applyCfg(logits: Float32Array, guidance: Float32Array, scale: number): void {
  if (logits.length !== guidance.length) {
    throw new RangeError(
      `applyCfg: logits (${logits.length}) and guidance (${guidance.length}) lengths differ`,
    );
  }
  const g = Float32Array.from(guidance);
  logSoftmax(logits);
  logSoftmax(g);
  const s = f(scale);
  for (let i = 0; i < logits.length; i++) logits[i] = f(f(s * f(logits[i] - g[i])) + g[i]);
}
