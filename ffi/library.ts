/**
 * Finding, building and opening the native kernel library.
 *
 * Search order: the `LLM_EDGE_LIB` environment variable (a file path), the
 * repository's build/ directory, then a per-user cache directory
 * (`$XDG_CACHE_HOME/llm-edge` or `~/.cache/llm-edge`). When none holds the
 * library and the kernel sources are on disk with a C compiler available, it
 * is built into build/; otherwise the Error says what to run.
 *
 * @module
 */
import { ABI_VERSION, type LlmEdgeSymbols, SYMBOLS } from "./symbols.ts";
import { buildNative, REPO_ROOT } from "./build.ts";
import { cString } from "./pointers.ts";

/** File name of the CPU kernel library. */
export const LIB_NAME = "libllm_edge.so";

/** Raised when the native library cannot be found, built or opened. */
export class NativeLibraryError extends Error {
  /** Creates the error. */
  constructor(message: string) {
    super(message);
    this.name = "NativeLibraryError";
  }
}

/** Options of {@linkcode locateLibrary}. */
export interface LocateOptions {
  /** Value of LLM_EDGE_LIB to use instead of the environment's. */
  envPath?: string | null;
  /** Directories searched after LLM_EDGE_LIB (default: build/, then the user cache). */
  searchDirs?: readonly string[];
}

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
    return undefined; // no --allow-env: behave as unset
  }
}

/** The per-user cache directory for built libraries, or null when HOME is unknown. */
export function userCacheDir(): string | null {
  const xdg = readEnv("XDG_CACHE_HOME");
  const home = readEnv("HOME");
  const base = xdg ? xdg : home ? `${home}/.cache` : null;
  return base ? `${base}/llm-edge/abi${ABI_VERSION}` : null;
}

/** Default directories searched for the library. */
export function defaultSearchDirs(): string[] {
  const dirs = [`${REPO_ROOT}/build`];
  const cache = userCacheDir();
  if (cache) dirs.push(cache);
  return dirs;
}

/** The command a user runs to build the library. */
export const BUILD_HINT: string =
  "run `deno task build` in the llm-edge repository (needs make and a C compiler), " +
  `or set LLM_EDGE_LIB to the path of a prebuilt ${LIB_NAME}`;

/** Path of the library, or throws NativeLibraryError naming what was tried. */
export function locateLibrary(options: LocateOptions = {}): string {
  const env = options.envPath === undefined ? readEnv("LLM_EDGE_LIB") : options.envPath;
  if (env) {
    if (fileExists(env)) return env;
    throw new NativeLibraryError(`LLM_EDGE_LIB=${env} does not exist; ${BUILD_HINT}`);
  }
  const dirs = options.searchDirs ?? defaultSearchDirs();
  for (const d of dirs) {
    const p = `${d}/${LIB_NAME}`;
    if (fileExists(p)) return p;
  }
  throw new NativeLibraryError(
    `${LIB_NAME} not found (looked in ${dirs.join(", ")}); ${BUILD_HINT}`,
  );
}

function compilerAvailable(): boolean {
  for (const c of ["cc", "gcc", "clang"]) {
    try {
      const out = new Deno.Command(c, { args: ["--version"], stdout: "null", stderr: "null" })
        .outputSync();
      if (out.success) return true;
    } catch {
      // not installed
    }
  }
  return false;
}

/** The opened library. */
export interface NativeLibrary {
  /** Where it was loaded from. */
  readonly path: string;
  /** Callable symbols. */
  readonly symbols: LlmEdgeSymbols;
  /** The thread-local message of the last native failure. */
  lastError(): string;
}

let opened: NativeLibrary | null = null;
let opening: Promise<NativeLibrary> | null = null;

function open(path: string): NativeLibrary {
  let lib: Deno.DynamicLibrary<typeof SYMBOLS>;
  try {
    lib = Deno.dlopen(path, SYMBOLS);
  } catch (e) {
    throw new NativeLibraryError(`cannot open ${path}: ${(e as Error).message}; ${BUILD_HINT}`);
  }
  const abi = lib.symbols.le_abi_version();
  if (abi !== ABI_VERSION) {
    lib.close();
    throw new NativeLibraryError(
      `${path} has ABI version ${abi}, expected ${ABI_VERSION}; rebuild it: deno task build`,
    );
  }
  const symbols = lib.symbols;
  return { path, symbols, lastError: () => cString(symbols.le_last_error()) };
}

/**
 * Opens the library once per process (later calls return the same object),
 * building it first when it is missing but buildable.
 */
export function loadLibrary(): Promise<NativeLibrary> {
  if (opened) return Promise.resolve(opened);
  opening ??= (async () => {
    let path: string;
    try {
      path = locateLibrary();
    } catch (e) {
      const sourcesHere = REPO_ROOT.startsWith("/") &&
        fileExists(`${REPO_ROOT}/kernels/Makefile`);
      if (readEnv("LLM_EDGE_LIB") || !sourcesHere || !compilerAvailable()) throw e;
      console.error(
        `llm-edge: ${LIB_NAME} is missing; building it from kernels/ (first run only) ...`,
      );
      path = await buildNative({ verbose: false });
    }
    opened = open(path);
    return opened;
  })();
  opening.catch(() => {
    opening = null;
  });
  return opening;
}

/** The library if already loaded by {@linkcode loadLibrary}, else opens it synchronously (no build). */
export function loadLibrarySync(): NativeLibrary {
  opened ??= open(locateLibrary());
  return opened;
}
