/**
 * The three word-level tokenizers of llama.cpp: SPM (score-driven bigram
 * merging with byte fallback), BPE (rank-driven merging over byte-level
 * words) and WPM (greedy longest match with BERT normalisation).
 *
 * @module
 */
export { BpeEncoder } from "./bpe.ts";
import { codePoints, CptFlag, cptFlags, nfdFirst, toLowerCpt } from "./unicode.ts";
import { TokenizerError, type Vocab } from "./vocab.ts";
import { WordCache, type WordCacheOptions } from "./word_cache.ts";

/** Byte-fallback token of each byte for SPM (`<0xHH>`, else the byte itself; -1 none). */
export function spmByteTokens(v: Vocab): Int32Array {
  const out = new Int32Array(256).fill(-1);
  for (let b = 0; b < 256; b++) {
    const hex = "<0x" + b.toString(16).toUpperCase().padStart(2, "0") + ">";
    out[b] = v.byText.get(hex) ?? (b < 0x80 ? v.byText.get(String.fromCharCode(b)) ?? -1 : -1);
  }
  return out;
}

// Scratch of spmEncode, grown as needed: symbols (UTF-16 start and length,
// links) and bigrams (left, right, score, size) with a heap of bigram indices.
let sStart = new Int32Array(64), sLen = new Int32Array(64);
let sPrev = new Int32Array(64), sNext = new Int32Array(64);
let bLeft = new Int32Array(192), bRight = new Int32Array(192), bSize = new Int32Array(192);
let bScore = new Float32Array(192), heap = new Int32Array(192);

function growSpm(n: number): void {
  let cap = sStart.length;
  while (cap < n) cap *= 2;
  sStart = new Int32Array(cap);
  sLen = new Int32Array(cap);
  sPrev = new Int32Array(cap);
  sNext = new Int32Array(cap);
  bLeft = new Int32Array(3 * cap);
  bRight = new Int32Array(3 * cap);
  bSize = new Int32Array(3 * cap);
  bScore = new Float32Array(3 * cap);
  heap = new Int32Array(3 * cap);
}

// Higher score first, then leftmost (llama.cpp's llm_bigram_spm order).
function spmBefore(a: number, b: number): boolean {
  return bScore[a] > bScore[b] || (bScore[a] === bScore[b] && bLeft[a] < bLeft[b]);
}

/** SPM over one already escaped text (spaces as ▁). */
export function spmEncode(v: Vocab, byteTok: Int32Array, text: string, out: number[]): void {
  const tl = text.length;
  if (tl === 0) return;
  if (sStart.length < tl) growSpm(tl);
  let n = 0;
  for (let i = 0; i < tl; n++) {
    const c = text.charCodeAt(i);
    const w = c >= 0xd800 && c <= 0xdbff && i + 1 < tl &&
        (text.charCodeAt(i + 1) & 0xfc00) === 0xdc00
      ? 2
      : 1;
    sStart[n] = i;
    sLen[n] = w;
    sPrev[n] = n - 1;
    sNext[n] = n + 1;
    i += w;
  }
  sNext[n - 1] = -1;
  let nb = 0, nh = 0;
  const tryAdd = (l: number, r: number) => {
    if (l === -1 || r === -1) return;
    const size = sLen[l] + sLen[r];
    const id = v.byText.get(text.substr(sStart[l], size));
    if (id === undefined) return;
    const b = nb++;
    bLeft[b] = l;
    bRight[b] = r;
    bScore[b] = v.scores[id];
    bSize[b] = size;
    let i = nh++;
    while (i > 0) {
      const p = (i - 1) >> 1;
      if (!spmBefore(b, heap[p])) break;
      heap[i] = heap[p];
      i = p;
    }
    heap[i] = b;
  };
  for (let i = 1; i < n; i++) tryAdd(i - 1, i);
  while (nh > 0) {
    const b = heap[0];
    const x = heap[--nh];
    if (nh > 0) {
      let i = 0;
      for (;;) {
        let c = 2 * i + 1;
        if (c >= nh) break;
        if (c + 1 < nh && spmBefore(heap[c + 1], heap[c])) c++;
        if (!spmBefore(heap[c], x)) break;
        heap[i] = heap[c];
        i = c;
      }
      heap[i] = x;
    }
    const l = bLeft[b], r = bRight[b];
    if (sLen[l] === 0 || sLen[r] === 0 || sLen[l] + sLen[r] !== bSize[b]) continue;
    sLen[l] += sLen[r];
    sLen[r] = 0;
    sNext[l] = sNext[r];
    if (sNext[r] >= 0) sPrev[sNext[r]] = l;
    tryAdd(sPrev[l], l);
    tryAdd(l, sNext[l]);
  }
  for (let i = 0; i !== -1; i = sNext[i]) {
    const piece = text.substr(sStart[i], sLen[i]);
    const id = v.byText.get(piece);
    if (id !== undefined) {
      out.push(id);
      continue;
    }
    for (let k = 0; k < piece.length; k++) {
      let c = piece.codePointAt(k)!;
      if (c > 0xffff) k++;
      else if (c >= 0xd800 && c <= 0xdfff) c = 0xfffd;
      if (c < 0x80) pushByte(byteTok, c, out);
      else if (c < 0x800) {
        pushByte(byteTok, 0xc0 | (c >> 6), out);
        pushByte(byteTok, 0x80 | (c & 0x3f), out);
      } else if (c < 0x10000) {
        pushByte(byteTok, 0xe0 | (c >> 12), out);
        pushByte(byteTok, 0x80 | ((c >> 6) & 0x3f), out);
        pushByte(byteTok, 0x80 | (c & 0x3f), out);
      } else {
        pushByte(byteTok, 0xf0 | (c >> 18), out);
        pushByte(byteTok, 0x80 | ((c >> 12) & 0x3f), out);
        pushByte(byteTok, 0x80 | ((c >> 6) & 0x3f), out);
        pushByte(byteTok, 0x80 | (c & 0x3f), out);
      }
    }
  }
}

