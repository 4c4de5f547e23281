/**
 * GBNF parser with llama.cpp's semantics (src/llama-grammar.cpp): the same
 * rule/element encoding, the same rewriting of `* + ? {m,n}` into helper
 * rules, the same acceptance of whitespace, comments and newlines, and the
 * same rejections (undefined rules, missing root, left recursion, repetition
 * limits) — reported as {@link GrammarSyntaxError} with line and column.
 *
 * @module
 */

/** Element types, numbered as llama.cpp's `llama_gretype`. */
export const GreType = {
  END: 0,
  ALT: 1,
  RULE_REF: 2,
  CHAR: 3,
  CHAR_NOT: 4,
  CHAR_RNG_UPPER: 5,
  CHAR_ALT: 6,
  CHAR_ANY: 7,
  TOKEN: 8,
  TOKEN_NOT: 9,
} as const;

/** A rule body: flat [type, value, type, value, ...] ending with END. */
export type GrammarRule = number[];

/** A parsed grammar: rules indexed by symbol id. */
export interface ParsedGrammar {
  /** Rule bodies, `rules[id]` (pairs of type, value). */
  rules: GrammarRule[];
  /** Symbol names (including generated helper names) to ids. */
  symbols: Map<string, number>;
  /** Index of the start rule. */
  root: number;
}

/** Options of {@link parseGrammar}. */
export interface ParseGrammarOptions {
  /** Start symbol (default "root"). */
  root?: string;
  /** Resolves `<text>` token references to one token id (else they are an error). */
  tokenize?: (text: string) => number[];
}

/** A malformed or unsupported grammar, located by line and column (1-based). */
export class GrammarSyntaxError extends Error {
  /** 1-based line. */
  readonly line: number;
  /** 1-based column (in UTF-16 units). */
  readonly column: number;
  /** Offset in the source. */
  readonly offset: number;

  /** Creates the instance. */
  constructor(message: string, src: string, offset: number) {
    let line = 1, col = 1;
    for (let i = 0; i < offset && i < src.length; i++) {
      if (src[i] === "\n") {
        line++;
        col = 1;
      } else col++;
    }
    super(`grammar:${line}:${col}: ${message}`);
    this.name = "GrammarSyntaxError";
    this.line = line;
    this.column = col;
    this.offset = offset;
  }
}

const MAX_REPETITION = 2000;

function isDigit(c: string | undefined): boolean {
  return c !== undefined && c >= "0" && c <= "9";
}

function isWord(c: string | undefined): boolean {
  return c !== undefined &&
    ((c >= "a" && c <= "z") || (c >= "A" && c <= "Z") || c === "-" || isDigit(c));
}

class Parser {
  readonly symbols = new Map<string, number>();
  readonly rules: GrammarRule[] = [];
  readonly s: string;

  constructor(src: string, readonly tokenize?: (text: string) => number[]) {
    // A C string ends at its first NUL.
    const nul = src.indexOf("\0");
    this.s = nul >= 0 ? src.slice(0, nul) : src;
  }

  fail(msg: string, at: number): never {
    throw new GrammarSyntaxError(msg, this.s, at);
  }

  symbolId(name: string): number {
    let id = this.symbols.get(name);
    if (id === undefined) {
      id = this.symbols.size;
      this.symbols.set(name, id);
    }
    return id;
  }

  generateId(base: string): number {
    const id = this.symbols.size;
    this.symbols.set(`${base}_${id}`, id);
    return id;
  }

  addRule(id: number, rule: GrammarRule): void {
    while (this.rules.length <= id) this.rules.push([]);
    this.rules[id] = rule;
  }

  space(pos: number, newlineOk: boolean): number {
    const s = this.s;
    for (;;) {
      const c = s[pos];
      if (c === " " || c === "\t" || (newlineOk && (c === "\r" || c === "\n"))) pos++;
      else if (c === "#") {
        while (pos < s.length && s[pos] !== "\r" && s[pos] !== "\n") pos++;
      } else return pos;
    }
  }

  name(pos: number): number {
    let e = pos;
    while (isWord(this.s[e])) e++;
    if (e === pos) this.fail("expecting name", pos);
    return e;
  }

