/**
 * The KV cache as bytes and back (llama.cpp's llama_kv_cache::state_write /
 * state_read): the whole cache, or the cells of one sequence compacted, with
 * their keys and values. Restores are failure-atomic: {@link planKvRestore}
 * checks everything (shapes, every cell, the room a sequence needs) without
 * changing the cache, and only then {@link applyKvRestore} writes.
 *
 * Differences from llama.cpp, on purpose:
 * - A whole-cache restore puts every cell back at its own index (llama.cpp
 *   packs them from cell 0), with the slot-search head and pending K-shifts,
 *   so the restored context continues bit for bit as the saved one would.
 * - Pending position shifts (seqAdd/seqDiv not yet applied to the keys) are
 *   carried in both modes; llama.cpp drops them.
 *
 * A sequence is restored as llama.cpp's state_read_meta does: the
 * destination sequence is emptied, its cells are placed by find_slot (not
 * necessarily contiguous) as one ubatch of that sequence, and the saved K/V
 * rows are written into those cells.
 *
 * A cache of one stream per sequence saves a sequence as the state of its
 * stream, and the whole cache as a container of every stream's state
 * (./state_streams.ts); each stream is restored as a cache of its own.
 *
 * Layout (little-endian): a fixed header of 14 u32 (tag, mode, seq, size,
 * head, hasShift, nCells, nLayer, typeK, typeV, nEmbdKGqa, nEmbdVGqa, vTrans,
 * nSeqMax), then per cell (idx, pos, shift, nSeq, seq ids...), then K rows
 * of every layer, then V of every layer (rows, or when V is transposed one
 * strip of nCells elements per V channel).
 *
 * @module
 */
import { bufferGet, bufferSet } from "../ggml/memory.ts";
import { ggmlTypeName, rowSize } from "../ggml/types.ts";
import type { Ubatch } from "./batch.ts";
import type { KvCache, SlotInfo } from "./cache.ts";
import { KvError, MAX_SEQ } from "./cells.ts";
import { isMaskedSwa } from "./swa.ts";
import { RECURRENT_STATE_TAG, recurrentStateInfo } from "./recurrent_state.ts";
import {
  packStreams,
  planStreams,
  STREAMS_TAG,
  streamsInfo,
  unpackStreams,
} from "./state_streams.ts";

const TAG = 0x3153564b; // "KVS1"
const HEADER_WORDS = 14;

/** What a serialized cache state holds, read from its header. */
export interface KvStateInfo {
  /** "all": the whole cache; "seq": the cells of one sequence. */
  readonly mode: "all" | "seq";
  /** The sequence saved (-1 for the whole cache). */
  readonly seq: number;
  /** Cells saved. */
  readonly nCells: number;
  /** Cells of the cache it was saved from. */
  readonly size: number;
  /** Highest cell index saved + 1 (what a whole restore needs). */
  readonly usedMaxP1: number;
  /** Highest sequence id in the cells + 1 (what a whole restore needs). */
  readonly seqMaxP1: number;
  /** KV streams of the cache it was saved from (1: unified). */
  readonly nStream?: number;
}

/** A checked restore, ready for {@link applyKvRestore}. */
export interface KvRestorePlan extends KvStateInfo {
  /** Destination sequence (-1: whole cache). */
  readonly dst: number;
  /** Destination cell of each saved cell, in saved order. */
  readonly idxs: readonly number[];
  /** @internal */
  readonly cells: readonly SavedCell[];
  /** @internal */
  readonly head: number;
  /** @internal */
  readonly hasShift: boolean;
  /** @internal */
  readonly data: Uint8Array;
  /** Per stream (a whole cache of one stream per sequence). @internal */
  readonly streams?: readonly KvRestorePlan[];
}

/** One saved cell. @internal */
export interface SavedCell {
  /** Index in the cache it was saved from. */
  readonly idx: number;
  /** Position. */
  readonly pos: number;
  /** Pending shift. */
  readonly shift: number;
  /** Sequences, ascending. */
  readonly seqs: readonly number[];
}

// Maximal runs of consecutive values: [start index in the list, first value, length].
function runs(idxs: readonly number[]): Array<[number, number, number]> {
  const out: Array<[number, number, number]> = [];
  idxs.forEach((c, i) => {
    const r = out[out.length - 1];
    if (r && r[1] + r[2] === c) r[2]++;
    else out.push([i, c, 1]);
  });
  return out;
}

