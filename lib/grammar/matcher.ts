/**
 * The pushdown matcher of llama.cpp's grammar engine: a set of stacks of
 * element positions, each advanced until its top is a terminal
 * (llama_grammar_advance_stack), narrowed by every code point, with partial
 * UTF-8 carried across tokens.
 *
 * Stacks are interned and immutable, so the stacks reached from a stack by a
 * code point are computed once and cached; a token's cost is then mostly map
 * lookups.
 *
 * @module
 */
import { GrammarError, GrammarMatchError } from "./errors.ts";
import { GreType, type ParsedGrammar } from "./parser.ts";

/** An interned grammar stack (bottom .. top element positions). */
export class GrammarStack {
  /** Positions into the compiled element arrays; the last one is the top. */
  readonly elems: Int32Array;
  /** Identity key. */
  readonly key: string;
  /** Cached successors by code point (only for char-topped stacks). */
  readonly next: Map<number, GrammarStack[]> = new Map<number, GrammarStack[]>();

  /** Creates the instance. */
  constructor(elems: Int32Array, key: string) {
    this.elems = elems;
    this.key = key;
  }

  /** Position of the top element, or -1 for the empty stack (grammar complete). */
  get top(): number {
    return this.elems.length ? this.elems[this.elems.length - 1] : -1;
  }
}

/** Partial UTF-8 state: value so far and bytes still expected (-1: invalid). */
export interface PartialUtf8 {
  /** Bits decoded so far. */
  value: number;
  /** Continuation bytes still expected (-1: invalid sequence). */
  nRemain: number;
}

/** Code points of a byte string continuing a partial sequence (llama.cpp's decode_utf8). */
export function decodeUtf8(
  bytes: Uint8Array,
  start: PartialUtf8 = { value: 0, nRemain: 0 },
): { cps: number[]; partial: PartialUtf8 } {
  const LOOKUP = [1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 2, 2, 3, 4];
  const cps: number[] = [];
  let value = start.value, nRemain = start.nRemain, pos = 0;
  // A C string: stop at NUL.
  let end = bytes.indexOf(0);
  if (end < 0) end = bytes.length;
  while (pos < end && nRemain > 0) {
    const b = bytes[pos];
    if (b >> 6 !== 2) return { cps: [], partial: { value: 0, nRemain: -1 } };
    value = (value << 6) + (b & 0x3f);
    pos++;
    nRemain--;
  }
  if (start.nRemain > 0 && nRemain === 0) cps.push(value);
  while (pos < end) {
    const b = bytes[pos];
    nRemain = LOOKUP[b >> 4] - 1;
    if (nRemain < 0) return { cps: [], partial: { value: 0, nRemain } };
    value = b & ((1 << (7 - nRemain)) - 1);
    pos++;
    while (pos < end && nRemain > 0) {
      value = (value << 6) + (bytes[pos] & 0x3f);
      pos++;
      nRemain--;
    }
    if (nRemain === 0) cps.push(value);
  }
  return { cps, partial: { value, nRemain } };
}

/** A grammar ready for matching: flat element arrays plus the stack cache. */
export class CompiledGrammar {
  /** Element types by position. */
  readonly type: Uint8Array;
  /** Element values by position. */
  readonly value: Uint32Array;
  /** Position of each rule's first element. */
  readonly ruleStart: Int32Array;
  /** The stacks a fresh match starts from. */
  readonly initial: GrammarStack[];
  #interned = new Map<string, GrammarStack>();
  #advanced = new Map<string, GrammarStack[]>();

  /** Creates the instance. */
  constructor(g: ParsedGrammar) {
    let n = 0;
    for (const r of g.rules) n += r.length / 2;
    this.type = new Uint8Array(n);
    this.value = new Uint32Array(n);
    this.ruleStart = new Int32Array(g.rules.length);
    let k = 0;
    g.rules.forEach((r, id) => {
      this.ruleStart[id] = k;
      for (let i = 0; i < r.length; i += 2, k++) {
        this.type[k] = r[i];
        this.value[k] = r[i + 1];
      }
    });
    const init: GrammarStack[] = [];
    const seen = new Set<GrammarStack>();
    let pos = this.ruleStart[g.root];
    for (;;) {
      const raw = this.#isEnd(pos) ? [] : [pos];
      for (const s of this.advance(raw)) if (!seen.has(s)) seen.add(s), init.push(s);
      while (!this.#isEnd(pos)) pos++;
      if (this.type[pos] === GreType.ALT) pos++;
      else break;
    }
    this.initial = init;
  }

  #isEnd(pos: number): boolean {
    const t = this.type[pos];
    return t === GreType.END || t === GreType.ALT;
  }

