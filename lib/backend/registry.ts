/**
 * Backends by name, so that which ones a context runs on is data (a list of
 * names) rather than a switch over the kinds this file happens to know.
 * Built in: "cpu" (the native kernels), "ref" (the TypeScript reference),
 * "cuda" (kernels/cuda; opening it fails with a one-line error where no
 * device is usable) and "wasm" (the kernels compiled to WebAssembly, for
 * runtimes without FFI; `threads` as asked where workers can share its
 * memory, else only 1: see lib/backend/wasm.ts).
 * A backend living elsewhere (a GPU one, a test double) registers a factory
 * under its own name.
 *
 * @module
 */
import { CpuBackend } from "./cpu.ts";
import { CudaBackend } from "./cuda.ts";
import { ReferenceBackend } from "./reference.ts";
import { WasmBackend } from "./wasm.ts";
import type { Backend } from "./types.ts";

/** What a factory is told when a context opens its backend. */
export interface BackendFactoryOptions {
  /** CPU threads asked for (undefined: the backend's default). */
  readonly threads?: number;
  /** The matrix products' float order (ContextOptions.matmulOrder; undefined: "default"). */
  readonly matmulOrder?: "default" | "fast";
}

/** Opens one backend; the result's `name` is the name it was registered under. */
export type BackendFactory = (options: BackendFactoryOptions) => Promise<Backend>;

const BUILTIN = new Map<string, BackendFactory>([
  ["cpu", (o) => CpuBackend.create({ threads: o.threads, matmulOrder: o.matmulOrder })],
  ["ref", () => Promise.resolve(new ReferenceBackend())],
  ["cuda", () => CudaBackend.create()],
  ["wasm", (o) => WasmBackend.create({ threads: o.threads })],
]);

const factories = new Map<string, BackendFactory>(BUILTIN);

/** Names a backend can be asked for by, built-in ones first. */
export function backendNames(): string[] {
  return [...factories.keys()];
}

/** Whether `name` is registered. */
export function hasBackend(name: unknown): name is string {
  return typeof name === "string" && factories.has(name);
}

/**
 * Makes `factory` available as `name` until the result is disposed. Names
 * are unique: a built-in or already registered one throws.
 */
export function registerBackend(name: string, factory: BackendFactory): Disposable {
  if (typeof name !== "string" || !/^[A-Za-z][\w.-]*$/.test(name)) {
    throw new TypeError(`registerBackend: bad name ${JSON.stringify(name)}`);
  }
  if (typeof factory !== "function") {
    throw new TypeError(`registerBackend: factory for ${name} is not a function`);
  }
  if (factories.has(name)) throw new Error(`registerBackend: ${name} is already registered`);
  factories.set(name, factory);
  return {
    [Symbol.dispose]() {
      if (factories.get(name) === factory) factories.delete(name);
    },
  };
}

/**
 * Opens the backend registered as `name`. A factory returning a backend
 * with another name is an error (the backend is disposed): buffers name
 * their owner, and the scheduler finds owners by that name.
 */
export async function createBackend(
  name: string,
  options: BackendFactoryOptions = {},
): Promise<Backend> {
  const factory = factories.get(name);
  if (!factory) {
    throw new Error(
      `no backend named ${JSON.stringify(name)} (known: ${backendNames().join(", ")})`,
    );
  }
  const b = await factory(options);
  if (b?.name !== name) {
    b?.[Symbol.dispose]?.();
    throw new Error(`backend factory for ${name} returned a backend named ${b?.name}`);
  }
  return b;
}
