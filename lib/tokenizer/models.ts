/**
 * The three word-level tokenizers of llama.cpp: SPM (score-driven bigram
 * merging with byte fallback), BPE (rank-driven merging over byte-level
 * words) and WPM (greedy longest match with BERT normalisation).
 *
 * @module
 */
import { PreTokenizer } from "./pretokenize.ts";
import { BYTE_TO_CHAR, codePoints, CptFlag, cptFlags, nfdFirst, toLowerCpt } from "./unicode.ts";
import { TokenizerError, type Vocab } from "./vocab.ts";

/** A binary heap of bigram indices; `before(a, b)` says a pops first. */
class Heap {
  #h: number[] = [];
  constructor(private before: (a: number, b: number) => boolean) {}
  get size(): number {
    return this.#h.length;
  }
  push(x: number): void {
    const h = this.#h;
    let i = h.length;
    h.push(x);
    while (i > 0) {
      const p = (i - 1) >> 1;
      if (!this.before(x, h[p])) break;
      h[i] = h[p];
      i = p;
    }
    h[i] = x;
  }
  pop(): number {
    const h = this.#h;
    const top = h[0];
    const x = h.pop()!;
    const n = h.length;
    if (n > 0) {
      let i = 0;
      for (;;) {
        let c = 2 * i + 1;
        if (c >= n) break;
        if (c + 1 < n && this.before(h[c + 1], h[c])) c++;
        if (!this.before(h[c], x)) break;
        h[i] = h[c];
        i = c;
      }
      h[i] = x;
    }
    return top;
  }
}

const encoder = new TextEncoder();

/** Byte-fallback token of each byte for SPM (`<0xHH>`, else the byte itself; -1 none). */
export function spmByteTokens(v: Vocab): Int32Array {
  const out = new Int32Array(256).fill(-1);
  for (let b = 0; b < 256; b++) {
    const hex = "<0x" + b.toString(16).toUpperCase().padStart(2, "0") + ">";
    out[b] = v.byText.get(hex) ?? (b < 0x80 ? v.byText.get(String.fromCharCode(b)) ?? -1 : -1);
  }
  return out;
}

/** SPM over one already escaped text (spaces as ▁). */
export function spmEncode(v: Vocab, byteTok: Int32Array, text: string, out: number[]): void {
  const { cps, offs } = codePoints(text);
  const n = cps.length;
  if (n === 0) return;
  const start = Int32Array.from(offs.subarray(0, n));
  const len = new Int32Array(n);
  const prev = new Int32Array(n);
  const next = new Int32Array(n);
  for (let i = 0; i < n; i++) {
    len[i] = offs[i + 1] - offs[i];
    prev[i] = i - 1;
    next[i] = i + 1 < n ? i + 1 : -1;
  }
  // Bigrams live in parallel arrays; the heap holds their indices.
  const bl: number[] = [], br: number[] = [], bscore: number[] = [], bsize: number[] = [];
  const heap = new Heap((a, b) =>
    bscore[a] > bscore[b] || (bscore[a] === bscore[b] && bl[a] < bl[b])
  );
  const tryAdd = (l: number, r: number) => {
    if (l === -1 || r === -1) return;
    const id = v.byText.get(text.substr(start[l], len[l] + len[r]));
    if (id === undefined) return;
    bl.push(l);
    br.push(r);
    bscore.push(v.scores[id]);
    bsize.push(len[l] + len[r]);
    heap.push(bl.length - 1);
  };
  for (let i = 1; i < n; i++) tryAdd(i - 1, i);
  while (heap.size > 0) {
    const b = heap.pop();
    const l = bl[b], r = br[b];
    if (len[l] === 0 || len[r] === 0 || len[l] + len[r] !== bsize[b]) continue;
    len[l] += len[r];
    len[r] = 0;
    next[l] = next[r];
    if (next[r] >= 0) prev[next[r]] = l;
    tryAdd(prev[l], l);
    tryAdd(l, next[l]);
  }
  for (let i = 0; i !== -1; i = next[i]) {
    const piece = text.substr(start[i], len[i]);
    const id = v.byText.get(piece);
    if (id !== undefined) {
      out.push(id);
      continue;
    }
    for (const byte of encoder.encode(piece)) {
      const t = byteTok[byte];
      if (t < 0) {
        throw new TokenizerError(`no byte-fallback token for 0x${byte.toString(16)}`);
      }
      out.push(t);
    }
  }
}

/** BPE over one raw-text fragment. */
export class BpeEncoder {
  readonly #v: Vocab;
  readonly #pre: PreTokenizer;

  /** Compiles the vocabulary's pre-tokenizer. */
  constructor(v: Vocab) {
    this.#v = v;
    this.#pre = new PreTokenizer(v.pre!.exprs);
  }

