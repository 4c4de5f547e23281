/**
 * `deno task bench:batched`: aggregate tokens/s of parallel greedy
 * sequences, llm-edge next to llama.cpp in the style of llama-batched-bench
 * (PP: every sequence's prompt in batches of up to nBatch tokens; TG: one
 * batch of N tokens per step, one per sequence), and the time to first
 * token of a follow-up chat turn with and without reusing the cache.
 *
 *   deno task bench:batched [--model FILE[,FILE]] [--threads 2] [--parallel 1,4,8,16]
 *     [--pp 128] [--tg 32] [--reps 3] [--chat 512] [--engines llm-edge,llama.cpp]
 *     [--kvu on|off|both] [--flash-attn [--fa-f32]]
 *
 * Each engine runs in its own child process per repetition (peak RSS is its
 * own), the repetitions alternate between the engines, medians and the
 * min–max spread are printed with the load average before and after each
 * run (which includes the benchmark's own threads) and the other processes
 * runnable before it; a ratio is withheld (and the reason printed) when the spread or the
 * load makes it meaningless. Both engines get the same threads and batches,
 * an F16 KV cache, flash attention or not (`--flash-attn`; `--fa-f32`: ours
 * with flashAttnPrecision "f32", llama.cpp's arithmetic unchanged), and the same KV layout: `--kvu on`
 * one pool over all sequences (llama.cpp's kv_unified, the default), `off`
 * one stream per sequence, `both` each engine with each (interleaved too). The greedy tokens of both are compared up to llama.cpp's first
 * near-tie (printed, never fatal).
 *
 * Needs the llama.cpp oracle from tests/oracle (fetched from npm).
 *
 * @module
 */
import { flag, runCommand, UsageError } from "../lib/cli/args.ts";
import { fileURLToPath } from "node:url";
import { join } from "node:path";
import {
  type ChildArgs,
  childLlama,
  childOurs,
  type ChildResult,
  type LevelResult,
  type Profile,
} from "./batched_engines.ts";

const ROOT = fileURLToPath(new URL("../", import.meta.url));
const SELF = fileURLToPath(import.meta.url);
const ENGINES = ["llm-edge", "llm-edge-seq", "llama.cpp"] as const;
type Engine = typeof ENGINES[number];
/** Spread (max - min) / median above which no ratio is printed. */
const WILD = 0.25;
/** llama.cpp's near-tie threshold (tests/oracle/oracle.ts NEAR_TIE). */
const NEAR_TIE = 0.01;

const DEFAULT_MODELS = [
  join(ROOT, "..", "shared", "models", "tolstoy-6m-f16.gguf"),
  join(ROOT, ".cache", "bench", "random-125m-f16.gguf"),
];

function loadavg(): number {
  return Number(Deno.readTextFileSync("/proc/loadavg").split(" ")[0]);
}

/**
 * Other runnable threads right now: /proc/stat's procs_running less this
 * reader, the fewest of 10 samples 20 ms apart (this process's own
 * background threads come and go; a busy neighbour stays). Taken between
 * runs, when nothing of ours computes: the load average would also count
 * the benchmark's own threads of the run before.
 */
async function othersRunning(): Promise<number> {
  let fewest = Infinity;
  for (let i = 0; i < 10; i++) {
    const m = /procs_running (\d+)/.exec(Deno.readTextFileSync("/proc/stat"));
    fewest = Math.min(fewest, m ? Number(m[1]) - 1 : 0);
    await new Promise((r) => setTimeout(r, 20));
  }
  return Math.max(0, fewest);
}

function cores(): number {
  return navigator.hardwareConcurrency;
}

/** An engine with a KV layout, and how the report names it. */
interface Variant {
  label: string;
  engine: Engine;
  kvUnified: boolean;
}

/** One child run, the load average around it and the other processes running before it. */
interface Run {
  r: ChildResult;
  loadBefore: number;
  loadAfter: number;
  others: number;
}

async function runChild(engine: Engine, a: ChildArgs): Promise<Run> {
  const kvu = a.kvUnified ? "on" : "off";
  const others = await othersRunning();
  const loadBefore = loadavg();
  const out = await new Deno.Command(Deno.execPath(), {
    args: [
      "run",
      "-A",
      SELF,
      "--child",
      engine,
      "--model",
      a.model,
      "--threads",
      String(a.threads),
      "--parallel",
      a.parallel.join(","),
      "--pp",
      String(a.pp),
      "--tg",
      String(a.tg),
      "--batch",
      String(a.nBatch),
      "--ubatch",
      String(a.nUbatch),
      "--chat",
      String(a.chat),
      "--kvu",
      kvu,
      ...(a.flashAttn ? ["--flash-attn"] : []),
      ...(a.faF32 ? ["--fa-f32"] : []),
    ],
    stdout: "piped",
    stderr: "inherit",
  }).output();
  if (!out.success) throw new Error(`${engine} child failed on ${a.model}`);
  const lines = new TextDecoder().decode(out.stdout).trim().split("\n");
  return { r: JSON.parse(lines[lines.length - 1]), loadBefore, loadAfter: loadavg(), others };
}

