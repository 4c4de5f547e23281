/**
 * `deno task build:wasm`: compiles build/wasm/llm_edge.wasm and its
 * threaded build llm_edge_mt.wasm from kernels/src with kernels/Makefile's
 * `wasm` target (Debian's clang + lld
 * for wasm32 with SIMD128, wasi-libc; incremental like `deno task build`).
 * A missing tool is named in a one-line error with the apt command that
 * installs it; {@linkcode wasmToolchain} tells tests whether to run.
 *
 * @module
 */
import { REPO_ROOT } from "./build.ts";
import { pathExists } from "./platform.ts";

/** The Debian packages the build needs. */
export const WASM_PACKAGES = ["clang", "lld", "wasi-libc", "libclang-rt-14-dev-wasm32"] as const;

/** The command that installs {@link WASM_PACKAGES}. */
export const WASM_APT = `apt-get install -y ${WASM_PACKAGES.join(" ")}`;

function runs(cmd: string, args: string[]): boolean {
  try {
    return new Deno.Command(cmd, { args, stdout: "null", stderr: "null" }).outputSync().success;
  } catch (e) {
    if (e instanceof Deno.errors.NotCapable) throw e;
    return false;
  }
}

/**
 * What of the toolchain is missing: `{ ok: true }`, or the first missing
 * piece with the package that provides it.
 */
export function wasmToolchain(
  cc = "clang",
  sysroot = "/usr",
): { ok: true } | { ok: false; missing: string; reason: string } {
  const need = (missing: string, pkg: string) => ({
    ok: false as const,
    missing,
    reason: `${missing} not found (apt-get install -y ${pkg}; all: ${WASM_APT})`,
  });
  if (!runs("make", ["--version"])) return need("make", "make");
  if (!runs(cc, ["--version"])) return need(cc, "clang");
  if (!runs("wasm-ld", ["--version"])) return need("wasm-ld", "lld");
  if (!pathExists(`${sysroot}/lib/wasm32-wasi/libc.a`)) {
    return need(`wasi-libc (${sysroot}/lib/wasm32-wasi/libc.a)`, "wasi-libc");
  }
  const rt = new Deno.Command(cc, {
    args: ["--target=wasm32-wasi", "-print-libgcc-file-name"],
    stdout: "piped",
    stderr: "null",
  }).outputSync();
  const rtPath = new TextDecoder().decode(rt.stdout).trim();
  if (!rt.success || !pathExists(rtPath)) {
    return need(`compiler-rt builtins for wasm32 (${rtPath})`, "libclang-rt-14-dev-wasm32");
  }
  return { ok: true };
}

/** Options of {@linkcode buildWasm}. */
export interface WasmBuildOptions {
  /** Output directory (default `<repo>/build`; the module goes to `wasm/` in it). */
  buildDir?: string;
  /** Parallel compile jobs (default: the CPU count). */
  jobs?: number;
  /** Print progress and make's output (default true). */
  verbose?: boolean;
}

/** The two modules {@linkcode buildWasm} makes. */
export interface WasmModules {
  /** llm_edge.wasm: one thread, a memory of its own. */
  single: string;
  /** llm_edge_mt.wasm: atomics, shared memory, threads on workers. */
  threaded: string;
}

/** Builds both modules; returns their paths. Throws a one-line error naming a missing tool. */
export async function buildWasm(options: WasmBuildOptions = {}): Promise<WasmModules> {
  if (!REPO_ROOT.startsWith("/")) {
    throw new Error(`cannot build ${REPO_ROOT}: the kernel sources must be on local disk`);
  }
  const tc = wasmToolchain();
  if (!tc.ok) throw new Error(`cannot build the WebAssembly kernels: ${tc.reason}`);
  const buildDir = options.buildDir ?? `${REPO_ROOT}/build`;
  const jobs = options.jobs ?? Math.max(1, navigator.hardwareConcurrency || 1);
  const verbose = options.verbose ?? true;
  if (verbose) {
    console.error("llm-edge: building the WebAssembly kernels (clang, wasm32 + simd128)");
  }
  const out = await new Deno.Command("make", {
    args: ["-s", `-j${jobs}`, "-C", `${REPO_ROOT}/kernels`, `BUILD=${buildDir}`, "wasm"],
    stdout: "piped",
    stderr: "piped",
  }).output();
  const text = new TextDecoder().decode(out.stdout) + new TextDecoder().decode(out.stderr);
  if (!out.success) throw new Error(`WebAssembly build failed:\n${text}`);
  if (verbose && text.trim()) console.error(text.trim());
  return {
    single: `${buildDir}/wasm/llm_edge.wasm`,
    threaded: `${buildDir}/wasm/llm_edge_mt.wasm`,
  };
}

if (import.meta.main) {
  try {
    for (const path of Object.values(await buildWasm())) {
      console.log(`built ${path} (${Deno.statSync(path).size} bytes)`);
    }
  } catch (e) {
    console.error(`error: ${(e as Error).message}`);
    Deno.exit(1);
  }
}
