/**
 * Memory planner: places tensors with known lifetimes inside one arena,
 * reusing a block once every reader has run (best fit with coalescing, the
 * way ggml-alloc's dynamic allocator does).
 *
 * @module
 */
import type { Graph } from "./graph.ts";
import type { Tensor } from "./tensor.ts";

/** Default arena alignment in bytes. */
export const ARENA_ALIGN = 64;

/** One thing to place: alive from step `start` through step `end` inclusive. */
export interface Lifetime<K> {
  /** What is placed. */
  readonly key: K;
  /** Bytes. */
  readonly size: number;
  /** First step it must exist at. */
  readonly start: number;
  /** Last step that reads it; `Infinity` keeps it for good (outputs). */
  readonly end: number;
  /**
   * An item whose block this one takes over when that item's last step is
   * this one's first and it is no smaller (a result written in place over
   * its source); otherwise ignored.
   */
  readonly inPlaceOf?: K;
}

/** Offsets chosen by {@link planArena}. */
export interface ArenaPlan<K> {
  /** Byte offset of each key. */
  readonly offsets: Map<K, number>;
  /** Arena bytes needed (peak). */
  readonly size: number;
}

/** Round `n` up to a multiple of `align`. */
export function alignUp(n: number, align: number): number {
  return Math.ceil(n / align) * align;
}

/**
 * Place every item so that no two items alive at the same step overlap.
 * At each step, items starting there are placed (in the given order) before
 * items ending there are released.
 */
export function planArena<K>(items: readonly Lifetime<K>[], align = ARENA_ALIGN): ArenaPlan<K> {
  const starts = new Map<number, Lifetime<K>[]>();
  const ends = new Map<number, Lifetime<K>[]>();
  const times = new Set<number>();
  for (const it of items) {
    if (!(it.end >= it.start)) {
      throw new RangeError(`lifetime of ${String(it.key)} ends before it starts`);
    }
    push(starts, it.start, it);
    times.add(it.start);
    if (it.end !== Infinity) {
      push(ends, it.end, it);
      times.add(it.end);
    }
  }
  const arena = new FreeList();
  const offsets = new Map<K, number>();
  // Blocks' sizes as placed (an item that took over a block frees all of it).
  const blocks = new Map<K, number>();
  const byKey = new Map(items.map((it) => [it.key, it]));
  const handedOn = new Set<K>();
  for (const t of [...times].sort((a, b) => a - b)) {
    for (const it of starts.get(t) ?? []) {
      const size = alignUp(Math.max(it.size, 1), align);
      const from = it.inPlaceOf === undefined ? undefined : byKey.get(it.inPlaceOf);
      if (
        from && from.end === t && offsets.has(from.key) && !handedOn.has(from.key) &&
        blocks.get(from.key)! >= size
      ) {
        offsets.set(it.key, offsets.get(from.key)!);
        blocks.set(it.key, blocks.get(from.key)!);
        handedOn.add(from.key);
        continue;
      }
      offsets.set(it.key, arena.alloc(size));
      blocks.set(it.key, size);
    }
    for (const it of ends.get(t) ?? []) {
      if (!handedOn.has(it.key)) arena.free(offsets.get(it.key)!, blocks.get(it.key)!);
    }
  }
  return { offsets, size: arena.peak };
}

function push<K, V>(m: Map<K, V[]>, k: K, v: V): void {
  const a = m.get(k);
  if (a) a.push(v);
  else m.set(k, [v]);
}

// Free blocks sorted by offset; everything from `tail` upward is free too.
class FreeList {
  blocks: Array<{ offset: number; size: number }> = [];
  tail = 0;
  peak = 0;

  alloc(size: number): number {
    let best = -1;
    for (let i = 0; i < this.blocks.length; i++) {
      const b = this.blocks[i];
      if (b.size >= size && (best < 0 || b.size < this.blocks[best].size)) best = i;
    }
    if (best >= 0) {
      const b = this.blocks[best];
      const off = b.offset;
      b.offset += size;
      b.size -= size;
      if (b.size === 0) this.blocks.splice(best, 1);
      return off;
    }
    // Grow at the end, absorbing a free block that touches the tail.
    const last = this.blocks[this.blocks.length - 1];
    if (last && last.offset + last.size === this.tail) {
      this.blocks.pop();
      this.tail = last.offset;
    }
    const off = this.tail;
    this.tail += size;
    this.peak = Math.max(this.peak, this.tail);
    return off;
  }

  free(offset: number, size: number): void {
    let i = 0;
    while (i < this.blocks.length && this.blocks[i].offset < offset) i++;
    this.blocks.splice(i, 0, { offset, size });
    // merge with next, then previous
    const b = this.blocks[i];
    const n = this.blocks[i + 1];
    if (n && b.offset + b.size === n.offset) {
      b.size += n.size;
      this.blocks.splice(i + 1, 1);
    }
    const p = this.blocks[i - 1];
    if (p && p.offset + p.size === b.offset) {
      p.size += b.size;
      this.blocks.splice(i, 1);
    }
    const last = this.blocks[this.blocks.length - 1];
    if (last && last.offset + last.size === this.tail) {
      this.blocks.pop();
      this.tail = last.offset;
    }
  }
}

/**
 * Lifetimes of everything a single-backend run of `g` must place in its
 * arena: inputs (alive from before the first node) and op results that own
 * storage. Step i is `g.nodes[i]`; inputs start at -1.
 */
export function graphLifetimes(g: Graph): Lifetime<Tensor>[] {
  const last = new Map<Tensor, number>();
  const start = new Map<Tensor, number>();
  g.nodes.forEach((n, i) => {
    if (!n.viewSrc) start.set(n, i);
    for (const s of n.src) last.set(s.root, i);
    if (n.viewSrc) last.set(n.viewSrc, i);
  });
  const pinned = new Set(g.outputs.map((o) => o.root));
  const out: Lifetime<Tensor>[] = [];
  for (const l of g.leafs) {
    if (l.kind !== "input") continue;
    out.push({
      key: l,
      size: l.nbytes,
      start: -1,
      end: pinned.has(l) ? Infinity : last.get(l) ?? -1,
    });
  }
  for (const [t, s] of start) {
    const end = pinned.has(t) ? Infinity : Math.max(s, last.get(t) ?? s);
    out.push({ key: t, size: t.nbytes, start: s, end });
  }
  return out;
}

/** Arena offsets and size for running `g` on one backend (measure without allocating). */
export function planGraph(g: Graph, align = ARENA_ALIGN): ArenaPlan<Tensor> {
  return planArena(graphLifetimes(g), align);
}
