/**
 * The whole state of a KV cache with one stream per sequence (kvUnified
 * false): a container of each stream's own state (./state.ts's single-stream
 * layout), after a header naming the layout, so that a file of another
 * layout is refused naming the field that differs.
 *
 * Layout (little-endian): tag "KVM1", nStream, size (cells per stream), then
 * per stream its byte length and its state.
 *
 * @module
 */
import type { KvCache } from "./cache.ts";
import { KvError } from "./cells.ts";
import { type KvRestorePlan, type KvStateInfo, streamState } from "./state.ts";

/** Tag of a multi-stream whole-cache state ("KVM1"). */
export const STREAMS_TAG = 0x314d564b;

/** A multi-stream state, split. */
export interface StreamStates {
  /** Cells per stream. */
  readonly size: number;
  /** Each stream's single-stream state. */
  readonly parts: readonly Uint8Array[];
}

/** Every stream's state of `kv` in one container. */
export function packStreams(kv: KvCache, parts: readonly Uint8Array[]): Uint8Array {
  const out = new Uint8Array(12 + parts.reduce((n, p) => n + 4 + p.length, 0));
  const dv = new DataView(out.buffer);
  dv.setUint32(0, STREAMS_TAG, true);
  dv.setUint32(4, parts.length, true);
  dv.setUint32(8, kv.size, true);
  let o = 12;
  for (const p of parts) {
    dv.setUint32(o, p.length, true);
    out.set(p, o + 4);
    o += 4 + p.length;
  }
  return out;
}

/** The streams of a container, checked for framing. */
export function unpackStreams(bytes: Uint8Array): StreamStates {
  const dv = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  if (bytes.length < 12) {
    throw new KvError(`kv state: truncated at offset ${bytes.length} (stream header)`);
  }
  const n = dv.getUint32(4, true), size = dv.getUint32(8, true);
  if (n < 2 || n > 256) throw new KvError(`kv state: bad nStream ${n}`);
  const parts: Uint8Array[] = [];
  let o = 12;
  for (let s = 0; s < n; s++) {
    if (o + 4 > bytes.length) throw new KvError(`kv state: truncated at offset ${o} (stream ${s})`);
    const len = dv.getUint32(o, true);
    if (o + 4 + len > bytes.length) {
      throw new KvError(
        `kv state: truncated at offset ${bytes.length} (stream ${s} ends at ${o + 4 + len})`,
      );
    }
    parts.push(bytes.subarray(o + 4, o + 4 + len));
    o += 4 + len;
  }
  if (o !== bytes.length) {
    throw new KvError(`kv state: ${bytes.length - o} bytes after the last stream`);
  }
  return { size, parts };
}

/** What the container holds, as one state's header would say it. */
export function streamsInfo(st: StreamStates): KvStateInfo {
  const infos = st.parts.map((p) => streamState.parse(p).info);
  return {
    mode: "all",
    seq: -1,
    nCells: infos.reduce((n, i) => n + i.nCells, 0),
    size: st.size * st.parts.length,
    usedMaxP1: Math.max(...infos.map((i) => i.usedMaxP1)),
    seqMaxP1: Math.max(...infos.map((i) => i.seqMaxP1)),
    nStream: st.parts.length,
  };
}

/** Checks every stream's state against `kv`'s stream (whole restores only). */
export function planStreams(kv: KvCache, st: StreamStates, dst?: number): KvRestorePlan {
  if (dst !== undefined && dst !== -1) {
    throw new KvError(`kv state: a whole-cache state has no sequence to put into ${dst}`);
  }
  if (st.parts.length !== kv.nStream) {
    throw new KvError(
      `kv state: nStream ${st.parts.length} in the state, ${kv.nStream} in the cache`,
    );
  }
  if (st.size !== kv.size) {
    throw new KvError(`kv state: stream size ${st.size} in the state, ${kv.size} in the cache`);
  }
  const streams = st.parts.map((p, s) => {
    const plan = streamState.plan(kv.stream(s), p, -1);
    if (plan.mode !== "all") throw new KvError(`kv state: stream ${s} holds a sequence state`);
    for (const c of plan.cells) {
      if (c.seqs.some((q) => q !== s)) {
        throw new KvError(`kv state: stream ${s} holds sequence ${c.seqs.find((q) => q !== s)}`);
      }
    }
    return plan;
  });
  return {
    ...streamsInfo(st),
    dst: -1,
    idxs: [],
    cells: [],
    head: 0,
    hasShift: false,
    data: new Uint8Array(0),
    streams,
  };
}
