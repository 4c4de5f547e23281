/**
 * The recurrent state memory as bytes and back (llama_memory_recurrent's
 * state_write / state_read): the whole memory (every cell with its
 * position, source, tail and sequences, and every layer's conv and ssm
 * states), or the one cell holding a sequence's state. Restores are
 * failure-atomic: {@link planRecurrentRestore} checks everything without
 * changing the memory, {@link applyRecurrentRestore} then writes.
 *
 * A sequence is restored as llama.cpp's state_read_meta does: the
 * destination sequence is emptied, a cell is found for it by find_slot (a
 * one-token ubatch at the saved position) and the saved states are written
 * there. A whole-memory restore puts every cell back at its own index, so
 * the context continues bit for bit as the saved one would.
 *
 * Layout (little-endian): 10 u32 (tag "RSS1", mode, seq, size, head,
 * nCells, nLayer, nEmbdR, nEmbdS, nSeqMax), per cell (idx, pos, src, tail,
 * nSeq, seq ids...), then for every layer the conv rows of the saved cells,
 * then for every layer their ssm rows (F32).
 *
 * @module
 */
import { bufferGet, bufferSet } from "../ggml/memory.ts";
import type { Ubatch } from "./batch.ts";
import { KvError, MAX_SEQ } from "./cells.ts";
import type { RecurrentMemory } from "./recurrent.ts";
import type { KvStateInfo } from "./state.ts";

/** The tag of a recurrent state ("RSS1"). */
export const RECURRENT_STATE_TAG = 0x31535352;
const HEADER_WORDS = 10;

/** One saved cell. */
interface SavedCell {
  idx: number;
  pos: number;
  src: number;
  tail: number;
  seqs: number[];
}

/**
 * What a serialized recurrent state holds, read from its header: the same
 * facts as a KV cache state's (`usedMaxP1` is the saved size there).
 */
export type RecurrentStateInfo = KvStateInfo;

/** A checked restore, ready for {@link applyRecurrentRestore}. */
export interface RecurrentRestorePlan extends RecurrentStateInfo {
  /** Destination sequence (-1: whole memory). */
  readonly dst: number;
  /** @internal */
  readonly cells: readonly SavedCell[];
  /** @internal */
  readonly head: number;
  /** @internal */
  readonly data: Uint8Array;
}

const rowBytes = (rs: RecurrentMemory, which: "r" | "s") =>
  4 * (which === "r" ? rs.nEmbdR : rs.nEmbdS);

// Conv rows of every layer, then ssm rows of every layer, for cells `idxs`.
function copyData(
  rs: RecurrentMemory,
  idxs: readonly number[],
  data: Uint8Array,
  dir: "get" | "set",
): void {
  let o = 0;
  for (const which of ["r", "s"] as const) {
    const rb = rowBytes(rs, which);
    for (let il = 0; il < rs.nLayer; il++) {
      const ref = rs.storage(il)[which];
      for (const i of idxs) {
        const part = data.subarray(o, o + rb);
        if (dir === "get") bufferGet(ref.buffer, ref.offset + i * rb, part);
        else bufferSet(ref.buffer, ref.offset + i * rb, part);
        o += rb;
      }
    }
  }
}

/** The memory (seq -1) or sequence `seq`'s cell, as bytes. */
export function saveRecurrentState(rs: RecurrentMemory, seq = -1): Uint8Array {
  const cells: SavedCell[] = [];
  rs.cells.forEach((c, idx) => {
    // The whole memory: every cell, empty ones included (their tails matter).
    if (seq === -1 || c.seqId.has(seq)) {
      cells.push({ idx, pos: c.pos, src: c.src, tail: c.tail, seqs: [...c.seqId].sort() });
    }
  });
  const metaWords = HEADER_WORDS + cells.reduce((n, c) => n + 5 + c.seqs.length, 0);
  const dataBytes = cells.length * rs.nLayer * 4 * (rs.nEmbdR + rs.nEmbdS);
  const out = new Uint8Array(metaWords * 4 + dataBytes);
  const dv = new DataView(out.buffer);
  let o = 0;
  const w = (v: number) => (dv.setInt32(o, v, true), o += 4);
  for (
    const v of [
      RECURRENT_STATE_TAG,
      seq === -1 ? 0 : 1,
      seq,
      rs.size,
      rs.head,
      cells.length,
      rs.nLayer,
      rs.nEmbdR,
      rs.nEmbdS,
      rs.nSeqMax,
    ]
  ) w(v);
  for (const c of cells) {
    w(c.idx), w(c.pos), w(c.src), w(c.tail), w(c.seqs.length);
    for (const s of c.seqs) w(s);
  }
  copyData(rs, cells.map((c) => c.idx), out.subarray(o), "get");
  return out;
}

interface Parsed {
  info: RecurrentStateInfo;
  head: number;
  nLayer: number;
  nEmbdR: number;
  nEmbdS: number;
  cells: SavedCell[];
  data: Uint8Array;
}

