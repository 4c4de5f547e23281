/**
 * Byte-level BPE as llama.cpp's llm_tokenizer_bpe does it: words from the
 * pre-tokenizer, one symbol per UTF-8 byte, then the adjacent pair with the
 * lowest merge rank (leftmost on ties) is merged until none is left.
 *
 * Symbols are integers rather than strings: every text a symbol can hold (a
 * byte character, or the result of a merge) is interned once, and the merge
 * table is an open-addressing hash keyed by the two symbol numbers, so the
 * merge loop builds no strings.
 *
 * @module
 */
import { PreTokenizer } from "./pretokenize.ts";
import { BYTE_TO_CHAR, codePoints } from "./unicode.ts";
import type { Vocab } from "./vocab.ts";
import { WordCache, type WordCacheOptions } from "./word_cache.ts";

/** (left symbol, right symbol) → (rank, merged symbol), open addressing. */
class PairTable {
  readonly #mask: number;
  readonly #left: Int32Array;
  readonly #right: Int32Array;
  /** Rank of the pair found by the last successful `find`. */
  readonly rank: Int32Array;
  /** Merged symbol of each slot. */
  readonly merged: Int32Array;

  constructor(n: number) {
    let cap = 16;
    while (cap < 2 * n) cap *= 2;
    this.#mask = cap - 1;
    this.#left = new Int32Array(cap).fill(-1);
    this.#right = new Int32Array(cap);
    this.rank = new Int32Array(cap);
    this.merged = new Int32Array(cap);
  }

  #slot(a: number, b: number): number {
    let h = Math.imul(a, 0x9e3779b1) ^ Math.imul(b ^ 0x7f4a7c15, 0x85ebca6b);
    h ^= h >>> 15;
    return h & this.#mask;
  }

  /** Adds a pair unless present (the first, lowest rank wins as in llama.cpp). */
  add(a: number, b: number, rank: number, merged: number): void {
    const l = this.#left, r = this.#right;
    for (let s = this.#slot(a, b);; s = (s + 1) & this.#mask) {
      if (l[s] === -1) {
        l[s] = a;
        r[s] = b;
        this.rank[s] = rank;
        this.merged[s] = merged;
        return;
      }
      if (l[s] === a && r[s] === b) return;
    }
  }

  /** Slot of the pair, or -1. */
  find(a: number, b: number): number {
    const l = this.#left, r = this.#right;
    for (let s = this.#slot(a, b);; s = (s + 1) & this.#mask) {
      const x = l[s];
      if (x === -1) return -1;
      if (x === a && r[s] === b) return s;
    }
  }
}

/** Merge tables derived from a vocabulary, built on first use. */
interface Tables {
  pairs: PairTable;
  /** Symbol of each byte's character. */
  byteSym: Int32Array;
  /** Texts of symbols that are not tokens (numbers from nVocab up). */
  extraText: string[];
}

function buildTables(v: Vocab): Tables {
  const nVocab = v.texts.length;
  const extra = new Map<string, number>();
  const extraText: string[] = [];
  const intern = (s: string): number => {
    let id = v.byText.get(s) ?? extra.get(s);
    if (id === undefined) {
      id = nVocab + extraText.length;
      extra.set(s, id);
      extraText.push(s);
    }
    return id;
  };
  const byteSym = new Int32Array(256);
  for (let b = 0; b < 256; b++) byteSym[b] = intern(BYTE_TO_CHAR[b]);
  const pairs = new PairTable(v.ranks.size);
  // Ranks are keyed "left right" split at the first space after position 0;
  // a symbol never holds a space, so that split is exactly the lookup's.
  for (const [key, rank] of v.ranks) {
    const sp = key.indexOf(" ", 1);
    if (sp === -1) continue;
    const a = key.slice(0, sp), b = key.slice(sp + 1);
    pairs.add(intern(a), intern(b), rank, intern(a + b));
  }
  return { pairs, byteSym, extraText };
}

/** BPE over raw-text fragments, with a word cache. */
export class BpeEncoder {
  readonly #v: Vocab;
  readonly #pre: PreTokenizer;
  readonly #cache: WordCache;
  #tables: Tables | null = null;
  // Scratch for one word, grown as needed.
  #bytes = new Uint8Array(256);
  #sym = new Int32Array(256);
  #len = new Int32Array(256);
  #prev = new Int32Array(256);
  #next = new Int32Array(256);
  #bl = new Int32Array(768);
  #br = new Int32Array(768);
  #brank = new Int32Array(768);
  #bmerged = new Int32Array(768);
  #bsize = new Int32Array(768);
  #heap = new Int32Array(768);
  #nb = 0;
  #nh = 0;

  /** Compiles the vocabulary's pre-tokenizer. */
  constructor(v: Vocab, cache: WordCacheOptions = {}) {
    this.#v = v;
    this.#pre = new PreTokenizer(v.pre!.exprs);
    this.#cache = new WordCache(cache);
  }

  /** Appends the ids of `text` to `out`. */
  encode(text: string, out: number[]): void {
    const { cps, offs } = codePoints(text);
    const lens = this.#pre.split(text, cps, offs);
    const cache = this.#cache;
    let cp = 0;
    for (const n of lens) {
      if (n > 0) {
        const a = offs[cp], b = offs[cp + n];
        if (cache.accepts(b - a)) {
          const key = text.slice(a, b);
          if (!cache.appendTo(key, out)) {
            const from = out.length;
            this.#word(cps, cp, n, out);
            cache.store(key, out, from);
          }
        } else this.#word(cps, cp, n, out);
      }
      cp += n;
    }
  }