function rowBytes(kv: KvCache): { rk: number; rv: number; es: number } {
  return {
    rk: rowSize(kv.typeK, kv.nEmbdKGqa),
    rv: rowSize(kv.typeV, kv.nEmbdVGqa),
    es: kv.vTrans ? rowSize(kv.typeV, 1) : 0,
  };
}

/**
 * The cache's cells and K/V bytes: all of it (`seq` -1, the default), or the
 * cells of sequence `seq` (llama_state_seq_get_data: those seen by `seq`,
 * less the ones its sliding window no longer reaches), in cell order.
 */
export function saveKvState(kv: KvCache, seq = -1): Uint8Array {
  if (seq !== -1 && (!Number.isInteger(seq) || seq < 0 || seq >= kv.nSeqMax)) {
    throw new KvError(`kv state: sequence ${seq} outside [0, ${kv.nSeqMax})`);
  }
  if (kv.nStream === 1) return saveStream(kv, seq);
  // One stream per sequence: a sequence is its stream's cells; the whole
  // cache every stream's state, in a container naming the layout.
  if (seq !== -1) return saveStream(kv.stream(kv.seqStream(seq)), seq);
  return packStreams(kv, Array.from({ length: kv.nStream }, (_, s) => saveStream(kv.stream(s))));
}

function saveStream(kv: KvCache, seq = -1): Uint8Array {
  const c = kv.cells;
  const pmax = seq === -1 ? -1 : c.seqPosMax(seq);
  const idxs: number[] = [];
  for (let i = 0; i < kv.size; i++) {
    if (c.isEmpty(i)) continue;
    if (seq !== -1 && (!c.seqHas(i, seq) || isMaskedSwa(kv.nSwa, kv.swaType, c.pos[i], pmax))) {
      continue;
    }
    idxs.push(i);
  }
  const seqsOf = (i: number) => seq === -1 ? c.seqs(i) : [seq];
  const metaWords = idxs.reduce((s, i) => s + 4 + seqsOf(i).length, 0);
  const { rk, rv } = rowBytes(kv);
  const n = idxs.length;
  const metaBytes = 4 * (HEADER_WORDS + metaWords);
  const out = new Uint8Array(metaBytes + kv.nLayer * n * (rk + rv));
  const dv = new DataView(out.buffer);
  let o = 0;
  const u32 = (x: number) => {
    dv.setUint32(o, x >>> 0, true);
    o += 4;
  };
  const i32 = (x: number) => {
    dv.setInt32(o, x, true);
    o += 4;
  };
  u32(TAG), u32(seq === -1 ? 0 : 1), i32(seq), u32(kv.size), u32(seq === -1 ? kv.head : 0);
  u32(seq === -1 && c.hasShift ? 1 : 0), u32(n), u32(kv.nLayer), u32(kv.typeK), u32(kv.typeV);
  u32(kv.nEmbdKGqa), u32(kv.nEmbdVGqa), u32(kv.vTrans ? 1 : 0), u32(kv.nSeqMax);
  for (const i of idxs) {
    const ss = seqsOf(i);
    u32(i), i32(c.pos[i]), i32(c.shift[i]), u32(ss.length);
    for (const s of ss) u32(s);
  }
  copyData(kv, idxs, out.subarray(metaBytes), "get");
  return out;
}

// Moves the K/V bytes of cells `idxs` between the cache and `data` (the
// layout of the module comment), run by run of consecutive cells.
function copyData(kv: KvCache, idxs: readonly number[], data: Uint8Array, dir: "get" | "set") {
  const { rk, rv, es } = rowBytes(kv);
  const n = idxs.length;
  const rr = runs(idxs);
  const move = (buf: Parameters<typeof bufferGet>[0], at: number, part: Uint8Array) => {
    if (dir === "get") bufferGet(buf, at, part);
    else bufferSet(buf, at, part);
  };
  let o = 0;
  for (let il = 0; il < kv.nLayer; il++) {
    const { k } = kv.storage(il);
    for (const [i0, c0, len] of rr) {
      move(k.buffer, k.offset + c0 * rk, data.subarray(o + i0 * rk, o + (i0 + len) * rk));
    }
    o += n * rk;
  }
  for (let il = 0; il < kv.nLayer; il++) {
    const { v } = kv.storage(il);
    if (!kv.vTrans) {
      for (const [i0, c0, len] of rr) {
        move(v.buffer, v.offset + c0 * rv, data.subarray(o + i0 * rv, o + (i0 + len) * rv));
      }
      o += n * rv;
      continue;
    }
    // Transposed: channel j of every cell is one row of `size` elements.
    for (let j = 0; j < kv.nEmbdVGqa; j++) {
      for (const [i0, c0, len] of rr) {
        const at = v.offset + (j * kv.size + c0) * es;
        move(v.buffer, at, data.subarray(o + i0 * es, o + (i0 + len) * es));
      }
      o += n * es;
    }
  }
}