  int(pos: number): number {
    let e = pos;
    while (isDigit(this.s[e])) e++;
    if (e === pos) this.fail("expecting integer", pos);
    return e;
  }

  hex(pos: number, size: number): [number, number] {
    let v = 0, p = pos;
    const end = pos + size;
    for (; p < end && p < this.s.length; p++) {
      const d = parseInt(this.s[p], 16);
      if (Number.isNaN(d)) break;
      v = v * 16 + d;
    }
    if (p !== end) this.fail(`expecting ${size} hex chars`, pos);
    return [v >>> 0, p];
  }

  char(pos: number): [number, number] {
    const s = this.s;
    if (s[pos] === "\\") {
      switch (s[pos + 1]) {
        case "x":
          return this.hex(pos + 2, 2);
        case "u":
          return this.hex(pos + 2, 4);
        case "U":
          return this.hex(pos + 2, 8);
        case "t":
          return [9, pos + 2];
        case "r":
          return [13, pos + 2];
        case "n":
          return [10, pos + 2];
        case "\\":
        case '"':
        case "[":
        case "]":
        case "-":
          return [s.charCodeAt(pos + 1), pos + 2];
        default:
          this.fail("unknown escape", pos);
      }
    }
    if (pos < s.length) {
      const cp = s.codePointAt(pos)!;
      return [cp, pos + (cp > 0xffff ? 2 : 1)];
    }
    this.fail("unexpected end of input", pos);
  }

  token(pos: number): [number, number] {
    const s = this.s, start = pos;
    if (s[pos] !== "<") this.fail("expecting '<'", pos);
    pos++;
    if (s[pos] === "[") {
      pos++;
      const e = this.int(pos);
      const id = Number(s.slice(pos, e));
      if (id > 0xffffffff) this.fail("token id out of range", pos);
      pos = e;
      if (s[pos] !== "]") this.fail("expecting ']'", pos);
      pos++;
      if (s[pos] !== ">") this.fail("expecting '>'", pos);
      return [id, pos + 1];
    }
    if (!this.tokenize) this.fail("no vocab to parse token", start);
    while (pos < s.length && s[pos] !== ">") pos++;
    if (s[pos] !== ">") this.fail("expecting '>'", pos);
    pos++;
    const ids = this.tokenize(s.slice(start, pos));
    if (ids.length !== 1) this.fail(`invalid token '${s.slice(start, pos)}'`, start);
    return [ids[0], pos];
  }

  alternates(pos: number, ruleName: string, ruleId: number, nested: boolean): number {
    const rule: GrammarRule = [];
    pos = this.sequence(pos, ruleName, rule, nested);
    while (this.s[pos] === "|") {
      rule.push(GreType.ALT, 0);
      pos = this.space(pos + 1, true);
      pos = this.sequence(pos, ruleName, rule, nested);
    }
    rule.push(GreType.END, 0);
    this.addRule(ruleId, rule);
    return pos;
  }

