/**
 * Shared helpers of the GGUF tests: fixture discovery and small file builders.
 *
 * @module
 */
import { fileURLToPath } from "node:url";
import { join } from "node:path";
import { type GGUFKV, GGUFValueType, writeGGUF } from "../lib/gguf/mod.ts";

/** Repository root. */
export const ROOT = fileURLToPath(new URL("../", import.meta.url));
/** The shared reference data (../shared from the repository root). */
export const SHARED = join(ROOT, "..", "shared");

function walk(dir: string, out: string[]): void {
  let entries: Deno.DirEntry[];
  try {
    entries = [...Deno.readDirSync(dir)];
  } catch {
    return;
  }
  for (const e of entries) {
    const p = join(dir, e.name);
    if (e.isDirectory) walk(p, out);
    else if (e.name.endsWith(".gguf")) out.push(p);
  }
}

/** Every GGUF under ../shared/fixtures and ../shared/models, sorted. */
export function sharedGGUFs(): string[] {
  const out: string[] = [];
  walk(join(SHARED, "fixtures"), out);
  walk(join(SHARED, "models"), out);
  return out.sort();
}

/** A small fixture path (llama-2-tiny-random), for tests that need a real model. */
export const TINY = join(SHARED, "fixtures", "models", "llama-2-tiny-random.gguf");
/** The 6M-parameter tolstoy model in f32. */
export const TOLSTOY = join(SHARED, "models", "tolstoy-6m-f32.gguf");

/** A string kv. */
export function kvStr(key: string, value: string): GGUFKV {
  return { key, type: GGUFValueType.STRING, value };
}

/** A u32 kv. */
export function kvU32(key: string, value: number): GGUFKV {
  return { key, type: GGUFValueType.UINT32, value };
}

/** A tiny valid file: a couple of kvs and two f32 tensors. */
export function tinyFile(opts: { version?: number; kv?: GGUFKV[] } = {}): Uint8Array {
  const f32 = (n: number, seed: number) =>
    new Uint8Array(Float32Array.from({ length: n }, (_, i) => seed + i * 0.5).buffer);
  return writeGGUF({
    version: opts.version,
    kv: opts.kv ?? [kvStr("general.architecture", "llama"), kvU32("llama.block_count", 1)],
    tensors: [
      { name: "a", type: 0, ne: [4, 3], data: f32(12, 1) },
      { name: "b", type: 0, ne: [5], data: f32(5, 2) },
    ],
  });
}

/** Writes bytes to a fresh temp file and returns its path. */
export function tempFile(bytes: Uint8Array, suffix = ".gguf"): string {
  const p = Deno.makeTempFileSync({ prefix: "llm-edge-gguf-", suffix });
  Deno.writeFileSync(p, bytes);
  return p;
}
