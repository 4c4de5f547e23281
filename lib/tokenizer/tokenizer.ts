/**
 * Text ↔ token ids with llama.cpp's semantics (`llama_tokenize`,
 * `llama_token_to_piece`, `llama_detokenize`).
 *
 * @module
 */
import type { GGUFHeader } from "../gguf/mod.ts";
import { BpeEncoder, SpmEncoder, WpmEncoder } from "./models.ts";
import { CHAR_TO_BYTE, codePoints } from "./unicode.ts";
import type { WordCacheOptions } from "./word_cache.ts";
import { TokenAttr, TokenizerError, Vocab, type VocabData, vocabDataFromGGUF } from "./vocab.ts";
import { OptionError } from "../options.ts";

/** Options of {@linkcode Tokenizer.encode}. */
export interface EncodeOptions {
  /** Add BOS/EOS (or CLS/SEP) as the model asks. Default true. */
  addSpecial?: boolean;
  /** Recognise control tokens spelled in the text. Default false. */
  parseSpecial?: boolean;
}

/** Options of {@linkcode Tokenizer.decode}. */
export interface DecodeOptions {
  /** Drop a leading BOS / trailing EOS the model adds itself. Default false. */
  removeSpecial?: boolean;
  /** Render control tokens as their text. Default false. */
  unparseSpecial?: boolean;
}

/** Options of the {@linkcode Tokenizer} constructor. */
export interface TokenizerOptions {
  /** Bounds of the per-tokenizer cache of encoded words. */
  wordCache?: WordCacheOptions;
}

/** A text fragment [start, end) of the input, or a special token id. */
type Fragment = { token: number } | { start: number; end: number };

const enc = new TextEncoder();
// ignoreBOM: a leading U+FEFF is text that llama.cpp's detokenize returns
// (EF BB BF), not a byte-order mark to drop.
const dec = new TextDecoder("utf-8", { ignoreBOM: true });
const EMPTY = new Uint8Array(0);

/** A tokenizer built from a GGUF vocabulary. */
export class Tokenizer {
  /**
   * The vocabulary with llama.cpp's derived state, for the engine and tests;
   * users have the accessors below.
   *
   * @internal
   */
  readonly vocab: Vocab;
  readonly #bpe: BpeEncoder | null;
  readonly #spm: SpmEncoder | null;
  readonly #wpm: WpmEncoder | null;
  readonly #pieces: (Uint8Array | undefined)[];

  /**
   * Builds a tokenizer from vocabulary fields. `opts.wordCache` bounds the
   * cache of encoded words (`{ maxEntries: 0 }` turns it off; ids are the
   * same either way).
   */
  constructor(data: VocabData, opts: TokenizerOptions = {}) {
    this.vocab = new Vocab(data);
    const t = this.vocab.type, wc = opts.wordCache;
    this.#bpe = t === "bpe" ? new BpeEncoder(this.vocab, wc) : null;
    this.#spm = t === "spm" ? new SpmEncoder(this.vocab, wc) : null;
    this.#wpm = t === "wpm" ? new WpmEncoder(this.vocab, wc) : null;
    this.#pieces = new Array(this.vocab.texts.length);
  }

  /** Builds a tokenizer from a parsed GGUF header (`tokenizer.ggml.*` keys). */
  static fromGGUF(header: GGUFHeader, opts: TokenizerOptions = {}): Tokenizer {
    return new Tokenizer(vocabDataFromGGUF(header), opts);
  }

  /** Number of tokens. */
  get nVocab(): number {
    return this.vocab.texts.length;
  }
  /** Beginning-of-sequence id (-1 = none). */
  get bos(): number {
    return this.vocab.ids.bos;
  }
  /** End-of-sequence id (-1 = none). */
  get eos(): number {
    return this.vocab.ids.eos;
  }
  /** End-of-turn id (-1 = none). */
  get eot(): number {
    return this.vocab.ids.eot;
  }
  /** Separator id (-1 = none). */
  get sep(): number {
    return this.vocab.ids.sep;
  }
  /** Whether generation stops at `id`. */
  isEog(id: number): boolean {
    return this.vocab.eog.has(id);
  }
  /** Whether `id` is a control token. */
  isControl(id: number): boolean {
    return (this.vocab.attrs[id] & TokenAttr.CONTROL) !== 0;
  }

