/**
 * `deno task bench`: llm-edge next to llama.cpp on the same GGUF file and
 * thread count, in one run. Each engine runs in its own child process (so
 * peak RSS is its own); repetitions alternate between the engines and the
 * medians are compared.
 *
 *   deno task bench [--model FILE] [--threads T] [--pp 512] [--tg 128] [--reps 3]
 *     [--types q8_0,q4_0,...] [--no-tokenizer] [--no-sampling]
 *
 * Without --model a ~125M-parameter random llama (f16) is generated once
 * under .cache/bench. --types also quantizes that file with llama.cpp's
 * quantizer and benchmarks every listed type. The tokenizer (MB/s) and the
 * sampler chain / grammar per-token costs are measured too.
 *
 * This tool needs the llama.cpp oracle from tests/oracle (fetched from npm).
 *
 * @module
 */
import { flag, runCommand, UsageError } from "../lib/cli/args.ts";
import { fileURLToPath } from "node:url";
import { join } from "node:path";

const ROOT = fileURLToPath(new URL("../", import.meta.url));
const SELF = fileURLToPath(import.meta.url);

/** Result of one engine's child run. */
interface ChildResult {
  engine: "llm-edge" | "llama.cpp";
  pp: number[];
  tg: number[];
  loadMs: number;
  peakRssMiB: number;
}

function peakRssMiB(): number {
  const status = Deno.readTextFileSync("/proc/self/status");
  const m = /VmHWM:\s+(\d+) kB/.exec(status);
  return m ? Number(m[1]) / 1024 : NaN;
}

function median(xs: number[]): number {
  const s = [...xs].sort((a, b) => a - b);
  const m = s.length >> 1;
  return s.length % 2 ? s[m] : (s[m - 1] + s[m]) / 2;
}

function randomTokens(n: number, nVocab: number, seed: number): number[] {
  let a = seed >>> 0;
  return Array.from({ length: n }, () => {
    a = (Math.imul(a, 1664525) + 1013904223) >>> 0;
    return 3 + (a % (nVocab - 3));
  });
}

async function childOurs(
  model: string,
  threads: number,
  pp: number,
  tg: number,
  reps: number,
): Promise<ChildResult> {
  const { Model } = await import("../lib/model/model.ts");
  const { Context } = await import("../lib/runtime/context.ts");
  const t0 = performance.now();
  using m = await Model.load(model);
  using ctx = await Context.create(m, { nCtx: pp + tg + 16, nBatch: pp, threads });
  const loadMs = performance.now() - t0;
  const prompt = randomTokens(pp, m.hparams.nVocab, 1);
  const gen = randomTokens(tg, m.hparams.nVocab, 2);
  const ppR: number[] = [], tgR: number[] = [];
  ctx.clear();
  await ctx.decode(prompt.slice(0, 16)); // warm-up
  for (let r = 0; r < reps; r++) {
    ctx.clear();
    let t = performance.now();
    await ctx.decode(prompt);
    ppR.push(pp / ((performance.now() - t) / 1000));
    ctx.clear();
    t = performance.now();
    for (const id of gen) await ctx.decode([id]);
    tgR.push(tg / ((performance.now() - t) / 1000));
  }
  return { engine: "llm-edge", pp: ppR, tg: tgR, loadMs, peakRssMiB: peakRssMiB() };
}

async function childLlama(
  model: string,
  threads: number,
  pp: number,
  tg: number,
  reps: number,
): Promise<ChildResult> {
  const { loadOracle } = await import("../tests/oracle/oracle.ts");
  const oracle = await loadOracle();
  const t0 = performance.now();
  using m = oracle.load(model);
  using ctx = m.context({ nCtx: pp + tg + 16, nBatch: pp, threads });
  const loadMs = performance.now() - t0;
  const prompt = randomTokens(pp, m.nVocab, 1);
  const gen = randomTokens(tg, m.nVocab, 2);
  const ppR: number[] = [], tgR: number[] = [];
  ctx.clear();
  ctx.decode(prompt.slice(0, 16));
  for (let r = 0; r < reps; r++) {
    ctx.clear();
    let t = performance.now();
    ctx.decode(prompt);
    ppR.push(pp / ((performance.now() - t) / 1000));
    ctx.clear();
    t = performance.now();
    for (const id of gen) ctx.decode([id]);
    tgR.push(tg / ((performance.now() - t) / 1000));
  }
  return { engine: "llama.cpp", pp: ppR, tg: tgR, loadMs, peakRssMiB: peakRssMiB() };
}