/** The header of a saved state, checked for self-consistency only. */
export function kvStateInfo(bytes: Uint8Array): KvStateInfo {
  const tag = bytes.length >= 4
    ? new DataView(bytes.buffer, bytes.byteOffset, 4).getUint32(0, true)
    : 0;
  // A recurrent model's memory is saved in the same section (./recurrent_state.ts).
  if (tag === RECURRENT_STATE_TAG) return recurrentStateInfo(bytes);
  if (tag === STREAMS_TAG) return streamsInfo(unpackStreams(bytes));
  return parse(bytes).info;
}

interface Parsed {
  info: KvStateInfo;
  head: number;
  hasShift: boolean;
  nLayer: number;
  typeK: number;
  typeV: number;
  nEmbdKGqa: number;
  nEmbdVGqa: number;
  vTrans: boolean;
  cells: SavedCell[];
  dataOffset: number;
}

function parse(bytes: Uint8Array): Parsed {
  const dv = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  let o = 0;
  const need = (n: number, what: string) => {
    if (o + n > bytes.length) {
      throw new KvError(
        `kv state: truncated at offset ${o} (${what} needs ${n} bytes, ${bytes.length - o} left)`,
      );
    }
  };
  const u32 = (what: string) => {
    need(4, what);
    const x = dv.getUint32(o, true);
    o += 4;
    return x;
  };
  const i32 = (what: string) => {
    need(4, what);
    const x = dv.getInt32(o, true);
    o += 4;
    return x;
  };
  if (u32("tag") !== TAG) throw new KvError("kv state: bad tag (not a KV cache state)");
  const mode = u32("mode");
  if (mode > 1) throw new KvError(`kv state: bad mode ${mode}`);
  const seq = i32("seq");
  if (mode === 0 ? seq !== -1 : seq < 0 || seq >= MAX_SEQ) {
    throw new KvError(
      `kv state: bad sequence id ${seq} for a ${mode ? "sequence" : "whole"} state`,
    );
  }
  const size = u32("size"), head = u32("head"), shiftFlag = u32("hasShift");
  const nCells = u32("nCells");
  if (shiftFlag > 1) throw new KvError(`kv state: bad shift flag ${shiftFlag}`);
  if (nCells > size) throw new KvError(`kv state: ${nCells} cells saved from a cache of ${size}`);
  if (head > size) throw new KvError(`kv state: head ${head} beyond the ${size} cells`);
  const [nLayer, typeK, typeV, nEmbdKGqa, nEmbdVGqa, vT, nSeqMax] = [
    u32("nLayer"),
    u32("typeK"),
    u32("typeV"),
    u32("nEmbdKGqa"),
    u32("nEmbdVGqa"),
    u32("vTrans"),
    u32("nSeqMax"),
  ];
  if (vT > 1) throw new KvError(`kv state: bad vTrans flag ${vT}`);
  if (nSeqMax < 1 || nSeqMax > MAX_SEQ) throw new KvError(`kv state: bad nSeqMax ${nSeqMax}`);
  const cells: SavedCell[] = [];
  let prev = -1, seqMaxP1 = 0;
  for (let k = 0; k < nCells; k++) {
    const at = o;
    const idx = u32("cell index"), pos = i32("cell position"), shift = i32("cell shift");
    const nSeq = u32("cell sequence count");
    if (idx >= size || idx <= prev) {
      throw new KvError(`kv state: cell ${k} at offset ${at}: index ${idx} out of order or range`);
    }
    if (pos < 0) throw new KvError(`kv state: cell ${k} (index ${idx}): bad position ${pos}`);
    if (nSeq < 1 || nSeq > nSeqMax || (mode === 1 && nSeq !== 1)) {
      throw new KvError(`kv state: cell ${k} (index ${idx}): bad sequence count ${nSeq}`);
    }
    const seqs: number[] = [];
    for (let j = 0; j < nSeq; j++) {
      const s = u32("cell sequence id");
      if (s >= nSeqMax || (j > 0 && s <= seqs[j - 1]) || (mode === 1 && s !== seq)) {
        throw new KvError(`kv state: cell ${k} (index ${idx}): bad sequence id ${s}`);
      }
      seqs.push(s);
      seqMaxP1 = Math.max(seqMaxP1, s + 1);
    }
    cells.push({ idx, pos, shift, seqs });
    prev = idx;
  }
  const info: KvStateInfo = {
    mode: mode === 0 ? "all" : "seq",
    seq,
    nCells,
    size,
    usedMaxP1: prev + 1,
    seqMaxP1,
  };
  return {
    info,
    head,
    hasShift: shiftFlag === 1,
    nLayer,
    typeK,
    typeV,
    nEmbdKGqa,
    nEmbdVGqa,
    vTrans: vT === 1,
    cells,
    dataOffset: o,
  };
}

