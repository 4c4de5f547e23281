/**
 * BPE pre-tokenization: splitting text into words the way llama.cpp's
 * `unicode_regex_split` does. Three regexes have hand-written matchers there
 * (GPT-2, LLaMA-3, Qwen2 and its variants) whose exact behaviour we mirror;
 * the others run through a regex engine either over a "collapsed" text (each
 * non-ASCII code point replaced by one byte naming its category, with `\p{..}`
 * rewritten to match those bytes) or over the code points themselves.
 *
 * @module
 */
import { CptFlag, cptFlags, toLowerCpt } from "./unicode.ts";

const F_WS = CptFlag.WHITESPACE;
const F_L = CptFlag.LETTER;
const F_N = CptFlag.NUMBER;
const F_M = CptFlag.ACCENT_MARK;

/** The regex list llama.cpp's GPT-2 matcher stands for. */
export const RE_GPT2 =
  "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)";
const CONTRACTIONS = "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])";
/** LLaMA-3's pre-tokenizer regex (case-insensitive contractions spelled out). */
export const RE_LLAMA3 = CONTRACTIONS +
  "|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
const RE_LLAMA3_ORIG =
  "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
/** Qwen2's pre-tokenizer regex. */
export const RE_QWEN2 = CONTRACTIONS +
  "|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
/** Qwen3.5's: marks join letters. */
export const RE_QWEN35 = CONTRACTIONS +
  "|[^\\r\\n\\p{L}\\p{N}]?[\\p{L}\\p{M}]+|\\p{N}| ?[^\\s\\p{L}\\p{M}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
const RE_NEWLINES = "[^\\n]+|[\\n]+";

/** A span of code points [start, end) and where split lengths go. */
type Splitter = (cps: Int32Array, start: number, end: number, out: number[]) => void;

function splitGpt2(cps: Int32Array, ini: number, end: number, out: number[]): void {
  const cp = (p: number) => (p >= ini && p < end ? cps[p] : -1);
  const fl = (p: number) => (p >= ini && p < end ? cptFlags(cps[p]) : 0);
  let prev = ini;
  const emit = (e: number) => {
    const n = e - prev;
    if (n > 0) out.push(n);
    prev = e;
    return n;
  };
  for (let pos = ini; pos < end;) {
    const c = cps[pos];
    if (c === 0x27 && pos + 1 < end) {
      const n1 = cp(pos + 1);
      if (n1 === 0x73 || n1 === 0x74 || n1 === 0x6d || n1 === 0x64) {
        pos += emit(pos + 2);
        continue;
      }
      if (pos + 2 < end) {
        const n2 = cp(pos + 2);
        if (
          (n1 === 0x72 && n2 === 0x65) || (n1 === 0x76 && n2 === 0x65) ||
          (n1 === 0x6c && n2 === 0x6c)
        ) {
          pos += emit(pos + 3);
          continue;
        }
      }
    }
    let f2 = c === 0x20 ? fl(pos + 1) : fl(pos);
    if (f2 & F_L) {
      if (c === 0x20) pos++;
      while (f2 & F_L) f2 = fl(++pos);
      emit(pos);
      continue;
    }
    if (f2 & F_N) {
      if (c === 0x20) pos++;
      while (f2 & F_N) f2 = fl(++pos);
      emit(pos);
      continue;
    }
    if (!(f2 & (F_WS | F_L | F_N)) && f2) {
      if (c === 0x20) pos++;
      while (!(f2 & (F_WS | F_L | F_N)) && f2) f2 = fl(++pos);
      emit(pos);
      continue;
    }
    let ws = 0;
    while (fl(pos + ws) & F_WS) ws++;
    if (ws > 1 && cp(pos + ws) !== -1) {
      pos += ws - 1;
      emit(pos);
      continue;
    }
    if (ws > 0) {
      pos += ws;
      emit(pos);
      continue;
    }
    emit(++pos);
  }
}

