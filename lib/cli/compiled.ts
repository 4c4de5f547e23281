/**
 * Entry point of the single binary `deno task compile` makes: `generate`,
 * with the native library and the default model `--include`d. Deno reads an
 * included file from inside the binary, but the kernels map model files with
 * mmap(2), which needs a real file: the first run copies the embedded default
 * model into the user cache (`$XDG_CACHE_HOME/llm-edge/<version>/<platform>/`),
 * checked by size and SHA-256 on later runs.
 *
 * @module
 */
import { main } from "./generate.ts";
import { DEFAULT_MODEL } from "./common_flags.ts";
import { userCacheDir } from "../../ffi/platform.ts";
import { sha256Hex } from "../../ffi/integrity.ts";

/** A path to the default model that C can open: itself, or its cached copy in a compiled binary. */
export async function defaultModelOnDisk(): Promise<string> {
  if (!Deno.build.standalone) return DEFAULT_MODEL;
  const bytes = await Deno.readFile(DEFAULT_MODEL);
  const dir = userCacheDir() ?? await Deno.makeTempDir({ prefix: "llm-edge-" });
  const path = `${dir}/${DEFAULT_MODEL.replace(/^.*\//, "")}`;
  const sum = sha256Hex(bytes);
  try {
    const have = await Deno.readFile(path);
    if (have.length === bytes.length && sha256Hex(have) === sum) return path;
  } catch {
    // not cached yet
  }
  await Deno.mkdir(dir, { recursive: true });
  const tmp = `${path}.tmp-${Deno.pid}`;
  await Deno.writeFile(tmp, bytes);
  await Deno.rename(tmp, path);
  return path;
}

/** Runs `generate` with the default model on disk unless --model is given. */
export async function compiledMain(args: string[]): Promise<number> {
  const given = args.some((a) => a === "-m" || a === "--model" || a.startsWith("--model="));
  const help = args.includes("--help") || args.includes("-h");
  return await main(given || help ? args : ["--model", await defaultModelOnDisk(), ...args]);
}

if (import.meta.main) Deno.exit(await compiledMain(Deno.args));