/** A ubatch of `pos.length` tokens of sequence `dst` (llama.cpp's ubatch_reserve for a restore). */
function restoreUbatch(pos: readonly number[], dst: number): Ubatch {
  const seqIdx = new Int32Array(MAX_SEQ).fill(-1);
  seqIdx[dst] = 0;
  const n = pos.length;
  return {
    equalSeqs: false,
    nTokens: n,
    nSeqTokens: n,
    nSeqs: 1,
    nSeqsUnq: 1,
    token: null,
    embd: null,
    pos: Int32Array.from(pos),
    seqId: Array.from({ length: n }, () => [dst]),
    seqIdUnq: [dst],
    seqIdx,
    output: new Uint8Array(n),
  };
}

// Where a sequence's cells would go: empty `dst`, then find_slot, then put
// every cell back as it was. Null when the cache has no room.
function trialSlot(kv: KvCache, ub: Ubatch, dst: number): SlotInfo | null {
  const all = Array.from({ length: kv.size }, (_, i) => i);
  const snap = kv.cells.save(all), head = kv.head;
  try {
    kv.seqRm(dst);
    return kv.findSlot(ub, false);
  } finally {
    kv.cells.restore(snap);
    kv.head = head;
  }
}

/**
 * Checks `bytes` against `kv` and works out where every cell goes, without
 * changing the cache; throws {@link KvError} naming the first problem. A
 * whole state restores as it is (`dst` must be -1 or absent); a sequence
 * state into `dst` (default: the sequence it was saved from).
 */
export function planKvRestore(kv: KvCache, bytes: Uint8Array, dst?: number): KvRestorePlan {
  const tag = bytes.length >= 4
    ? new DataView(bytes.buffer, bytes.byteOffset, 4).getUint32(0, true)
    : 0;
  if (tag === STREAMS_TAG) return planStreams(kv, unpackStreams(bytes), dst);
  if (kv.nStream === 1) return planStream(kv, bytes, dst);
  const info = parse(bytes).info;
  if (info.mode === "all") {
    throw new KvError(`kv state: nStream 1 in the state, ${kv.nStream} in the cache`);
  }
  const to = dst ?? info.seq;
  if (!Number.isInteger(to) || to < 0 || to >= kv.nSeqMax) {
    throw new KvError(`kv state: destination sequence ${to} outside [0, ${kv.nSeqMax})`);
  }
  return planStream(kv.stream(kv.seqStream(to)), bytes, to);
}

