/**
 * `deno task build`: compiles build/libllm_edge.so with kernels/Makefile
 * (incremental: make skips up-to-date objects). {@linkcode buildNative} also
 * builds a copy of the kernel sources fetched into the user cache, and
 * cross-compiles for `deno task build:dist`.
 *
 * @module
 */
import { fromFileUrl, libFileName } from "./platform.ts";

/** The package root: a path for a local checkout, else the https URL it was loaded from. */
export const REPO_ROOT: string = new URL("../", import.meta.url).protocol === "file:"
  ? fromFileUrl(new URL("../", import.meta.url)).replace(/\/$/, "")
  : new URL("../", import.meta.url).href;

/** Options of {@linkcode buildNative}. */
export interface BuildOptions {
  /** Output directory (default `<repo>/build`). */
  buildDir?: string;
  /** The directory holding kernels/ (default: this checkout). */
  sourceRoot?: string;
  /** C compiler (default make's `cc`); e.g. `aarch64-linux-gnu-gcc` to cross-compile. */
  cc?: string;
  /** Parallel compile jobs (default: the CPU count). */
  jobs?: number;
  /** Print make's output (default true). */
  verbose?: boolean;
}

/** Runs make for the native library; throws with make's output on failure. */
export async function buildNative(options: BuildOptions = {}): Promise<string> {
  const root = options.sourceRoot ?? REPO_ROOT;
  if (!root.startsWith("/")) {
    throw new Error(`cannot run make on ${root}: the kernel sources must be on local disk`);
  }
  const buildDir = options.buildDir ?? `${root}/build`;
  const jobs = options.jobs ?? Math.max(1, navigator.hardwareConcurrency || 1);
  const args = ["-s", `-j${jobs}`, "-C", `${root}/kernels`, `BUILD=${buildDir}`];
  if (options.cc) args.push(`CC=${options.cc}`);
  args.push("cpu");
  let out: Deno.CommandOutput;
  try {
    out = await new Deno.Command("make", { args, stdout: "piped", stderr: "piped" }).output();
  } catch (e) {
    if (e instanceof Deno.errors.NotCapable) throw e;
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
  return `${buildDir}/${libFileName()}`;
}

/** Whether a C compiler answers `--version` (cc, gcc or clang, or the one named). */
export function compilerAvailable(names: readonly string[] = ["cc", "gcc", "clang"]): boolean {
  for (const c of names) {
    try {
      const out = new Deno.Command(c, { args: ["--version"], stdout: "null", stderr: "null" })
        .outputSync();
      if (out.success) return true;
    } catch (e) {
      if (e instanceof Deno.errors.NotCapable) throw e;
      // not installed
    }
  }
  return false;
}

if (import.meta.main) {
  const lib = await buildNative();
  console.log(`built ${lib}`);
}
