/**
 * Shared by the WebAssembly backend tests: whether the toolchain is here
 * (the tests are skipped, naming the missing tool, only when it is not;
 * .ci/run installs it) and the module, built once per test file.
 *
 * @module
 */
import { buildWasm, wasmToolchain } from "../ffi/wasm_build.ts";
import { loadWasmKernels, type WasmKernels } from "../ffi/wasm.ts";

const tc = wasmToolchain();

/** Set when the tests cannot run: why (the missing tool and its apt command). */
export const WASM_SKIP: string | undefined = tc.ok ? undefined : tc.reason;

/** A test name with the skip reason appended when skipped. */
export function wasmTestName(name: string): string {
  return WASM_SKIP ? `${name} (skipped: ${WASM_SKIP})` : name;
}

let built: Promise<string> | undefined;

/** Builds build/wasm/llm_edge.wasm (incremental) once; its path. */
export function wasmModulePath(): Promise<string> {
  built ??= buildWasm({ verbose: false });
  return built;
}

/** The shared instance, after building the module. */
export async function wasmKernels(): Promise<WasmKernels> {
  await wasmModulePath();
  return await loadWasmKernels();
}
