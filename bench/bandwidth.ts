/**
 * The token-generation bound of `deno task bench`: a model's weights are
 * read once per generated token, so tg cannot beat (read bandwidth) /
 * (bytes of weights read per token). The bandwidth comes from
 * bench/bandwidth.c, built here with the system C compiler for this CPU
 * (`-march=native`) and run with the benchmark's thread count.
 *
 * @module
 */
import { fileURLToPath } from "node:url";
import { join } from "node:path";
import { readGGUF } from "../lib/gguf/mod.ts";

const SOURCE = fileURLToPath(new URL("./bandwidth.c", import.meta.url));

/** What the probe measured: GB/s over its runs. */
export interface Bandwidth {
  /** Median of the runs. */
  gbps: number;
  min: number;
  max: number;
  threads: number;
}

/** The bound for one model file. */
export interface TgBound {
  /** Bytes of weights read per generated token. */
  bytesPerToken: number;
  /** Tokens/s at the measured bandwidth's median. */
  tgTps: number;
}

async function built(dir: string): Promise<string> {
  const bin = join(dir, "bandwidth");
  const src = await Deno.stat(SOURCE);
  const have = await Deno.stat(bin).catch(() => null);
  if (have && have.mtime && src.mtime && have.mtime >= src.mtime) return bin;
  await Deno.mkdir(dir, { recursive: true });
  const cc = Deno.env.get("CC") ?? "cc";
  const out = await new Deno.Command(cc, {
    args: ["-O2", "-march=native", "-pthread", SOURCE, "-o", bin],
    stderr: "piped",
  }).output().catch((e) => {
    throw new Error(`bandwidth probe: ${cc} not runnable (${(e as Error).message})`);
  });
  if (!out.success) {
    throw new Error(`bandwidth probe: ${cc} failed: ${new TextDecoder().decode(out.stderr)}`);
  }
  return bin;
}

/**
 * Measures read bandwidth with `threads` threads over a 1 GiB buffer (far
 * beyond any cache), building the probe into `dir` first if needed.
 */
export async function measureBandwidth(threads: number, dir: string): Promise<Bandwidth> {
  const bin = await built(dir);
  const out = await new Deno.Command(bin, { args: [String(threads), "1024"], stderr: "piped" })
    .output();
  if (!out.success) {
    throw new Error(`bandwidth probe failed: ${new TextDecoder().decode(out.stderr)}`);
  }
  const r = JSON.parse(new TextDecoder().decode(out.stdout));
  return { gbps: r.gbps, min: r.min, max: r.max, threads: r.threads };
}

/**
 * Bytes of weights one generated token reads from `model`: every tensor but
 * the token embeddings, of which a decode step reads one row (unless the
 * output projection is tied to them, when all of it is read).
 */
export async function bytesPerToken(model: string): Promise<number> {
  const { tensors } = await readGGUF(model);
  const tied = !tensors.some((t) => t.name === "output.weight");
  return tensors
    .filter((t) => tied || t.name !== "token_embd.weight")
    .reduce((s, t) => s + t.size, 0);
}

/** The tg bound of `model` at bandwidth `bw`. */
export async function tgBound(model: string, bw: Bandwidth): Promise<TgBound> {
  const bytes = await bytesPerToken(model);
  return { bytesPerToken: bytes, tgTps: (bw.gbps * 1e9) / bytes };
}
