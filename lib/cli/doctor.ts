/**
 * `deno task doctor [--json] [--quiet]`: what this installation runs with —
 * CPU features and the SIMD level chosen, the native library's path and the
 * resolution step that found it, the default thread count, GPU/CUDA library
 * status, the library cache and the default model.
 *
 * @module
 */
import { fileURLToPath } from "node:url";
import { flag, runCommand } from "./args.ts";

// The default model beside the package: a path on disk, a URL when imported from JSR.
const DEFAULT_MODEL_URL = new URL("../../models/tolstoy-6m-f16.gguf", import.meta.url);
const DEFAULT_MODEL = DEFAULT_MODEL_URL.protocol === "file:"
  ? fileURLToPath(DEFAULT_MODEL_URL)
  : DEFAULT_MODEL_URL.href;

const SPEC = {
  name: "doctor",
  summary: "Reports CPU features, the SIMD level, the native library and how it was found.",
  flags: {
    json: flag.boolean({ description: "print one JSON object instead of lines" }),
    quiet: flag.boolean({ short: "q", description: "no progress while fetching or building" }),
  },
  notes: ["Exit codes: 0, 1 when the native library cannot be found, built or opened."],
};

const SIMD_NAMES = ["scalar", "avx2", "avx512", "neon"];

/** How each resolution step reads in the report. */
const STEP_TEXT: Record<string, string> = {
  env: "LLM_EDGE_LIB",
  executable: "beside the executable",
  package: "the package's build/",
  cache: "the user cache",
  prebuilt: "downloaded prebuilt (now cached)",
  source: "built from the kernel sources",
};

/** The CUDA driver library, probed by dlopen (no symbols are called). */
function cudaStatus(): string {
  for (const name of ["libcuda.so.1", "libcuda.so"]) {
    try {
      Deno.dlopen(name, {}).close();
      return `driver ${name} found; no CUDA backend in this version (CPU kernels only)`;
    } catch {
      // try the next name
    }
  }
  return "no CUDA driver library (libcuda.so.1) found; CPU kernels only";
}

/** Runs the CLI with `args`; returns the exit code (the report goes to stdout). */
export function main(args: string[]): Promise<number> {
  return runCommand(SPEC, args, async ({ values }) => {
    const { loadLibrary } = await import("../../ffi/library.ts");
    const { stderrProgress } = await import("../../ffi/progress.ts");
    const { platformTag, userCacheDir } = await import("../../ffi/platform.ts");
    const { VERSION } = await import("../../ffi/version.ts");
    const { physicalCores } = await import("../backend/cpu.ts");
    const lib = await loadLibrary({ progress: stderrProgress({ quiet: values.quiet }) });
    const f = lib.symbols.le_cpu_features();
    const features = [
      f & 1 ? "avx2+fma+f16c" : "",
      f & 2 ? "avx512f+bw+vl" : "",
      f & 4 ? "neon" : "",
    ]
      .filter(Boolean);
    const level = lib.symbols.le_set_simd_level(-1); // -1: the best the CPU has, the default
    let modelOk = DEFAULT_MODEL_URL.protocol !== "file:"; // remote: published with the package
    try {
      modelOk ||= Deno.statSync(DEFAULT_MODEL).isFile;
    } catch {
      // reported as missing
    }
    const report = {
      version: VERSION,
      deno: Deno.version.deno,
      platform: platformTag(),
      cpuFeatures: features.length ? features.join(", ") : "none beyond the baseline",
      simdLevel: SIMD_NAMES[level] ?? `level ${level}`,
      library: lib.path,
      foundBy: STEP_TEXT[lib.step] + (lib.step === "cache" ? ` (${lib.origin})` : ""),
      threads: physicalCores(),
      logicalCpus: navigator.hardwareConcurrency,
      gpu: cudaStatus(),
      libraryCache: userCacheDir() ?? "none (set XDG_CACHE_HOME or HOME)",
      defaultModel: `${DEFAULT_MODEL}${modelOk ? "" : " (missing)"}`,
    };
    if (values.json) {
      console.log(JSON.stringify(report));
    } else {
      const width = Math.max(...Object.keys(report).map((k) => k.length));
      for (const [k, v] of Object.entries(report)) console.log(`${k.padEnd(width)}  ${v}`);
    }
    return 0;
  });
}

if (import.meta.main) Deno.exit(await main(Deno.args));
