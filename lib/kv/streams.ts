/**
 * Helpers of a KV cache with one stream per sequence (./cache.ts): the
 * streams a slot's tokens fall into, and llama_kv_cache::seq_cp between two
 * streams.
 *
 * @module
 */
import { bufferCopy } from "../ggml/memory.ts";
import { rowSize } from "../ggml/types.ts";
import type { KvCache, SlotInfo } from "./cache.ts";
import { KvError } from "./cells.ts";

/** [stream, first token, tokens] of each stream's block of a slot's tokens. */
export function streamBlocks(slot: SlotInfo): Array<[number, number, number]> {
  const st = slot.strm;
  if (!st) return [[0, 0, slot.idxs.length]];
  const out: Array<[number, number, number]> = [];
  st.forEach((s, t) => {
    const b = out[out.length - 1];
    if (b && b[0] === s) b[2]++;
    else out.push([s, t, 1]);
  });
  return out;
}

/**
 * llama_kv_cache::seq_cp across streams: only whole sequences (llama.cpp
 * asserts it); stream `b` becomes `a`'s cells of `src` (as they are, pending
 * shifts included) for `dst`, and its K/V bytes a copy of `a`'s, now
 * (llama.cpp copies at its next memory update, before anything reads them).
 */
export function copyStream(
  a: KvCache,
  b: KvCache,
  src: number,
  dst: number,
  p0: number,
  p1: number,
): void {
  const size = a.size;
  const full = (p: number) => !(p > 0 && p + 1 < size);
  if (!full(p0) || !full(p1)) {
    throw new KvError(
      `seqCp: only whole sequences can be copied between streams (p0 ${p0}, p1 ${p1})`,
    );
  }
  const ca = a.cells, cb = b.cells;
  cb.reset();
  for (let i = 0; i < size; i++) {
    if (!ca.seqHas(i, src) || ca.isEmpty(i)) continue;
    const sh = ca.shift[i];
    cb.posSet(i, ca.pos[i] - sh);
    cb.seqAdd(i, dst);
    if (sh !== 0) cb.posAdd(i, sh);
  }
  b.head = a.head;
  const kb = rowSize(a.typeK, a.nEmbdKGqa) * size;
  const vb = rowSize(a.typeV, a.nEmbdVGqa) * size;
  for (let il = 0; il < a.nLayer; il++) {
    const from = a.storage(il), to = b.storage(il);
    bufferCopy(to.k.buffer, to.k.offset, from.k.buffer, from.k.offset, kb);
    bufferCopy(to.v.buffer, to.v.offset, from.v.buffer, from.v.offset, vb);
  }
}
