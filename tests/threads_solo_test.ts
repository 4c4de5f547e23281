// A context with several threads may run a compute on thread 0 alone when
// the machine is busy (kernels/src/threads.c, le_adapt); LE_SOLO=1 forces
// that for every compute. The logits must be the bits of the same context
// computed on one thread and on all threads, for a prompt and for the
// one-token steps after it. With flash attention at f32 precision the
// decode steps take the f32 kernel split by K/V head (tolstoy-6m has 4), so
// the same holds there, and a step may run solo (threads.c fixed_nth).
import assert from "node:assert/strict";
import { fileURLToPath } from "node:url";
import { Model } from "../lib/model/model.ts";
import { Context, type ContextOptions } from "../lib/runtime/context.ts";

const MODEL = fileURLToPath(new URL("../models/tolstoy-6m-f16.gguf", import.meta.url));

// The prompt's last logits, then each step's, as raw bits.
async function run(
  m: Model,
  threads: number,
  solo: boolean,
  attn: ContextOptions = { flashAttn: false },
): Promise<Uint32Array[]> {
  if (solo) Deno.env.set("LE_SOLO", "1");
  try {
    await using ctx = await Context.create(m, { nCtx: 64, nBatch: 16, threads, ...attn });
    const out: Uint32Array[] = [];
    const bits = (r: { logits: Float32Array[] }) =>
      new Uint32Array(r.logits[r.logits.length - 1].slice().buffer);
    out.push(bits(await ctx.decode([1, 50, 300, 7, 1200, 9, 33, 402, 8, 15])));
    for (const t of [100, 2000, 5, 77, 901, 12]) out.push(bits(await ctx.decode([t])));
    return out;
  } finally {
    if (solo) Deno.env.delete("LE_SOLO");
  }
}

Deno.test("threads: computes forced onto thread 0 give the bits of one thread and of two", async () => {
  using m = await Model.load(MODEL);
  const one = await run(m, 1, false);
  const two = await run(m, 2, false);
  const solo = await run(m, 2, true);
  for (let i = 0; i < one.length; i++) {
    assert.deepEqual(two[i], one[i], `2 threads, output ${i}`);
    assert.deepEqual(solo[i], one[i], `2 threads on thread 0 alone, output ${i}`);
  }
});

Deno.test("threads: flash attention at f32, split by K/V head: one thread's bits on two and solo", async () => {
  using m = await Model.load(MODEL);
  const attn: ContextOptions = { flashAttn: true, flashAttnPrecision: "f32" };
  const one = await run(m, 1, false, attn);
  const two = await run(m, 2, false, attn);
  const four = await run(m, 4, false, attn);
  const solo = await run(m, 2, true, attn);
  const unfused = await run(m, 1, false);
  assert.notDeepEqual(one.slice(1), unfused.slice(1), "the f32 kernel ran");
  for (let i = 0; i < one.length; i++) {
    assert.deepEqual(two[i], one[i], `2 threads, output ${i}`);
    assert.deepEqual(four[i], one[i], `4 threads, output ${i}`);
    assert.deepEqual(solo[i], one[i], `2 threads on thread 0 alone, output ${i}`);
  }
});
