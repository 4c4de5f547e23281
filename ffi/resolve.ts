/**
 * Where the native library comes from. In order:
 *
 * 1. `LLM_EDGE_LIB`, an explicit path (an error if it does not exist);
 * 2. beside the executable (a `deno compile` binary shipped with the library);
 * 3. the package's own `build/` when the package is on local disk (a
 *    checkout after `deno task build`, or a compiled binary that
 *    `--include`d it);
 * 4. the per-user cache `$XDG_CACHE_HOME/llm-edge/<version>/<platform>/`,
 *    used only when its SHA-256 matches the record written with it;
 * 5. the prebuilt library published with the package (`dist/`, located with
 *    `import.meta.url`, so over https when imported from JSR), checked
 *    against `dist/manifest.json` and stored in that cache;
 * 6. a build of the kernel sources shipped with the package, when a C
 *    compiler and make exist, stored in that cache;
 *
 * and otherwise a {@linkcode NativeLibraryError} listing every step with what
 * it found and what to run. A git checkout is a development tree: it builds
 * into its own `build/` at step 6 and never uses the cache or a prebuilt,
 * which could be older than its kernels.
 *
 * @module
 */
import { ABI_VERSION } from "./symbols.ts";
import { buildNative, compilerAvailable } from "./build.ts";
import { fromFileUrl, libFileName, platformTag, readEnv, userCacheDir } from "./platform.ts";
import { type CacheOrigin, readCacheRecord, sha256Hex, writeCachedLibrary } from "./integrity.ts";
import { type DistManifest, parseManifest } from "./manifest.ts";
import { type Progress, stderrProgress } from "./progress.ts";
import { VERSION } from "./version.ts";

/** The resolution steps, in order. */
export type Step = "env" | "executable" | "package" | "cache" | "prebuilt" | "source";

/** What one step found. */
export interface Attempt {
  /** The step. */
  step: Step;
  /** The path or URL looked at. */
  where: string;
  /** Why it did not give a library. */
  result: string;
}

/** A library found. */
export interface Resolved {
  /** Path to open. */
  path: string;
  /** The step that gave it. */
  step: Step;
  /** For the cache: where the cached file came from. */
  origin?: CacheOrigin;
  /** Steps tried before it. */
  tried: Attempt[];
}

/** Raised when the native library cannot be found, built or opened. */
export class NativeLibraryError extends Error {
  /** Steps tried, in order. */
  readonly tried: readonly Attempt[];
  /** Permission flags that would have let a step go further (`--allow-net`, ...). */
  readonly missingPermissions: readonly string[];
  /** Creates the error. */
  constructor(message: string, tried: Attempt[] = [], missingPermissions: string[] = []) {
    super(message);
    this.name = "NativeLibraryError";
    this.tried = tried;
    this.missingPermissions = missingPermissions;
  }
}

/** Options of {@linkcode resolveLibrary}; the defaults are the real environment. */
export interface ResolveOptions {
  /** Environment lookup (default `Deno.env.get`, unset without --allow-env). */
  env?: (name: string) => string | undefined;
  /** The package root (default: this package, from `import.meta.url`). */
  packageRoot?: URL;
  /** The running executable, whose directory is step 2 (default `Deno.execPath()`; null skips). */
  execPath?: string | null;
  /** The per-user cache directory (default {@linkcode userCacheDir}; null: none). */
  cacheDir?: string | null;
  /** Platform tag (default {@linkcode platformTag}). */
  platform?: string;
  /** Treat the package as a git checkout (default: it is on disk and has `.git`). */
  checkout?: boolean;
  /** Compilers probed before a source build (default cc, gcc, clang). */
  compilers?: readonly string[];
  /** Progress sink (default stderr, see {@linkcode stderrProgress}). */
  progress?: Progress;
}

/** The command that fixes a missing library. */
export const BUILD_HINT: string = "install make and a C compiler (the library builds on first " +
  "use), or set LLM_EDGE_LIB to a prebuilt libllm_edge.so; in a checkout run `deno task build`";

const PACKAGE_ROOT = new URL("../", import.meta.url);

function isFile(path: string): boolean {
  try {
    return Deno.statSync(path).isFile;
  } catch (e) {
    if (e instanceof Deno.errors.NotCapable) throw e;
    return false;
  }
}

/**
 * The flag a NotCapable error asks for, as precise as its message allows
 * (`--allow-net=host:port` from `Requires net access to "host:port"`), else
 * the flag it names, else the fallback.
 */