function pushByte(byteTok: Int32Array, byte: number, out: number[]): void {
  const t = byteTok[byte];
  if (t < 0) throw new TokenizerError(`no byte-fallback token for 0x${byte.toString(16)}`);
  out.push(t);
}

/**
 * SPM over escaped text, split into words where no token can straddle the
 * split: before a "▁" that follows another character, when no token text
 * holds "▁" after something else. Merges never cross such a point, so each
 * word merges on its own exactly as inside the whole text, and repeated
 * words come from the cache.
 */
export class SpmEncoder {
  readonly #v: Vocab;
  readonly #byteTok: Int32Array;
  readonly #cache: WordCache;
  readonly #splittable: boolean;

  /** Prepares byte fallback and the word-split check for `v`. */
  constructor(v: Vocab, cache: WordCacheOptions = {}) {
    this.#v = v;
    this.#byteTok = spmByteTokens(v);
    this.#cache = new WordCache(cache);
    this.#splittable = !v.texts.some((t) => /[^\u2581]\u2581/u.test(t));
  }

  /** Appends the ids of an escaped text (spaces as ▁) to `out`. */
  encode(text: string, out: number[]): void {
    if (!this.#splittable) return spmEncode(this.#v, this.#byteTok, text, out);
    let from = 0;
    for (let i = 1; i <= text.length; i++) {
      if (
        i < text.length && !(text.charCodeAt(i) === 0x2581 && text.charCodeAt(i - 1) !== 0x2581)
      ) {
        continue;
      }
      this.#word(text.slice(from, i), out);
      from = i;
    }
  }

  #word(w: string, out: number[]): void {
    const cache = this.#cache;
    if (!cache.accepts(w.length)) return spmEncode(this.#v, this.#byteTok, w, out);
    if (cache.appendTo(w, out)) return;
    const from = out.length;
    spmEncode(this.#v, this.#byteTok, w, out);
    cache.store(w, out, from);
  }
}

/**
 * WPM with a cache per whitespace-separated chunk: normalisation and the
 * word split never look across whitespace, so a chunk's ids depend on the
 * chunk alone.
 */
export class WpmEncoder {
  readonly #v: Vocab;
  readonly #cache: WordCache;

  /** Creates the encoder for `v`. */
  constructor(v: Vocab, cache: WordCacheOptions = {}) {
    this.#v = v;
    this.#cache = new WordCache(cache);
  }

  /** Appends the ids of one raw-text fragment to `out`. */
  encode(text: string, out: number[]): void {
    const { cps, offs } = codePoints(text);
    const strip = this.#v.stripAccents;
    const n = cps.length;
    let start = -1;
    for (let i = 0; i <= n; i++) {
      let ws = i === n;
      if (!ws) {
        const c = strip ? nfdFirst(cps[i]) : cps[i];
        ws = (cptFlags(c) & CptFlag.WHITESPACE) !== 0;
      }
      if (!ws) {
        if (start < 0) start = i;
        continue;
      }
      if (start >= 0) this.#chunk(text.slice(offs[start], offs[i]), out);
      start = -1;
    }
  }

  #chunk(w: string, out: number[]): void {
    const cache = this.#cache;
    if (!cache.accepts(w.length)) return wpmEncode(this.#v, w, out);
    if (cache.appendTo(w, out)) return;
    const from = out.length;
    wpmEncode(this.#v, w, out);
    cache.store(w, out, from);
  }
}

// BERT's CJK ideograph blocks as llama.cpp lists them (one range differs from
// Unicode on purpose, following the HF implementation).
function isChineseChar(c: number): boolean {
  return (c >= 0x4e00 && c <= 0x9fff) || (c >= 0x3400 && c <= 0x4dbf) ||
    (c >= 0x20000 && c <= 0x2a6df) || (c >= 0x2a700 && c <= 0x2b73f) ||
    (c >= 0x2b740 && c <= 0x2b81f) || (c >= 0x2b920 && c <= 0x2ceaf) ||
    (c >= 0xf900 && c <= 0xfaff) || (c >= 0x2f800 && c <= 0x2fa1f);
}

const prefixCache = new WeakMap<Vocab, Set<string>>();

/** Every prefix (at code point boundaries) of every token text of `v`. */
function tokenPrefixes(v: Vocab): Set<string> {
  let set = prefixCache.get(v);
  if (!set) {
    set = new Set<string>();
    for (const t of v.texts) {
      let p = "";
      for (const ch of t) set.add(p += ch);
    }
    prefixCache.set(v, set);
  }
  return set;
}

// Scratch of wpmEncode: UTF-16 offset and UTF-8 position of each code point.
let wOffs = new Int32Array(64), wBpos = new Int32Array(64);

/** WPM over one raw-text fragment. */
export function wpmEncode(v: Vocab, text: string, out: number[]): void {
  const words = wpmPreprocess(text, v.lowercase, v.stripAccents);
  for (const word of words) {
    const w = "\u2581" + word;
    if (wOffs.length < w.length + 1) {
      wOffs = new Int32Array(2 * w.length + 2);
      wBpos = new Int32Array(2 * w.length + 2);
    }
    const offs = wOffs, bpos = wBpos;
    let n = 0;
    for (let u = 0; u < w.length; n++) {
      offs[n] = u;
      const c = w.codePointAt(u)!;
      u += c > 0xffff ? 2 : 1;
      // Lone surrogates are 3 UTF-8 bytes (as U+FFFD) like any BMP code point.
      bpos[n + 1] = bpos[n] + (c < 0x80 ? 1 : c < 0x800 ? 2 : c < 0x10000 ? 3 : 4);
    }
    offs[n] = w.length;
    const mark = out.length;
    let ok = true;
    // `far` is the last code point boundary within max_token_len + 1 bytes of
    // `i` (llama.cpp's longest candidate); it only moves forward as `i` does,
    // so finding it costs O(n) over the whole word instead of O(n) per token.
    let far = 0;
    const prefixes = tokenPrefixes(v);
    for (let i = 0; i < n;) {
      if (far < i) far = i;
      while (far < n && bpos[far + 1] - bpos[i] <= v.maxTokenLen + 1) far++;
      // Longest token from i, found growing: a longer token needs every shorter
      // prefix to be a token prefix, so the walk stops at the first that is not.
      let found = -1, j = i;
      for (let k = i + 1; k <= far; k++) {
        const s = w.slice(offs[i], offs[k]);
        if (!prefixes.has(s)) break;
        const id = v.byText.get(s);
        if (id !== undefined) {
          found = id;
          j = k;
        }
      }
      if (found < 0) {
        ok = false;
        break;
      }
      out.push(found);
      i = j;
    }
    if (!ok) out.length = mark;
    if (out.length === mark) out.push(v.ids.unk);
  }
}

/** BERT normalisation and splitting, as llama.cpp's WPM preprocess. */
export function wpmPreprocess(text: string, lowercase: boolean, stripAccents: boolean): string[] {
  const words: string[] = [];
  // The current word as string pieces joined on flush: spreading its code
  // points into String.fromCodePoint overflows the stack on long words.
  let cur: string[] = [];
  const flush = () => {
    if (cur.length) words.push(cur.join(""));
    cur = [];
  };
  for (let u = 0; u < text.length; u++) {
    let c = text.codePointAt(u)!;
    if (c > 0xffff) u++;
    else if (c >= 0xd800 && c <= 0xdfff) c = 0xfffd;
    if (stripAccents) c = nfdFirst(c);
    const f = cptFlags(c);
    if (f & CptFlag.WHITESPACE) {
      flush();
      continue;
    }
    if (c === 0 || c === 0xfffd || (f & CptFlag.CONTROL)) continue;
    if (stripAccents && (f & CptFlag.ACCENT_MARK)) continue;
    const o = lowercase ? toLowerCpt(c) : c;
    if ((f & CptFlag.PUNCTUATION) || (c < 0x7f && (f & CptFlag.SYMBOL)) || isChineseChar(c)) {
      flush();
      words.push(String.fromCodePoint(o));
    } else {
      cur.push(String.fromCodePoint(o));
    }
  }
  flush();
  return words;
}
