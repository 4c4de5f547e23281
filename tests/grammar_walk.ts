/**
 * Test helpers: random strings a grammar accepts (a random walk of our own
 * matcher) and mutations of them. Which of them llama.cpp accepts is what the
 * tests compare; the walk itself is not trusted as an oracle.
 */
import { CompiledGrammar, GrammarState } from "../lib/grammar/matcher.ts";
import { GreType, parseGrammar } from "../lib/grammar/parser.ts";
import { mulberry32 as rand } from "./rng.ts";
export { rand };

/** Characters used for negated classes, `.` and insertions. */
export const POOL: number[] = [
  ...Array.from({ length: 95 }, (_, i) => 0x20 + i),
  9,
  10,
  13,
  ..."éßぁゟァヿ、〾一鿿😀\u2028\u0085".split("").map((c) => c.codePointAt(0)!).filter((c) =>
    c < 0xd800 || c > 0xdfff
  ),
  0x1f600,
];

function candidates(g: CompiledGrammar, pos: number, r: () => number): number[] {
  const out: number[] = [];
  const t = g.type[pos];
  if (t === GreType.CHAR_ANY || t === GreType.CHAR_NOT) {
    for (let i = 0; i < 6; i++) {
      const cp = POOL[Math.floor(r() * POOL.length)];
      if (g.matchChar(pos, cp)[0]) out.push(cp);
    }
    return out;
  }
  // Positive set: list its ranges and pick inside them.
  let p = pos;
  const ranges: [number, number][] = [];
  do {
    if (g.type[p + 1] === GreType.CHAR_RNG_UPPER) {
      ranges.push([g.value[p], g.value[p + 1]]);
      p += 2;
    } else {
      ranges.push([g.value[p], g.value[p]]);
      p += 1;
    }
  } while (g.type[p] === GreType.CHAR_ALT);
  for (let i = 0; i < 3; i++) {
    const [lo, hi] = ranges[Math.floor(r() * ranges.length)];
    out.push(lo + Math.floor(r() * (hi - lo + 1)));
  }
  return out;
}

/** A random string the grammar accepts (null if the walk did not close in time). */
export function walk(src: string, r: () => number, target = 20, maxLen = 300): string | null {
  const g = new CompiledGrammar(parseGrammar(src));
  const st = new GrammarState(g);
  const out: number[] = [];
  while (out.length < maxLen) {
    if (st.canEnd && (out.length >= target || r() < 0.05)) return String.fromCodePoint(...out);
    const tops = st.stacks.filter((s) => s.top >= 0 && !g.isTokenTop(s));
    if (tops.length === 0) return st.canEnd ? String.fromCodePoint(...out) : null;
    const opts: number[] = [];
    for (let i = 0; i < 4; i++) {
      opts.push(...candidates(g, tops[Math.floor(r() * tops.length)].top, r));
    }
    let best = -1, bestScore = Infinity;
    for (const cp of opts) {
      const c = st.clone();
      if (!c.acceptCodePoint(cp)) continue;
      // Past the target length, prefer characters that unwind the stacks.
      const depth = Math.min(...c.stacks.map((s) => s.elems.length)) + (c.canEnd ? -100 : 0);
      const score = out.length >= target ? depth + r() : r();
      if (score < bestScore) bestScore = score, best = cp;
    }
    if (best < 0) return null;
    st.acceptCodePoint(best);
    out.push(best);
  }
  return null;
}

/** A random edit of s: delete, insert, replace, swap or truncate. */
export function mutate(s: string, r: () => number): string {
  const cps = [...s];
  const i = Math.floor(r() * (cps.length + 1));
  const rc = () => String.fromCodePoint(POOL[Math.floor(r() * POOL.length)]);
  switch (Math.floor(r() * 5)) {
    case 0:
      cps.splice(i, 1);
      break;
    case 1:
      cps.splice(i, 0, r() < 0.5 && cps.length ? cps[Math.floor(r() * cps.length)] : rc());
      break;
    case 2:
      cps[Math.min(i, Math.max(0, cps.length - 1))] = rc();
      break;
    case 3:
      if (cps.length > 1) {
        const j = Math.min(i, cps.length - 2);
        [cps[j], cps[j + 1]] = [cps[j + 1], cps[j]];
      }
      break;
    default:
      cps.length = Math.floor(r() * cps.length);
  }
  return cps.join("");
}
