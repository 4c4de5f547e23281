/**
 * `deno task bench:paired`: both engines in one process, taking turns.
 * Each round times a burst of generated tokens (and with `--pp N` one
 * prompt of N tokens) on llm-edge and on llama.cpp, one right after the
 * other, first one then the other engine in alternate rounds; the figure is
 * the median over rounds of the per-round ratio. A VM whose read bandwidth
 * moves by a third between minutes (1.1B F16 tg went 66 -> 45 ms per token
 * in the middle of one run, both engines alike) spreads separate processes'
 * figures beyond any ratio (`deno task bench` withholds them); two bursts
 * a second apart see the same machine. The engine that goes second starts
 * while the first one's threads may still be polling for work (ggml's and
 * ours spin a while before they sleep): the order alternates, so each pays
 * that as often, and a burst much longer than a poll makes it small. Peak
 * RSS is not measured here (both engines share the process): `deno task
 * bench` has it.
 *
 *   deno task bench:paired --model FILE [--threads T] [--rounds 12] [--burst 8]
 *     [--depth 0 [--self]] [--pp 0] [--flash-attn [--fa-f32]] [--fast]
 *     [--cache-type f16|f32|q8_0] [--json]
 *
 * Without `--depth`, every burst starts from an empty context (tg-N as
 * `deno task bench` times it); with it, the context is filled once and each
 * burst adds its tokens (the depth grows by rounds x burst over the run, the
 * same for both). With `--pp`, each turn's prompt runs in an emptied context.
 * `--self` pairs ours at `--depth` with ours at depth 0 (a second context
 * on the same file, each burst from empty) instead of llama.cpp: the
 * ratio is tg at depth over tg at depth 0, both seen by the same minutes
 * of the machine (issue 16's depth line).
 *
 * @module
 */
import { flag, runCommand, UsageError } from "../lib/cli/args.ts";
import { cacheTypeFlag } from "../lib/cli/common_flags.ts";
import { median } from "./bench.ts";
import { type OpenEngine, openLlama, openOurs, randomTokens, type Spec } from "./engines.ts";

const SPEC = {
  name: "bench:paired",
  summary: "llm-edge and llama.cpp in one process, alternating bursts: per-round tg (and pp) " +
    "ratios and their median. Needs the llama.cpp oracle (tests/oracle).",
  flags: {
    model: flag.string({ short: "m", value: "FILE", description: "GGUF model (required)" }),
    threads: flag.int({ short: "t", min: 1, max: 512, default: 2, description: "threads of both" }),
    rounds: flag.int({ min: 2, default: 12, description: "rounds (each engine once per round)" }),
    burst: flag.int({ min: 1, default: 8, description: "generated tokens timed per turn" }),
    depth: flag.int({ short: "d", min: 0, default: 0, description: "tokens in the context first" }),
    pp: flag.int({
      short: "p",
      min: 0,
      default: 0,
      description: "also time a prompt of this many tokens per turn (0: tg only)",
    }),
    "flash-attn": flag.boolean({ aliases: ["fa"], description: "flash attention in both" }),
    "fa-f32": flag.boolean({
      description: "ours with flashAttnPrecision f32 (needs --flash-attn)",
    }),
    fast: flag.boolean({ description: "ours with matmulOrder fast" }),
    self: flag.boolean({
      description: "ours at --depth against ours at depth 0, not llama.cpp (needs --depth)",
    }),
    "cache-type": cacheTypeFlag(),
    json: flag.boolean({ description: "print the result as JSON" }),
  },
};

/** Paired figures of one metric: per round ours and llama.cpp, and their ratio. */
export interface Paired {
  /** Milliseconds per token, per round. */
  ours: number[];
  llama: number[];
  /** llama.cpp's time over ours per round (ours' tokens/s over llama.cpp's). */
  ratios: number[];
  median: number;
  min: number;
  max: number;
  /** Rounds in which ours was faster. */
  wins: number;
}

function paired(ours: number[], llama: number[]): Paired {
  const ratios = ours.map((o, i) => llama[i] / o);
  return {
    ours,
    llama,
    ratios,
    median: median(ratios),
    min: Math.min(...ratios),
    max: Math.max(...ratios),
    wins: ratios.filter((r) => r > 1).length,
  };
}

async function fill(e: OpenEngine, n: number, batch: number): Promise<void> {
  const ids = randomTokens(n, e.nVocab, 3);
  for (let i = 0; i < n; i += batch) await e.decode(ids.slice(i, i + batch));
}