  #intern(elems: number[] | Int32Array): GrammarStack {
    const key = elems.join(",");
    let s = this.#interned.get(key);
    if (!s) {
      s = new GrammarStack(Int32Array.from(elems), key);
      this.#interned.set(key, s);
    }
    return s;
  }

  /** Number of distinct stacks seen so far (cache size). */
  get cachedStacks(): number {
    return this.#interned.size;
  }

  /** Expands a raw stack until every result is empty or topped by a terminal. */
  advance(raw: number[] | Int32Array): GrammarStack[] {
    const key = raw.join(",");
    const hit = this.#advanced.get(key);
    if (hit) return hit;
    const out: GrammarStack[] = [];
    const outSeen = new Set<GrammarStack>();
    const todo: (number[] | Int32Array)[] = [raw];
    const seen = new Set<string>();
    // Without consuming input a stack grows by at most one element per rule
    // being expanded, and each rule can be mid-expansion once — unless a rule
    // reaches itself through a prefix that may be empty only via other rules
    // (`e ::= ws e ")"`, `ws ::= [ ]*`), which llama.cpp's left-recursion check
    // misses and its matcher then expands forever. Past this bound it is that.
    const limit = raw.length + this.ruleStart.length + 2;
    while (todo.length) {
      const cur = todo.pop()!;
      if (cur.length > limit) {
        throw new GrammarError(
          "grammar: a rule expands to itself without consuming input " +
            "(left recursion through a rule that may be empty)",
        );
      }
      const k = cur.join(",");
      if (seen.has(k)) continue;
      seen.add(k);
      if (cur.length === 0) {
        const s = this.#intern(cur);
        if (!outSeen.has(s)) outSeen.add(s), out.push(s);
        continue;
      }
      const pos = cur[cur.length - 1];
      const t = this.type[pos];
      if (t === GreType.RULE_REF) {
        let sub = this.ruleStart[this.value[pos]];
        for (;;) {
          const next: number[] = Array.from(cur.slice(0, cur.length - 1));
          if (!this.#isEnd(pos + 1)) next.push(pos + 1);
          if (!this.#isEnd(sub)) next.push(sub);
          todo.push(next);
          while (!this.#isEnd(sub)) sub++;
          if (this.type[sub] === GreType.ALT) sub++;
          else break;
        }
      } else if (
        t === GreType.CHAR || t === GreType.CHAR_NOT || t === GreType.CHAR_ANY ||
        t === GreType.TOKEN || t === GreType.TOKEN_NOT
      ) {
        const s = this.#intern(cur);
        if (!outSeen.has(s)) outSeen.add(s), out.push(s);
      } else {
        // Only a hand-built ParsedGrammar can get here; parseGrammar never emits one.
        throw new GrammarError(`grammar: stack left on element type ${t} at ${pos}`);
      }
    }
    this.#advanced.set(key, out);
    return out;
  }

  /** Whether the char set at `pos` accepts `cp`; also the position after the set. */
  matchChar(pos: number, cp: number): [boolean, number] {
    const type = this.type, value = this.value;
    const positive = type[pos] === GreType.CHAR || type[pos] === GreType.CHAR_ANY;
    let found = false;
    do {
      if (type[pos + 1] === GreType.CHAR_RNG_UPPER) {
        found = found || (value[pos] <= cp && cp <= value[pos + 1]);
        pos += 2;
      } else if (type[pos] === GreType.CHAR_ANY) {
        found = true;
        pos += 1;
      } else {
        found = found || value[pos] === cp;
        pos += 1;
      }
    } while (type[pos] === GreType.CHAR_ALT);
    return [found === positive, pos];
  }

  /** Whether some completion of a partial UTF-8 sequence could match the set at `pos`. */
  matchPartial(pos: number, partial: PartialUtf8): boolean {
    const type = this.type, value = this.value;
    const positive = type[pos] === GreType.CHAR || type[pos] === GreType.CHAR_ANY;
    const n = partial.nRemain;
    if (n < 0 || (n === 1 && partial.value < 2)) return false;
    let low = partial.value * 2 ** (n * 6);
    const high = low + 2 ** (n * 6) - 1;
    if (low === 0) {
      if (n === 2) low = 1 << 11;
      else if (n === 3) low = 1 << 16;
    }
    do {
      if (type[pos + 1] === GreType.CHAR_RNG_UPPER) {
        if (value[pos] <= high && low <= value[pos + 1]) return positive;
        pos += 2;
      } else if (type[pos] === GreType.CHAR_ANY) {
        return true;
      } else {
        if (low <= value[pos] && value[pos] <= high) return positive;
        pos += 1;
      }
    } while (type[pos] === GreType.CHAR_ALT);
    return !positive;
  }

  /** Whether the top is a token element (<[id]> or !<[id]>). */
  isTokenTop(s: GrammarStack): boolean {
    const t = s.top;
    return t >= 0 && (this.type[t] === GreType.TOKEN || this.type[t] === GreType.TOKEN_NOT);
  }

  /** Whether the token element at `pos` matches token id. */
  matchToken(pos: number, id: number): boolean {
    return this.type[pos] === GreType.TOKEN ? this.value[pos] === id : this.value[pos] !== id;
  }

  /** Stacks reached from one stack by one code point (cached). */
  step(s: GrammarStack, cp: number): GrammarStack[] {
    const hit = s.next.get(cp);
    if (hit) return hit;
    let out: GrammarStack[] = [];
    const top = s.top;
    if (top >= 0 && !this.isTokenTop(s)) {
      const [ok, after] = this.matchChar(top, cp);
      if (ok) {
        const raw = Array.from(s.elems.subarray(0, s.elems.length - 1));
        if (!this.#isEnd(after)) raw.push(after);
        out = this.advance(raw);
      }
    }
    s.next.set(cp, out);
    return out;
  }

  /** Stacks after a token element at the top of `s` is consumed. */
  stepToken(s: GrammarStack): GrammarStack[] {
    const raw = Array.from(s.elems.subarray(0, s.elems.length - 1));
    if (!this.#isEnd(s.top + 1)) raw.push(s.top + 1);
    return this.advance(raw);
  }
}

/** Union of stack lists without duplicates, in first-seen order. */
export function unionStacks(lists: Iterable<GrammarStack[]>): GrammarStack[] {
  const seen = new Set<GrammarStack>();
  const out: GrammarStack[] = [];
  for (const l of lists) for (const s of l) if (!seen.has(s)) seen.add(s), out.push(s);
  return out;
}

/** A matching position: the live stacks and the pending partial UTF-8 sequence. */
export class GrammarState {
  /** Live stacks (never empty while the match is alive). */
  stacks: GrammarStack[];
  /** Partial UTF-8 left by the last token. */
  partial: PartialUtf8 = { value: 0, nRemain: 0 };

  /** Starts at the grammar's initial stacks. */
  constructor(readonly g: CompiledGrammar) {
    this.stacks = g.initial;
  }

  /** Whether the grammar may end here (some stack is empty). */
  get canEnd(): boolean {
    return this.stacks.some((s) => s.top < 0);
  }

  /** Feeds one code point (llama_grammar_accept); false when nothing survives. */
  acceptCodePoint(cp: number): boolean {
    this.stacks = unionStacks(this.stacks.map((s) => this.g.step(s, cp)));
    return this.stacks.length > 0;
  }

  /**
   * Feeds a token (llama_grammar_accept_token): token elements match by id,
   * text by its code points. Throws when no stack survives.
   */
  acceptToken(id: number, bytes: Uint8Array): void {
    const g = this.g;
    const { cps, partial } = decodeUtf8(bytes, this.partial);
    const lists: GrammarStack[][] = [];
    for (const s of this.stacks) {
      if (s.top < 0) continue;
      if (g.isTokenTop(s)) {
        if (g.matchToken(s.top, id)) lists.push(g.stepToken(s));
        continue;
      }
      let cur = [s];
      for (const cp of cps) {
        cur = unionStacks(cur.map((x) => g.step(x, cp)));
        if (cur.length === 0) break;
      }
      lists.push(cur);
    }
    const next = unionStacks(lists);
    if (next.length === 0) {
      throw new GrammarMatchError(`token ${id} cannot continue the grammar`, id);
    }
    this.stacks = next;
    this.partial = partial;
  }

  /** Copies this state (stacks are shared; they are immutable). */
  clone(): GrammarState {
    const c = new GrammarState(this.g);
    c.stacks = this.stacks;
    c.partial = { ...this.partial };
    return c;
  }
}

/**
 * Whether a stack accepts a token whose decoded text is `cps[i..]` followed
 * by the partial sequence `partial` (llama_grammar_reject_candidates_for_stack,
 * for one candidate).
 */
export function stackAccepts(
  g: CompiledGrammar,
  s: GrammarStack,
  cps: number[],
  i: number,
  partial: PartialUtf8,
  id: number,
): boolean {
  const top = s.top;
  if (i >= cps.length) {
    if (partial.nRemain === 0) return true;
    if (top < 0 || g.isTokenTop(s)) return false;
    return g.matchPartial(top, partial);
  }
  if (top < 0) return false;
  if (g.isTokenTop(s)) return g.matchToken(top, id);
  for (const n of g.step(s, cps[i])) if (stackAccepts(g, n, cps, i + 1, partial, id)) return true;
  return false;
}