export function permissionFlag(e: Error, fallback: string): string {
  const access = /Requires (\w+) access to "([^"]+)"/.exec(e.message);
  if (access && /^(net|read|write|env|run|ffi|sys)$/.test(access[1])) {
    return `--allow-${access[1]}=${access[2]}`;
  }
  return /--allow-[a-z-]+/.exec(e.message)?.[0] ?? fallback;
}

/** Reads a file of the package: from disk, or fetched when the package is remote. */
async function readPackageFile(url: URL, progress: Progress, label?: string): Promise<Uint8Array> {
  if (url.protocol === "file:") return await Deno.readFile(fromFileUrl(url));
  const res = await fetch(url);
  if (!res.ok || !res.body) {
    await res.body?.cancel();
    throw new Deno.errors.NotFound(`HTTP ${res.status}`);
  }
  const total = Number(res.headers.get("content-length")) || null;
  const parts: Uint8Array[] = [];
  let done = 0;
  for await (const chunk of res.body) {
    parts.push(chunk);
    done += chunk.length;
    if (label) progress.bytes(label, done, total);
  }
  const out = new Uint8Array(done);
  let o = 0;
  for (const p of parts) out.set(p, (o += p.length) - p.length);
  return out;
}

class Search {
  readonly tried: Attempt[] = [];
  readonly denied = new Set<string>();
  readonly name: string;
  readonly platform: string;
  readonly root: URL;
  readonly local: string | null;
  readonly checkout: boolean;
  readonly progress: Progress;
  readonly cacheDir: string | null;
  private manifest: Promise<DistManifest | string> | null = null;

  constructor(readonly options: ResolveOptions) {
    this.platform = options.platform ?? platformTag();
    this.name = libFileName(this.platform.split("-")[0]);
    this.root = options.packageRoot ?? PACKAGE_ROOT;
    this.local = this.root.protocol === "file:" ? fromFileUrl(this.root).replace(/\/$/, "") : null;
    this.progress = options.progress ?? stderrProgress();
    let checkout = options.checkout;
    if (checkout === undefined) {
      try {
        checkout = this.local !== null && Deno.statSync(`${this.local}/.git`) !== null;
      } catch {
        checkout = false;
      }
    }
    this.checkout = checkout;
    this.cacheDir = options.cacheDir !== undefined
      ? options.cacheDir
      : userCacheDir(this.env, VERSION, this.platform);
  }

  env = (name: string): string | undefined =>
    this.options.env ? this.options.env(name) : readEnv(name, (f) => this.denied.add(f));

  miss(step: Step, where: string, result: string): null {
    this.tried.push({ step, where, result });
    return null;
  }

  /** Runs a step; a missing permission is recorded with its flag and the search goes on. */
  guard<T>(step: Step, where: string, flag: string, f: () => T): T | null {
    try {
      return f();
    } catch (e) {
      if (!(e instanceof Deno.errors.NotCapable)) throw e;
      const p = permissionFlag(e, flag);
      this.denied.add(p);
      return this.miss(step, where, `not permitted (run with ${p})`);
    }
  }

  async guardAsync<T>(step: Step, where: string, flag: string, f: () => Promise<T>) {
    try {
      return await f();
    } catch (e) {
      if (!(e instanceof Deno.errors.NotCapable)) throw e;
      const p = permissionFlag(e, flag);
      this.denied.add(p);
      return this.miss(step, where, `not permitted (run with ${p})`);
    }
  }

  found(path: string, step: Step, origin?: CacheOrigin): Resolved {
    return { path, step, origin, tried: this.tried };
  }

