/**
 * `deno task quantize IN.gguf OUT.gguf TYPE`: llama-quantize's job for
 * TYPE in q8_0 q4_0 q4_1 q5_0 q5_1 q2_k q3_k(_s|_m) q4_k(_s|_m) q5_k(_s|_m) q6_k.
 *
 * @module
 */
import { resolve } from "node:path";
import { flag, runCommand, UsageError } from "./args.ts";
import { QUANT_PRESETS } from "../quant/rules.ts";
import type { QuantizeProgress } from "../quant/quantize.ts";

const TYPES = [...QUANT_PRESETS.keys()];

const SPEC = {
  name: "quantize",
  summary: "Quantizes a GGUF model the way llama-quantize does.",
  positionals: [
    { name: "IN.gguf", description: "f32/f16/bf16 GGUF model" },
    { name: "OUT.gguf", description: "file to write (not IN.gguf)" },
    { name: "TYPE", description: TYPES.join(" ") },
  ],
  flags: { quiet: flag.boolean({ short: "q", description: "no progress bar" }) },
  notes: ["Exit codes: 0, 1 unreadable or unsupported input, 2 usage."],
};

/** A one-line progress bar for stderr. */
export function progressLine(p: QuantizeProgress, width = 30): string {
  const fill = Math.round((p.done / p.total) * width);
  return `[${"#".repeat(fill)}${".".repeat(width - fill)}] ${p.done}/${p.total} ` +
    `${p.name} ${p.from} -> ${p.to}`;
}

/** Runs the CLI with `args`; returns the exit code. */
export function main(args: string[]): Promise<number> {
  return runCommand(SPEC, args, async ({ values, positionals }) => {
    const [input, output, type] = positionals;
    if (!QUANT_PRESETS.has(type.toLowerCase())) {
      throw new UsageError(`TYPE '${type}' is not one of ${TYPES.join(", ")}`);
    }
    if (resolve(input) === resolve(output)) {
      throw new UsageError(`OUT.gguf is IN.gguf (${input}); write to another file`);
    }
    const { quantizeModel } = await import("../quant/quantize.ts");
    const enc = new TextEncoder();
    const tty = Deno.stderr.isTerminal();
    const t0 = performance.now();
    const r = await quantizeModel(input, output, type, {
      onProgress: values.quiet ? undefined : (p) => {
        const line = progressLine(p).slice(0, 120);
        Deno.stderr.writeSync(enc.encode(tty ? `\r\x1b[K${line}` : `${line}\n`));
      },
    });
    if (tty && !values.quiet) Deno.stderr.writeSync(enc.encode("\n"));
    const mb = (n: number) => (n / 2 ** 20).toFixed(2);
    console.log(
      `${output}: ${type}, ${r.types.size} tensors, ${mb(r.bytesIn)} MiB -> ${mb(r.bytesOut)} ` +
        `MiB in ${((performance.now() - t0) / 1000).toFixed(1)} s`,
    );
    return 0;
  });
}

if (import.meta.main) Deno.exit(await main(Deno.args));
