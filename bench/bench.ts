/**
 * `deno task bench`: llm-edge next to llama.cpp on the same GGUF file and
 * thread count, in one run. Each engine runs in its own child process (so
 * peak RSS is its own); repetitions alternate between the engines and the
 * medians are compared.
 *
 *   deno task bench [--model FILE | --shape 125m|1.1b] [--threads T] [-p 512] [-n 128]
 *     [--depth 0] [--reps 3] [--runs 1] [--types q8_0,q4_0,...] [--flash-attn [--fa-f32]] [--fast]
 *     [--cache-type f16|f32|q8_0] [--json]
 *     [--no-tokenizer]
 *     [--no-sampling]
 *
 * Without --model a random llama (f16) of the `--shape` (default 125m; 1.1b
 * is TinyLlama's shape) is generated once under .cache/bench. --types also quantizes that file with llama.cpp's
 * quantizer and benchmarks every listed type. The tokenizer (MB/s) and the
 * sampler chain / grammar per-token costs are measured too. `--depth N`
 * times pp and tg with N tokens already in the context (llama-bench's -d).
 * `--runs N` times N runs in each child after its warm-up and takes their
 * median as that child's figure (llama-bench's -r, which repeats within one
 * process): a tiny model's 50-100 ms run is at the mercy of one scheduler
 * hiccup, its median over runs is not.
 * Each engine's medians come with their spread ((max - min) / median);
 * a ratio whose repetitions spread more than 25% is withheld, and the CPU
 * that other processes took during the runs (bench/contention.ts; the load
 * average is printed too) marks a busy machine's figures, since both
 * engines' figures mean little when anything else runs (ggml's threads
 * busy-wait). `--json`
 * prints everything as one JSON document. With tg runs, the machine's read
 * bandwidth is measured first (bench/bandwidth.c) and after each file, and
 * each file's tg bound (bandwidth / weight bytes read per token, at the faster
 * of the probes around its runs) printed with both engines' share of it.
 *
 * This tool needs the llama.cpp oracle from tests/oracle (fetched from npm).
 *
 * @module
 */
import { flag, runCommand, UsageError } from "../lib/cli/args.ts";
import { cacheTypeFlag } from "../lib/cli/common_flags.ts";
import { fileURLToPath } from "node:url";
import { join } from "node:path";
import { type Bandwidth, measureBandwidth, type TgBound, tgBound } from "./bandwidth.ts";
import { type Contention, contention, cpuSnapshot } from "./contention.ts";
import { childLlama, childOurs, type ChildResult, type Spec } from "./engines.ts";
import { BENCH_TYPES, benchModel, quantizedModel } from "./models.ts";

const ROOT = fileURLToPath(new URL("../", import.meta.url));
const SELF = fileURLToPath(import.meta.url);

/** The middle value (mean of the two middle ones for an even count). */
export function median(xs: number[]): number {
  const s = [...xs].sort((a, b) => a - b);
  const m = s.length >> 1;
  return s.length % 2 ? s[m] : (s[m - 1] + s[m]) / 2;
}

/** (max - min) / median: how far apart the repetitions are. */
export function spread(xs: number[]): number {
  return xs.length < 2 ? 0 : (Math.max(...xs) - Math.min(...xs)) / median(xs);
}

// A ratio from repetitions further apart than this says more about the
// machine than the engines (ggml's busy-waiting threads collapse when
// anything else runs): it is withheld.
const SPREAD_MAX = 0.25;

/** The 1-minute load average (NaN where /proc is not readable). */
function loadAvg(): number {
  try {
    return Number(Deno.readTextFileSync("/proc/loadavg").split(" ")[0]);
  } catch {
    return NaN;
  }
}

async function runChild(engine: string, s: Spec): Promise<ChildResult> {
  const out = await new Deno.Command(Deno.execPath(), {
    args: [
      "run",
      "-A",
      SELF,
      "--child",
      engine,
      "--model",
      s.model,
      "--threads",
      String(s.threads),
      "--pp",
      String(s.pp),
      "--tg",
      String(s.tg),
      "--depth",
      String(s.depth),
      "--reps",
      String(s.runs ?? 1),
      ...(s.flashAttn ? ["--flash-attn"] : []),
      ...(s.faF32 ? ["--fa-f32"] : []),
      ...(s.fast ? ["--fast"] : []),
      ...(s.cacheType ? ["--cache-type", s.cacheType] : []),
    ],
    stdout: "piped",
    stderr: "inherit",
  }).output();
  if (!out.success) throw new Error(`${engine} child failed on ${s.model}`);
  const lines = new TextDecoder().decode(out.stdout).trim().split("\n");
  return JSON.parse(lines[lines.length - 1]);
}

