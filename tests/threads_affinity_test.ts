// A pool worker that finds itself on the CPU the calling thread started a
// compute on leaves that CPU for the compute (kernels/src/threads.c,
// kernels/src/cpus.c), and must get every CPU it had back afterwards: a worker
// left pinned would keep a later compute off a free core. The logits must
// not change either (which thread computes what never changes a value).
import assert from "node:assert/strict";
import { fileURLToPath } from "node:url";
import { Model } from "../lib/model/model.ts";
import { Context } from "../lib/runtime/context.ts";

const MODEL = fileURLToPath(new URL("../models/tolstoy-6m-f16.gguf", import.meta.url));

/** Cpus_allowed_list of each thread of this process named `name`. */
function allowedOf(name: string): string[] {
  const out: string[] = [];
  for (const e of Deno.readDirSync("/proc/self/task")) {
    const status = Deno.readTextFileSync(`/proc/self/task/${e.name}/status`);
    if (status.match(/^Name:\s+(.*)$/m)?.[1] !== name) continue;
    out.push(status.match(/^Cpus_allowed_list:\s+(.*)$/m)![1]);
  }
  return out;
}

Deno.test({
  name: "threads: workers have all their CPUs back after computes, and the same logits",
  ignore: Deno.build.os !== "linux",
  fn: async () => {
    const mine = Deno.readTextFileSync("/proc/self/status").match(
      /^Cpus_allowed_list:\s+(.*)$/m,
    )![1];
    using m = await Model.load(MODEL);
    const run = async (threads: number) => {
      await using ctx = await Context.create(m, { nCtx: 256, nBatch: 64, threads });
      const bits = (r: { logits: Float32Array[] }) =>
        new Uint32Array(r.logits[r.logits.length - 1].slice().buffer);
      const out = [bits(await ctx.decode(Array.from({ length: 48 }, (_, i) => 10 + 7 * i)))];
      for (let i = 0; i < 40; i++) out.push(bits(await ctx.decode([100 + i])));
      if (threads > 1) {
        const workers = allowedOf("le-worker");
        assert.ok(workers.length >= threads - 1, `${workers.length} workers`);
        for (const w of workers) assert.equal(w, mine, "a worker's CPUs after the computes");
      }
      return out;
    };
    const one = await run(1);
    const two = await run(2);
    const four = await run(4); // more threads than this machine's 2 CPUs: left to the kernel
    for (let i = 0; i < one.length; i++) {
      assert.deepEqual(two[i], one[i], `2 threads, output ${i}`);
      assert.deepEqual(four[i], one[i], `4 threads, output ${i}`);
    }
  },
});
