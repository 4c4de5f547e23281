/**
 * Batches (llama_batch) and their split into micro-batches (llama_ubatch),
 * following llama.cpp's llama_batch_allocr: validation, filling in missing
 * positions / sequence ids / output flags, and split_simple / split_equal /
 * split_seq.
 *
 * @module
 */
import { KvError, MAX_SEQ } from "./cells.ts";

/** Input of one decode call. Give `token` or `embd`; the rest is optional. */
export interface Batch {
  /** Token ids [nTokens]. */
  token?: Int32Array;
  /** Embeddings [nEmbd * nTokens]. */
  embd?: Float32Array;
  /** Positions [nTokens]; default: continue each sequence after memory. */
  pos?: Int32Array;
  /** Sequence ids of each token; default: every token in seq 0. */
  seqId?: readonly (readonly number[])[];
  /** Which tokens produce outputs; default: only the last (or all, see outputAll). */
  logits?: ArrayLike<boolean | number>;
}

/** What the batch splitter asks of the memory (KV cache). */
export interface SeqPositions {
  /** Smallest cached position of seq, -1 when absent. */
  seqPosMin(seq: number): number;
  /** Largest cached position of seq, -1 when absent. */
  seqPosMax(seq: number): number;
}

/** A micro-batch: what one graph evaluation processes. */
export interface Ubatch {
  /** Every sequence set has nSeqTokens tokens (split_equal/split_seq). */
  readonly equalSeqs: boolean;
  /** Tokens in the ubatch. */
  readonly nTokens: number;
  /** Tokens per sequence set. */
  readonly nSeqTokens: number;
  /** Sequence sets. */
  readonly nSeqs: number;
  /** Distinct sequence ids present. */
  readonly nSeqsUnq: number;
  /** Token ids, or null for embeddings. */
  readonly token: Int32Array | null;
  /** Embeddings [nEmbd * nTokens], or null. */
  readonly embd: Float32Array | null;
  /** Position per token. */
  readonly pos: Int32Array;
  /** Sequence ids per token. */
  readonly seqId: readonly (readonly number[])[];
  /** Distinct sequence ids, ascending. */
  readonly seqIdUnq: readonly number[];
  /** For each seq id, its index in seqIdUnq or -1. */
  readonly seqIdx: Int32Array;
  /** Output flag per token. */
  readonly output: Uint8Array;
}

/** Options of {@link BatchSplitter.init}. */
export interface BatchInitOptions {
  /** Vocabulary size (token ids are checked against it). */
  nVocab?: number;
  /** Embedding width (needed for embd batches). */
  nEmbd?: number;
  /** Sequence ids must be below this. Default 1. */
  nSeqMax?: number;
  /** Memory whose positions continue (and check) each sequence. */
  memory?: SeqPositions;
  /** Every token is an output (embeddings). */
  outputAll?: boolean;
}

/** Validates a {@link Batch} and cuts it into {@link Ubatch}es. */
export class BatchSplitter {
  #n = 0;
  #token: Int32Array | null = null;
  #embd: Float32Array | null = null;
  #nEmbd = 0;
  #pos: Int32Array = new Int32Array(0);
  #seqId: number[][] = [];
  #output = new Uint8Array(0);
  #nSeqMax = 1;
  #seqSet: string[] = [];
  #seqSetMap = new Map<string, number[]>();
  #used: boolean[] = [];
  #nUsed = 0;
  #nOutputs = 0;
  #hasCoupled = false;
  /** Batch indices of outputs, in the order ubatches were produced. */
  outIds: number[] = [];

