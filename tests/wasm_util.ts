/**
 * Shared by the WebAssembly backend tests: whether the toolchain is here
 * (the tests are skipped, naming the missing tool, only when it is not;
 * .ci/run installs it) and the module, built once per test file.
 *
 * @module
 */
import { buildWasm, type WasmModules, wasmToolchain } from "../ffi/wasm_build.ts";
import { loadWasmKernels, type WasmKernels } from "../ffi/wasm.ts";

const tc = wasmToolchain();

/** Set when the tests cannot run: why (the missing tool and its apt command). */
export const WASM_SKIP: string | undefined = tc.ok ? undefined : tc.reason;

/** A test name with the skip reason appended when skipped. */
export function wasmTestName(name: string): string {
  return WASM_SKIP ? `${name} (skipped: ${WASM_SKIP})` : name;
}

let built: Promise<WasmModules> | undefined;

/** Builds build/wasm/llm_edge{,_mt}.wasm (incremental) once; their paths. */
export function wasmModules(): Promise<WasmModules> {
  built ??= buildWasm({ verbose: false });
  return built;
}

/** Builds both modules once; the single-threaded one's path. */
export async function wasmModulePath(): Promise<string> {
  return (await wasmModules()).single;
}

/** The shared instance (the threaded build in Deno), after building the modules. */
export async function wasmKernels(): Promise<WasmKernels> {
  await wasmModulePath();
  return await loadWasmKernels();
}
