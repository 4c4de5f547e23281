/**
 * Fetches llama.cpp (the oracle) from the npm registry and builds the test
 * shim against the headers of the exact revision its binaries came from.
 *
 * Layout under .cache/oracle/:
 *   bin/   prebuilt libllama, libggml*, per-microarchitecture CPU variants
 *   src/   llama.cpp source at that revision (for its headers)
 *   liboracle.so   tests/oracle/*.c compiled and linked against bin/
 *
 * Idempotent: each step is skipped when its output exists and is current.
 *
 * @module
 */
import { join } from "node:path";
import { fileURLToPath as fromFileUrl } from "node:url";
import { pathExists } from "../../ffi/platform.ts";

/** Version of node-llama-cpp whose prebuilt llama.cpp is the oracle. */
export const ORACLE_NPM_VERSION = "3.22.1";

const ROOT = fromFileUrl(new URL("../../", import.meta.url));
/** Folder that holds everything the oracle needs. */
export const ORACLE_DIR = join(ROOT, ".cache", "oracle");
/** Folder of the prebuilt llama.cpp libraries. */
export const ORACLE_BIN = join(ORACLE_DIR, "bin");
/** Path of the compiled shim. */
export const ORACLE_LIB = join(ORACLE_DIR, "liboracle.so");

async function run(cmd: string, args: string[], cwd?: string): Promise<void> {
  const out = await new Deno.Command(cmd, { args, cwd, stdout: "piped", stderr: "piped" }).output();
  if (!out.success) {
    const err = new TextDecoder().decode(out.stderr);
    throw new Error(`oracle setup: ${cmd} ${args.join(" ")} failed:\n${err}`);
  }
}

function mtime(p: string): number {
  return Deno.statSync(p).mtime?.getTime() ?? 0;
}

async function fetchPackages(): Promise<void> {
  if (
    pathExists(join(ORACLE_BIN, "libllama.v0.5.0.so")) &&
    pathExists(join(ORACLE_DIR, "src", "include"))
  ) {
    return;
  }
  const tmp = await Deno.makeTempDir({ prefix: "llm-edge-oracle-" });
  console.error(`oracle: fetching node-llama-cpp@${ORACLE_NPM_VERSION} from npm ...`);
  await run("npm", [
    "pack",
    "--silent",
    `node-llama-cpp@${ORACLE_NPM_VERSION}`,
    `@node-llama-cpp/linux-x64@${ORACLE_NPM_VERSION}`,
  ], tmp);
  for (const e of Deno.readDirSync(tmp)) {
    if (!e.name.endsWith(".tgz")) continue;
    const dir = join(tmp, e.name.replace(/\.tgz$/, ""));
    Deno.mkdirSync(dir);
    await run("tar", ["-xzf", join(tmp, e.name), "-C", dir]);
  }
  const binSrc = join(
    tmp,
    `node-llama-cpp-linux-x64-${ORACLE_NPM_VERSION}`,
    "package",
    "bins",
    "linux-x64",
  );
  Deno.mkdirSync(ORACLE_BIN, { recursive: true });
  for (const e of Deno.readDirSync(binSrc)) {
    Deno.copyFileSync(join(binSrc, e.name), join(ORACLE_BIN, e.name));
  }
  const bundle = join(
    tmp,
    `node-llama-cpp-${ORACLE_NPM_VERSION}`,
    "package",
    "llama",
    "gitRelease.bundle",
  );
  const src = join(ORACLE_DIR, "src");
  if (pathExists(src)) Deno.removeSync(src, { recursive: true });
  await run("git", ["clone", "--quiet", bundle, src]);
  Deno.removeSync(tmp, { recursive: true });
}

async function buildShim(): Promise<void> {
  const here = fromFileUrl(new URL(".", import.meta.url));
  const sources = [...Deno.readDirSync(here)].filter((e) => e.name.endsWith(".c")).map((e) =>
    join(here, e.name)
  ).sort();
  const inputs = [...sources, fromFileUrl(import.meta.url)]; // this file holds the flags
  if (pathExists(ORACLE_LIB) && inputs.every((s) => mtime(s) <= mtime(ORACLE_LIB))) return;
  const src = join(ORACLE_DIR, "src");
  await run("cc", [
    "-shared",
    "-fPIC",
    "-O2",
    "-std=c11",
    "-I",
    join(src, "include"),
    "-I",
    join(src, "ggml", "include"),
    ...sources,
    "-o",
    ORACLE_LIB,
    "-L",
    ORACLE_BIN,
    "-l:libllama.v0.5.0.so",
    "-l:libggml.v0.5.0.so",
    "-l:libggml-base.so",
    // Relative to the shim: a .cache reached through a symlink from another
    // checkout keeps working after that checkout is gone (an absolute path
    // pointed into a removed worktree, and every llama.cpp call failed).
    "-Wl,-rpath,$ORIGIN/bin",
  ]);
}

/** Makes sure the oracle is installed and the shim is built; returns the shim's path. */
export async function ensureOracle(): Promise<string> {
  await fetchPackages();
  await buildShim();
  return ORACLE_LIB;
}

if (import.meta.main) {
  console.log(await ensureOracle());
}
