/**
 * One generation step of N sequences with a unified KV cache against one KV
 * stream per sequence (kvUnified false), in one process, alternating the
 * two every round so that a drifting machine load falls on both:
 *
 *   deno run -A bench/kv_streams.ts [--model FILE] [--n 16] [--rounds 5]
 *     [--threads 2] [--gap]
 *
 * Each context gets N prompts of 128 tokens (one batch), then every round
 * runs 16 steps of one greedy token per sequence on each. With `--gap`
 * sequence 5 sits out every other step: with streams, split_equal
 * (sequential) then cuts the batch into two micro-batches at the gap, as
 * llama.cpp does. Prints the median wall and CPU (user + system) ms per
 * step and the load average.
 *
 * @module
 */
import { flag, runCommand } from "../lib/cli/args.ts";
import { DEFAULT_MODEL } from "../lib/cli/generate.ts";
import { Model } from "../lib/model/model.ts";
import { Context } from "../lib/runtime/context.ts";

const PP = 128, TG = 16;

const SPEC = {
  name: "bench/kv_streams.ts",
  summary: "A decode step of N sequences: unified KV cache against one stream per sequence.",
  flags: {
    model: flag.string({ default: DEFAULT_MODEL, description: "GGUF model file" }),
    n: flag.int({ min: 6, max: 256, default: 16, description: "sequences" }),
    rounds: flag.int({ min: 1, default: 5, description: "rounds (16 steps on each context)" }),
    threads: flag.int({ min: 1, max: 512, default: 2, description: "threads" }),
    gap: flag.boolean({ description: "sequence 5 sits out every other step" }),
  },
};

function cpuMs(): number {
  const f = Deno.readTextFileSync("/proc/self/stat").split(") ")[1].split(" ");
  return (Number(f[11]) + Number(f[12])) * 10;
}

const median = (a: number[]) => [...a].sort((x, y) => x - y)[a.length >> 1];

function argmax(x: Float32Array): number {
  let b = 0;
  for (let i = 1; i < x.length; i++) if (x[i] > x[b]) b = i;
  return b;
}

if (import.meta.main) {
  Deno.exit(
    await runCommand(SPEC, Deno.args, async ({ values: a }) => {
      using m = await Model.load(a.model);
      const n = a.n, nV = m.hparams.nVocab;
      const mk = (kvUnified: boolean) =>
        Context.create(m, {
          nCtx: n * (PP + TG * a.rounds + 8),
          nBatch: 2048,
          nUbatch: 512,
          nSeqMax: n,
          threads: a.threads,
          kvUnified,
        });
      const ctxs = { unified: await mk(true), streams: await mk(false) };
      let r = 7;
      const tok = () => 3 + ((r = (r * 1103515245 + 12345) % 2147483648) % (nV - 3));
      const prompt = Array.from({ length: n * PP }, tok);
      const seqIds = prompt.map((_, i) => Math.floor(i / PP));
      const logits = prompt.map((_, i) => i % PP === PP - 1);
      const last: Record<string, Float32Array[]> = {};
      const wall: Record<string, number[]> = { unified: [], streams: [] };
      const cpu: Record<string, number[]> = { unified: [], streams: [] };
      for (const [k, c] of Object.entries(ctxs)) {
        last[k] = (await c.decodeBatch({ tokens: prompt, seqIds, logits })).logits;
      }
      for (let round = 0; round < a.rounds; round++) {
        const order = round % 2 ? ["streams", "unified"] : ["unified", "streams"];
        for (const k of order as (keyof typeof ctxs)[]) {
          const t = performance.now(), c0 = cpuMs();
          for (let s = 0; s < TG; s++) {
            const ids = [...Array(n).keys()].filter((i) => !(a.gap && s % 2 === 0 && i === 5));
            const b = {
              tokens: ids.map((i) => argmax(last[k][i])),
              seqIds: ids,
              logits: ids.map(() => 1),
            };
            const out = (await ctxs[k].decodeBatch(b)).logits;
            ids.forEach((i, j) => (last[k][i] = out[j]));
          }
          wall[k].push((performance.now() - t) / TG);
          cpu[k].push((cpuMs() - c0) / TG);
        }
      }
      for (const c of Object.values(ctxs)) c[Symbol.dispose]();
      const load = Deno.readTextFileSync("/proc/loadavg").split(" ").slice(0, 3).join(" ");
      const f = (k: string) =>
        `${median(wall[k]).toFixed(2)} ms/step (${wall[k].map((x) => x.toFixed(1)).join(", ")}), ` +
        `CPU ${median(cpu[k]).toFixed(1)} ms/step`;
      console.log(
        `${a.model.split("/").pop()} N=${n} threads=${a.threads}${a.gap ? " gap" : ""}: ` +
          `unified ${f("unified")}; streams ${f("streams")}; unified / streams wall ` +
          `${(median(wall.unified) / median(wall.streams)).toFixed(2)}x; load ${load}`,
      );
      return 0;
    }),
  );
}