/** LLaMA-3 / Qwen2 / Qwen3.5 matchers differ in digit grouping and marks. */
function splitLlama3Like(maxDigits: number, marks: boolean): Splitter {
  const wordMask = marks ? F_L | F_M : F_L;
  return (cps, ini, end, out) => {
    const cp = (p: number) => (p >= ini && p < end ? cps[p] : -1);
    const fl = (p: number) => (p >= ini && p < end ? cptFlags(cps[p]) : 0);
    let prev = ini;
    const emit = (e: number) => {
      const n = e - prev;
      if (n > 0) out.push(n);
      prev = e;
      return n;
    };
    for (let pos = ini; pos < end;) {
      const c = cps[pos];
      const f = fl(pos);
      if (c === 0x27 && pos + 1 < end) {
        const n1 = toLowerCpt(cp(pos + 1));
        if (n1 === 0x73 || n1 === 0x74 || n1 === 0x6d || n1 === 0x64) {
          pos += emit(pos + 2);
          continue;
        }
        if (pos + 2 < end) {
          const n2 = toLowerCpt(cp(pos + 2));
          if (
            (n1 === 0x72 && n2 === 0x65) || (n1 === 0x76 && n2 === 0x65) ||
            (n1 === 0x6c && n2 === 0x6c)
          ) {
            pos += emit(pos + 3);
            continue;
          }
        }
      }
      if (!(c === 0x0d || c === 0x0a || (f & F_N))) {
        if ((f & wordMask) || (fl(pos + 1) & wordMask)) {
          pos++;
          while (fl(pos) & wordMask) pos++;
          emit(pos);
          continue;
        }
      }
      if (f & F_N) {
        if (maxDigits === 1) {
          emit(++pos);
          continue;
        }
        let from = pos;
        while (fl(pos) & F_N) {
          if (++pos - from >= maxDigits) {
            emit(pos);
            from = pos;
          }
        }
        emit(pos);
        continue;
      }
      const notWord = F_WS | F_L | F_N | (marks ? F_M : 0);
      let f2 = c === 0x20 ? fl(pos + 1) : f;
      if (!(f2 & notWord) && f) {
        if (c === 0x20) pos++;
        while (!(f2 & notWord) && f2) f2 = fl(++pos);
        let c2 = cp(pos);
        while (c2 === 0x0d || c2 === 0x0a) c2 = cp(++pos);
        emit(pos);
        continue;
      }
      let ws = 0;
      let lastNl = 0;
      while (fl(pos + ws) & F_WS) {
        const c2 = cp(pos + ws);
        if (c2 === 0x0d || c2 === 0x0a) lastNl = pos + ws + 1;
        ws++;
      }
      if (lastNl > 0) {
        pos = lastNl;
        emit(pos);
        continue;
      }
      if (ws > 1 && cp(pos + ws) !== -1) {
        pos += ws - 1;
        emit(pos);
        continue;
      }
      if (ws > 0) {
        pos += ws;
        emit(pos);
        continue;
      }
      emit(++pos);
    }
  };
}

function splitNewlines(cps: Int32Array, ini: number, end: number, out: number[]): void {
  for (let pos = ini; pos < end;) {
    const nl = cps[pos] === 0x0a;
    const from = pos;
    while (pos < end && (cps[pos] === 0x0a) === nl) pos++;
    out.push(pos - from);
  }
}

const CUSTOM = new Map<string, Splitter>([
  [RE_GPT2, splitGpt2],
  [RE_LLAMA3, splitLlama3Like(3, false)],
  [RE_LLAMA3_ORIG, splitLlama3Like(3, false)],
  [RE_QWEN2, splitLlama3Like(1, false)],
  [RE_QWEN35, splitLlama3Like(1, true)],
  [RE_NEWLINES, splitNewlines],
]);

// Collapsed-text categories: the byte llama.cpp substitutes for a non-ASCII code
// point of that category, and the ASCII members of the category (in regex class
// syntax) that stay themselves.
const UCAT: Record<string, [number, string]> = {
  "\\p{N}": [0xd1, "0-9"],
  "\\p{L}": [0xd2, "A-Za-z"],
  "\\p{P}": [0xd3, "!-#%-*,-/:-;?-@\\[-\\]_\\{\\}"],
  "\\p{M}": [0xd4, ""],
  "\\p{S}": [0xd5, "\\$\\+<=>\\^`\\|~"],
  "\\p{Lu}": [0xd2, "A-Za-z"],
  "\\p{Ll}": [0xd2, "A-Za-z"],
  "\\p{Lt}": [0xd2, "A-Za-z"],
  "\\p{Lm}": [0xd2, "A-Za-z"],
  "\\p{Lo}": [0xd2, "A-Za-z"],
};

function usesCategories(re: string): boolean {
  for (const k in UCAT) if (re.includes(k)) return true;
  return false;
}

/** Rewrites `\p{..}` into classes over collapsed bytes (llama.cpp's scheme). */
function collapseRegex(re: string): string {
  let out = "";
  let inside = false;
  for (let i = 0; i < re.length; i++) {
    const ch = re[i];
    if (ch === "[" && (i === 0 || re[i - 1] !== "\\")) {
      out += "[";
      inside = true;
      continue;
    }
    if (inside && ch === "]" && re[i - 1] !== "\\") {
      out += "]";
      inside = false;
      continue;
    }
    if (ch === "\\" && i + 3 < re.length && re[i + 1] === "p" && re[i + 2] === "{") {
      const close = re.indexOf("}", i + 3);
      if (close !== -1 && close <= i + 10) {
        const cat = UCAT[re.slice(i, close + 1)];
        if (cat) {
          const body = "\\u00" + cat[0].toString(16).toUpperCase() + cat[1];
          out += inside ? body : "[" + body + "]";
          i = close;
          continue;
        }
      }
    }
    out += ch;
  }
  return out;
}