/** One metric of one engine over the repetitions. */
interface Metric {
  median: number;
  spread: number;
  runs: number[];
}

/** The comparison of both engines on one file (what --json prints per file). */
interface FileResult extends Spec {
  reps: number;
  /** 1-minute load average before the first and after the last run. */
  loadAvg: { before: number; after: number };
  /** CPU other processes took during the runs (bench/contention.ts), where /proc was readable. */
  contention?: Contention;
  engines: Record<
    ChildResult["engine"],
    { pp: Metric; tg: Metric; peakRssMiB: number; loadMs: number }
  >;
  /** llama.cpp's CPU variant (libggml-cpu-<variant>.so). */
  llamaVariant?: string;
  /** ours / llama.cpp; null where a spread exceeds SPREAD_MAX. */
  ratio: { pp: number | null; tg: number | null; rss: number };
  /** The tg bandwidth bound (bench/bandwidth.ts), when the probe ran. */
  /**
   * The tg bound (bench/bandwidth.ts) at the faster of the probes run just
   * before and just after this file's runs (`probes`, GB/s), when they ran.
   */
  bound?: TgBound & { gbps: number; probes: number[] };
}

function metric(runs: number[]): Metric {
  return { median: median(runs), spread: spread(runs), runs };
}

/** Benchmarks one file: alternating child runs, medians, spreads, ratios. */
async function benchFile(s: Spec, reps: number, quiet: boolean): Promise<FileResult> {
  const ours: ChildResult[] = [], llama: ChildResult[] = [];
  const before = loadAvg(), cpu0 = cpuSnapshot();
  for (let r = 0; r < reps; r++) {
    if (!quiet) console.error(`bench: ${s.model.split("/").pop()} rep ${r + 1}/${reps}`);
    llama.push(await runChild("llama.cpp", s));
    ours.push(await runChild("llm-edge", s));
  }
  const after = loadAvg(), cpu1 = cpuSnapshot();
  const row = (rs: ChildResult[]) => ({
    // Each child's figure is the median of its runs (one run: that run).
    pp: metric(rs.map((x) => median(x.pp))),
    tg: metric(rs.map((x) => median(x.tg))),
    peakRssMiB: Math.max(...rs.map((x) => x.peakRssMiB)),
    loadMs: median(rs.map((x) => x.loadMs)),
  });
  const a = row(ours), b = row(llama);
  const ratio = (k: "pp" | "tg") =>
    a[k].spread > SPREAD_MAX || b[k].spread > SPREAD_MAX ? null : a[k].median / b[k].median;
  return {
    ...s,
    reps,
    loadAvg: { before, after },
    contention: cpu0 && cpu1 ? contention(cpu0, cpu1) : undefined,
    engines: { "llm-edge": a, "llama.cpp": b },
    llamaVariant: llama[0]?.variant,
    ratio: { pp: ratio("pp"), tg: ratio("tg"), rss: a.peakRssMiB / b.peakRssMiB },
  };
}

