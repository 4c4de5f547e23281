/**
 * `deno task build:dist`: the prebuilt libraries published with the package,
 * and `dist/manifest.json` with their SHA-256 and the kernel sources'.
 *
 * - linux-x64: one library for every x86-64 CPU (the SIMD paths carry their
 *   own target attributes and are chosen at run time by CPUID);
 * - linux-arm64: cross-compiled with Debian's `aarch64-linux-gnu-gcc`
 *   (NEON compiled for real) when that compiler is installed, else skipped
 *   with a message. `--require-arm64` makes its absence an error.
 * - `dist/llm_edge.wasm` and `dist/llm_edge_mt.wasm`: the WebAssembly
 *   kernels, single-threaded and threaded (ffi/wasm.ts fetches one from the
 *   package where FFI is unavailable) when the wasm toolchain is installed,
 *   else skipped with a message.
 *
 * Release: `deno task build:dist && deno publish`. dist/ is ignored by git
 * and published (deno.json `publish.exclude` un-ignores it), so the manifest
 * always describes the libraries next to it.
 *
 * @module
 */
import { fileURLToPath } from "node:url";
import { buildNative, compilerAvailable } from "../ffi/build.ts";
import { buildWasm, wasmToolchain } from "../ffi/wasm_build.ts";
import { WASM_DIST_FILE, WASM_MT_DIST_FILE } from "../ffi/wasm.ts";
import { sha256Hex } from "../ffi/integrity.ts";
import type { DistManifest, SourceEntry } from "../ffi/manifest.ts";
import { LIB_NAME } from "../ffi/platform.ts";
import { ABI_VERSION } from "../ffi/symbols.ts";
import { VERSION } from "../ffi/version.ts";

const ROOT = fileURLToPath(new URL("../", import.meta.url)).replace(/\/$/, "");

/** The cross compiler for linux-arm64. */
export const ARM64_CC = "aarch64-linux-gnu-gcc";

/** The kernel files a source build needs (paths from the package root, sorted). */
export async function kernelSources(root: string = ROOT): Promise<string[]> {
  const out: string[] = ["kernels/Makefile"];
  for (const sub of ["include", "src"]) {
    for await (const e of Deno.readDir(`${root}/kernels/${sub}`)) {
      if (e.isFile && /\.(c|h)$/.test(e.name)) out.push(`kernels/${sub}/${e.name}`);
    }
  }
  return out.sort();
}

/** Options of {@linkcode writeDist}. */
export interface WriteDistOptions {
  /** Output directory (default `<repo>/dist`). */
  outDir?: string;
  /** Built libraries by platform tag. */
  libraries: Record<string, string>;
  /** Where kernels/ is (default this checkout). */
  root?: string;
}

/** Copies the libraries into `<outDir>/<platform>/` and writes the manifest. */
export async function writeDist(options: WriteDistOptions): Promise<DistManifest> {
  const root = options.root ?? ROOT;
  const outDir = options.outDir ?? `${root}/dist`;
  const manifest: DistManifest = { version: VERSION, abi: ABI_VERSION, libraries: {}, sources: [] };
  for (const [platform, path] of Object.entries(options.libraries)) {
    const bytes = await Deno.readFile(path);
    const file = `${platform}/${LIB_NAME}`;
    await Deno.mkdir(`${outDir}/${platform}`, { recursive: true });
    await Deno.writeFile(`${outDir}/${file}`, bytes, { mode: 0o755 });
    manifest.libraries[platform] = { file, sha256: sha256Hex(bytes), size: bytes.length };
  }
  manifest.sources = await Promise.all(
    (await kernelSources(root)).map(async (path): Promise<SourceEntry> => ({
      path,
      sha256: sha256Hex(await Deno.readFile(`${root}/${path}`)),
    })),
  );
  await Deno.writeTextFile(`${outDir}/manifest.json`, JSON.stringify(manifest, null, 2) + "\n");
  return manifest;
}

if (import.meta.main) {
  const requireArm = Deno.args.includes("--require-arm64");
  const work = await Deno.makeTempDir({ prefix: "llm-edge-dist-" });
  try {
    const libraries: Record<string, string> = {};
    console.log("building linux-x64 (runtime SIMD dispatch: scalar, AVX2, AVX-512)");
    libraries["linux-x64"] = await buildNative({ buildDir: `${work}/x64`, verbose: false });
    if (compilerAvailable([ARM64_CC])) {
      console.log(`building linux-arm64 with ${ARM64_CC} (NEON)`);
      libraries["linux-arm64"] = await buildNative({
        buildDir: `${work}/arm64`,
        cc: ARM64_CC,
        verbose: false,
      });
    } else if (requireArm) {
      throw new Error(`${ARM64_CC} not found; install Debian's gcc-aarch64-linux-gnu`);
    } else {
      console.log(`linux-arm64 skipped: ${ARM64_CC} not found (Debian: gcc-aarch64-linux-gnu)`);
    }
    await Deno.remove(`${ROOT}/dist`, { recursive: true }).catch(() => {});
    const m = await writeDist({ libraries });
    for (const [p, e] of Object.entries(m.libraries)) {
      console.log(`dist/${e.file}  ${e.size} bytes  sha256 ${e.sha256}  (${p})`);
    }
    const tc = wasmToolchain();
    if (tc.ok) {
      const wasm = await buildWasm({ buildDir: `${work}/wasm`, verbose: false });
      for (
        const [src, file] of [[wasm.single, WASM_DIST_FILE], [wasm.threaded, WASM_MT_DIST_FILE]]
      ) {
        await Deno.copyFile(src, `${ROOT}/dist/${file}`);
        console.log(`dist/${file}  ${Deno.statSync(src).size} bytes`);
      }
    } else {
      console.log(`dist/${WASM_DIST_FILE} and ${WASM_MT_DIST_FILE} skipped: ${tc.reason}`);
    }
    console.log(`dist/manifest.json: ${m.sources.length} kernel sources`);
  } finally {
    await Deno.remove(work, { recursive: true });
  }
}