// ms per token of a burst of generated tokens after what the context holds
// (from an empty context when `fresh`).
async function burst(e: OpenEngine, n: number, seed: number, fresh: boolean): Promise<number> {
  if (fresh) e.clear();
  const ids = randomTokens(n, e.nVocab, seed);
  const t = performance.now();
  for (const id of ids) await e.decode([id]);
  return (performance.now() - t) / n;
}

// ms per token of one prompt of n tokens in an empty context (left empty).
async function prompt(e: OpenEngine, n: number): Promise<number> {
  e.clear();
  const ids = randomTokens(n, e.nVocab, 1);
  const t = performance.now();
  await e.decode(ids);
  const ms = (performance.now() - t) / n;
  e.clear();
  return ms;
}

/** Runs the CLI; returns the exit code. */
export function main(args: string[]): Promise<number> {
  return runCommand(SPEC, args, async ({ values: a }) => {
    if (!a.model) throw new UsageError("--model is required");
    if (a["fa-f32"] && !a["flash-attn"]) throw new UsageError("--fa-f32 needs --flash-attn");
    if (a["cache-type"] === "q8_0" && !a["flash-attn"]) {
      throw new UsageError("--cache-type q8_0 needs --flash-attn");
    }
    if (a.pp && a.depth) {
      throw new UsageError("--pp times a prompt in an empty context: not with --depth");
    }
    if (a.self && !a.depth) throw new UsageError("--self needs --depth");
    const batch = Math.max(a.pp, 256);
    // contextSize(spec) = depth + pp + tg + 16: room for every burst.
    const spec: Spec = {
      model: a.model,
      threads: a.threads,
      pp: batch,
      tg: a.rounds * a.burst,
      depth: a.depth,
      flashAttn: a["flash-attn"],
      faF32: a["fa-f32"],
      fast: a.fast,
      cacheType: a["cache-type"],
    };
    const load0 = Deno.loadavg()[0];
    using ours = await openOurs(spec);
    // the other side: llama.cpp, or (--self) ours again, from empty each burst
    using llama = a.self ? await openOurs(spec) : await openLlama(spec);
    const depthOf = (e: OpenEngine) => e === llama && a.self ? 0 : a.depth;
    for (const e of [ours, llama]) {
      await fill(e, depthOf(e), batch);
      await burst(e, a.burst, 9, depthOf(e) === 0); // warm-up, untimed
    }
    const tg = { ours: [] as number[], llama: [] as number[] };
    const pp = { ours: [] as number[], llama: [] as number[] };
    for (let r = 0; r < a.rounds; r++) {
      const order = r % 2 ? [llama, ours] : [ours, llama];
      for (const e of order) {
        const key = e === ours ? "ours" : "llama";
        if (a.pp) pp[key].push(await prompt(e, a.pp));
        tg[key].push(await burst(e, a.burst, 100 + r, depthOf(e) === 0));
      }
    }
    const res = {
      model: a.model,
      threads: a.threads,
      depth: a.depth,
      burst: a.burst,
      rounds: a.rounds,
      self: a.self,
      llamaVariant: llama.variant,
      loadAvg: { before: load0, after: Deno.loadavg()[0] },
      tg: paired(tg.ours, tg.llama),
      pp: a.pp ? paired(pp.ours, pp.llama) : undefined,
    };
    if (a.json) {
      console.log(JSON.stringify(res, null, 2));
      return 0;
    }
    const name = a.model.split("/").pop();
    const [us, them] = a.self ? [`ours at ${a.depth}`, "ours at 0"] : ["ours", "llama.cpp"];
    console.log(
      `${name}  threads=${a.threads}  depth=${a.depth}  ${a.rounds} rounds of ${a.burst} tokens` +
        (a["flash-attn"] ? "  flash-attn" : "") + (a["fa-f32"] ? " (ours: f32 precision)" : "") +
        (a.fast ? "  (ours: matmulOrder fast)" : "") +
        (a.self ? "  against ours at depth 0" : `  llama.cpp cpu variant: ${llama.variant}`),
    );
    const line = (what: string, p: Paired) =>
      console.log(
        `  ${what}: ${us}/${them} ${p.median.toFixed(3)} (rounds ${p.min.toFixed(3)}-` +
          `${p.max.toFixed(3)}, ${us} faster in ${p.wins}/${p.ratios.length}); ms per token ` +
          `${us} ${median(p.ours).toFixed(3)}, ${them} ${median(p.llama).toFixed(3)}`,
      );
    line("tg", res.tg);
    if (res.pp) line(`pp${a.pp}`, res.pp);
    console.log(
      `  load average (1 min): ${res.loadAvg.before.toFixed(2)} before, ` +
        `${res.loadAvg.after.toFixed(2)} after`,
    );
    return 0;
  });
}

if (import.meta.main) Deno.exit(await main(Deno.args));
