/**
 * Shared fixtures of the quantization tests: tolstoy-6m quantized by
 * llama.cpp (llama_model_quantize) to each ftype, cached under .cache/quant.
 *
 * @module
 */
import { fileURLToPath } from "node:url";
import { loadOracle } from "./oracle/oracle.ts";

/** The repository root. */
export const ROOT: string = fileURLToPath(new URL("../", import.meta.url));
/** tolstoy-6m in f32 (the quantizers' input). */
export const TOLSTOY_F32: string = `${ROOT}../shared/models/tolstoy-6m-f32.gguf`;
/** Where quantized fixtures are cached. */
export const QUANT_DIR: string = `${ROOT}.cache/quant`;

/** llama.cpp's llama_ftype values (include/llama.h). */
export const FTYPE = {
  Q4_0: 2,
  Q4_1: 3,
  Q8_0: 7,
  Q5_0: 8,
  Q5_1: 9,
  Q2_K: 10,
  Q3_K_S: 11,
  Q3_K_M: 12,
  Q4_K_S: 14,
  Q4_K_M: 15,
  Q5_K_S: 16,
  Q5_K_M: 17,
  Q6_K: 18,
} as const;

/** Path of tolstoy-6m quantized by llama.cpp to `ftype` (made on first use). */
export async function llamaQuantized(name: keyof typeof FTYPE): Promise<string> {
  const out = `${QUANT_DIR}/tolstoy-6m-llama-${name.toLowerCase()}.gguf`;
  try {
    await Deno.stat(out);
    return out;
  } catch {
    // not cached yet
  }
  await Deno.mkdir(QUANT_DIR, { recursive: true });
  const tmp = `${out}.tmp${Deno.pid}`;
  (await loadOracle()).quantize(TOLSTOY_F32, tmp, FTYPE[name]);
  await Deno.rename(tmp, out);
  return out;
}