/**
 * std::regex's `\s` in the C locale is the six ASCII spaces; JS's also takes
 * U+FEFF and Unicode spaces, so spell it out for regexes run on code points.
 */
function cLocaleSpaces(re: string): string {
  let out = "";
  let inside = false;
  for (let i = 0; i < re.length; i++) {
    const ch = re[i];
    if (ch === "\\" && i + 1 < re.length) {
      const n = re[i + 1];
      if (n === "s") out += inside ? "\\t-\\r " : "[\\t-\\r ]";
      else if (n === "S" && !inside) out += "[^\\t-\\r ]";
      else out += ch + n;
      i++;
      continue;
    }
    if (ch === "[" && !inside) inside = true;
    else if (ch === "]" && inside) inside = false;
    out += ch;
  }
  return out;
}

/** One regex of the list, compiled for our engine. */
interface Step {
  custom?: Splitter;
  collapsed?: RegExp;
  wide?: RegExp;
}

/** A compiled pre-tokenizer: a list of regexes applied one after the other. */
export class PreTokenizer {
  readonly #steps: Step[];
  readonly #needCollapse: boolean;

  /** Compiles llama.cpp's regex list `exprs`. */
  constructor(readonly exprs: readonly string[]) {
    this.#needCollapse = exprs.some(usesCategories);
    this.#steps = exprs.map((re) => {
      const custom = CUSTOM.get(re);
      if (custom) return { custom };
      if (usesCategories(re)) return { collapsed: new RegExp(collapseRegex(re), "g") };
      return { wide: new RegExp(cLocaleSpaces(re), "gu") };
    });
  }

  /**
   * Splits `cps` (code points of a text, UTF-16 offsets in `offs`, the text in
   * `text`) into word lengths in code points.
   */
  split(text: string, cps: Int32Array, offs: Int32Array): number[] {
    let lens = [cps.length];
    let collapsed = "";
    if (this.#needCollapse) collapsed = collapse(cps);
    let wide = "";
    let u2c: Int32Array | null = null;
    for (const step of this.#steps) {
      const out: number[] = [];
      let start = 0;
      for (const len of lens) {
        const end = start + len;
        if (step.custom) step.custom(cps, start, end, out);
        else if (step.collapsed) {
          regexSplit(step.collapsed, collapsed.slice(start, end), null, out);
        } else {
          if (!u2c) {
            wide = wideText(text, cps, offs);
            u2c = new Int32Array(text.length + 1);
            for (let i = 0; i < cps.length; i++) u2c[offs[i]] = i;
            u2c[text.length] = cps.length;
          }
          const base = offs[start];
          regexSplit(step.wide!, wide.slice(base, offs[end]), (u) => u2c![base + u] - start, out);
        }
        start = end;
      }
      lens = out;
    }
    return lens;
  }
}

// Matches and the gaps between them both become words, as std::regex_iterator
// is used in llama.cpp; `toCp` maps a UTF-16 index in `s` to code points.
function regexSplit(
  re: RegExp,
  s: string,
  toCp: ((u: number) => number) | null,
  out: number[],
): void {
  const at = toCp ?? ((u: number) => u);
  re.lastIndex = 0;
  let last = 0;
  for (let m = re.exec(s); m !== null; m = re.exec(s)) {
    const a = at(m.index);
    const b = at(m.index + m[0].length);
    if (a > last) out.push(a - last);
    out.push(b - a);
    last = b;
    if (m[0].length === 0) re.lastIndex++;
  }
  const total = at(s.length);
  if (last < total) out.push(total - last);
}

const latin1 = new TextDecoder("latin1");

function collapse(cps: Int32Array): string {
  const b = new Uint8Array(cps.length);
  for (let i = 0; i < cps.length; i++) {
    const c = cps[i];
    if (c < 0x80) {
      b[i] = c;
      continue;
    }
    const f = cptFlags(c);
    if (f & F_WS) b[i] = 0x0b;
    else if (f & F_N) b[i] = 0xd1;
    else if (f & F_L) b[i] = 0xd2;
    else if (f & CptFlag.PUNCTUATION) b[i] = 0xd3;
    else if (f & F_M) b[i] = 0xd4;
    else if (f & CptFlag.SYMBOL) b[i] = 0xd5;
    else b[i] = 0xd0;
  }
  // windows-1252 (what "latin1" decodes as) only differs from Latin-1 in 0x80-0x9F.
  return latin1.decode(b);
}

function wideText(text: string, cps: Int32Array, offs: Int32Array): string {
  let out = "";
  let from = 0;
  for (let i = 0; i < cps.length; i++) {
    const c = cps[i];
    const lone = c === 0xfffd && text.charCodeAt(offs[i]) !== 0xfffd;
    if ((c > 0x7f && (cptFlags(c) & F_WS)) || lone) {
      out += text.slice(from, offs[i]) + (lone ? "\ufffd" : "\x0b");
      from = offs[i + 1];
    }
  }
  return out + text.slice(from);
}