function printFile(f: FileResult): void {
  const name = f.model.split("/").pop()!;
  const at = (f.depth ? ` depth=${f.depth}` : "") + (f.flashAttn ? " flash-attn" : "") +
    (f.faF32 ? " (ours: f32 precision)" : "") + (f.fast ? " (ours: matmulOrder fast)" : "") +
    (f.cacheType && f.cacheType !== "f16" ? ` cache=${f.cacheType}` : "");
  const variant = f.llamaVariant ? `  llama.cpp cpu variant: ${f.llamaVariant}` : "";
  const runs = (f.runs ?? 1) > 1 ? ` x ${f.runs} runs` : "";
  console.log(
    `\n${name}  threads=${f.threads}${at}  reps=${f.reps}${runs} (medians, ±spread)${variant}`,
  );
  console.log(
    `  engine         pp${f.pp} tok/s        tg${f.tg} tok/s   peak RSS MiB   load ms`,
  );
  const cell = (m: Metric) =>
    `${m.median.toFixed(1).padStart(9)} ±${(100 * m.spread).toFixed(0).padStart(2)}%`;
  for (const [n, x] of Object.entries(f.engines)) {
    console.log(
      `  ${n.padEnd(9)}  ${cell(x.pp).padStart(17)}  ${cell(x.tg).padStart(17)}  ${
        x.peakRssMiB.toFixed(0).padStart(13)
      }  ${x.loadMs.toFixed(0).padStart(8)}`,
    );
  }
  const r = (v: number | null) =>
    v === null ? `withheld (spread > ${100 * SPREAD_MAX}%)` : v.toFixed(2);
  console.log(
    `  ratio (ours/llama.cpp): pp ${r(f.ratio.pp)}  tg ${r(f.ratio.tg)}  rss ${
      f.ratio.rss.toFixed(2)
    }`,
  );
  if (f.bound && f.tg > 0) {
    const pct = (x: { tg: Metric }) => `${(100 * x.tg.median / f.bound!.tgTps).toFixed(0)}%`;
    console.log(
      `  tg bound ${f.bound.tgTps.toFixed(1)} tok/s (${f.bound.gbps.toFixed(1)} GB/s read, ` +
        `the faster of the probes before and after: ${
          f.bound.probes.map((g) => g.toFixed(1)).join(", ")
        }; ${(f.bound.bytesPerToken / 2 ** 20).toFixed(0)} MiB of weights per token): llm-edge ${
          pct(f.engines["llm-edge"])
        }, llama.cpp ${pct(f.engines["llama.cpp"])}`,
    );
  }
  const c = f.contention;
  console.log(
    `  load average (1 min): ${f.loadAvg.before.toFixed(2)} before, ${
      f.loadAvg.after.toFixed(2)
    } after; other processes used ${c ? c.otherCores.toFixed(2) : "?"} cores, steal ${
      c ? c.stealCores.toFixed(2) : "?"
    } cores${
      c && c.otherCores > OTHER_MAX
        ? "  (other work was running: figures are not a quiet machine's)"
        : ""
    }`,
  );
}