  /** Text → ids, as `llama_tokenize`. Lone surrogates count as U+FFFD. */
  encode(text: string, opts: EncodeOptions = {}): number[] {
    const addSpecial = opts.addSpecial ?? true;
    const v = this.vocab;
    text = text.toWellFormed();
    const frags = text.length ? this.#partition(text, opts.parseSpecial ?? false) : [];
    const out: number[] = [];
    if (v.type === "spm") {
      let prevSpecial = true;
      if (addSpecial && v.addBos) out.push(this.#need(v.ids.bos, "BOS"));
      for (const f of frags) {
        if ("token" in f) {
          out.push(f.token);
          prevSpecial = true;
          continue;
        }
        let s = text.slice(f.start, f.end);
        if (v.addSpacePrefix && prevSpecial) s = " " + s;
        this.#spm!.encode(s.replaceAll(" ", "\u2581"), out);
        prevSpecial = false;
      }
      if (addSpecial && v.addEos) out.push(this.#need(v.ids.eos, "EOS"));
    } else if (v.type === "bpe") {
      if (addSpecial && v.addBos) out.push(this.#need(v.ids.bos, "BOS"));
      for (const f of frags) {
        if ("token" in f) out.push(f.token);
        else this.#bpe!.encode(text.slice(f.start, f.end), out);
      }
      if (addSpecial && v.addEos) out.push(this.#need(v.ids.eos, "EOS"));
    } else {
      if (addSpecial) out.push(this.#need(v.ids.bos, "BOS"));
      for (const f of frags) {
        if ("token" in f) out.push(f.token);
        else this.#wpm!.encode(text.slice(f.start, f.end), out);
      }
      if (addSpecial) out.push(this.#need(v.ids.sep, "SEP"));
    }
    return out;
  }

  #need(id: number, what: string): number {
    if (id < 0) throw new TokenizerError(`the model asks for ${what} but has none`);
    return id;
  }

  // Splits special tokens out of the text, longest first (llama.cpp's
  // tokenizer_st_partition), honouring lstrip/rstrip.
  #partition(text: string, parseSpecial: boolean): Fragment[] {
    const v = this.vocab;
    let frags: Fragment[] = [{ start: 0, end: text.length }];
    for (const id of v.specials) {
      const a = v.attrs[id];
      if (!parseSpecial && (a & (TokenAttr.CONTROL | TokenAttr.UNKNOWN))) continue;
      const tt = v.texts[id];
      if (text.indexOf(tt) === -1) continue;
      const next: Fragment[] = [];
      for (const f of frags) {
        if ("token" in f) {
          next.push(f);
          continue;
        }
        let { start } = f;
        const { end } = f;
        for (;;) {
          const m = text.indexOf(tt, start);
          if (m === -1 || m + tt.length > end) {
            if (end > start) next.push({ start, end });
            break;
          }
          let le = m;
          if (a & TokenAttr.LSTRIP) {
            while (le > start && isCSpace(text.charCodeAt(le - 1))) le--;
          }
          if (le > start) next.push({ start, end: le });
          next.push({ token: id });
          start = m + tt.length;
          if (a & TokenAttr.RSTRIP) {
            while (start < end && isCSpace(text.charCodeAt(start))) start++;
          }
          if (start >= end) break;
        }
      }
      frags = next;
    }
    return frags;
  }

  /**
   * The bytes of one token, as `llama_token_to_piece`: control/unknown tokens
   * are empty unless `special`; up to `lstrip` leading spaces are dropped.
   */
  pieceBytes(id: number, opts: { special?: boolean; lstrip?: number } = {}): Uint8Array {
    const v = this.vocab;
    if (!(Number.isInteger(id) && id >= 0 && id < v.texts.length)) {
      // 1.5 would index no piece and come out as "" without this check.
      throw new OptionError(
        "Tokenizer.decode",
        "id",
        id,
        `an integer token id in 0..${v.texts.length - 1}`,
      );
    }
    if (!opts.special && (v.attrs[id] & (TokenAttr.UNKNOWN | TokenAttr.CONTROL))) return EMPTY;
    let p = this.#pieces[id];
    if (!p) p = this.#pieces[id] = this.#piece(id);
    let s = 0;
    for (let i = 0; i < (opts.lstrip ?? 0) && s < p.length && p[s] === 0x20; i++) s++;
    return s ? p.subarray(s) : p;
  }

  /** A token as text (`pieceBytes` decoded; partial UTF-8 becomes U+FFFD). */
  tokenToPiece(id: number, opts: { special?: boolean } = {}): string {
    return dec.decode(this.pieceBytes(id, opts));
  }

  #piece(id: number): Uint8Array {
    const v = this.vocab;
    const a = v.attrs[id];
    const t = v.texts[id];
    if (a & (TokenAttr.UNKNOWN | TokenAttr.CONTROL | TokenAttr.USER_DEFINED)) return enc.encode(t);
    if (a & TokenAttr.NORMAL) {
      return v.type === "bpe" ? byteDecode(t) : enc.encode(t.replaceAll("\u2581", " "));
    }
    if (a & TokenAttr.BYTE) return Uint8Array.of(strtol16(t.slice(3, 5)));
    return EMPTY;
  }

  /** Ids → bytes, as `llama_detokenize` (may end in partial UTF-8). */
  decodeBytes(ids: ArrayLike<number>, opts: DecodeOptions = {}): Uint8Array {
    const v = this.vocab;
    let from = 0, to = ids.length;
    let removeSpace = v.addSpacePrefix;
    if (opts.removeSpecial && v.addBos && to > 0 && ids[0] === v.ids.bos) {
      removeSpace = false;
      from++;
    }
    if (opts.removeSpecial && v.addEos && to > from && ids[to - 1] === v.ids.eos) to--;
    const parts: Uint8Array[] = [];
    let total = 0;
    for (let i = from; i < to; i++) {
      const p = this.pieceBytes(ids[i], {
        special: opts.unparseSpecial,
        lstrip: removeSpace ? 1 : 0,
      });
      removeSpace = false;
      parts.push(p);
      total += p.length;
    }
    const out = new Uint8Array(total);
    let o = 0;
    for (const p of parts) {
      out.set(p, o);
      o += p.length;
    }
    return v.cleanSpaces ? cleanSpaces(out) : out;
  }

  /** Ids → text (invalid UTF-8 becomes U+FFFD). */
  decode(ids: ArrayLike<number>, opts: DecodeOptions = {}): string {
    return dec.decode(this.decodeBytes(ids, opts));
  }
}

/**
 * Feeds ids one at a time and yields text, holding back incomplete UTF-8.
 * Pieces are rendered as llama.cpp's common_token_to_piece does when streaming
 * (no leading-space strip).
 */
export class StreamDecoder {
  readonly #tok: Tokenizer;
  readonly #special: boolean;
  readonly #dec = new TextDecoder("utf-8", { ignoreBOM: true });

  /** `special` renders control tokens as text. */
  constructor(tokenizer: Tokenizer, opts: { special?: boolean } = {}) {
    this.#tok = tokenizer;
    this.#special = opts.special ?? false;
  }

  /** The text that `id` completes (may be ""). */
  push(id: number): string {
    return this.#dec.decode(this.#tok.pieceBytes(id, { special: this.#special }), { stream: true });
  }

  /** Whatever partial UTF-8 is left, as U+FFFD. */
  flush(): string {
    return this.#dec.decode();
  }
}

function isCSpace(c: number): boolean {
  return c === 0x20 || (c >= 0x09 && c <= 0x0d);
}

// strtol(s, 16) on the two hex digits of "<0xHH>": stops at the first non-digit.
function strtol16(s: string): number {
  let r = 0;
  for (const ch of s) {
    const d = parseInt(ch, 16);
    if (Number.isNaN(d)) break;
    r = r * 16 + d;
  }
  return r & 0xff;
}

// GPT-2 byte-level text → bytes; a character outside the byte table is
// rendered the way llama.cpp's llama_decode_text does.
function byteDecode(t: string): Uint8Array {
  const out: number[] = [];
  const { cps } = codePoints(t);
  for (const c of cps) {
    const b = c < CHAR_TO_BYTE.length ? CHAR_TO_BYTE[c] : -1;
    if (b >= 0) {
      out.push(b);
      continue;
    }
    const hex = [...enc.encode(String.fromCodePoint(c))].map((x) =>
      x.toString(16).padStart(2, "0")
    );
    out.push(...enc.encode("[UNK_BYTE_0x" + hex.join("") + t + "]"));
  }
  return Uint8Array.from(out);
}

// llama.cpp's clean_up_tokenization_spaces passes, byte for byte.
function cleanSpaces(t: Uint8Array): Uint8Array {
  const SP = 0x20, AP = 0x27;
  let total = t.length;
  // " ?", " !", " .", " ," lose the space
  let n = total;
  total = n ? 1 : 0;
  for (let i = 1; i < n; i++) {
    const x = t[i];
    if (t[i - 1] === SP && (x === 0x3f || x === 0x21 || x === 0x2e || x === 0x2c)) total--;
    t[total++] = x;
  }
  // " ' " → "'"
  n = total;
  total = n ? 1 : 0;
  for (let i = 1; i < n; i++) {
    const x = t[i];
    if (x === AP && i + 1 < n && t[i - 1] === SP && t[i + 1] === SP) {
      total--;
      t[++i] = 0;
    }
    t[total++] = x;
  }
  // " 's", " 'm", " 're", " 've" lose the space
  n = total;
  total = n ? 1 : 0;
  for (let i = 1; i < n; i++) {
    const x = t[i];
    if (t[i - 1] === SP && x === AP && i + 1 < n) {
      const x1 = t[i + 1];
      if (x1 === 0x73 || x1 === 0x6d) total--;
      else if (x1 !== 0x74 && x1 !== 0x64 && i + 2 < n) {
        const x2 = t[i + 2];
        if ((x1 === 0x72 && x2 === 0x65) || (x1 === 0x76 && x2 === 0x65)) total--;
      }
    }
    t[total++] = x;
  }
  return t.subarray(0, total);
}
