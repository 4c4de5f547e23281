/**
 * Sizing a context before allocating it: stand-in backends that allocate
 * nothing (so the worst-case graph can be planned and measured), and the
 * check of the total against the machine's memory. A context too big fails
 * before gigabytes are zero-filled, or the kernel's OOM killer ends the
 * process.
 *
 * @module
 */
import type { Backend, OwnedBuffer } from "../backend/types.ts";

/**
 * A stand-in for `b` that allocates nothing: for measuring a context before
 * allocating it. Its buffers have a size and no memory: any transfer throws.
 */
export function dryBackend(b: Backend): Backend {
  return {
    name: b.name,
    supportsOp: (q) => b.supportsOp(q),
    // What the planner reads from a backend, so that the measure equals
    // the real plan (without inPlaceOps a 512-token step's softmax was
    // counted beside its scores: 110.5 MiB measured against 70.5 placed).
    inPlaceOps: b.inPlaceOps,
    kvWindowPad: b.kvWindowPad,
    alloc: (size) => dryBuffer(b.name, size),
    free() {},
    compute: () => Promise.reject(new Error("a dry-run backend cannot compute")),
    [Symbol.dispose]() {},
  };
}

function dryBuffer(backend: string, size: number): OwnedBuffer {
  const none = (): never => {
    throw new Error(`a dry-run ${backend} buffer of ${size} bytes holds no memory`);
  };
  return {
    backend,
    size,
    ptr: null,
    get bytes(): Uint8Array {
      return none();
    },
    set: none,
    get: none,
    copy: none,
    clear: none,
  };
}

/** Physical memory plus swap in bytes (Linux), or undefined when unknown. */
export function memoryLimit(): number | undefined {
  try {
    const text = Deno.readTextFileSync("/proc/meminfo");
    const kb = (key: string) =>
      Number(new RegExp(`^${key}:\\s+(\\d+) kB`, "m").exec(text)?.[1] ?? 0);
    const total = (kb("MemTotal") + kb("SwapTotal")) * 1024;
    return total > 0 ? total : undefined;
  } catch {
    return undefined; // not Linux, or no read permission
  }
}

const GB = (n: number) => `${(n / 1e9).toFixed(1)} GB`;

/**
 * Why `kvBytes + computeBytes` cannot fit this machine ("needs 37.9 GB (KV
 * cache 3.1 GB, compute 34.8 GB), more than …"), or null when it can or the
 * limit is unknown.
 */
export function memoryShortfall(kvBytes: number, computeBytes: number): string | null {
  const limit = memoryLimit();
  const need = kvBytes + computeBytes;
  if (limit === undefined || need <= limit) return null;
  return `needs ${GB(need)} (KV cache ${GB(kvBytes)}, compute ${GB(computeBytes)}), ` +
    `more than this machine's ${GB(limit)} of memory and swap`;
}
