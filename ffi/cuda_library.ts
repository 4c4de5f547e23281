/**
 * Finding, building and opening the CUDA kernel library, parallel to
 * ffi/library.ts for the CPU one. Search order: the `LLM_EDGE_CUDA_LIB`
 * environment variable (a file path), build/, then the per-user cache
 * directory. When none holds the library and the sources and nvcc are on
 * disk, it is built into build/ (about 20 s); otherwise the Error says what
 * to run.
 *
 * Opening the library needs no GPU and no driver (the CUDA runtime is linked
 * statically): whether a device is usable is the backend's question
 * (lib/backend/cuda.ts), asked through `lec_device_count`.
 *
 * @module
 */
import { CUDA_ABI_VERSION, CUDA_SYMBOLS, type CudaSymbols } from "./cuda_symbols.ts";
import { buildCuda, CUDA_LIB_NAME, findNvcc } from "./cuda_build.ts";
import { REPO_ROOT } from "./build.ts";
import { defaultSearchDirs, NativeLibraryError } from "./library.ts";
import { cString } from "./pointers.ts";

export { CUDA_LIB_NAME };

/** The command a user runs to build the CUDA library. */
export const CUDA_BUILD_HINT: string =
  "run `deno task build:cuda` in the llm-edge repository (needs make and nvcc), " +
  `or set LLM_EDGE_CUDA_LIB to the path of a prebuilt ${CUDA_LIB_NAME}`;

function fileExists(path: string): boolean {
  try {
    return Deno.statSync(path).isFile;
  } catch {
    return false;
  }
}

function readEnv(name: string): string | undefined {
  try {
    return Deno.env.get(name);
  } catch {
    return undefined;
  }
}

/** Options of {@linkcode locateCudaLibrary}. */
export interface LocateCudaOptions {
  /** Value of LLM_EDGE_CUDA_LIB to use instead of the environment's. */
  envPath?: string | null;
  /** Directories searched after LLM_EDGE_CUDA_LIB (default: as for the CPU library). */
  searchDirs?: readonly string[];
}

/** Path of the CUDA library, or throws NativeLibraryError naming what was tried. */
export function locateCudaLibrary(options: LocateCudaOptions = {}): string {
  const env = options.envPath === undefined ? readEnv("LLM_EDGE_CUDA_LIB") : options.envPath;
  if (env) {
    if (fileExists(env)) return env;
    throw new NativeLibraryError(`LLM_EDGE_CUDA_LIB=${env} does not exist; ${CUDA_BUILD_HINT}`);
  }
  const dirs = options.searchDirs ?? defaultSearchDirs();
  for (const d of dirs) {
    const p = `${d}/${CUDA_LIB_NAME}`;
    if (fileExists(p)) return p;
  }
  throw new NativeLibraryError(
    `${CUDA_LIB_NAME} not found (looked in ${dirs.join(", ")}); ${CUDA_BUILD_HINT}`,
  );
}

/** The opened CUDA library. */
export interface CudaLibrary {
  /** Where it was loaded from. */
  readonly path: string;
  /** Callable symbols. */
  readonly symbols: CudaSymbols;
  /** The thread-local message of the last failure on the calling thread. */
  lastError(): string;
}

let opened: CudaLibrary | null = null;
let opening: Promise<CudaLibrary> | null = null;

/** Opens `path` and checks its ABI version. */
export function openCudaLibrary(path: string): CudaLibrary {
  let lib: Deno.DynamicLibrary<typeof CUDA_SYMBOLS>;
  try {
    lib = Deno.dlopen(path, CUDA_SYMBOLS);
  } catch (e) {
    throw new NativeLibraryError(
      `cannot open ${path}: ${(e as Error).message}; ${CUDA_BUILD_HINT}`,
    );
  }
  const abi = lib.symbols.lec_abi_version();
  if (abi !== CUDA_ABI_VERSION) {
    lib.close();
    throw new NativeLibraryError(
      `${path} has ABI version ${abi}, expected ${CUDA_ABI_VERSION}; rebuild it: deno task build:cuda`,
    );
  }
  const symbols = lib.symbols;
  return { path, symbols, lastError: () => cString(symbols.lec_last_error()) };
}

/**
 * Makes {@linkcode loadCudaLibrary} return `lib` from now on (null: find and
 * open the library again on the next call). For an already opened library
 * and for stand-ins that emulate a device on the host, so that everything
 * above the C ABI can be exercised on machines without a GPU.
 */
export function setCudaLibrary(lib: CudaLibrary | null): void {
  opened = lib;
  opening = null;
}

/**
 * Opens the CUDA library once per process, building it first when it is
 * missing but buildable (sources here and nvcc found).
 */
export function loadCudaLibrary(): Promise<CudaLibrary> {
  if (opened) return Promise.resolve(opened);
  opening ??= (async () => {
    let path: string;
    try {
      path = locateCudaLibrary();
    } catch (e) {
      const sourcesHere = REPO_ROOT.startsWith("/") &&
        fileExists(`${REPO_ROOT}/kernels/cuda/le_cuda.h`);
      if (readEnv("LLM_EDGE_CUDA_LIB") || !sourcesHere || !findNvcc()) throw e;
      console.error(`llm-edge: ${CUDA_LIB_NAME} is missing; building it from kernels/cuda ...`);
      path = await buildCuda({ verbose: false });
    }
    opened = openCudaLibrary(path);
    return opened;
  })();
  opening.catch(() => {
    opening = null;
  });
  return opening;
}
