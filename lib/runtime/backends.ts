/**
 * Which backends a context runs on, as data: an ordered list of registry
 * names and how the layers are split over them. The `backend` option's
 * values are shorthands for such lists, so `Context.create` opens
 * whatever the list names instead of switching over kinds it knows.
 *
 * @module
 */
import { type BackendFactoryOptions, createBackend } from "../backend/registry.ts";
import { ffiAvailable } from "../../ffi/wasm.ts";
import type { Backend } from "../backend/types.ts";

/**
 * Backends by registry name, highest priority first, and the layers each
 * runs. With `layerSplit`, `backends[i]` runs the next `layerSplit[i]`
 * layers (and their KV cache) and the last backend runs the rest and the
 * output head; without it, the first backend runs every layer. Either way
 * an op a backend cannot run goes to the first one in the list that can.
 */
export interface BackendPlan {
  /** Registry names ("cpu", "ref", ...), each once. */
  readonly backends: readonly string[];
  /** Layer counts of every backend but the last (backends.length - 1 of them). */
  readonly layerSplit?: readonly number[];
}

/**
 * A context's backends as chosen: a shorthand of the `backend` option
 * ("cpu", "ref", `{ cpuLayers }`), the `nGpuLayers` option (`{ gpuLayers }`)
 * or the general {@link BackendPlan}.
 */
export type BackendChoice =
  | "cpu"
  | "ref"
  | "wasm"
  | { readonly cpuLayers: number }
  | { readonly gpuLayers: number }
  | BackendPlan;

/**
 * The choice `options` make (a copy, so later changes to the caller's arrays
 * do not reach the context): `backends` and `layerSplit` when given, else
 * `backend`, by default "cpu", or "wasm" where FFI is unavailable (no
 * `--allow-ffi`, no `Deno.dlopen`) or the weights are not `native` (a model
 * from bytes, in WebAssembly memory). Run after the options were validated.
 */
export function backendChoice(options: {
  readonly backend?: "cpu" | "ref" | "wasm" | { readonly cpuLayers: number };
  readonly backends?: readonly string[];
  readonly layerSplit?: readonly number[];
  readonly nGpuLayers?: number;
}, native = true): BackendChoice {
  const { backend, backends, layerSplit, nGpuLayers } = options;
  if (nGpuLayers) return { gpuLayers: nGpuLayers };
  if (!backends) return backend ?? (ffiAvailable() && native ? "cpu" : "wasm");
  return layerSplit ? { backends: [...backends], layerSplit: [...layerSplit] } : {
    backends: [...backends],
  };
}

/**
 * The plan a choice stands for: "cpu" is `{ backends: ["cpu"] }`, "ref" is
 * `{ backends: ["ref"] }`, "wasm" is `{ backends: ["wasm"] }`, `{ cpuLayers: k }` is
 * `{ backends: ["cpu", "ref"], layerSplit: [k] }` and `{ gpuLayers: k }`
 * (for a model of `nLayer` layers) offloads the last k layers as llama.cpp's
 * n_gpu_layers does: `{ backends: ["cpu", "cuda"], layerSplit: [nLayer - k] }`,
 * all of them for k = -1 or k >= nLayer. Unlike llama.cpp, the output head
 * runs on the GPU with the last layer (llama.cpp keeps it on the host unless
 * k > nLayer), and ops the CUDA kernels lack run on the CPU.
 */
export function backendPlan(choice: BackendChoice, nLayer?: number): BackendPlan {
  if (choice === "cpu" || choice === "ref" || choice === "wasm") return { backends: [choice] };
  if ("cpuLayers" in choice) return { backends: ["cpu", "ref"], layerSplit: [choice.cpuLayers] };
  if ("gpuLayers" in choice) {
    if (nLayer === undefined) throw new TypeError("backendPlan: gpuLayers needs the layer count");
    const k = choice.gpuLayers;
    const onGpu = k < 0 ? nLayer : Math.min(k, nLayer);
    return { backends: ["cpu", "cuda"], layerSplit: [nLayer - onGpu] };
  }
  return choice;
}

/** How a context's label names its choice: "cpu", "cpuLayers 3", "cpu:3+ref". */
export function choiceLabel(choice: BackendChoice): string {
  if (typeof choice === "string") return choice;
  if ("cpuLayers" in choice) return `cpuLayers ${choice.cpuLayers}`;
  if ("gpuLayers" in choice) return `gpuLayers ${choice.gpuLayers}`;
  const split = choice.layerSplit;
  return choice.backends.map((n, i) => split && i < split.length ? `${n}:${split[i]}` : n)
    .join("+");
}

/** The shape of `choice` as context options (to open another context like it). */
export function choiceOptions(
  choice: BackendChoice,
): { backend: "cpu" | "ref" | "wasm" | { cpuLayers: number } } | { nGpuLayers: number } | {
  backends: readonly string[];
  layerSplit?: readonly number[];
} {
  if (typeof choice === "string") return { backend: choice };
  if ("cpuLayers" in choice) return { backend: { cpuLayers: choice.cpuLayers } };
  if ("gpuLayers" in choice) return { nGpuLayers: choice.gpuLayers };
  return choice.layerSplit
    ? { backends: choice.backends, layerSplit: choice.layerSplit }
    : { backends: choice.backends };
}

/**
 * Opens the plan's backends in order, each handed to `stack` (so a failure
 * later in context creation disposes them).
 */
export async function openBackends(
  plan: BackendPlan,
  options: BackendFactoryOptions,
  stack: DisposableStack,
): Promise<Backend[]> {
  const out: Backend[] = [];
  for (const name of plan.backends) out.push(stack.use(await createBackend(name, options)));
  return out;
}

/**
 * The backend of each layer under `plan` (`backends` opened from it, same
 * order); layer `nLayer` and beyond is the output head.
 */
export function layerAssignment(
  plan: BackendPlan,
  backends: readonly Backend[],
): (layer: number) => Backend {
  const split = plan.layerSplit ?? [];
  if (split.length === 0) return () => backends[0];
  // First layer of backend i + 1: cumulative counts.
  const ends: number[] = [];
  split.reduce((sum, n) => (ends.push(sum + n), sum + n), 0);
  return (layer) => {
    const i = ends.findIndex((end) => layer < end);
    return backends[i < 0 ? backends.length - 1 : i];
  };
}
