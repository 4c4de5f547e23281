/**
 * Platform names, file names and directories of the native library, and
 * reading the environment without failing when --allow-env is missing.
 *
 * @module
 */
import { VERSION } from "./version.ts";

/** Base name of the CPU kernel library on Linux (the only prebuilt OS today). */
export const LIB_NAME = "libllm_edge.so";

/**
 * The library's file name. kernels/Makefile names it `libllm_edge.so` on
 * every OS (dlopen does not care about the suffix), so the name is one.
 */
export function libFileName(_os: string = Deno.build.os): string {
  return LIB_NAME;
}

/** `<os>-<arch>` as the dist manifest names it: linux-x64, linux-arm64, darwin-arm64... */
export function platformTag(
  os: string = Deno.build.os,
  arch: string = Deno.build.arch,
): string {
  const a = arch === "x86_64" ? "x64" : arch === "aarch64" ? "arm64" : arch;
  return `${os}-${a}`;
}

/** Deno.env.get that treats a denied permission as unset (and says so through `denied`). */
export function readEnv(name: string, denied?: (flag: string) => void): string | undefined {
  const deno = (globalThis as { Deno?: typeof Deno }).Deno;
  if (!deno) return undefined; // a browser: no environment
  try {
    return deno.env.get(name);
  } catch (e) {
    if (e instanceof deno.errors.NotCapable) denied?.(`--allow-env=${name}`);
    return undefined;
  }
}

/**
 * The per-user cache directory for this version and platform:
 * `$XDG_CACHE_HOME/llm-edge/<version>/<platform>` (or `~/.cache/...`), or
 * null when neither variable can be read.
 */
export function userCacheDir(
  env: (name: string) => string | undefined = (n) => readEnv(n),
  version: string = VERSION,
  platform: string = platformTag(),
): string | null {
  const xdg = env("XDG_CACHE_HOME");
  const home = env("HOME");
  const base = xdg ? xdg : home ? `${home}/.cache` : null;
  return base ? `${base}/llm-edge/${version}/${platform}` : null;
}

/**
 * The path of a `file:` URL (node:url's fileURLToPath without node:url,
 * which a browser bundle cannot import): percent-decoded, and on Windows a
 * drive path with backslashes.
 *
 * @example
 * ```ts
 * fromFileUrl("file:///tmp/a%20b.gguf"); // "/tmp/a b.gguf"
 * ```
 */
export function fromFileUrl(url: URL | string): string {
  const u = url instanceof URL ? url : new URL(url);
  if (u.protocol !== "file:") throw new TypeError(`${u.href} is not a file: URL`);
  const path = decodeURIComponent(u.pathname);
  const win = (globalThis as { Deno?: { build: { os: string } } }).Deno?.build.os === "windows";
  return win ? path.replace(/^\/([A-Za-z]:)/, "$1").replaceAll("/", "\\") : path;
}

/** Whether anything is at `path` (a file, a folder, a link that resolves); false where it cannot be seen. */
export function pathExists(path: string): boolean {
  try {
    Deno.statSync(path);
    return true;
  } catch {
    return false;
  }
}
