/**
 * Unicode facts the tokenizers need, with llama.cpp's meaning (src/unicode.cpp):
 * one general-category flag per code point, White_Space, simple lowercase and the
 * first code point of the NFD decomposition. Categories come from a table that
 * scripts/gen_unicode_data.ts generates from the `@unicode/unicode-15.1.0`
 * package; the rest from the JS engine (`\p{White_Space}`, `toLowerCase`,
 * `normalize`), memoised per code point. No hand-typed tables.
 *
 * @module
 */
import { CATEGORY_RUNS } from "./unicode_data.ts";

/** Category and helper bits, as llama.cpp's `unicode_cpt_flags`. */
export const CptFlag = {
  UNDEFINED: 0x0001,
  NUMBER: 0x0002,
  LETTER: 0x0004,
  SEPARATOR: 0x0008,
  ACCENT_MARK: 0x0010,
  PUNCTUATION: 0x0020,
  SYMBOL: 0x0040,
  CONTROL: 0x0080,
  WHITESPACE: 0x0100,
} as const;

/** Number of code points (U+0000..U+10FFFF). */
export const MAX_CODEPOINTS = 0x110000;

const RE_WS = /^\p{White_Space}$/u;

// Categories come from the generated Unicode 15.1 table (the version llama.cpp's
// tables were built from); White_Space is a fixed list that has not changed
// since Unicode 6 and all of it lies below U+3001, so the engine answers it.
// Two levels, as llama.cpp's table is one flat vector: blocks of 256 code
// points, each stored once (most of the 4352 are one flag throughout), and an
// index of blocks. A flat Uint16Array of every code point is 2.1 MiB of
// resident memory in each process; this is ~0.1 MiB, built on first use (SPM
// vocabularies never ask).
const BLOCK_BITS = 8;
const BLOCK = 1 << BLOCK_BITS;

interface FlagTable {
  /** Block id of each 256-code-point block. */
  readonly index: Uint16Array;
  /** The distinct blocks, BLOCK flags each. */
  readonly blocks: Uint16Array;
}

let table: FlagTable | null = null;

function buildFlagTable(): FlagTable {
  const index = new Uint16Array(MAX_CODEPOINTS >> BLOCK_BITS);
  const blocks: Uint16Array[] = [];
  const store = (x: Uint16Array) => blocks.push(x.slice()) - 1;
  // A block of one flag throughout, by flag; the others by their text.
  const uniform = new Map<number, number>();
  const mixed = new Map<string, number>();
  const uniformId = (flag: number) => {
    let id = uniform.get(flag);
    if (id === undefined) uniform.set(flag, id = store(new Uint16Array(BLOCK).fill(flag)));
    return id;
  };
  const block = new Uint16Array(BLOCK);
  let filled = 0; // code points of `block` written so far
  let b = 0; // the block being filled
  const finish = () => {
    if (b << BLOCK_BITS <= 0x3000) {
      for (let i = 0; i < BLOCK; i++) {
        if (RE_WS.test(String.fromCodePoint((b << BLOCK_BITS) + i))) block[i] |= CptFlag.WHITESPACE;
      }
    }
    let id: number | undefined;
    if (block.every((x) => x === block[0])) id = uniformId(block[0]);
    else {
      const key = String.fromCharCode(...block);
      id = mixed.get(key);
      if (id === undefined) mixed.set(key, id = store(block));
    }
    index[b++] = id;
    filled = 0;
  };
  let at = 0;
  for (const run of CATEGORY_RUNS.split(",")) {
    const colon = run.indexOf(":");
    const flag = parseInt(run.slice(0, colon), 16);
    let n = parseInt(run.slice(colon + 1), 36);
    at += n;
    while (n > 0 && b < index.length) {
      // Whole blocks inside the run (past the White_Space range): no filling.
      const whole = filled === 0 && b << BLOCK_BITS > 0x3000 ? n >> BLOCK_BITS : 0;
      if (whole > 0) {
        const k = Math.min(whole, index.length - b);
        index.fill(uniformId(flag), b, b + k);
        b += k;
        n -= k << BLOCK_BITS;
        continue;
      }
      const k = Math.min(n, BLOCK - filled);
      block.fill(flag, filled, filled + k);
      filled += k;
      n -= k;
      if (filled === BLOCK) finish();
    }
  }
  if (at !== MAX_CODEPOINTS || b !== index.length) {
    throw new Error("unicode_data.ts: category table is corrupt");
  }
  const all = new Uint16Array(blocks.length * BLOCK);
  blocks.forEach((x, i) => all.set(x, i * BLOCK));
  return { index, blocks: all };
}

