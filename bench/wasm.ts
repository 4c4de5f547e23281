/**
 * `deno run -A bench/wasm.ts [--model FILE] [-p 64] [-n 32] [--reps 3]`: the
 * WebAssembly backend next to the CPU backend at one thread (its scalar
 * level, which the wasm kernels reproduce, and its best level), one engine
 * per configuration, repetitions interleaved, medians in tokens/s. Prints
 * the load average before and after: figures taken on a busy machine are
 * only comparable to each other.
 *
 * @module
 */
import { parseArgs } from "node:util";
import { Model } from "../lib/model/model.ts";
import { Context } from "../lib/runtime/context.ts";
import { loadLibrary } from "../ffi/library.ts";
import { SimdLevel } from "../ffi/symbols.ts";

const { values } = parseArgs({
  args: Deno.args,
  options: {
    model: { type: "string", default: "models/tolstoy-6m-f16.gguf" },
    p: { type: "string", default: "64" },
    n: { type: "string", default: "32" },
    reps: { type: "string", default: "3" },
  },
});
const pp = Number(values.p), tg = Number(values.n), reps = Number(values.reps);
const lib = await loadLibrary();
const load = () => Deno.readTextFileSync("/proc/loadavg").split(" ").slice(0, 3).join(" ");

interface Config {
  name: string;
  backend: "cpu" | "wasm";
  level: number;
}
const configs: Config[] = [
  { name: "wasm (1 thread)", backend: "wasm", level: SimdLevel.BEST },
  { name: "cpu scalar (1 thread)", backend: "cpu", level: SimdLevel.SCALAR },
  { name: "cpu best (1 thread)", backend: "cpu", level: SimdLevel.BEST },
];

async function once(model: Model, c: Config): Promise<[number, number]> {
  lib.symbols.le_set_simd_level(c.level);
  using ctx = await Context.create(model, { nCtx: pp + tg + 8, backend: c.backend, threads: 1 });
  const nVocab = model.hparams.nVocab;
  const prompt = Array.from({ length: pp }, (_, i) => 1 + ((i * 7919) % (nVocab - 1)));
  let t0 = performance.now();
  await ctx.decode(prompt);
  const ppRate = pp / ((performance.now() - t0) / 1000);
  t0 = performance.now();
  for (let i = 0; i < tg; i++) await ctx.decode([1 + ((i * 104729) % (nVocab - 1))]);
  const tgRate = tg / ((performance.now() - t0) / 1000);
  return [ppRate, tgRate];
}

const median = (a: number[]) => [...a].sort((x, y) => x - y)[Math.floor(a.length / 2)];
console.log(`model ${values.model}, pp ${pp}, tg ${tg}, reps ${reps}; load before: ${load()}`);
const res = new Map<string, [number[], number[]]>(configs.map((c) => [c.name, [[], []]]));
{
  using model = await Model.load(values.model!);
  for (const c of configs) await once(model, c); // warm-up (weights copied into wasm memory)
  for (let r = 0; r < reps; r++) {
    for (const c of configs) {
      const [a, b] = await once(model, c);
      res.get(c.name)![0].push(a);
      res.get(c.name)![1].push(b);
    }
  }
}
lib.symbols.le_set_simd_level(SimdLevel.BEST);
for (const [name, [a, b]] of res) {
  console.log(
    `${name.padEnd(24)} pp ${median(a).toFixed(1).padStart(8)} t/s   tg ${
      median(b).toFixed(1).padStart(8)
    } t/s`,
  );
}
console.log(`load after: ${load()}`);