  sequence(pos: number, ruleName: string, rule: GrammarRule, nested: boolean): number {
    const s = this.s;
    let lastStart = rule.length;
    let prevRules = 1;

    const repeat = (min: number, max: number, at: number) => {
      const noMax = max === Infinity;
      if (lastStart === rule.length) this.fail("expecting preceding item to */+/?/{", at);
      const prev = rule.slice(lastStart);
      const total = !noMax && max > 0 ? max : min > 0 ? min : 1;
      if (prevRules * total > MAX_REPETITION) {
        this.fail("too many repetitions of repeated rules (llama.cpp's limit is 2000)", at);
      }
      if (!noMax && max < min) this.fail("repetition maximum below minimum", at);
      if (min === 0) rule.length = lastStart;
      else for (let i = 1; i < min; i++) rule.push(...prev);
      let lastRec = 0;
      const nOpt = noMax ? 1 : max - min;
      for (let i = 0; i < nOpt; i++) {
        const rec = prev.slice();
        const recId = this.generateId(ruleName);
        if (i > 0 || noMax) rec.push(GreType.RULE_REF, noMax ? recId : lastRec);
        rec.push(GreType.ALT, 0, GreType.END, 0);
        this.addRule(recId, rec);
        lastRec = recId;
      }
      if (nOpt > 0) rule.push(GreType.RULE_REF, lastRec);
      prevRules *= total;
    };

    while (pos < s.length) {
      const c = s[pos];
      if (c === '"') {
        pos++;
        lastStart = rule.length;
        prevRules = 1;
        while (s[pos] !== '"') {
          if (pos >= s.length) this.fail("unexpected end of input", pos);
          const [cp, next] = this.char(pos);
          pos = next;
          rule.push(GreType.CHAR, cp);
        }
        pos = this.space(pos + 1, nested);
      } else if (c === "[") {
        pos++;
        let startType: number = GreType.CHAR;
        if (s[pos] === "^") {
          pos++;
          startType = GreType.CHAR_NOT;
        }
        lastStart = rule.length;
        prevRules = 1;
        while (s[pos] !== "]") {
          if (pos >= s.length) this.fail("unexpected end of input", pos);
          const [cp, next] = this.char(pos);
          pos = next;
          rule.push(lastStart < rule.length ? GreType.CHAR_ALT : startType, cp);
          if (s[pos] === "-" && s[pos + 1] !== "]") {
            if (pos + 1 >= s.length) this.fail("unexpected end of input", pos + 1);
            const [hi, next2] = this.char(pos + 1);
            pos = next2;
            rule.push(GreType.CHAR_RNG_UPPER, hi);
          }
        }
        pos = this.space(pos + 1, nested);
      } else if (c === "<" || c === "!") {
        let type: number = GreType.TOKEN;
        if (c === "!") {
          type = GreType.TOKEN_NOT;
          pos++;
        }
        const [id, end] = this.token(pos);
        lastStart = rule.length;
        prevRules = 1;
        rule.push(type, id);
        pos = this.space(end, nested);
      } else if (isWord(c)) {
        const end = this.name(pos);
        const ref = this.symbolId(s.slice(pos, end));
        pos = this.space(end, nested);
        lastStart = rule.length;
        prevRules = 1;
        rule.push(GreType.RULE_REF, ref);
      } else if (c === "(") {
        pos = this.space(pos + 1, true);
        const before = this.symbols.size;
        const sub = this.generateId(ruleName);
        pos = this.alternates(pos, ruleName, sub, true);
        prevRules = Math.max(1, this.symbols.size - before);
        lastStart = rule.length;
        rule.push(GreType.RULE_REF, sub);
        if (s[pos] !== ")") this.fail("expecting ')'", pos);
        pos = this.space(pos + 1, nested);
      } else if (c === ".") {
        lastStart = rule.length;
        prevRules = 1;
        rule.push(GreType.CHAR_ANY, 0);
        pos = this.space(pos + 1, nested);
      } else if (c === "*" || c === "+" || c === "?") {
        const at = pos;
        pos = this.space(pos + 1, nested);
        if (c === "*") repeat(0, Infinity, at);
        else if (c === "+") repeat(1, Infinity, at);
        else repeat(0, 1, at);
      } else if (c === "{") {
        const at = pos;
        pos = this.space(pos + 1, nested);
        if (!isDigit(s[pos])) this.fail("expecting an int", pos);
        let e = this.int(pos);
        const min = Number(s.slice(pos, e));
        pos = this.space(e, nested);
        let max = Infinity;
        if (s[pos] === "}") {
          max = min;
          pos = this.space(pos + 1, nested);
        } else if (s[pos] === ",") {
          pos = this.space(pos + 1, nested);
          if (isDigit(s[pos])) {
            e = this.int(pos);
            max = Number(s.slice(pos, e));
            pos = this.space(e, nested);
          }
          if (s[pos] !== "}") this.fail("expecting '}'", pos);
          pos = this.space(pos + 1, nested);
        } else this.fail("expecting ','", pos);
        if (min > MAX_REPETITION) this.fail("number of repetitions exceeds 2000", at);
        if (max !== Infinity && max > MAX_REPETITION) max = Infinity;
        repeat(min, max, at);
      } else break;
    }
    return pos;
  }