  // Room for words of up to `nb` bytes.
  #grow(nb: number): void {
    let cap = this.#sym.length;
    while (cap < nb) cap *= 2;
    this.#bytes = new Uint8Array(cap);
    this.#sym = new Int32Array(cap);
    this.#len = new Int32Array(cap);
    this.#prev = new Int32Array(cap);
    this.#next = new Int32Array(cap);
    this.#bl = new Int32Array(cap * 3);
    this.#br = new Int32Array(cap * 3);
    this.#brank = new Int32Array(cap * 3);
    this.#bmerged = new Int32Array(cap * 3);
    this.#bsize = new Int32Array(cap * 3);
    this.#heap = new Int32Array(cap * 3);
  }

  // One pre-tokenized word: code points cps[from .. from+n).
  #word(cps: Int32Array, from: number, n: number, out: number[]): void {
    const t = this.#tables ??= buildTables(this.#v);
    if (this.#bytes.length < 4 * n) this.#grow(4 * n);
    const bytes = this.#bytes;
    let nb = 0;
    for (let i = from; i < from + n; i++) {
      const c = cps[i];
      if (c < 0x80) bytes[nb++] = c;
      else if (c < 0x800) {
        bytes[nb++] = 0xc0 | (c >> 6);
        bytes[nb++] = 0x80 | (c & 0x3f);
      } else if (c < 0x10000) {
        bytes[nb++] = 0xe0 | (c >> 12);
        bytes[nb++] = 0x80 | ((c >> 6) & 0x3f);
        bytes[nb++] = 0x80 | (c & 0x3f);
      } else {
        bytes[nb++] = 0xf0 | (c >> 18);
        bytes[nb++] = 0x80 | ((c >> 12) & 0x3f);
        bytes[nb++] = 0x80 | ((c >> 6) & 0x3f);
        bytes[nb++] = 0x80 | (c & 0x3f);
      }
    }
    if (nb === 0) return;
    const v = this.#v;
    if (v.ignoreMerges) {
      let s = "";
      for (let i = 0; i < nb; i++) s += BYTE_TO_CHAR[bytes[i]];
      const id = v.byText.get(s);
      if (id !== undefined) {
        out.push(id);
        return;
      }
    }
    if (this.#sym.length < nb) this.#grow(nb);
    const sym = this.#sym, len = this.#len, prev = this.#prev, next = this.#next;
    for (let i = 0; i < nb; i++) {
      sym[i] = t.byteSym[bytes[i]];
      len[i] = 1;
      prev[i] = i - 1;
      next[i] = i + 1 < nb ? i + 1 : -1;
    }
    this.#nb = 0;
    this.#nh = 0;
    for (let i = 1; i < nb; i++) this.#tryAdd(t.pairs, i - 1, i);
    const bl = this.#bl, br = this.#br, bsize = this.#bsize, bmerged = this.#bmerged;
    while (this.#nh > 0) {
      const b = this.#pop();
      const l = bl[b], r = br[b];
      // A pair is stale once either side merged elsewhere; the left side
      // cannot change while the right lives, so lengths tell it.
      if (len[l] === 0 || len[r] === 0 || len[l] + len[r] !== bsize[b]) continue;
      sym[l] = bmerged[b];
      len[l] += len[r];
      len[r] = 0;
      next[l] = next[r];
      if (next[r] >= 0) prev[next[r]] = l;
      this.#tryAdd(t.pairs, prev[l], l);
      this.#tryAdd(t.pairs, l, next[l]);
    }
    const nVocab = v.texts.length;
    for (let i = 0; i !== -1; i = next[i]) {
      const s = sym[i];
      if (s < nVocab) {
        out.push(s);
        continue;
      }
      // llama.cpp looks each UTF-8 byte of an unknown piece up as a one-byte
      // token; only ASCII bytes can name a (valid UTF-8) token.
      const piece = t.extraText[s - nVocab];
      for (let k = 0; k < piece.length; k++) {
        if (piece.charCodeAt(k) >= 0x80) continue;
        const id = v.byText.get(piece[k]);
        if (id !== undefined) out.push(id);
      }
    }
  }

  #tryAdd(pairs: PairTable, l: number, r: number): void {
    if (l < 0 || r < 0) return;
    const s = pairs.find(this.#sym[l], this.#sym[r]);
    if (s < 0) return;
    const b = this.#nb++;
    this.#bl[b] = l;
    this.#br[b] = r;
    this.#brank[b] = pairs.rank[s];
    this.#bmerged[b] = pairs.merged[s];
    this.#bsize[b] = this.#len[l] + this.#len[r];
    // Sift up: lower rank first, then leftmost.
    const heap = this.#heap, rank = this.#brank, left = this.#bl;
    const rk = rank[b], lf = left[b];
    let i = this.#nh++;
    while (i > 0) {
      const p = (i - 1) >> 1;
      const q = heap[p];
      if (!(rk < rank[q] || (rk === rank[q] && lf < left[q]))) break;
      heap[i] = q;
      i = p;
    }
    heap[i] = b;
  }

  #pop(): number {
    const heap = this.#heap, rank = this.#brank, left = this.#bl;
    const top = heap[0];
    const n = --this.#nh;
    if (n > 0) {
      const x = heap[n], rk = rank[x], lf = left[x];
      let i = 0;
      for (;;) {
        let c = 2 * i + 1;
        if (c >= n) break;
        const d = c + 1;
        if (
          d < n && (rank[heap[d]] < rank[heap[c]] ||
            (rank[heap[d]] === rank[heap[c]] && left[heap[d]] < left[heap[c]]))
        ) c = d;
        const y = heap[c];
        if (!(rank[y] < rk || (rank[y] === rk && left[y] < lf))) break;
        heap[i] = y;
        i = c;
      }
      heap[i] = x;
    }
    return top;
  }
}