async function runChild(
  engine: string,
  model: string,
  threads: number,
  pp: number,
  tg: number,
): Promise<ChildResult> {
  const out = await new Deno.Command(Deno.execPath(), {
    args: [
      "run",
      "-A",
      SELF,
      "--child",
      engine,
      "--model",
      model,
      "--threads",
      String(threads),
      "--pp",
      String(pp),
      "--tg",
      String(tg),
      "--reps",
      "1",
    ],
    stdout: "piped",
    stderr: "inherit",
  }).output();
  if (!out.success) throw new Error(`${engine} child failed on ${model}`);
  const lines = new TextDecoder().decode(out.stdout).trim().split("\n");
  return JSON.parse(lines[lines.length - 1]);
}

/** Benchmarks one file: alternating child runs, medians, ratios. */
async function benchFile(
  model: string,
  threads: number,
  pp: number,
  tg: number,
  reps: number,
): Promise<void> {
  const ours: ChildResult[] = [], llama: ChildResult[] = [];
  for (let r = 0; r < reps; r++) {
    console.error(`bench: ${model.split("/").pop()} rep ${r + 1}/${reps}`);
    llama.push(await runChild("llama.cpp", model, threads, pp, tg));
    ours.push(await runChild("llm-edge", model, threads, pp, tg));
  }
  const row = (rs: ChildResult[]) => ({
    pp: median(rs.flatMap((x) => x.pp)),
    tg: median(rs.flatMap((x) => x.tg)),
    rss: Math.max(...rs.map((x) => x.peakRssMiB)),
    load: median(rs.map((x) => x.loadMs)),
  });
  const a = row(ours), b = row(llama);
  const name = model.split("/").pop()!;
  console.log(`\n${name}  threads=${threads}  reps=${reps} (medians)`);
  console.log(`  engine      pp${pp} tok/s   tg${tg} tok/s   peak RSS MiB   load ms`);
  for (const [n, x] of [["llm-edge ", a], ["llama.cpp", b]] as const) {
    console.log(
      `  ${n}  ${x.pp.toFixed(1).padStart(12)}  ${x.tg.toFixed(1).padStart(12)}  ${
        x.rss.toFixed(0).padStart(13)
      }  ${x.load.toFixed(0).padStart(8)}`,
    );
  }
  console.log(
    `  ratio (ours/llama.cpp): pp ${(a.pp / b.pp).toFixed(2)}  tg ${
      (a.tg / b.tg).toFixed(2)
    }  rss ${(a.rss / b.rss).toFixed(2)}`,
  );
}

const FTYPES: Record<string, string> = {
  q8_0: "Q8_0",
  q4_0: "Q4_0",
  q4_1: "Q4_1",
  q5_0: "Q5_0",
  q5_1: "Q5_1",
};

const SPEC = {
  name: "bench",
  summary: "Benchmarks llm-edge next to llama.cpp (pp/tg tokens/s, peak RSS, load time), " +
    "then tokenizer and sampler costs. Needs the llama.cpp oracle (tests/oracle).",
  flags: {
    model: flag.string({
      short: "m",
      value: "FILE",
      defaultText: "a random 125M llama written to .cache/bench",
      description: "GGUF model to benchmark",
    }),
    threads: flag.int({
      short: "t",
      min: 1,
      max: 512,
      defaultText: "physical cores",
      description: "threads for both engines",
    }),
    pp: flag.int({ min: 1, default: 512, description: "prompt tokens per prompt-processing run" }),
    tg: flag.int({ min: 1, default: 128, description: "tokens per generation run" }),
    reps: flag.int({ min: 1, default: 3, description: "repetitions per engine (medians kept)" }),
    types: flag.string({
      value: "LIST",
      description: `also quantize the model to these types and bench each (${
        Object.keys(FTYPES).join(",")
      })`,
    }),
    child: flag.choice(["llm-edge", "llama.cpp"], {
      description: "internal: run one engine and print JSON",
    }),
    "no-tokenizer": flag.boolean({ description: "skip the tokenizer speed table" }),
    "no-sampling": flag.boolean({ description: "skip the sampling cost table" }),
  },
};