  /** Steps 1-4, which only look at local files. */
  local_(): Resolved | null {
    const env = this.env("LLM_EDGE_LIB");
    if (env) {
      const hit = this.guard("env", env, "--allow-read", () => isFile(env));
      if (hit) return this.found(env, "env");
      if (hit === null) {
        const flag = [...this.denied].at(-1)!;
        throw new NativeLibraryError(
          `LLM_EDGE_LIB=${env} cannot be read: not permitted; run with ${flag}`,
          this.tried,
          [flag],
        );
      }
      throw new NativeLibraryError(`LLM_EDGE_LIB=${env} does not exist; ${BUILD_HINT}`, [
        ...this.tried,
        { step: "env", where: env, result: "does not exist" },
      ]);
    }
    this.miss("env", "LLM_EDGE_LIB", "not set");

    const exe = this.options.execPath !== undefined
      ? this.options.execPath
      : this.guard("executable", "Deno.execPath()", "--allow-read", () => Deno.execPath());
    if (exe) {
      const p = `${exe.replace(/\/[^/]*$/, "")}/${this.name}`;
      const hit = this.guard("executable", p, "--allow-read", () => isFile(p));
      if (hit) return this.found(p, "executable");
      if (hit === false) this.miss("executable", p, "not found");
    }

    if (this.local) {
      const p = `${this.local}/build/${this.name}`;
      const hit = this.guard("package", p, "--allow-read", () => isFile(p));
      if (hit) return this.found(p, "package");
      if (hit === false) this.miss("package", p, "not found");
    }

    if (this.checkout) return null;
    if (!this.cacheDir) {
      return this.miss("cache", "$XDG_CACHE_HOME or $HOME", "neither is set (or readable)");
    }
    const p = `${this.cacheDir}/${this.name}`;
    return this.guard("cache", p, "--allow-read", () => {
      if (!isFile(p)) return this.miss("cache", p, "not found");
      const rec = readCacheRecord(p);
      if (!rec) return this.miss("cache", p, "no checksum record beside it; ignored");
      const sum = sha256Hex(Deno.readFileSync(p));
      if (sum !== rec.sha256) return this.miss("cache", p, "checksum mismatch; ignored");
      return this.found(p, "cache", rec.origin);
    });
  }

  loadManifest(): Promise<DistManifest | string> {
    const url = new URL("dist/manifest.json", this.root);
    this.manifest ??= readPackageFile(url, this.progress).then(
      (b) => parseManifest(JSON.parse(new TextDecoder().decode(b)), url.href),
      (e) => {
        if (e instanceof Deno.errors.NotCapable) throw e;
        return `no manifest at ${url.href} (${(e as Error).message})`;
      },
    ).then((m) => {
      if (typeof m === "string") return m;
      if (m.version !== VERSION) return `${url.href} is for version ${m.version}, not ${VERSION}`;
      if (m.abi !== ABI_VERSION) return `${url.href} is for ABI ${m.abi}, not ${ABI_VERSION}`;
      return m;
    }, (e) => {
      if (e instanceof Deno.errors.NotCapable) throw e;
      return `${url.href}: ${(e as Error).message}`;
    });
    return this.manifest;
  }

  /** Step 5: the published prebuilt, into the cache. */
  async prebuilt(cacheDir: string): Promise<Resolved | null> {
    const net = this.root.protocol === "file:" ? "--allow-read" : `--allow-net=${this.root.host}`;
    const where = new URL("dist/", this.root).href;
    const m = await this.guardAsync("prebuilt", where, net, () => this.loadManifest());
    if (m === null) return null;
    if (typeof m === "string") return this.miss("prebuilt", where, m);
    const entry = m.libraries[this.platform];
    if (!entry) return this.miss("prebuilt", where, `the manifest has no ${this.platform} library`);
    const url = new URL(`dist/${entry.file}`, this.root);
    return await this.guardAsync("prebuilt", url.href, net, async () => {
      let bytes: Uint8Array;
      try {
        this.progress.line(
          `fetching the prebuilt ${this.name} (${this.platform}) from ${url.href}`,
        );
        bytes = await readPackageFile(url, this.progress, `fetching ${this.name}`);
      } catch (e) {
        if (e instanceof Deno.errors.NotCapable) throw e;
        return this.miss("prebuilt", url.href, `cannot read it (${(e as Error).message})`);
      }
      const sum = sha256Hex(bytes);
      if (bytes.length !== entry.size || sum !== entry.sha256) {
        return this.miss("prebuilt", url.href, `checksum mismatch (sha256 ${sum}); not used`);
      }
      const path = await this.guardAsync(
        "cache",
        cacheDir,
        `--allow-write=${cacheDir}`,
        () => writeCachedLibrary(cacheDir, this.name, bytes, rec("prebuilt", url)),
      );
      if (path === null) return null;
      this.progress.line(`cached ${path}`);
      return this.found(path, "prebuilt", "prebuilt");
    });
  }