  /** Check and complete `b`; throws KvError naming the problem. */
  init(b: Batch, o: BatchInitOptions = {}): void {
    const n = b.token?.length ?? (b.embd && o.nEmbd ? b.embd.length / o.nEmbd : 0);
    if (!Number.isInteger(n) || n <= 0) {
      throw new KvError("batch: no tokens (or embd without nEmbd)");
    }
    const nSeqMax = o.nSeqMax ?? 1;
    if (nSeqMax > MAX_SEQ) throw new KvError(`batch: nSeqMax ${nSeqMax} > ${MAX_SEQ}`);
    if (b.token && o.nVocab !== undefined) {
      b.token.forEach((t, i) => {
        if (t < 0 || t >= o.nVocab!) throw new KvError(`batch: invalid token[${i}] = ${t}`);
      });
    }
    const seqId = b.seqId ? b.seqId.map((s) => [...s]) : Array.from({ length: n }, () => [0]);
    if (seqId.length !== n) {
      throw new KvError(`batch: ${seqId.length} seq id lists for ${n} tokens`);
    }
    seqId.forEach((ss, i) => {
      if (ss.length === 0) throw new KvError(`batch: token ${i} has no sequence`);
      ss.forEach((s, j) => {
        if (!Number.isInteger(s) || s < 0 || s >= nSeqMax) {
          throw new KvError(`batch: invalid seq_id[${i}][${j}] = ${s} >= ${nSeqMax}`);
        }
      });
    });
    let pos: Int32Array;
    if (b.pos) {
      if (b.pos.length !== n) throw new KvError(`batch: ${b.pos.length} positions for ${n} tokens`);
      pos = Int32Array.from(b.pos);
    } else {
      pos = new Int32Array(n);
      const p0 = Array.from(
        { length: nSeqMax },
        (_, s) => (o.memory ? o.memory.seqPosMax(s) + 1 : 0),
      );
      for (let i = 0; i < n; i++) {
        pos[i] = p0[seqId[i][0]];
        for (const s of seqId[i]) p0[s] = pos[i] + 1;
      }
    }
    const output = new Uint8Array(n);
    if (b.logits && !o.outputAll) {
      if (b.logits.length !== n) {
        throw new KvError(`batch: ${b.logits.length} output flags for ${n} tokens`);
      }
      for (let i = 0; i < n; i++) output[i] = b.logits[i] ? 1 : 0;
    } else if (o.outputAll) output.fill(1);
    else output[n - 1] = 1;

    // Each token in one sequence at the positions that continue the memory
    // (a decode step): continuous, increasing, uncoupled by construction,
    // so the checks below cannot fail.
    const simple = !b.pos && seqId.every((ss) => ss.length === 1);
    if (!simple) this.#check(seqId, pos, o.memory);
    this.#n = n;
    this.#token = b.token ? Int32Array.from(b.token) : null;
    this.#embd = b.token ? null : b.embd ?? null;
    this.#nEmbd = o.nEmbd ?? 0;
    this.#pos = pos;
    this.#seqId = seqId;
    this.#output = output;
    this.#nSeqMax = nSeqMax;
    let nOut = 0;
    for (let i = 0; i < n; i++) nOut += output[i];
    this.#nOutputs = nOut;
    this.#hasCoupled = !simple && seqId.some((ss) => ss.length > 1);
    this.#seqSet = seqId.map((ss) =>
      ss.length === 1 ? String(ss[0]) : [...new Set(ss)].sort((a, b) => a - b).join(",")
    );
    this.#seqSetMap = new Map();
    this.#seqSet.forEach((k, i) => {
      const a = this.#seqSetMap.get(k);
      if (a) a.push(i);
      else this.#seqSetMap.set(k, [i]);
    });
    this.splitReset();
  }

  // llama_batch_allocr::init's checks of positions and sequence sets.
  #check(seqId: number[][], pos: Int32Array, memory: SeqPositions | undefined): void {
    const n = seqId.length;
    // positions of each sequence must continue the memory and be gap-free
    const seqPos = new Map<number, Set<number>>();
    const cpl = new Set<string>();
    for (let i = 0; i < n; i++) {
      seqId[i].forEach((s, j) => {
        if (!seqPos.has(s)) seqPos.set(s, new Set());
        seqPos.get(s)!.add(pos[i]);
        if (j > 0) cpl.add(`${s},${seqId[i][0]}`);
      });
    }
    for (const [s, ps] of seqPos) {
      const min = Math.min(...ps), max = Math.max(...ps);
      const last = memory ? memory.seqPosMax(s) : -1;
      if (last >= 0 && min !== last + 1) {
        throw new KvError(
          `batch: sequence ${s} starts at ${min} but the memory ends at ${last} (need ${last + 1})`,
        );
      }
      if (max - min + 1 > ps.size) {
        throw new KvError(`batch: sequence ${s} positions are not continuous`);
      }
    }
    if (memory) {
      for (const k of cpl) {
        const [s0, s1] = k.split(",").map(Number);
        const m = memory;
        if (m.seqPosMin(s0) !== m.seqPosMin(s1) || m.seqPosMax(s0) !== m.seqPosMax(s1)) {
          throw new KvError(`batch: sequence ${s0} is coupled to ${s1} but they have diverged`);
        }
      }
    }
    // no partial sequence subsets, no decreasing positions
    const curSet = new Map<number, Set<number>>();
    const curPos = new Map<number, number>();
    for (let i = 0; i < n; i++) {
      for (const s of seqId[i]) {
        const prev = curSet.get(s);
        const inter = prev ? new Set(seqId[i].filter((x) => prev.has(x))) : new Set(seqId[i]);
        if (inter.size === 0) {
          throw new KvError(`batch: sequence ${s} belongs to incompatible sequence sets`);
        }
        curSet.set(s, inter);
        if (pos[i] < (curPos.get(s) ?? -1)) {
          throw new KvError(`batch: sequence ${s} positions are decreasing`);
        }
        curPos.set(s, pos[i]);
      }
    }
  }

  /** Tokens in the batch. */
  get nTokens(): number {
    return this.#n;
  }

  /** Tokens marked as outputs. */
  get nOutputs(): number {
    return this.#nOutputs;
  }

  /** Tokens already placed in ubatches. */
  get nUsed(): number {
    return this.#nUsed;
  }

  /** Start splitting from scratch. */
  splitReset(): void {
    this.outIds = [];
    this.#nUsed = 0;
    this.#used = new Array(this.#n).fill(false);
  }

  /** Next up-to-nUbatch tokens in batch order; null when done. */
  splitSimple(nUbatch: number): Ubatch | null {
    let cur = this.#used.indexOf(false);
    if (cur < 0) return null;
    const idxs: number[] = [];
    while (cur < this.#n && idxs.length < nUbatch) {
      idxs.push(cur);
      this.#take(cur++);
    }
    return this.#ubatch(idxs, idxs.length, false);
  }

  /**
   * Equal-length slices of non-overlapping sequence sets (recurrent models,
   * multi-stream caches). `sequential` wants consecutive seq ids;
   * "ascending" takes any (a gap does not end the micro-batch) and orders
   * the sets by sequence id, as a multi-stream cache's slot wants them.
   */
  splitEqual(nUbatch: number, sequential: boolean | "ascending" = false): Ubatch | null {
    const ascending = sequential === "ascending";
    if (ascending) sequential = false;
    if ((sequential || ascending) && this.#hasCoupled) {
      throw new KvError("batch: sequential split_equal needs uncoupled sequences");
    }
    const sets: string[] = [];
    let lastSeq = -1;
    for (let i = 0; i < this.#n; i++) {
      if (this.#used[i]) continue;
      const mine = this.#seqId[i];
      let add = sets.every((k) => !k.split(",").some((s) => mine.includes(Number(s))));
      if (sequential) add &&= sets.length === 0 || mine[0] === lastSeq + 1;
      if (add) {
        sets.push(this.#seqSet[i]);
        lastSeq = mine[0];
        if (sets.length > nUbatch) break;
      }
    }
    const nSeqs = sets.length;
    if (nSeqs === 0) return null;
    if (ascending) sets.sort((a, b) => Number(a) - Number(b));
    const lists = sets.map((k) => this.#seqSetMap.get(k)!);
    const cur = lists.map((l) => {
      let j = 0;
      while (this.#used[l[j]]) j++;
      return j;
    });
    const per: number[][] = sets.map(() => []);
    while (true) {
      if (lists.some((l, s) => cur[s] >= l.length)) break;
      for (let s = 0; s < nSeqs; s++) {
        const idx = lists[s][cur[s]++];
        per[s].push(idx);
        this.#take(idx);
      }
      if ((per[0].length + 1) * nSeqs > nUbatch) break;
    }
    return this.#ubatch(per.flat(), nSeqs, true);
  }

  /** Up to nUbatch tokens of one sequence set (and its subsets). */
  splitSeq(nUbatch: number): Ubatch | null {
    let cur = this.#used.indexOf(false);
    if (cur < 0) return null;
    let set = new Set(this.#seqId[cur]);
    const idxs: number[] = [];
    while (true) {
      idxs.push(cur);
      this.#take(cur);
      if (idxs.length >= nUbatch) break;
      do cur++; while (
        cur < this.#n && (this.#used[cur] || !this.#seqId[cur].every((s) => set.has(s)))
      );
      if (cur === this.#n) break;
      set = new Set(this.#seqId[cur]);
    }
    return this.#ubatch(idxs, 1, true);
  }

  #take(i: number): void {
    this.#used[i] = true;
    this.#nUsed++;
  }

  #ubatch(idxs: number[], nSeqs: number, equal: boolean): Ubatch {
    const n = idxs.length;
    const unq = new Set<number>();
    const seqId = idxs.map((i) => {
      this.#seqId[i].forEach((s) => unq.add(s));
      return [...this.#seqId[i]];
    });
    const seqIdUnq = [...unq].filter((s) => s < this.#nSeqMax).sort((a, b) => a - b);
    const seqIdx = new Int32Array(MAX_SEQ).fill(-1);
    seqIdUnq.forEach((s, k) => (seqIdx[s] = k));
    const output = Uint8Array.from(idxs, (i) => this.#output[i]);
    idxs.forEach((i) => {
      if (this.#output[i]) this.outIds.push(i);
    });
    let embd: Float32Array | null = null;
    if (this.#embd) {
      const d = this.#nEmbd;
      embd = new Float32Array(n * d);
      idxs.forEach((i, k) => embd!.set(this.#embd!.subarray(i * d, i * d + d), k * d));
    }
    return {
      equalSeqs: equal,
      nTokens: n,
      nSeqTokens: n / nSeqs,
      nSeqs,
      nSeqsUnq: seqIdUnq.length,
      token: this.#token ? Int32Array.from(idxs, (i) => this.#token![i]) : null,
      embd,
      pos: Int32Array.from(idxs, (i) => this.#pos[i]),
      seqId,
      seqIdUnq,
      seqIdx,
      output,
    };
  }
}

/** A ubatch of `nTokens` tokens in seq 0 at positions 0.. (for reserving worst-case graphs). */
export function reserveUbatch(nSeqTokens: number, nSeqs = 1): Ubatch {
  const n = nSeqTokens * nSeqs;
  const seqIdx = new Int32Array(MAX_SEQ).fill(-1);
  for (let s = 0; s < nSeqs; s++) seqIdx[s] = s;
  return {
    equalSeqs: true,
    nTokens: n,
    nSeqTokens,
    nSeqs,
    nSeqsUnq: nSeqs,
    token: new Int32Array(n),
    embd: null,
    pos: new Int32Array(n),
    seqId: Array.from({ length: n }, () => [0]),
    seqIdUnq: Array.from({ length: nSeqs }, (_, s) => s),
    seqIdx,
    output: new Uint8Array(n),
  };
}