/**
 * Flags of a code point (category bit | WHITESPACE). Out-of-range code points
 * are UNDEFINED, as in llama.cpp; callers model "past the end" as 0 themselves.
 */
export function cptFlags(cp: number): number {
  if (!(cp >= 0 && cp < MAX_CODEPOINTS)) return CptFlag.UNDEFINED;
  const t = table ??= buildFlagTable();
  return t.blocks[(t.index[cp >> BLOCK_BITS] << BLOCK_BITS) | (cp & (BLOCK - 1))];
}

// Code points unassigned in the table's Unicode version have no case or
// decomposition there, whatever the (newer) engine says.
function assigned(cp: number): boolean {
  return cp < MAX_CODEPOINTS && cptFlags(cp) !== CptFlag.UNDEFINED &&
    !(cp >= 0xd800 && cp <= 0xdfff);
}

const lowerCache = new Map<number, number>();

/**
 * Simple (one-to-one) lowercase mapping, as UnicodeData's field 13. The engine
 * gives the full mapping; where that expands (only U+0130 does), its first code
 * point is the simple mapping.
 */
export function toLowerCpt(cp: number): number {
  if (cp < 0x80) return cp >= 0x41 && cp <= 0x5a ? cp + 32 : cp;
  if (!assigned(cp)) return cp;
  let r = lowerCache.get(cp);
  if (r === undefined) {
    r = String.fromCodePoint(cp).toLowerCase().codePointAt(0)!;
    lowerCache.set(cp, r);
  }
  return r;
}

const nfdCache = new Map<number, number>();

/** First code point of the canonical decomposition (llama.cpp keeps only that one). */
export function nfdFirst(cp: number): number {
  if (cp < 0xc0 || !assigned(cp)) return cp;
  let r = nfdCache.get(cp);
  if (r === undefined) {
    r = String.fromCodePoint(cp).normalize("NFD").codePointAt(0)!;
    nfdCache.set(cp, r);
  }
  return r;
}

/**
 * GPT-2's byte-to-character table: printable Latin-1 bytes map to themselves,
 * the rest to U+0100 upwards in byte order.
 */
export const BYTE_TO_CHAR: readonly string[] = (() => {
  const out = new Array<string>(256);
  const printable = (b: number) =>
    (b >= 0x21 && b <= 0x7e) || (b >= 0xa1 && b <= 0xac) || (b >= 0xae && b <= 0xff);
  let n = 0;
  for (let b = 0; b < 256; b++) {
    out[b] = String.fromCharCode(printable(b) ? b : 256 + n++);
  }
  return out;
})();

/** Inverse of BYTE_TO_CHAR, indexed by UTF-16 code unit (-1 = not a byte char). */
export const CHAR_TO_BYTE: Int16Array = (() => {
  const out = new Int16Array(0x200).fill(-1);
  for (let b = 0; b < 256; b++) out[BYTE_TO_CHAR[b].charCodeAt(0)] = b;
  return out;
})();

/**
 * Code points of a JS string and the UTF-16 offset where each begins
 * (`offs[n]` = text.length). Lone surrogates become U+FFFD, which is what the
 * UTF-8 bytes the C library sees decode to.
 */
export function codePoints(text: string): { cps: Int32Array; offs: Int32Array } {
  const cps = new Int32Array(text.length);
  const offs = new Int32Array(text.length + 1);
  let n = 0;
  for (let i = 0; i < text.length;) {
    let c = text.charCodeAt(i);
    offs[n] = i;
    if (c >= 0xd800 && c <= 0xdbff && i + 1 < text.length) {
      const d = text.charCodeAt(i + 1);
      if (d >= 0xdc00 && d <= 0xdfff) {
        cps[n++] = ((c - 0xd800) << 10) + (d - 0xdc00) + 0x10000;
        i += 2;
        continue;
      }
    }
    if (c >= 0xd800 && c <= 0xdfff) c = 0xfffd;
    cps[n++] = c;
    i++;
  }
  offs[n] = text.length;
  return { cps: cps.subarray(0, n), offs: offs.subarray(0, n + 1) };
}

/** UTF-8 length of a code point. */
export function utf8Len(cp: number): number {
  return cp < 0x80 ? 1 : cp < 0x800 ? 2 : cp < 0x10000 ? 3 : 4;
}
