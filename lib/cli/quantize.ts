/**
 * `deno task quantize IN.gguf OUT.gguf TYPE`: llama-quantize's job for
 * TYPE in q8_0 q4_0 q4_1 q5_0 q5_1 q2_k q3_k(_s|_m) q4_k(_s|_m) q5_k(_s|_m) q6_k.
 *
 * @module
 */
import { parseArgs } from "node:util";
import { QUANT_PRESETS } from "../quant/rules.ts";
import { quantizeModel, type QuantizeProgress } from "../quant/quantize.ts";

const USAGE = `usage: deno task quantize IN.gguf OUT.gguf TYPE\n  TYPE: ${
  [...QUANT_PRESETS.keys()].join(" ")
}`;

/** A one-line progress bar for stderr. */
export function progressLine(p: QuantizeProgress, width = 30): string {
  const fill = Math.round((p.done / p.total) * width);
  return `[${"#".repeat(fill)}${".".repeat(width - fill)}] ${p.done}/${p.total} ` +
    `${p.name} ${p.from} -> ${p.to}`;
}

/** Runs the CLI with `args`; returns the exit code. */
export async function main(args: string[]): Promise<number> {
  const { values, positionals } = parseArgs({
    args,
    options: { help: { type: "boolean", short: "h" }, quiet: { type: "boolean", short: "q" } },
    allowPositionals: true,
  });
  if (values.help) {
    console.log(USAGE);
    return 0;
  }
  if (positionals.length !== 3) {
    console.error(USAGE);
    return 2;
  }
  const [input, output, type] = positionals;
  const enc = new TextEncoder();
  const tty = Deno.stderr.isTerminal();
  try {
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
      `${output}: ${type}, ${r.types.size} tensors, ${mb(r.bytesIn)} MiB -> ${
        mb(r.bytesOut)
      } MiB ` +
        `in ${((performance.now() - t0) / 1000).toFixed(1)} s`,
    );
    return 0;
  } catch (e) {
    console.error(`quantize: ${e instanceof Error ? e.message : e}`);
    return 1;
  }
}

if (import.meta.main) Deno.exit(await main(Deno.args));
