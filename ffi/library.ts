/**
 * Opening the native kernel library, found by ./resolve.ts: `LLM_EDGE_LIB`,
 * beside the executable, the package's build/, the per-user cache, the
 * published prebuilt (fetched and checksum-verified), then a build of the
 * shipped kernel sources; otherwise the error lists what was tried and what
 * to run.
 *
 * @module
 */
import { ABI_VERSION, type LlmEdgeSymbols, SYMBOLS } from "./symbols.ts";
import { REPO_ROOT } from "./build.ts";
import { cString } from "./pointers.ts";
import { LIB_NAME, readEnv, userCacheDir as cacheDirFor } from "./platform.ts";
import {
  BUILD_HINT,
  NativeLibraryError,
  permissionFlag,
  type Resolved,
  resolveLibrary,
  resolveLibrarySync,
  type ResolveOptions,
  type Step,
} from "./resolve.ts";

export { BUILD_HINT, LIB_NAME, NativeLibraryError };
export type { Resolved, ResolveOptions, Step };

/** Options of {@linkcode locateLibrary}. */
export interface LocateOptions {
  /** Value of LLM_EDGE_LIB to use instead of the environment's (null: unset). */
  envPath?: string | null;
  /** Only these directories after LLM_EDGE_LIB (default: the resolution steps 2-4). */
  searchDirs?: readonly string[];
}

function fileExists(path: string): boolean {
  try {
    return Deno.statSync(path).isFile;
  } catch {
    return false;
  }
}

/** The per-user cache directory of this version and platform, or null when HOME is unknown. */
export function userCacheDir(): string | null {
  return cacheDirFor();
}

/** Default directories searched for the library: the checkout's build/, then the user cache. */
export function defaultSearchDirs(): string[] {
  const dirs = REPO_ROOT.startsWith("/") ? [`${REPO_ROOT}/build`] : [];
  const cache = userCacheDir();
  if (cache) dirs.push(cache);
  return dirs;
}

/**
 * Path of an existing library (no fetch, no build), or throws
 * NativeLibraryError naming what was tried.
 */
export function locateLibrary(options: LocateOptions = {}): string {
  if (!options.searchDirs) {
    const env = options.envPath === undefined ? undefined : options.envPath ?? undefined;
    return resolveLibrarySync(
      options.envPath === undefined ? {} : { env: (n) => n === "LLM_EDGE_LIB" ? env : readEnv(n) },
    ).path;
  }
  const env = options.envPath === undefined ? readEnv("LLM_EDGE_LIB") : options.envPath;
  if (env) {
    if (fileExists(env)) return env;
    throw new NativeLibraryError(`LLM_EDGE_LIB=${env} does not exist; ${BUILD_HINT}`);
  }
  for (const d of options.searchDirs) {
    const p = `${d}/${LIB_NAME}`;
    if (fileExists(p)) return p;
  }
  throw new NativeLibraryError(
    `${LIB_NAME} not found (looked in ${options.searchDirs.join(", ")}); ${BUILD_HINT}`,
  );
}

/** The opened library. */
export interface NativeLibrary {
  /** Where it was loaded from. */
  readonly path: string;
  /** Which resolution step found it (see ./resolve.ts). */
  readonly step: Step;
  /** For a library from the cache: prebuilt download or source build. */
  readonly origin?: "prebuilt" | "source";
  /** Callable symbols. */
  readonly symbols: LlmEdgeSymbols;
  /** The thread-local message of the last native failure. */
  lastError(): string;
}

let opened: NativeLibrary | null = null;
let opening: Promise<NativeLibrary> | null = null;

/** dlopen and ABI check of a resolved library. */
export function openLibrary(found: Resolved): NativeLibrary {
  const { path } = found;
  let lib: Deno.DynamicLibrary<typeof SYMBOLS>;
  try {
    lib = Deno.dlopen(path, SYMBOLS);
  } catch (e) {
    if (e instanceof Deno.errors.NotCapable) {
      const flag = permissionFlag(e, "--allow-ffi");
      throw new NativeLibraryError(
        `cannot open ${path}: not permitted; run with ${flag}`,
        found.tried,
        [flag],
      );
    }
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
  return {
    path,
    step: found.step,
    origin: found.origin,
    symbols,
    lastError: () => cString(symbols.le_last_error()),
  };
}

/**
 * Opens the library once per process (later calls return the same object),
 * fetching or building it first when needed. `options` apply to the first
 * call only.
 */
export function loadLibrary(options: ResolveOptions = {}): Promise<NativeLibrary> {
  if (opened) return Promise.resolve(opened);
  opening ??= (async () => {
    opened = openLibrary(await resolveLibrary(options));
    return opened;
  })();
  opening.catch(() => {
    opening = null;
  });
  return opening;
}

/** The library if already loaded by {@linkcode loadLibrary}, else opens it synchronously (no fetch, no build). */
export function loadLibrarySync(): NativeLibrary {
  opened ??= openLibrary(resolveLibrarySync());
  return opened;
}