function median(xs: number[]): number {
  const s = [...xs].sort((a, b) => a - b);
  const m = s.length >> 1;
  return s.length % 2 ? s[m] : (s[m - 1] + s[m]) / 2;
}

/** Median, min, max and relative spread of a series. */
interface Stat {
  med: number;
  min: number;
  max: number;
  spread: number;
}

function stat(xs: number[]): Stat {
  const med = median(xs);
  const min = Math.min(...xs), max = Math.max(...xs);
  return { med, min, max, spread: med > 0 ? (max - min) / med : 0 };
}

function fmt(s: Stat, digits = 1): string {
  const f = (x: number) => x.toFixed(digits);
  return `${f(s.med)} (${f(s.min)}–${f(s.max)})`;
}

/** Why a comparison of `a` and `b` is withheld, or null when it is fair. */
function withheld(a: Stat, b: Stat, others: number[]): string | null {
  const busy = Math.max(0, ...others);
  if (busy > 0) return `${busy} other thread(s) were runnable before a run`;
  const wild = [a, b].find((s) => s.spread > WILD);
  if (wild) return `spread ${(wild.spread * 100).toFixed(0)}% > ${WILD * 100}%`;
  return null;
}

/** The figures of one engine at one level over all repetitions. */
interface LevelStats {
  ppS: Stat;
  tgS: Stat;
  sPp: Stat;
  sTg: Stat;
  s: Stat;
  rss: number;
  loads: number[];
  others: number[];
}

function levelStats(runs: Run[], n: number, pp: number, tg: number): LevelStats {
  const ls = runs.map((x) => x.r.levels.find((l) => l.n === n)!);
  return {
    ppS: stat(ls.map((l) => l.ppMs / 1000)),
    tgS: stat(ls.map((l) => l.tgMs / 1000)),
    sPp: stat(ls.map((l) => (n * pp) / (l.ppMs / 1000))),
    sTg: stat(ls.map((l) => (n * tg) / (l.tgMs / 1000))),
    s: stat(ls.map((l) => (n * (pp + tg)) / ((l.ppMs + l.tgMs) / 1000))),
    rss: Math.max(...ls.map((l) => l.rssMiB)),
    loads: runs.flatMap((x) => [x.loadBefore, x.loadAfter]),
    others: runs.map((x) => x.others),
  };
}

/** Greedy agreement of one engine's tokens with llama.cpp's, per sequence. */
function agreement(ours: LevelResult, ref: LevelResult): string {
  let identical = 0, nearTie = 0;
  const bad: string[] = [];
  ref.tokens.forEach((want, j) => {
    const got = ours.tokens[j];
    let m = 0;
    while (m < want.length && got[m] === want[m]) m++;
    if (m === want.length) return void identical++;
    const tie = ref.gaps![j].findIndex((g) => g < NEAR_TIE);
    if (tie >= 0 && tie <= m) nearTie++;
    else bad.push(`seq ${j} differs at step ${m} (llama.cpp gap ${ref.gaps![j][m].toFixed(3)})`);
  });
  const n = ref.tokens.length;
  const ok = identical + nearTie;
  return `${ok}/${n} agree (${identical} identical, ${nearTie} up to a near-tie)` +
    (bad.length ? `; ${bad.slice(0, 3).join("; ")}` : "");
}

function pad(s: string, n: number): string {
  return s.padStart(n);
}

function loadText(loads: number[]): string {
  return `${Math.min(...loads).toFixed(2)}–${Math.max(...loads).toFixed(2)}`;
}

function profileText(p: Profile): string {
  const per = (ms: number) => `${(ms / p.calls).toFixed(2)}`;
  const ts = p.decodeMs - p.nativeMs;
  return `${per(p.decodeMs)} ms/call (${p.calls} calls, ${p.graphs} graphs): native ` +
    `le_graph_compute ${per(p.nativeMs)}, TypeScript ${per(ts)} (${
      (100 * ts / p.decodeMs).toFixed(0)
    }%: command encoding ${per(p.backendComputeMs - p.nativeMs)}, graph planning ${
      per(p.allocMs)
    }, scheduler copies ${per(p.schedComputeMs - p.backendComputeMs)}, the rest ${
      per(p.decodeMs - p.schedComputeMs - p.allocMs)
    })`;
}

