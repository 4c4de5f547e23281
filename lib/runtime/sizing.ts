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

/**
 * Memory the machine can give now, in bytes (Linux): the kernel's estimate
 * of what new allocations can take without swapping (MemAvailable: free
 * memory and reclaimable caches) plus free swap; MemTotal plus SwapTotal on
 * kernels without that estimate; undefined when unknown. Not the machine's
 * total: a context that fits the total but not what is free is zero-filled
 * until the kernel's OOM killer ends the process.
 */
export function memoryLimit(): number | undefined {
  try {
    const text = Deno.readTextFileSync("/proc/meminfo");
    const kb = (key: string) => {
      const m = new RegExp(`^${key}:\\s+(\\d+) kB`, "m").exec(text);
      return m ? Number(m[1]) : undefined;
    };
    const avail = kb("MemAvailable");
    const bytes = avail !== undefined
      ? (avail + (kb("SwapFree") ?? 0)) * 1024
      : ((kb("MemTotal") ?? 0) + (kb("SwapTotal") ?? 0)) * 1024;
    return bytes > 0 ? bytes : undefined;
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
    `more than the ${GB(limit)} of memory and swap this machine has available`;
}
