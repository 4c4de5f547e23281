/**
 * `deno task build:cuda`: compiles build/libllm_edge_cuda.so from
 * kernels/cuda/*.cu with nvcc (sm_80 and sm_90), through the `cuda` target
 * of kernels/Makefile (incremental).
 *
 * @module
 */
import { REPO_ROOT } from "./build.ts";

/** File name of the CUDA kernel library. */
export const CUDA_LIB_NAME = "libllm_edge_cuda.so";

/** Options of {@linkcode buildCuda}. */
export interface CudaBuildOptions {
  /** Output directory (default `<repo>/build`). */
  buildDir?: string;
  /** Print make's output (default true). */
  verbose?: boolean;
  /** nvcc to use (default: {@linkcode findNvcc}). */
  nvcc?: string;
  /**
   * The make target: "cuda" (default) the library; "cuda-emu" the same
   * kernels built for the host emulation (kernels/cuda/emu, for tests
   * without a GPU); "cuda-host-check" the host check of the element loaders.
   */
  target?: "cuda" | "cuda-emu" | "cuda-host-check";
}

function runs(cmd: string): boolean {
  try {
    return new Deno.Command(cmd, { args: ["--version"], stdout: "null", stderr: "null" })
      .outputSync().success;
  } catch {
    return false;
  }
}

/** Where nvcc was looked for, in order ($NVCC, PATH, /usr/local/cuda*). */
export function nvccCandidates(): string[] {
  const out: string[] = [];
  try {
    const env = Deno.env.get("NVCC");
    if (env) out.push(env);
  } catch {
    // no --allow-env
  }
  out.push("nvcc", "/usr/local/cuda/bin/nvcc");
  try {
    for (const e of Deno.readDirSync("/usr/local")) {
      if (e.name.startsWith("cuda-")) out.push(`/usr/local/${e.name}/bin/nvcc`);
    }
  } catch {
    // no /usr/local
  }
  return out;
}

/** The first nvcc that runs, or null. */
export function findNvcc(): string | null {
  return nvccCandidates().find(runs) ?? null;
}

/**
 * Runs `make cuda`; throws when nvcc is missing (naming where it looked) or
 * the build fails (with nvcc's output). Returns the library's path.
 */
export async function buildCuda(options: CudaBuildOptions = {}): Promise<string> {
  const buildDir = options.buildDir ?? `${REPO_ROOT}/build`;
  const nvcc = options.nvcc ?? findNvcc();
  if (!nvcc) {
    throw new Error(
      `cannot build ${CUDA_LIB_NAME}: nvcc not found (tried ${nvccCandidates().join(", ")}); ` +
        "install the CUDA toolkit or set NVCC to its nvcc",
    );
  }
  const cmd = new Deno.Command("make", {
    args: [
      "-s",
      "-j2",
      "-C",
      `${REPO_ROOT}/kernels`,
      `BUILD=${buildDir}`,
      `NVCC=${nvcc}`,
      options.target ?? "cuda",
    ],
    stdout: "piped",
    stderr: "piped",
  });
  let out: Deno.CommandOutput;
  try {
    out = await cmd.output();
  } catch (e) {
    throw new Error(
      `cannot run make (${(e as Error).message}); install make, then: deno task build:cuda`,
    );
  }
  const text = new TextDecoder().decode(out.stdout) + new TextDecoder().decode(out.stderr);
  if (!out.success) throw new Error(`CUDA build failed:\n${text}`);
  if ((options.verbose ?? true) && text.trim()) console.log(text.trim());
  const file = options.target === "cuda-host-check"
    ? "cuda_dequant_check"
    : options.target === "cuda-emu"
    ? "libllm_edge_cuda_emu.so"
    : CUDA_LIB_NAME;
  return `${buildDir}/${file}`;
}

if (import.meta.main) {
  const t0 = performance.now();
  const lib = await buildCuda();
  console.log(`built ${lib} (${((performance.now() - t0) / 1000).toFixed(1)} s)`);
}