  /** Appends the ids of `text` to `out`. */
  encode(text: string, out: number[]): void {
    const { cps, offs } = codePoints(text);
    const lens = this.#pre.split(text, cps, offs);
    // Byte-level text of the whole fragment; word k spans bytes [bo[k], bo[k+1]).
    const bytes = encoder.encode(text);
    const mapped = new Array<string>(bytes.length);
    for (let i = 0; i < bytes.length; i++) mapped[i] = BYTE_TO_CHAR[bytes[i]];
    const encoded = mapped.join("");
    let cp = 0, bo = 0;
    for (const n of lens) {
      let nb = 0;
      for (let i = cp; i < cp + n; i++) {
        const c = cps[i];
        nb += c < 0x80 ? 1 : c < 0x800 ? 2 : c < 0x10000 ? 3 : 4;
      }
      if (nb > 0) this.#word(encoded.substr(bo, nb), out);
      cp += n;
      bo += nb;
    }
  }

  #word(word: string, out: number[]): void {
    const v = this.#v;
    if (v.ignoreMerges) {
      const id = v.byText.get(word);
      if (id !== undefined) {
        out.push(id);
        return;
      }
    }
    const n = word.length; // every byte-level character is one UTF-16 unit
    const len = new Int32Array(n).fill(1);
    const prev = new Int32Array(n);
    const next = new Int32Array(n);
    for (let i = 0; i < n; i++) {
      prev[i] = i - 1;
      next[i] = i + 1 < n ? i + 1 : -1;
    }
    const bl: number[] = [], br: number[] = [], brank: number[] = [], btext: string[] = [];
    const heap = new Heap((a, b) =>
      brank[a] < brank[b] || (brank[a] === brank[b] && bl[a] < bl[b])
    );
    const tryAdd = (l: number, r: number) => {
      if (l === -1 || r === -1) return;
      const left = word.substr(l, len[l]), right = word.substr(r, len[r]);
      const rank = v.ranks.get(left + " " + right);
      if (rank === undefined) return;
      bl.push(l);
      br.push(r);
      brank.push(rank);
      btext.push(left + right);
      heap.push(bl.length - 1);
    };
    for (let i = 1; i < n; i++) tryAdd(i - 1, i);
    while (heap.size > 0) {
      const b = heap.pop();
      const l = bl[b], r = br[b];
      if (len[l] === 0 || len[r] === 0) continue;
      const t = btext[b];
      if (len[l] + len[r] !== t.length || word.substr(l, len[l] + len[r]) !== t) continue;
      len[l] += len[r];
      len[r] = 0;
      next[l] = next[r];
      if (next[r] >= 0) prev[next[r]] = l;
      tryAdd(prev[l], l);
      tryAdd(l, next[l]);
    }
    for (let i = 0; i < n; i++) {
      if (len[i] === 0) continue;
      const piece = word.substr(i, len[i]);
      const id = v.byText.get(piece);
      if (id !== undefined) {
        out.push(id);
        continue;
      }
      // llama.cpp looks each UTF-8 byte of the piece up as a one-byte token;
      // only ASCII bytes can name a (valid UTF-8) token.
      for (let k = 0; k < piece.length; k++) {
        const c = piece.charCodeAt(k);
        if (c >= 0x80) continue;
        const t = v.byText.get(piece[k]);
        if (t !== undefined) out.push(t);
      }
    }
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

/** WPM over one raw-text fragment. */
export function wpmEncode(v: Vocab, text: string, out: number[]): void {
  const words = wpmPreprocess(text, v.lowercase, v.stripAccents);
  for (const word of words) {
    const w = "\u2581" + word;
    const { cps, offs } = codePoints(w);
    const n = cps.length;
    const bpos = new Int32Array(n + 1);
    for (let i = 0; i < n; i++) {
      const c = cps[i];
      bpos[i + 1] = bpos[i] + (c < 0x80 ? 1 : c < 0x800 ? 2 : c < 0x10000 ? 3 : 4);
    }
    const mark = out.length;
    let ok = true;
    for (let i = 0; i < n;) {
      let j = n;
      while (j > i && bpos[j] - bpos[i] > v.maxTokenLen + 1) j--;
      let found = -1;
      for (; j > i; j--) {
        const id = v.byText.get(w.slice(offs[i], offs[j]));
        if (id !== undefined) {
          found = id;
          break;
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
  const { cps } = codePoints(text);
  const words: string[] = [];
  let cur: number[] = [];
  const flush = () => {
    if (cur.length) words.push(String.fromCodePoint(...cur));
    cur = [];
  };
  for (let c of cps) {
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
      cur.push(o);
    }
  }
  flush();
  return words;
}
