/**
 * Per-layer storage of a memory (the KV cache's keys and values, the
 * recurrent states): two regions per layer, in one buffer per backend, so
 * layers placed on different backends live in those backends' memory.
 *
 * @module
 */
import type { BackendBuffer, BufferAllocator, BufferRef } from "../ggml/memory.ts";
import { alignUp } from "../graph/alloc.ts";

/** Two regions of one layer: `a` then `b` (K then V, conv then ssm state). */
export interface LayerRegions {
  /** The first region. */
  readonly a: BufferRef;
  /** The second region. */
  readonly b: BufferRef;
}

/** The buffers holding every layer's two regions; dispose to free them. */
export class LayerStorage implements Disposable {
  #buffers: Array<[BufferAllocator, BackendBuffer]> = [];
  #layers: LayerRegions[] = [];

  /**
   * Allocates `aBytes + bBytes` (each aligned to 64) per layer, grouped by
   * the backend `pick` gives each layer. Backends hand out zero-filled
   * memory. If one allocation fails the earlier ones are freed.
   */
  constructor(
    nLayer: number,
    pick: BufferAllocator | ((layer: number) => BufferAllocator),
    aBytes: number,
    bBytes: number,
  ) {
    const at = typeof pick === "function" ? pick : () => pick;
    const a = alignUp(aBytes, 64), b = alignUp(bBytes, 64);
    const groups = new Map<BufferAllocator, number[]>();
    for (let il = 0; il < nLayer; il++) {
      const backend = at(il);
      if (!groups.has(backend)) groups.set(backend, []);
      groups.get(backend)!.push(il);
    }
    try {
      for (const [backend, layers] of groups) {
        const buffer = backend.alloc(layers.length * (a + b));
        this.#buffers.push([backend, buffer]);
        layers.forEach((il, j) => {
          const base = j * (a + b);
          this.#layers[il] = { a: { buffer, offset: base }, b: { buffer, offset: base + a } };
        });
      }
    } catch (e) {
      this[Symbol.dispose]();
      throw e;
    }
  }

  /** Bytes allocated, all layers. */
  get totalBytes(): number {
    return this.#buffers.reduce((s, [, b]) => s + b.size, 0);
  }

  /** The buffers (one per backend). */
  get buffers(): readonly BackendBuffer[] {
    return this.#buffers.map(([, b]) => b);
  }

  /** Layer il's regions, or undefined. */
  layer(il: number): LayerRegions | undefined {
    return this.#layers[il];
  }

  /** Frees the buffers. */
  [Symbol.dispose](): void {
    for (const [b, buf] of this.#buffers) b.free(buf);
    this.#buffers = [];
  }
}