  rule(pos: number): number {
    const s = this.s;
    const nameEnd = this.name(pos);
    const name = s.slice(pos, nameEnd);
    pos = this.space(nameEnd, false);
    const id = this.symbolId(name);
    if (s.slice(pos, pos + 3) !== "::=") this.fail("expecting ::=", pos);
    pos = this.space(pos + 3, true);
    pos = this.alternates(pos, name, id, false);
    if (s[pos] === "\r") pos += s[pos + 1] === "\n" ? 2 : 1;
    else if (s[pos] === "\n") pos++;
    else if (pos < s.length) this.fail("expecting newline or end", pos);
    return this.space(pos, true);
  }

  parse(): void {
    let pos = this.space(0, true);
    while (pos < this.s.length) pos = this.rule(pos);
    const nameOf = (id: number) => [...this.symbols].find(([, v]) => v === id)?.[0] ?? `#${id}`;
    for (let id = 0; id < this.rules.length; id++) {
      const r = this.rules[id];
      if (r.length === 0) this.fail(`undefined rule '${nameOf(id)}'`, this.s.length);
      for (let i = 0; i < r.length; i += 2) {
        if (r[i] !== GreType.RULE_REF) continue;
        const ref = r[i + 1];
        if (ref >= this.rules.length || this.rules[ref].length === 0) {
          this.fail(`undefined rule identifier '${nameOf(ref)}'`, this.refOffset(nameOf(ref)));
        }
      }
    }
    if (this.rules.length === 0) this.fail("empty grammar", 0);
  }

  refOffset(name: string): number {
    const m = new RegExp(`(^|[^a-zA-Z0-9-])${name.replace(/-/g, "\\-")}(?![a-zA-Z0-9-])`).exec(
      this.s,
    );
    return m ? m.index + m[1].length : this.s.length;
  }
}

function isEndOfSeq(rule: GrammarRule, i: number): boolean {
  return rule[i] === GreType.END || rule[i] === GreType.ALT;
}

/** llama.cpp's left-recursion check (a left-recursive grammar cannot be matched). */
function findLeftRecursion(rules: GrammarRule[]): number {
  const n = rules.length;
  const visited = new Array<boolean>(n).fill(false);
  const inProgress = new Array<boolean>(n).fill(false);
  const mayBeEmpty = new Array<boolean>(n).fill(false);
  const detect = (ri: number): boolean => {
    if (inProgress[ri]) return true;
    inProgress[ri] = true;
    const r = rules[ri];
    let atStart = true;
    for (let i = 0; i < r.length; i += 2) {
      if (isEndOfSeq(r, i)) {
        if (atStart) {
          mayBeEmpty[ri] = true;
          break;
        }
        atStart = true;
      } else atStart = false;
    }
    let recurse = true;
    for (let i = 0; i < r.length; i += 2) {
      if (r[i] === GreType.RULE_REF && recurse) {
        if (detect(r[i + 1])) return true;
        if (!mayBeEmpty[r[i + 1]]) recurse = false;
      } else if (isEndOfSeq(r, i)) recurse = true;
      else recurse = false;
    }
    inProgress[ri] = false;
    visited[ri] = true;
    return false;
  };
  for (let i = 0; i < n; i++) if (!visited[i] && detect(i)) return i;
  return -1;
}

/**
 * Parses GBNF text and applies llama.cpp's build checks (start symbol
 * present, no left recursion). Throws {@link GrammarSyntaxError}.
 */
export function parseGrammar(src: string, opts: ParseGrammarOptions = {}): ParsedGrammar {
  const p = new Parser(src, opts.tokenize);
  p.parse();
  const rootName = opts.root ?? "root";
  const root = p.symbols.get(rootName) ??
    p.fail(`grammar does not contain a '${rootName}' symbol`, 0);
  const lr = findLeftRecursion(p.rules);
  if (lr >= 0) {
    const name = [...p.symbols].find(([, v]) => v === lr)?.[0] ?? `#${lr}`;
    p.fail(`left recursion detected for rule '${name}'`, p.refOffset(name.replace(/_\d+$/, "")));
  }
  return { rules: p.rules, symbols: p.symbols, root };
}