  /** Step 6: build the kernel sources (fetched first when the package is remote). */
  async source(): Promise<Resolved | null> {
    const where = new URL("kernels/", this.root).href;
    const cc = this.guard(
      "source",
      where,
      "--allow-run",
      () => compilerAvailable(this.options.compilers),
    );
    if (cc === null) return null;
    if (!cc) return this.miss("source", where, "no C compiler (cc, gcc or clang) found");
    if (this.checkout) {
      this.progress.line(`${this.name} is missing; building it from kernels/ (first run only)`);
      const path = await this.guardAsync(
        "source",
        where,
        "--allow-run=make",
        () => buildNative({ sourceRoot: this.local!, verbose: false }),
      );
      return path === null ? null : this.found(path, "source");
    }
    const cacheDir = this.cacheDir!;
    return await this.guardAsync("source", where, `--allow-write=${cacheDir}`, async () => {
      await Deno.mkdir(cacheDir, { recursive: true });
      const work = await Deno.makeTempDir({ dir: cacheDir, prefix: "build-" });
      try {
        const srcRoot = await this.materializeSources(work);
        if (typeof srcRoot !== "string") return srcRoot;
        this.progress.line(`building ${this.name} from the kernel sources (first run only)`);
        let built: string;
        try {
          built = await buildNative({
            sourceRoot: srcRoot,
            buildDir: `${work}/out`,
            verbose: false,
          });
        } catch (e) {
          if (e instanceof Deno.errors.NotCapable) throw e;
          const msg = (e as Error).message.split("\n").slice(0, 4).join(" ");
          return this.miss("source", where, `the build failed: ${msg}`);
        }
        const path = await writeCachedLibrary(
          cacheDir,
          this.name,
          await Deno.readFile(built),
          rec("source", new URL("kernels/", this.root)),
        );
        this.progress.line(`built ${path}`);
        return this.found(path, "source", "source");
      } finally {
        await Deno.remove(work, { recursive: true }).catch(() => {});
      }
    });
  }

  /** A directory holding kernels/: the package itself when on disk, else fetched and checked. */
  async materializeSources(work: string): Promise<string | null> {
    const where = new URL("kernels/", this.root).href;
    if (this.local && isFile(`${this.local}/kernels/Makefile`)) return this.local;
    const net = `--allow-net=${this.root.host}`;
    const m = await this.guardAsync("source", where, net, () => this.loadManifest());
    if (m === null) return null;
    if (typeof m === "string") return this.miss("source", where, `cannot list the sources: ${m}`);
    if (m.sources.length === 0) return this.miss("source", where, "the manifest lists no sources");
    this.progress.line(`fetching ${m.sources.length} kernel sources from ${where}`);
    for (const s of m.sources) {
      const url = new URL(s.path, this.root);
      let bytes: Uint8Array;
      try {
        bytes = await readPackageFile(url, this.progress);
      } catch (e) {
        if (e instanceof Deno.errors.NotCapable) throw e;
        return this.miss("source", url.href, `cannot read it (${(e as Error).message})`);
      }
      if (sha256Hex(bytes) !== s.sha256) return this.miss("source", url.href, "checksum mismatch");
      const dst = `${work}/${s.path}`;
      await Deno.mkdir(dst.replace(/\/[^/]*$/, ""), { recursive: true });
      await Deno.writeFile(dst, bytes);
    }
    return work;
  }

  fail(sync = false): NativeLibraryError {
    const steps = this.tried.map((a, i) => `${i + 1}) ${a.step} ${a.where}: ${a.result}`);
    const perms = [...this.denied];
    let fix = perms.length ? `grant ${perms.join(" ")}, or ${BUILD_HINT}` : BUILD_HINT;
    if (sync) {
      fix += "; the synchronous loader neither fetches nor builds: await loadLibrary() first";
    }
    return new NativeLibraryError(
      `no usable ${this.name} for ${this.platform}; tried ${steps.join("; ")}; to fix: ${fix}`,
      this.tried,
      perms,
    );
  }
}

function rec(origin: CacheOrigin, url: URL) {
  return { origin, from: url.href };
}

/**
 * Finds the library, fetching or building it when needed (steps 1-6 of this
 * module's order); throws {@linkcode NativeLibraryError} naming every step.
 */
export async function resolveLibrary(options: ResolveOptions = {}): Promise<Resolved> {
  const s = new Search(options);
  const hit = s.local_();
  if (hit) return hit;
  if (!s.checkout) {
    if (s.cacheDir) {
      const pre = await s.prebuilt(s.cacheDir);
      if (pre) return pre;
    } else {
      s.miss("prebuilt", new URL("dist/", s.root).href, "no cache directory to store it in");
    }
  }
  if (s.checkout || s.cacheDir) {
    const built = await s.source();
    if (built) return built;
  } else {
    s.miss("source", new URL("kernels/", s.root).href, "no cache directory to build in");
  }
  throw s.fail();
}

/** Steps 1-4 only (no network, no build), for synchronous callers. */
export function resolveLibrarySync(options: ResolveOptions = {}): Resolved {
  const s = new Search(options);
  const hit = s.local_();
  if (hit) return hit;
  throw s.fail(true);
}
