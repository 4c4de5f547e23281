/**
 * `deno task bench:gpu`: llm-edge's CUDA backend on one GGUF file, pp and tg
 * tokens/s with `--gpu-layers` layers offloaded (-1: all), the same timing
 * loop as `deno task bench` (warm-up, then `--reps` repetitions, medians and
 * spread). Only our engine: the CPU oracle that `deno task bench` runs has no
 * CUDA, so this prints no ratio.
 *
 *   deno task bench:gpu --model FILE [--gpu-layers -1] [-p 512] [-n 128] [--reps 3]
 *     [--depth 0] [--flash-attn] [--threads T]
 *
 * @module
 */
import { flag, runCommand, UsageError } from "../lib/cli/args.ts";
import { median, spread } from "./bench.ts";
import { childOurs, type Spec } from "./engines.ts";

const SPEC = {
  name: "bench:gpu",
  summary: "Times llm-edge on the CUDA backend (pp/tg tokens/s) with layers offloaded.",
  flags: {
    model: flag.string({ short: "m", value: "FILE", description: "GGUF model to benchmark" }),
    "gpu-layers": flag.int({
      min: -1,
      default: -1,
      description: "layers on the GPU (-1: all, as llama.cpp's -ngl 99)",
    }),
    threads: flag.int({
      short: "t",
      min: 1,
      max: 512,
      defaultText: "physical cores",
      description: "CPU threads for what stays on the host",
    }),
    pp: flag.int({ short: "p", min: 1, default: 512, description: "prompt tokens per run" }),
    tg: flag.int({ short: "n", min: 1, default: 128, description: "tokens per generation run" }),
    depth: flag.int({ short: "d", min: 0, default: 0, description: "tokens already in context" }),
    reps: flag.int({ min: 1, default: 3, description: "repetitions (medians kept)" }),
    "flash-attn": flag.boolean({ aliases: ["fa"], description: "flash attention" }),
  },
};

/** Runs the CLI; returns the exit code. */
export function main(args: string[]): Promise<number> {
  return runCommand(SPEC, args, async ({ values: a }) => {
    if (!a.model) throw new UsageError("--model is required");
    if (a["gpu-layers"] === 0) {
      throw new UsageError("--gpu-layers 0 is the CPU: use deno task bench");
    }
    const { physicalCores } = await import("../lib/backend/cpu.ts");
    const { probeCuda } = await import("../lib/backend/cuda.ts");
    const probe = await probeCuda();
    if (!probe.ok) throw new Error(probe.reason);
    const dev = probe.devices[0];
    const s: Spec = {
      model: a.model,
      threads: a.threads ?? physicalCores(),
      pp: a.pp,
      tg: a.tg,
      depth: a.depth,
      flashAttn: a["flash-attn"],
    };
    const r = await childOurs(s, a.reps, a["gpu-layers"]);
    const cell = (xs: number[]) =>
      `${median(xs).toFixed(1)} tok/s ±${(100 * spread(xs)).toFixed(0)}% (${
        xs.map((x) => x.toFixed(1)).join(", ")
      })`;
    const name = s.model.split("/").pop();
    console.log(
      `${name} on ${dev.name} (sm_${dev.computeCapability.join("")}), gpu-layers ${
        a["gpu-layers"]
      }, threads ${s.threads}${s.depth ? `, depth ${s.depth}` : ""}${
        s.flashAttn ? ", flash-attn" : ""
      }, load+upload ${r.loadMs.toFixed(0)} ms`,
    );
    console.log(`  pp${s.pp}: ${cell(r.pp)}`);
    console.log(`  tg${s.tg}: ${cell(r.tg)}`);
    return 0;
  });
}

if (import.meta.main) Deno.exit(await main(Deno.args));