/** Runs and reports one model. */
async function benchModel(
  a: ChildArgs,
  variants: Variant[],
  reps: number,
): Promise<void> {
  const engines = variants.map((v) => v.label);
  const byLabel = new Map(variants.map((v) => [v.label, v]));
  const runs = new Map<string, Run[]>(engines.map((e) => [e, []]));
  const name = a.model.split("/").pop()!;
  for (let r = 0; r < reps; r++) {
    // Alternate the order, so a drifting machine load falls on both engines.
    const order = r % 2 ? [...engines].reverse() : engines;
    for (const e of order) {
      const v = byLabel.get(e)!;
      const run = await runChild(v.engine, { ...a, kvUnified: v.kvUnified });
      runs.get(e)!.push(run);
      console.error(
        `bench:batched: ${name} rep ${r + 1}/${reps} ${e}: load ${run.loadBefore.toFixed(2)} → ` +
          `${run.loadAfter.toFixed(2)}, peak RSS ${run.r.peakRssMiB.toFixed(0)} MiB`,
      );
    }
  }
  console.log(
    `\n## ${name}  threads=${a.threads} pp=${a.pp} tg=${a.tg} nBatch=${a.nBatch} ` +
      `nUbatch=${a.nUbatch}${a.flashAttn ? ` flash-attn${a.faF32 ? " (ours f32)" : ""}` : ""} ` +
      `reps=${reps}  (medians, min–max; load = 1-min load average ` +
      `before/after each run, ${cores()} cores)`,
  );
  // The load average counts this benchmark's own threads; what matters is
  // whether anything else was runnable when a run started.
  const busy = Math.max(0, ...[...runs.values()].flat().map((x) => x.others));
  if (busy > 0) {
    console.log(
      `PROVISIONAL: up to ${busy} other thread(s) were runnable when runs started; ` +
        `they shared the ${cores()} cores`,
    );
  }
  console.log(
    `| engine | N | PP s | S_PP t/s | TG s | S_TG t/s | S t/s | peak RSS MiB | load |`,
  );
  console.log(`|---|---:|---|---|---|---|---|---:|---|`);
  const stats = new Map<string, Map<number, LevelStats>>();
  for (const e of engines) {
    const m = new Map<number, LevelStats>();
    stats.set(e, m);
    for (const n of a.parallel) {
      const s = levelStats(runs.get(e)!, n, a.pp, a.tg);
      m.set(n, s);
      console.log(
        `| ${e} | ${n} | ${fmt(s.ppS, 3)} | ${fmt(s.sPp)} | ${fmt(s.tgS, 3)} | ${fmt(s.sTg)} | ` +
          `${fmt(s.s)} | ${s.rss.toFixed(0)} | ${loadText(s.loads)} |`,
      );
    }
  }
  // Scaling: N sequences against one, per engine.
  if (a.parallel.includes(1)) {
    console.log(`\nscaling (aggregate at N / aggregate at 1, medians):`);
    for (const e of engines) {
      const one = stats.get(e)!.get(1)!;
      const parts = a.parallel.filter((n) => n > 1).map((n) => {
        const s = stats.get(e)!.get(n)!;
        return `N=${n}: S_TG ×${(s.sTg.med / one.sTg.med).toFixed(2)}, S ×${
          (s.s.med / one.s.med).toFixed(2)
        }`;
      });
      console.log(`  ${e.padEnd(12)} ${parts.join("  ")}`);
    }
    if (a.parallel.includes(8)) {
      for (const e of engines) {
        const one = stats.get(e)!.get(1)!, eight = stats.get(e)!.get(8)!;
        const tg = eight.sTg.med / one.sTg.med, all = eight.s.med / one.s.med;
        console.log(
          `  ${e}: 8 sequences ${tg >= 4 ? "reach" : "do NOT reach"} 4× the single-sequence ` +
            `S_TG (×${tg.toFixed(2)}); S (PP + TG) ×${all.toFixed(2)}`,
        );
      }
    }
  }
  // Ours against llama.cpp with the same KV layout.
  const refOf = (e: string) => {
    const v = byLabel.get(e)!;
    return variants.find((w) => w.engine === "llama.cpp" && w.kvUnified === v.kvUnified)?.label;
  };
  const ourLabels = engines.filter((e) => byLabel.get(e)!.engine !== "llama.cpp" && refOf(e));
  if (ourLabels.length) {
    console.log(`\nours / llama.cpp (medians):`);
    for (const e of ourLabels) {
      const ref = stats.get(refOf(e)!)!;
      for (const n of a.parallel) {
        const x = stats.get(e)!.get(n)!, y = ref.get(n)!;
        const parts = (["sPp", "sTg", "s"] as const).map((k) => {
          const why = withheld(x[k], y[k], [...x.others, ...y.others]);
          const label = { sPp: "S_PP", sTg: "S_TG", s: "S" }[k];
          return why ? `${label} — (${why})` : `${label} ${(x[k].med / y[k].med).toFixed(2)}`;
        });
        console.log(`  ${e.padEnd(12)} N=${pad(String(n), 2)}: ${parts.join("  ")}`);
      }
    }
    console.log(`\ngreedy tokens against llama.cpp's (first repetition, up to near-ties):`);
    for (const e of ourLabels) {
      const first = runs.get(refOf(e)!)![0].r;
      const ours = runs.get(e)![0].r;
      for (const l of first.levels) {
        console.log(
          `  ${e.padEnd(12)} N=${pad(String(l.n), 2)}: ${
            agreement(ours.levels.find((o) => o.n === l.n)!, l)
          }`,
        );
      }
    }
  }
  for (const e of engines.filter((e) => byLabel.get(e)!.engine !== "llama.cpp")) {
    console.log(`\nwhere ${e}'s time goes (first repetition):`);
    for (const l of runs.get(e)![0].r.levels) {
      console.log(`  N=${pad(String(l.n), 2)} TG ${profileText(l.profile!.tg)}`);
      console.log(`       PP ${profileText(l.profile!.pp)}`);
    }
  }
  if (a.chat > 0) chatReport(runs, engines, refOf);
}

