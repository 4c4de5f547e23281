/**
 * `deno task build`: compiles build/libllm_edge.so with the Makefile
 * (incremental: make skips up-to-date objects).
 *
 * @module
 */
import { fileURLToPath } from "node:url";

/** The repository root. */
export const REPO_ROOT: string = new URL("../", import.meta.url).protocol === "file:"
  ? fileURLToPath(new URL("../", import.meta.url)).replace(/\/$/, "")
  : new URL("../", import.meta.url).href;

/** Options of {@linkcode buildNative}. */
export interface BuildOptions {
  /** Output directory (default `<repo>/build`). */
  buildDir?: string;
  /** Print make's output (default true). */
  verbose?: boolean;
}

/** Runs make for the native library; throws with make's output on failure. */
export async function buildNative(options: BuildOptions = {}): Promise<string> {
  const buildDir = options.buildDir ?? `${REPO_ROOT}/build`;
  const cmd = new Deno.Command("make", {
    args: ["-s", "-C", `${REPO_ROOT}/kernels`, `BUILD=${buildDir}`, "cpu"],
    stdout: "piped",
    stderr: "piped",
  });
  let out: Deno.CommandOutput;
  try {
    out = await cmd.output();
  } catch (e) {
    throw new Error(
      `cannot run make (${(e as Error).message}); install make and a C compiler (cc), ` +
        `then run: deno task build`,
    );
  }
  const text = new TextDecoder().decode(out.stdout) + new TextDecoder().decode(out.stderr);
  if (!out.success) throw new Error(`native build failed:\n${text}`);
  if (options.verbose ?? true) {
    if (text.trim()) console.log(text.trim());
  }
  return `${buildDir}/libllm_edge.so`;
}

if (import.meta.main) {
  const lib = await buildNative();
  console.log(`built ${lib}`);
}
