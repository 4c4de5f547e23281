/**
 * The models `deno task bench` writes when given none: a random llama of a
 * named shape (f16) and llama.cpp's quantizations of it, under .cache/bench,
 * each made once and reused.
 *
 * @module
 */
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { Ftype } from "../lib/quant/rules.ts";
import { pathExists } from "../ffi/platform.ts";

const DIR = fileURLToPath(new URL("../.cache/bench/", import.meta.url));
const TOKENIZER = fileURLToPath(
  new URL("../../shared/fixtures/models/llama-2-tiny-random.gguf", import.meta.url),
);

/** The types `--types` takes, as llama.cpp's quantizer names them. */
export const BENCH_TYPES: Record<string, keyof typeof Ftype> = {
  q8_0: "Q8_0",
  q4_0: "Q4_0",
  q4_1: "Q4_1",
  q5_0: "Q5_0",
  q5_1: "Q5_1",
  q4_k_m: "Q4_K_M",
  q5_k_m: "Q5_K_M",
  q6_k: "Q6_K",
};

// The random models' shapes: 125m is writeRandomLlama's default; 1.1b is
// TinyLlama-1.1B's (the "1.1B-shape random llama").
export const BENCH_SHAPES: Record<
  string,
  { nEmbd?: number; nLayer?: number; nHead?: number; nHeadKv?: number; nFF?: number }
> = {
  "125m": {},
  "1.1b": { nEmbd: 2048, nLayer: 22, nHead: 32, nHeadKv: 4, nFF: 5632 },
};

/** The f16 random llama of `shape` (written on first use); its path. */
export async function benchModel(shape: string): Promise<string> {
  const dims = BENCH_SHAPES[shape];
  if (!dims) throw new Error(`bench: no model shape '${shape}' (${Object.keys(BENCH_SHAPES)})`);
  const model = join(DIR, `random-${shape}-f16.gguf`);
  if (pathExists(model)) return model;
  const { writeRandomLlama } = await import("../lib/model/random.ts");
  Deno.mkdirSync(DIR, { recursive: true });
  console.error(`bench: writing a random ${shape} llama to ${model} ...`);
  await writeRandomLlama(model, { type: "f16", ...dims, tokenizerFrom: TOKENIZER });
  return model;
}

/** `model` quantized to `type` by llama.cpp (made on first use, beside it); its path. */
export async function quantizedModel(
  model: string,
  type: string,
  threads: number,
): Promise<string> {
  const ftype = BENCH_TYPES[type];
  if (!ftype) throw new Error(`bench: no type '${type}' (${Object.keys(BENCH_TYPES)})`);
  const out = model.replace(/\.gguf$/, `-${type}.gguf`);
  if (pathExists(out)) return out;
  const { loadOracle } = await import("../tests/oracle/oracle.ts");
  console.error(`bench: llama.cpp quantizes ${model} to ${type} ...`);
  (await loadOracle()).quantize(model, out, Ftype[ftype], threads);
  return out;
}
