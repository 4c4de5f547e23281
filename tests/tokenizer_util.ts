/**
 * Shared helpers of the tokenizer tests: where the vocab fixtures live, and a
 * seeded generator of hostile strings.
 *
 * @module
 */
import { readGGUF } from "../lib/gguf/mod.ts";
import { Tokenizer } from "../lib/tokenizer/mod.ts";
import { mulberry32 as rng } from "./rng.ts";
export { rng };

/** ../shared/fixtures/vocab, relative to the repository root. */
export const VOCAB_DIR = new URL("../../shared/fixtures/vocab/", import.meta.url).pathname;
/** The tolstoy model (SPM, byte fallback). */
export const TOLSTOY = new URL("../../shared/models/tolstoy-6m-f16.gguf", import.meta.url)
  .pathname;

/** Every vocab GGUF under VOCAB_DIR, sorted. */
export function vocabFiles(): string[] {
  return [...Deno.readDirSync(VOCAB_DIR)].map((e) => e.name).filter((n) => n.endsWith(".gguf"))
    .sort().map((n) => VOCAB_DIR + n);
}

/** Loads our tokenizer for a GGUF file. */
export async function loadTokenizer(path: string): Promise<Tokenizer> {
  return Tokenizer.fromGGUF(await readGGUF(path));
}

const WORDS = [
  "hello",
  "World",
  "the",
  "I'm",
  "don't",
  "WE'RE",
  "they'll",
  "it'S",
  "café",
  "naïve",
  "Привет",
  "мир",
  "Ελληνικά",
  "中文字符",
  "日本語です",
  "한국어",
  "العربية",
  "हिन्दी",
  "ไทย",
  "ḍḥṃ",
  "Ⅻ",
  "½",
  "x²",
  "١٢٣",
  "ℌ",
  "ﬁ",
  "İstanbul",
  "ΣΑΣ",
  "ß",
  "a\u0301",
  "e\u0308\u0301",
  "\u1100\u1161",
  "Å",
  "Kelvin\u212a",
];
const SPACES = [
  " ",
  "  ",
  "   ",
  "\t",
  "\n",
  "\n\n",
  "\r\n",
  " \n ",
  "\u3000",
  "\u00a0",
  "\u2028",
  "\u0085",
  "\u2009",
  "\v",
  "\f",
  "\u1680",
];
const PUNCT = [
  ".",
  ",",
  "!",
  "?",
  "'",
  '"',
  "...",
  "--",
  "(",
  ")",
  "[",
  "]",
  "{",
  "}",
  "<",
  ">",
  "$",
  "+",
  "=",
  "^",
  "~",
  "|",
  "`",
  "@",
  "#",
  "%",
  "&",
  "*",
  "/",
  "\\",
  ":",
  ";",
  "_",
  "«",
  "»",
  "。",
  "，",
  "、",
  "…",
  "—",
  "‘",
  "’",
  "“",
  "”",
  "¿",
  "¡",
  "§",
  "€",
  "£",
  "©",
  "®",
  "°",
  "±",
];
const EMOJI = ["😀", "🦙", "👍🏽", "👨‍👩‍👧", "🇺🇦", "❤️", "✨", "🤖", "\u{1f600}\u{1f601}", "🏳️‍🌈"];
const CONTROL = [
  "\x00",
  "\x01",
  "\x07",
  "\x1b",
  "\x1f",
  "\x7f",
  "\u200b",
  "\u200d",
  "\ufeff",
  "\u00ad",
  "\ue000",
  "\u{10ffff}",
  "\ufffd",
  "\ud800",
  "\udfff",
  "a\ud83d",
  "\udc00z",
];

/**
 * A random hostile string: words of many scripts, whitespace runs, digits,
 * punctuation, emoji, control characters, lone surrogates, random code points
 * (newer than llama.cpp's Unicode tables too) and the texts of `specials`.
 */
export function randomText(r: () => number, specials: string[]): string {
  const pick = <T>(a: T[]) => a[Math.floor(r() * a.length)];
  const n = Math.floor(r() * 24);
  let s = "";
  for (let i = 0; i < n; i++) {
    const k = r();
    if (k < 0.25) s += pick(WORDS);
    else if (k < 0.4) s += pick(SPACES);
    else if (k < 0.5) s += String(Math.floor(r() * 10 ** Math.floor(r() * 9)));
    else if (k < 0.6) s += pick(PUNCT);
    else if (k < 0.67) s += pick(EMOJI);
    else if (k < 0.73) s += pick(CONTROL);
    else if (k < 0.83 && specials.length) s += pick(specials);
    else if (k < 0.9) {
      // any code point; surrogate halves stay lone
      const cp = r() < 0.5 ? Math.floor(r() * 0x3000) : Math.floor(r() * 0x110000);
      s += cp >= 0xd800 && cp <= 0xdfff ? String.fromCharCode(cp) : String.fromCodePoint(cp);
    } else s += pick(["'s", "'T", "'re", "'VE", "'m", "'ll", "'D", " 's", "''", "a'b"]);
  }
  return s;
}

// Devanagari with its signs (virama, nukta, matras, candrabindu, visarga),
// Cyrillic with combining stress/diaeresis, Arabic with harakat, shadda and
// superscript alef, plus the joiners that sit between such marks.
const MIXED = [
  "हिन्दी",
  "क्षत्रिय",
  "क़ि",
  "\u0915\u093c",
  "\u0958",
  "ँ",
  "ं",
  "ः",
  "\u094d",
  "ि",
  "Привет",
  "Ёжик",
  "ё",
  "й",
  "и\u0306",
  "е\u0308",
  "о\u0301",
  "\u0301",
  "العربية",
  "عَرَبِيّ",
  "بّ",
  "ـً",
  "\u0670",
  "\u0651",
  "\u064b\u064c",
  "\u200c",
  "\u200d",
];
const MIXED_BLOCKS: [number, number][] = [[0x900, 0x97f], [0x400, 0x4ff], [0x600, 0x6ff], [
  0x300,
  0x36f,
]];

/** A random string mixing Devanagari, Cyrillic and Arabic with combining marks. */
export function mixedScriptText(r: () => number): string {
  const n = 1 + Math.floor(r() * 12);
  let s = "";
  for (let i = 0; i < n; i++) {
    const k = r();
    if (k < 0.6) s += MIXED[Math.floor(r() * MIXED.length)];
    else if (k < 0.85) {
      const [a, b] = MIXED_BLOCKS[Math.floor(r() * MIXED_BLOCKS.length)];
      s += String.fromCodePoint(a + Math.floor(r() * (b - a + 1)));
    } else s += r() < 0.5 ? " " : "A";
  }
  return s;
}