function chatReport(
  runs: Map<string, Run[]>,
  engines: string[],
  refOf: (e: string) => string | undefined,
): void {
  const any = runs.get(engines[0])![0].r.chat!;
  console.log(
    `\nfollow-up chat turn: time to first token (ms; medians, min–max); turn 1: ` +
      `${any.history} tokens cached (prompt + answer)`,
  );
  console.log(
    `| engine | turn-2 prompt | reused | reuse TTFT ms | scratch TTFT ms | ` +
      `scratch / reuse | first tokens (reuse, scratch) | load |`,
  );
  console.log(`|---|---:|---:|---|---|---|---|---|`);
  const reuse = new Map<string, Stat>();
  for (const e of engines) {
    const rs = runs.get(e)!;
    const c = rs.map((x) => x.r.chat!);
    const r = stat(c.map((x) => x.reuseMs)), s = stat(c.map((x) => x.scratchMs));
    reuse.set(e, r);
    const loads = rs.flatMap((x) => [x.loadBefore, x.loadAfter]);
    const why = withheld(r, s, rs.map((x) => x.others));
    console.log(
      `| ${e} | ${c[0].prompt} | ${c[0].reused} | ${fmt(r)} | ${fmt(s)} | ${
        why ? `— (${why})` : (s.med / r.med).toFixed(1) + "×"
      } | ${c[0].first.join(", ")} | ${loadText(loads)} |`,
    );
  }
  for (const e of engines) {
    const r = refOf(e);
    const ref = r && r !== e ? reuse.get(r) : undefined;
    if (ref) {
      const rs = [...runs.get(e)!, ...runs.get(r!)!];
      const why = withheld(reuse.get(e)!, ref, rs.map((x) => x.others));
      console.log(
        `  ${e} / llama.cpp, reuse TTFT: ${
          why ? `— (${why})` : (reuse.get(e)!.med / ref.med).toFixed(2)
        }`,
      );
    }
  }
}

