/**
 * Model files the parity tests share: the reference models in ../shared and
 * their quantized variants made by llama.cpp's own quantizer (cached under
 * .cache/models so one CI run quantizes each once).
 *
 * @module
 */
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { Ftype } from "../../lib/quant/rules.ts";
import { loadOracle } from "./oracle.ts";

const ROOT = fileURLToPath(new URL("../../", import.meta.url));
/** ../shared, seen from the repository root. */
export const SHARED_DIR: string = join(ROOT, "..", "shared");
/** tolstoy-6m in f32. */
export const TOLSTOY_F32: string = join(SHARED_DIR, "models", "tolstoy-6m-f32.gguf");
/** tolstoy-6m in f16. */
export const TOLSTOY_F16: string = join(SHARED_DIR, "models", "tolstoy-6m-f16.gguf");
/** llama-2 vocabulary with random weights. */
export const TINY_RANDOM: string = join(
  SHARED_DIR,
  "fixtures",
  "models",
  "llama-2-tiny-random.gguf",
);

/**
 * tolstoy-6m quantized by llama.cpp to `type` (a llama_ftype name, e.g.
 * "Q8_0"); made once and cached.
 */
export async function tolstoyQuantized(type: keyof typeof Ftype): Promise<string> {
  const dir = join(ROOT, ".cache", "models");
  Deno.mkdirSync(dir, { recursive: true });
  const out = join(dir, `tolstoy-6m-${type.toLowerCase()}.gguf`);
  try {
    Deno.statSync(out);
    return out;
  } catch {
    // not made yet
  }
  const tmp = `${out}.${Deno.pid}.tmp`;
  (await loadOracle()).quantize(TOLSTOY_F32, tmp, Ftype[type]);
  Deno.renameSync(tmp, out);
  return out;
}