// Other processes' CPU above this many cores marks a file's figures as a
// busy machine's (ggml's busy-waiting threads lose most when anything runs).
const OTHER_MAX = 0.25;

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
    pp: flag.int({
      short: "p",
      min: 1,
      default: 512,
      description: "prompt tokens per prompt-processing run (also the batch size)",
    }),
    tg: flag.int({ short: "n", min: 1, default: 128, description: "tokens per generation run" }),
    depth: flag.int({
      short: "d",
      min: 0,
      default: 0,
      description: "tokens already in the context when pp and tg are timed",
    }),
    shape: flag.choice(["125m", "1.1b"], {
      default: "125m",
      description: "without --model: the random llama's shape (1.1b = TinyLlama's)",
    }),
    json: flag.boolean({ description: "print the results as one JSON document" }),
    "flash-attn": flag.boolean({
      aliases: ["fa"],
      description: "flash attention in both engines (default: both unfused)",
    }),
    "fa-f32": flag.boolean({
      description: "ours with flashAttnPrecision f32 (needs --flash-attn; llama.cpp unchanged)",
    }),
    fast: flag.boolean({ description: "ours with matmulOrder fast (llama.cpp unchanged)" }),
    "cache-type": cacheTypeFlag(),
    reps: flag.int({ min: 1, default: 3, description: "repetitions per engine (medians kept)" }),
    runs: flag.int({
      min: 1,
      default: 1,
      description: "timed runs in each repetition's process after its warm-up (their median " +
        "is the repetition's figure, as llama-bench's -r)",
    }),
    types: flag.string({
      value: "LIST",
      description: `also quantize the model to these types and bench each (${
        Object.keys(BENCH_TYPES).join(",")
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
      if (!(t in BENCH_TYPES)) {
        throw new UsageError(`--types: unknown type '${t}' (known: ${Object.keys(BENCH_TYPES)})`);
      }
    }
    if (a.child && !a.model) throw new UsageError("--child needs --model");
    if (a["fa-f32"] && !a["flash-attn"]) throw new UsageError("--fa-f32 needs --flash-attn");
    if (a["cache-type"] === "q8_0" && !a["flash-attn"]) {
      throw new UsageError("--cache-type q8_0 needs --flash-attn");
    }
    if (a.model && a.shape !== "125m") {
      throw new UsageError("--shape and --model exclude each other");
    }
    return await run(a, types);
  });
}

async function run(
  a: {
    model?: string;
    threads?: number;
    pp: number;
    tg: number;
    depth: number;
    shape: string;
    reps: number;
    runs: number;
    json: boolean;
    child?: string;
    "no-tokenizer": boolean;
    "no-sampling": boolean;
    "flash-attn": boolean;
    "fa-f32": boolean;
    fast: boolean;
    "cache-type": "f16" | "f32" | "q8_0";
  },
  types: string[],
): Promise<number> {
  const { pp, tg, depth, reps, json } = a;
  const { physicalCores } = await import("../lib/backend/cpu.ts");
  const threads = a.threads ?? physicalCores();
  // one configuration for both engines, on each file
  const specOf = (model: string): Spec => ({
    model,
    threads,
    pp,
    tg,
    depth,
    flashAttn: a["flash-attn"],
    faF32: a["fa-f32"],
    fast: a.fast,
    cacheType: a["cache-type"],
    runs: a.runs,
  });
  if (a.child) {
    const spec = specOf(a.model!);
    const r = a.child === "llm-edge" ? await childOurs(spec, reps) : await childLlama(spec, reps);
    console.log(JSON.stringify(r));
    return 0;
  }
  const model = a.model ?? await benchModel(a.shape);
  // The machine's read bandwidth sets each file's tg bound: measured first
  // (while nothing of ours runs) and again after each file, since a VM's
  // moves between minutes (27-34 GB/s within one session here); a file's
  // bound takes the faster of the probes around its runs.
  const probe = async (): Promise<Bandwidth | undefined> => {
    try {
      return await measureBandwidth(threads, join(ROOT, ".cache", "bench"));
    } catch (e) {
      console.error(`bench: no tg bound: ${(e as Error).message}`);
      return undefined;
    }
  };
  let bw = tg > 0 ? await probe() : undefined;
  if (bw && !json) {
    console.log(
      `read bandwidth, ${threads} threads: ${bw.gbps.toFixed(1)} GB/s (runs ${bw.min.toFixed(1)}-${
        bw.max.toFixed(1)
      })`,
    );
  }
  const files: FileResult[] = [];
  const bench = async (m: string) => {
    const f = await benchFile(specOf(m), reps, json);
    const after = bw ? await probe() : undefined;
    if (bw && after) {
      const fast = after.gbps > bw.gbps ? after : bw;
      f.bound = { ...(await tgBound(m, fast)), gbps: fast.gbps, probes: [bw.gbps, after.gbps] };
    }
    bw = after;
    files.push(f);
    if (!json) printFile(f);
  };
  await bench(model);
  for (const t of types) await bench(await quantizedModel(model, t, threads));
  const doc: Record<string, unknown> = { files };
  if (!a["no-tokenizer"]) {
    const { compareEncodeSpeed } = await import("../tests/tokenizer_bench.ts");
    const rows = await compareEncodeSpeed();
    doc.tokenizer = rows.map((r) => ({
      model: r.model,
      mbPerSec: {
        noCache: r.oursNoCache.mbPerSec,
        cache: r.ours.mbPerSec,
        llamaCpp: r.llama.mbPerSec,
      },
      identical: r.identical,
    }));
    if (!json) {
      // The text repeats a block, so the warm word cache flatters us: the
      // no-cache column is the honest floor.
      console.log("\ntokenizer encode speed (1 MiB mixed text), MB/s");
      console.log(
        "  model                              no cache     cache  llama.cpp  ratio(no cache)",
      );
      for (const r of rows) {
        const cold = r.oursNoCache.mbPerSec, warm = r.ours.mbPerSec, ref = r.llama.mbPerSec;
        console.log(
          `  ${r.model.padEnd(34)} ${cold.toFixed(2).padStart(8)} ${warm.toFixed(2).padStart(9)} ` +
            `${ref.toFixed(2).padStart(10)} ${
              (cold / ref).toFixed(2).padStart(16)
            }  identical=${r.identical}`,
        );
      }
    }
  }
  if (!a["no-sampling"]) {
    const { compareSamplingCost } = await import("../tests/oracle/oracle_sample.ts");
    const c = await compareSamplingCost();
    doc.samplingMicros = {
      nVocab: c.nVocab,
      chain: { ours: c.chain.ours / 1000, llamaCpp: c.chain.llamaCpp / 1000 },
      grammar: { ours: c.grammar.ours / 1000, llamaCpp: c.grammar.llamaCpp / 1000 },
    };
    if (!json) {
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
  }
  if (json) console.log(JSON.stringify(doc, null, 2));
  return 0;
}

if (import.meta.main) Deno.exit(await main(Deno.args));
