/**
 * The flags several commands share, defined once so `generate`, `chat` and
 * `serve` name, default and check them alike (llama.cpp's names).
 *
 * @module
 */
import { fileURLToPath } from "node:url";
import { MAX_THREADS } from "../../ffi/symbols.ts";
import { flag } from "./args.ts";

const EMBEDDED = new URL("../../models/tolstoy-6m-f16.gguf", import.meta.url);

/**
 * The embedded default model, used when --model is not given: a path in a
 * checkout, the URL where the package is served from (importing this module
 * from JSR must not throw; the commands are not published entry points).
 */
export const DEFAULT_MODEL: string = EMBEDDED.protocol === "file:"
  ? fileURLToPath(EMBEDDED)
  : EMBEDDED.href;

/** --model / -m. */
export const modelFlag = () =>
  flag.string({
    short: "m",
    value: "FILE",
    default: DEFAULT_MODEL,
    defaultText: "models/tolstoy-6m-f16.gguf",
    description: "GGUF model file",
  });

/** --threads / -t. */
export const threadsFlag = () =>
  flag.int({
    short: "t",
    min: 1,
    max: MAX_THREADS,
    defaultText: "physical cores",
    description: "CPU threads (WebAssembly backend: 1 unless given)",
  });

/** --flash-attn / --fa. */
export const flashAttnFlag = () =>
  flag.boolean({
    aliases: ["fa"],
    description: "attention through flash attention (llama.cpp's -fa on); needed by a q8_0 cache",
  });

/** --fa-precision. */
export const flashAttnPrecisionFlag = () =>
  flag.choice(["default", "f32"], {
    default: "default",
    description:
      "flash attention arithmetic: llama.cpp's (default) or f32, faster over a deep cache (needs --flash-attn)",
  });

/** --matmul-order. */
export const matmulOrderFlag = () =>
  flag.choice(["default", "fast"], {
    default: "default",
    description:
      "matrix products' float order: llama.cpp's (default) or fast (Q8_0 at AVX2/AVX-512; not llama.cpp's bits)",
  });

/** --cache-type / --ctk. */
export const cacheTypeFlag = () =>
  flag.choice(["f16", "f32", "q8_0"], {
    default: "f16",
    aliases: ["ctk"],
    description: "KV cache type for keys and values (q8_0 needs --flash-attn)",
  });