function planStream(kv: KvCache, bytes: Uint8Array, dst?: number): KvRestorePlan {
  const p = parse(bytes);
  const { info } = p;
  const mismatch = (what: string, file: unknown, cache: unknown) => {
    throw new KvError(`kv state: ${what} ${file} in the state, ${cache} in the cache`);
  };
  if (p.nLayer !== kv.nLayer) mismatch("nLayer", p.nLayer, kv.nLayer);
  if (p.typeK !== kv.typeK) mismatch("K type", ggmlTypeName(p.typeK), ggmlTypeName(kv.typeK));
  if (p.typeV !== kv.typeV) mismatch("V type", ggmlTypeName(p.typeV), ggmlTypeName(kv.typeV));
  if (p.nEmbdKGqa !== kv.nEmbdKGqa) mismatch("K width", p.nEmbdKGqa, kv.nEmbdKGqa);
  if (p.nEmbdVGqa !== kv.nEmbdVGqa) mismatch("V width", p.nEmbdVGqa, kv.nEmbdVGqa);
  if (p.vTrans !== kv.vTrans) mismatch("V transposed", p.vTrans, kv.vTrans);
  const { rk, rv } = rowBytes(kv);
  const want = p.dataOffset + kv.nLayer * info.nCells * (rk + rv);
  if (bytes.length !== want) {
    throw new KvError(
      bytes.length < want
        ? `kv state: truncated at offset ${bytes.length} (K/V data ends at ${want})`
        : `kv state: ${bytes.length - want} bytes after the K/V data (expected ${want} bytes)`,
    );
  }
  const rest = {
    ...info,
    cells: p.cells,
    hasShift: p.hasShift,
    data: bytes.subarray(p.dataOffset),
  };
  if (info.mode === "all") {
    if (dst !== undefined && dst !== -1) {
      throw new KvError(`kv state: a whole-cache state has no sequence to put into ${dst}`);
    }
    if (info.usedMaxP1 > kv.size) {
      throw new KvError(
        `kv state: cells up to ${info.usedMaxP1} are used, the cache has ${kv.size}`,
      );
    }
    if (info.seqMaxP1 > kv.nSeqMax) {
      throw new KvError(
        `kv state: sequence ${info.seqMaxP1 - 1} outside the cache's [0, ${kv.nSeqMax})`,
      );
    }
    const head = p.head <= kv.size ? p.head : 0;
    return { ...rest, dst: -1, idxs: p.cells.map((c) => c.idx), head };
  }
  const to = dst ?? info.seq;
  if (!Number.isInteger(to) || to < 0 || to >= kv.nSeqMax) {
    throw new KvError(`kv state: destination sequence ${to} outside [0, ${kv.nSeqMax})`);
  }
  let idxs: readonly number[] = [];
  if (info.nCells > 0) {
    const slot = trialSlot(kv, restoreUbatch(p.cells.map((c) => c.pos), to), to);
    if (!slot) {
      throw new KvError(
        `kv state: no room for the ${info.nCells} cells of sequence ${info.seq} in the cache ` +
          `(${kv.size} cells, ${kv.cells.used} used)`,
      );
    }
    idxs = slot.idxs;
  }
  return { ...rest, dst: to, idxs, head: 0 };
}

/**
 * Writes a plan from {@link planKvRestore} into the cache. Call it right
 * after planning, with nothing changing the cache in between.
 */
export function applyKvRestore(kv: KvCache, plan: KvRestorePlan): void {
  if (plan.streams) return plan.streams.forEach((p, s) => applyStream(kv.stream(s), p));
  applyStream(plan.dst === -1 ? kv : kv.stream(kv.seqStream(plan.dst)), plan);
}

function applyStream(kv: KvCache, plan: KvRestorePlan): void {
  const c = kv.cells;
  if (plan.dst === -1) {
    kv.clear();
    for (const cell of plan.cells) {
      c.posSet(cell.idx, cell.pos);
      c.shift[cell.idx] = cell.shift;
      for (const s of cell.seqs) c.seqAdd(cell.idx, s);
    }
    // posAdd(i, 0) raises the pending-shift flag without moving anything.
    if (plan.hasShift && plan.cells.length) c.posAdd(plan.cells[0].idx, 0);
    kv.head = plan.head;
  } else {
    kv.seqRm(plan.dst);
    if (plan.cells.length) {
      const ub = restoreUbatch(plan.cells.map((x) => x.pos), plan.dst);
      const slot = kv.findSlot(ub, false);
      if (!slot || slot.idxs.some((i, k) => i !== plan.idxs[k])) {
        throw new KvError("kv state: the cache changed between planning and applying a restore");
      }
      kv.applyUbatch(slot, ub);
      plan.cells.forEach((cell, k) => {
        if (cell.shift === 0) return;
        c.shift[plan.idxs[k]] = cell.shift;
        c.posAdd(plan.idxs[k], 0);
      });
    }
  }
  copyData(kv, plan.idxs, plan.data, "set");
}

/** {@link planKvRestore} then {@link applyKvRestore}: all or nothing. */
export function restoreKvState(kv: KvCache, bytes: Uint8Array, dst?: number): KvRestorePlan {
  const plan = planKvRestore(kv, bytes, dst);
  applyKvRestore(kv, plan);
  return plan;
}

/** @internal Single-stream save, plan and apply, for ./state_streams.ts. */
export const streamState = { save: saveStream, plan: planStream, parse };