const SPEC = {
  name: "bench:batched",
  summary: "Aggregate tokens/s of parallel greedy sequences (llama-batched-bench style) and a " +
    "follow-up chat turn's time to first token, llm-edge next to llama.cpp. Needs the " +
    "llama.cpp oracle (tests/oracle).",
  flags: {
    model: flag.string({
      short: "m",
      value: "FILE[,FILE]",
      defaultText: "tolstoy-6m-f16 and a random 125M llama (f16, written to .cache/bench)",
      description: "GGUF model(s) to benchmark",
    }),
    threads: flag.int({ short: "t", min: 1, max: 512, default: 2, description: "threads, both" }),
    parallel: flag.string({
      value: "LIST",
      default: "1,4,8,16",
      description: "parallel sequence counts",
    }),
    pp: flag.int({ min: 1, default: 128, description: "prompt tokens per sequence" }),
    tg: flag.int({ min: 1, default: 32, description: "generated tokens per sequence" }),
    reps: flag.int({ min: 1, default: 3, description: "repetitions per engine" }),
    batch: flag.int({ min: 1, default: 2048, description: "n_batch (most tokens per decode)" }),
    ubatch: flag.int({ min: 1, default: 512, description: "n_ubatch (tokens per graph)" }),
    chat: flag.int({
      min: 0,
      default: 512,
      description: "first-turn prompt tokens of the chat measurement (0: skip it)",
    }),
    engines: flag.string({
      value: "LIST",
      default: "llm-edge,llama.cpp",
      description: `engines (${ENGINES.join(",")}; llm-edge-seq: through Sequence.evaluate)`,
    }),
    kvu: flag.choice(["on", "off", "both"], {
      default: "on",
      description: "KV layout, both engines: one unified pool (on, llama.cpp's kv_unified), " +
        "one stream per sequence (off), or each of them (both)",
    }),
    "flash-attn": flag.boolean({
      aliases: ["fa"],
      description: "both engines with flash attention (llama.cpp's CPU default)",
    }),
    "fa-f32": flag.boolean({
      description: 'with --flash-attn: ours with flashAttnPrecision "f32" (not llama.cpp\'s bits)',
    }),
    child: flag.choice([...ENGINES], { description: "internal: run one engine, print JSON" }),
  },
};

function parseList(s: string, what: string): number[] {
  const xs = s.split(",").map(Number);
  if (!xs.length || xs.some((x) => !Number.isInteger(x) || x < 1)) {
    throw new UsageError(`--${what}: expected positive integers separated by commas, got '${s}'`);
  }
  return [...new Set(xs)].sort((a, b) => a - b);
}

/** Runs the CLI; returns the exit code. */
export function main(args: string[]): Promise<number> {
  return runCommand(SPEC, args, async ({ values: v }) => {
    const parallel = parseList(v.parallel, "parallel");
    const engines = v.engines.split(",") as Engine[];
    for (const e of engines) {
      if (!ENGINES.includes(e)) throw new UsageError(`--engines: unknown engine '${e}'`);
    }
    if (v.ubatch > v.batch) throw new UsageError(`--ubatch ${v.ubatch} exceeds --batch ${v.batch}`);
    if (v["fa-f32"] && !v["flash-attn"]) throw new UsageError("--fa-f32 needs --flash-attn");
    const base = {
      threads: v.threads,
      parallel,
      pp: v.pp,
      tg: v.tg,
      nBatch: v.batch,
      nUbatch: v.ubatch,
      chat: v.chat,
      kvUnified: v.kvu !== "off",
      flashAttn: v["flash-attn"],
      faF32: v["fa-f32"],
    };
    if (v.child) {
      if (!v.model) throw new UsageError("--child needs --model");
      const a = { ...base, model: v.model };
      const r = v.child === "llama.cpp"
        ? await childLlama(a)
        : await childOurs(a, v.child === "llm-edge-seq");
      console.log(JSON.stringify(r));
      return 0;
    }
    const models = v.model ? v.model.split(",") : DEFAULT_MODELS;
    if (!v.model) await ensureRandom(DEFAULT_MODELS[1]);
    console.log(`# bench:batched  ${Deno.args.join(" ")}`);
    console.log(`CPU: ${cpuName()}, ${cores()} logical cores`);
    const kvus = v.kvu === "both" ? [true, false] : [v.kvu !== "off"];
    const variants = kvus.flatMap((kvUnified) =>
      engines.map((engine) => ({
        engine,
        kvUnified,
        label: kvus.length > 1 ? `${engine} kvu=${kvUnified ? "on" : "off"}` : engine,
      }))
    );
    for (const model of models) await benchModel({ ...base, model }, variants, v.reps);
    return 0;
  });
}

function cpuName(): string {
  const m = /^model name\s*:\s*(.*)$/m.exec(Deno.readTextFileSync("/proc/cpuinfo"));
  return m ? m[1] : "unknown CPU";
}

/** Writes the random 125M llama of bench/bench.ts when it is missing. */
async function ensureRandom(path: string): Promise<void> {
  try {
    Deno.statSync(path);
    return;
  } catch {
    // written below
  }
  const { writeRandomLlama } = await import("../lib/model/random.ts");
  Deno.mkdirSync(join(ROOT, ".cache", "bench"), { recursive: true });
  console.error(`bench:batched: writing a random 125M llama to ${path} ...`);
  await writeRandomLlama(path, {
    type: "f16",
    tokenizerFrom: join(ROOT, "..", "shared", "fixtures", "models", "llama-2-tiny-random.gguf"),
  });
}

if (import.meta.main) Deno.exit(await main(Deno.args));