/** Runs the CLI; returns the exit code. */
export function main(args: string[]): Promise<number> {
  return runCommand(SPEC, args, async ({ values: a }) => {
    const types = a.types?.split(",") ?? [];
    for (const t of types) {
      if (!(t in FTYPES)) {
        throw new UsageError(`--types: unknown type '${t}' (known: ${Object.keys(FTYPES)})`);
      }
    }
    if (a.child && !a.model) throw new UsageError("--child needs --model");
    return await run(a, types);
  });
}

async function run(
  a: {
    model?: string;
    threads?: number;
    pp: number;
    tg: number;
    reps: number;
    child?: string;
    "no-tokenizer": boolean;
    "no-sampling": boolean;
  },
  types: string[],
): Promise<number> {
  const { pp, tg, reps } = a;
  const { physicalCores } = await import("../lib/backend/cpu.ts");
  const threads = a.threads ?? physicalCores();
  if (a.child) {
    const r = a.child === "llm-edge"
      ? await childOurs(a.model!, threads, pp, tg, reps)
      : await childLlama(a.model!, threads, pp, tg, reps);
    console.log(JSON.stringify(r));
    return 0;
  }
  let model = a.model;
  if (!model) {
    const { writeRandomLlama } = await import("../lib/model/random.ts");
    const dir = join(ROOT, ".cache", "bench");
    Deno.mkdirSync(dir, { recursive: true });
    model = join(dir, "random-125m-f16.gguf");
    try {
      Deno.statSync(model);
    } catch {
      console.error(`bench: writing a random 125M llama to ${model} ...`);
      await writeRandomLlama(model, {
        type: "f16",
        tokenizerFrom: join(ROOT, "..", "shared", "fixtures", "models", "llama-2-tiny-random.gguf"),
      });
    }
  }
  await benchFile(model, threads, pp, tg, reps);
  if (types.length) {
    const { loadOracle } = await import("../tests/oracle/oracle.ts");
    const oracle = await loadOracle();
    const { LlamaFtype } = await import("../tests/oracle/oracle.ts");
    for (const t of types) {
      const key = FTYPES[t] as keyof typeof LlamaFtype;
      const out = model.replace(/\.gguf$/, `-${t}.gguf`);
      try {
        Deno.statSync(out);
      } catch {
        console.error(`bench: llama.cpp quantizes ${model} to ${t} ...`);
        oracle.quantize(model, out, LlamaFtype[key], threads);
      }
      await benchFile(out, threads, pp, tg, reps);
    }
  }
  if (!a["no-tokenizer"]) {
    const { compareEncodeSpeed } = await import("../tests/tokenizer_bench.ts");
    // The text repeats a block, so the warm word cache flatters us: the
    // no-cache column is the honest floor.
    console.log("\ntokenizer encode speed (1 MiB mixed text), MB/s");
    console.log(
      "  model                              no cache     cache  llama.cpp  ratio(no cache)",
    );
    for (const r of await compareEncodeSpeed()) {
      const cold = r.oursNoCache.mbPerSec, warm = r.ours.mbPerSec, ref = r.llama.mbPerSec;
      console.log(
        `  ${r.model.padEnd(34)} ${cold.toFixed(2).padStart(8)} ${warm.toFixed(2).padStart(9)} ` +
          `${ref.toFixed(2).padStart(10)} ${
            (cold / ref).toFixed(2).padStart(16)
          }  identical=${r.identical}`,
      );
    }
  }
  if (!a["no-sampling"]) {
    const { compareSamplingCost } = await import("../tests/oracle/oracle_sample.ts");
    const c = await compareSamplingCost();
    console.log(`\nsampling cost per token, ${c.nVocab} vocabulary (µs)`);
    console.log(
      `  default chain  ours ${(c.chain.ours / 1000).toFixed(1)}  llama.cpp ${
        (c.chain.llamaCpp / 1000).toFixed(1)
      }`,
    );
    console.log(
      `  json grammar   ours ${(c.grammar.ours / 1000).toFixed(1)}  llama.cpp ${
        (c.grammar.llamaCpp / 1000).toFixed(1)
      }`,
    );
  }
  return 0;
}

if (import.meta.main) Deno.exit(await main(Deno.args));
