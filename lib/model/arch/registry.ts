/**
 * The architectures this engine builds, by `general.architecture` value.
 * Adding a dense architecture is one file in this folder and one line in
 * {@link ARCHITECTURES}.
 *
 * @module
 */
import { ModelError } from "../hparams.ts";
import { bert } from "./bert.ts";
import { gemma } from "./gemma.ts";
import { llama } from "./llama.ts";
import { mamba } from "./mamba.ts";
import { phi3 } from "./phi3.ts";
import { qwen2 } from "./qwen2.ts";
import type { Architecture } from "./types.ts";

/** Every architecture, in the order error messages list them. */
export const ARCHITECTURES: readonly Architecture[] = [
  llama,
  qwen2,
  phi3,
  bert,
  gemma,
  mamba,
] as Architecture[];

const BY_NAME = new Map<string, Architecture>(
  ARCHITECTURES.flatMap((a) => a.names.map((n) => [n, a] as const)),
);

/** The `general.architecture` values supported, in registry order. */
export const SUPPORTED_ARCHS: readonly string[] = ARCHITECTURES.flatMap((a) => a.names);

/**
 * The architecture named `name`; throws a ModelError "architecture 'X' is
 * not supported (supported: …)" prefixed with `path` otherwise.
 */
export function architecture(name: string, path: string): Architecture {
  const a = BY_NAME.get(name);
  if (!a) {
    throw new ModelError(
      `${path}: architecture '${name}' is not supported (supported: ${SUPPORTED_ARCHS.join(", ")})`,
    );
  }
  return a;
}
