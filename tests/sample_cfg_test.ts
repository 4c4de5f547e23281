/**
 * Classifier-free guidance wiring: two llama.cpp contexts (prompt and
 * negative prompt) on the tolstoy model, scale 1.5, greedy for 16 steps with
 * both contexts fed the chosen token. applyCfg must pick the same token as
 * the formula evaluated independently in float64 at every step.
 */
import assert from "node:assert/strict";
import { applyCfg } from "../lib/sample/cfg.ts";
import { loadOracle } from "./oracle/oracle.ts";

function logSoftmax64(x: Float32Array): Float64Array {
  let max = -Infinity;
  for (const v of x) if (v > max) max = v;
  let sum = 0;
  for (const v of x) sum += Math.exp(v - max);
  const lse = max + Math.log(sum);
  return Float64Array.from(x, (v) => v - lse);
}

function argmax(x: ArrayLike<number>): number {
  let b = 0;
  for (let i = 1; i < x.length; i++) if (x[i] > x[b]) b = i;
  return b;
}

Deno.test("applyCfg follows llama.cpp contexts' logits through the float64 formula", async () => {
  const oracle = await loadOracle();
  using model = oracle.load("../shared/models/tolstoy-6m-f32.gguf");
  using main = model.context({ nCtx: 128 });
  using guide = model.context({ nCtx: 128 });
  const prompt = model.tokenize("The prince looked at Natasha and said", { addSpecial: true });
  const negative = model.tokenize("The war was cold and the soldiers", { addSpecial: true });
  const scale = 1.5;
  let l = main.decode(prompt)[0];
  let g = guide.decode(negative)[0];
  const tokens: number[] = [];
  let differsFromPlain = false;
  for (let step = 0; step < 16; step++) {
    const a = logSoftmax64(l), b = logSoftmax64(g);
    const ref = Float64Array.from(a, (v, i) => scale * (v - b[i]) + b[i]);
    const want = argmax(ref);
    const ours = Float32Array.from(l);
    applyCfg(ours, g, scale);
    const got = argmax(ours);
    const second = Math.max(...ref.filter((_, i) => i !== want));
    if (ref[want] - second > 1e-4) assert.equal(got, want, `step ${step}`);
    if (want !== argmax(l)) differsFromPlain = true;
    tokens.push(want);
    l = main.decode([want])[0];
    g = guide.decode([want])[0];
  }
  assert.equal(tokens.length, 16);
  assert.ok(differsFromPlain, "guidance at 1.5 should change at least one greedy choice");
});

Deno.test("applyCfg at scale 1 gives the main context's log-probabilities", () => {
  const l = Float32Array.from({ length: 300 }, (_, i) => Math.sin(i) * 5);
  const g = Float32Array.from({ length: 300 }, (_, i) => Math.cos(i * 3) * 4);
  const want = logSoftmax64(l);
  applyCfg(l, g, 1);
  for (let i = 0; i < l.length; i++) assert.ok(Math.abs(l[i] - want[i]) < 1e-5);
  assert.throws(() => applyCfg(new Float32Array(3), new Float32Array(4), 1), RangeError);
});