function parse(bytes: Uint8Array): Parsed {
  const dv = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  let o = 0;
  const r = (what: string) => {
    if (o + 4 > bytes.length) {
      throw new KvError(`recurrent state: truncated at offset ${o} (${what})`);
    }
    const v = dv.getInt32(o, true);
    o += 4;
    return v;
  };
  if (r("tag") !== RECURRENT_STATE_TAG) throw new KvError("recurrent state: bad tag");
  const mode = r("mode"), seq = r("seq"), size = r("size"), head = r("head");
  const nCells = r("nCells"), nLayer = r("nLayer"), nEmbdR = r("nEmbdR"), nEmbdS = r("nEmbdS");
  r("nSeqMax");
  if (mode !== 0 && mode !== 1) throw new KvError(`recurrent state: bad mode ${mode}`);
  if (!(size > 0 && nCells >= 0 && nCells <= size && head >= 0 && head < size)) {
    throw new KvError(`recurrent state: bad sizes (size ${size}, cells ${nCells}, head ${head})`);
  }
  if (mode === 1 && !(seq >= 0 && seq < MAX_SEQ && nCells <= 1)) {
    throw new KvError(`recurrent state: bad sequence ${seq} (${nCells} cells)`);
  }
  const cells: SavedCell[] = [];
  let seqMax = -1;
  for (let k = 0; k < nCells; k++) {
    const idx = r("cell idx"), pos = r("cell pos"), src = r("cell src"), tail = r("cell tail");
    const n = r("cell nSeq");
    if (!(idx >= 0 && idx < size && n >= 0 && n <= MAX_SEQ && src >= -1 && src < size)) {
      throw new KvError(`recurrent state: bad cell ${k} (idx ${idx}, ${n} sequences)`);
    }
    const seqs: number[] = [];
    for (let j = 0; j < n; j++) {
      const s = r("cell seq");
      if (!(s >= 0 && s < MAX_SEQ)) throw new KvError(`recurrent state: bad sequence id ${s}`);
      seqs.push(s);
      seqMax = Math.max(seqMax, s);
    }
    cells.push({ idx, pos, src, tail, seqs });
  }
  const want = nCells * nLayer * 4 * (nEmbdR + nEmbdS);
  if (bytes.length - o !== want) {
    throw new KvError(`recurrent state: ${bytes.length - o} data bytes, expected ${want}`);
  }
  return {
    info: {
      mode: mode === 0 ? "all" : "seq",
      seq: mode === 0 ? -1 : seq,
      nCells,
      size,
      usedMaxP1: mode === 0 ? size : nCells,
      seqMaxP1: seqMax + 1,
    },
    head,
    nLayer,
    nEmbdR,
    nEmbdS,
    cells,
    data: bytes.subarray(o),
  };
}

/** The header of a serialized recurrent state (throws KvError when malformed). */
export function recurrentStateInfo(bytes: Uint8Array): RecurrentStateInfo {
  return parse(bytes).info;
}

/**
 * Checks that `bytes` can be restored into `rs` (as sequence `dst` for a
 * sequence state; default the saved one) and returns the plan; changes nothing.
 */
export function planRecurrentRestore(
  rs: RecurrentMemory,
  bytes: Uint8Array,
  dst?: number,
): RecurrentRestorePlan {
  const p = parse(bytes);
  if (p.nLayer !== rs.nLayer || p.nEmbdR !== rs.nEmbdR || p.nEmbdS !== rs.nEmbdS) {
    throw new KvError(
      `recurrent state: layers ${p.nLayer}, state sizes ${p.nEmbdR}/${p.nEmbdS}; ` +
        `the memory has ${rs.nLayer}, ${rs.nEmbdR}/${rs.nEmbdS}`,
    );
  }
  const target = p.info.mode === "all" ? -1 : dst ?? p.info.seq;
  if (p.info.mode === "all") {
    if (p.info.size !== rs.size) {
      throw new KvError(
        `recurrent state: saved with ${p.info.size} cells (nSeqMax), the memory has ${rs.size}`,
      );
    }
  } else if (!(target >= 0 && target < rs.size)) {
    throw new KvError(`recurrent state: sequence ${target} outside [0, ${rs.size})`);
  } else if (p.cells.length) {
    // A cell must be found for it once the destination is emptied.
    const saved = rs.snapshot();
    try {
      rs.seqRm(target, -1, -1);
      if (!rs.findSlot(oneToken(target, p.cells[0].pos))) {
        throw new KvError(`recurrent state: no room for sequence ${target}`);
      }
    } finally {
      rs.restore(saved);
    }
  }
  return { ...p.info, dst: target, cells: p.cells, head: p.head, data: p.data };
}

/** Writes a plan made by {@link planRecurrentRestore} (cannot fail). */
export function applyRecurrentRestore(rs: RecurrentMemory, plan: RecurrentRestorePlan): void {
  if (plan.mode === "all") {
    rs.clear();
    for (const c of plan.cells) {
      Object.assign(rs.cells[c.idx], {
        pos: c.pos,
        src: c.src,
        tail: c.tail,
        seqId: new Set(c.seqs),
      });
    }
    rs.head = plan.head;
    rs.used = rs.cells.filter((c) => c.seqId.size > 0).length;
    copyData(rs, plan.cells.map((c) => c.idx), plan.data, "set");
    return;
  }
  rs.seqRm(plan.dst, -1, -1);
  if (!plan.cells.length) return;
  rs.findSlot(oneToken(plan.dst, plan.cells[0].pos));
  copyData(rs, [rs.cells[plan.dst].tail], plan.data, "set");
}

/** A one-token ubatch of `seq` at `pos` (state_read_meta's placement). */
function oneToken(seq: number, pos: number): Ubatch {
  const seqIdx = new Int32Array(MAX_SEQ).fill(-1);
  seqIdx[seq] = 0;
  return {
    equalSeqs: true,
    nTokens: 1,
    nSeqTokens: 1,
    nSeqs: 1,
    nSeqsUnq: 1,
    token: new Int32Array(1),
    embd: null,
    pos: Int32Array.of(pos),
    seqId: [[seq]],
    seqIdUnq: [seq],
    seqIdx,
    output: new Uint8Array(1),
  };
}
