/**
 * Shared fixtures of the quantization tests: tolstoy-6m quantized by
 * llama.cpp (llama_model_quantize) to each ftype (cached by tests/oracle/models.ts),
 * and where our own quantize tool's outputs go.
 *
 * @module
 */
import { fileURLToPath } from "node:url";
import { Ftype } from "../lib/quant/rules.ts";
import { TOLSTOY_F32, tolstoyQuantized } from "./oracle/models.ts";

/** The repository root. */
export const ROOT: string = fileURLToPath(new URL("../", import.meta.url));
export { TOLSTOY_F32 };
/** Where the tests write our quantize tool's files. */
export const QUANT_DIR: string = `${ROOT}.cache/quant`;

/** llama.cpp's llama_ftype values (include/llama.h). */
export const FTYPE = Ftype;

/** Path of tolstoy-6m quantized by llama.cpp to `ftype` (made on first use). */
export const llamaQuantized: (name: keyof typeof FTYPE) => Promise<string> = tolstoyQuantized;
