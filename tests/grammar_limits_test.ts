/**
 * Grammar inputs that used to crash: deeply nested groups and long rule
 * chains (a RangeError from the recursive parser and left-recursion check),
 * and a grammar that admits no token at sample time (a plain Error, one step
 * late). Each is compared with what llama.cpp does with the same grammar.
 */
import assert from "node:assert/strict";
import { CompiledGrammar, GrammarState } from "../lib/grammar/matcher.ts";
import { GrammarError, GrammarMatchError } from "../lib/grammar/errors.ts";
import { GrammarSyntaxError, parseGrammar } from "../lib/grammar/parser.ts";
import { GrammarSampler } from "../lib/sample/grammar.ts";
import { TokenCandidates } from "../lib/sample/candidates.ts";
import { loadOracle } from "./oracle/oracle.ts";
import { loadSamplingOracle } from "./oracle/oracle_sample.ts";

const sampling = await loadSamplingOracle();

function matches(src: string, text: string): boolean {
  const st = new GrammarState(new CompiledGrammar(parseGrammar(src)));
  for (const ch of text) if (!st.acceptCodePoint(ch.codePointAt(0)!)) return false;
  return st.canEnd;
}

Deno.test("5,000 nested groups parse and match as in llama.cpp (was RangeError)", () => {
  const nest = (n: number) => `root ::= ${"(".repeat(n)}"a" | "b"${")".repeat(n)} "c"`;
  // llama.cpp's parser recurses too: on a test worker's stack it manages 500
  // levels, not 5,000. Nesting does not change the language, so its answers
  // at 500 are the expectations at 5,000.
  const small = nest(500), big = nest(5000);
  assert.ok(sampling.grammarBuilds(small));
  for (const text of ["ac", "bc", "a", "abc", "c"]) {
    const want = sampling.grammarMatches(small, text);
    assert.equal(matches(small, text), want, text);
    assert.equal(matches(big, text), want, text);
  }
  // Deeper than any call stack: the parser's own stack grows on the heap.
  const deep = 200_000;
  const g = parseGrammar(`root ::= ${"(".repeat(deep)}"a"${")".repeat(deep)}`);
  assert.equal(g.rules.length, deep + 1);
  // An unclosed group deep inside is still a located syntax error.
  assert.throws(
    () => parseGrammar(`root ::= ${"(".repeat(5000)}"a"`),
    (e) => e instanceof GrammarSyntaxError && e.message.includes("expecting ')'"),
  );
});

Deno.test("10,000 chained rules parse, and a left-recursive chain is rejected, as in llama.cpp", () => {
  const n = 10_000;
  let chain = "root ::= r0\n";
  for (let i = 0; i < n; i++) chain += `r${i} ::= r${i + 1}\n`;
  const ok = chain + `r${n} ::= "a" | "b"\n`;
  assert.ok(sampling.grammarBuilds(ok));
  for (const text of ["a", "b", "ab", ""]) {
    assert.equal(matches(ok, text), sampling.grammarMatches(ok, text), text);
  }
  const looped = chain + `r${n} ::= "a" r0 | r0 "b"\n`;
  assert.equal(sampling.grammarBuilds(looped), false);
  assert.throws(
    () => parseGrammar(looped),
    (e) => e instanceof GrammarSyntaxError && /left recursion/.test(e.message),
  );
});

Deno.test("a grammar that admits no token raises GrammarMatchError (llama.cpp allows none)", async () => {
  const oracle = await loadOracle();
  using model = oracle.load("../shared/models/tolstoy-6m-f32.gguf", { vocabOnly: true });
  const eog = sampling.eogTokens(model);
  const vocab = {
    nVocab: model.nVocab,
    pieces: (id: number) => model.pieceBytes(id, { special: true }),
    eogTokens: eog,
  };
  // [b-a] is an empty range: nothing can ever match, so no token (and no EOG).
  const src = 'root ::= "x" [b-a]';
  using ref = sampling.grammarSampler(model, src);
  const ours = new GrammarSampler(src, vocab);
  const x = [...Array(model.nVocab).keys()].find((id) => {
    const p = vocab.pieces(id);
    return p.length === 1 && p[0] === 0x78;
  })!;
  assert.ok(ours.allows(x));
  ours.accept(x);
  ref.accept(x);
  assert.equal(ref.allowed().indexOf(1), -1, "llama.cpp allows some token");
  const logits = new Float32Array(model.nVocab).fill(1);
  for (const size of [model.nVocab, 1]) {
    const c = new TokenCandidates(model.nVocab).load(logits);
    c.size = size;
    assert.throws(() => ours.apply(c), (e) => e instanceof GrammarMatchError && e.token === -1);
  }
  // Accepting any token now (or EOG before completion) is the same typed error.
  assert.throws(() => ours.accept(x), (e) => e instanceof GrammarMatchError && e.token === x);
  const eos = [...eog][0];
  assert.throws(() => ours.accept(eos), (e) => e instanceof GrammarMatchError);
  assert.ok(new GrammarMatchError("m") instanceof GrammarError);
});

Deno.test("left recursion hidden behind a nullable rule is a GrammarError, not endless expansion", () => {
  // llama.cpp's check only sees syntactically empty alternatives, so it builds
  // this grammar and then expands `e` forever; we stop with a typed error.
  const src = 'root ::= e\ne ::= ws e ")" | "a"\nws ::= [ ]*';
  const g = parseGrammar(src);
  assert.throws(
    () => new CompiledGrammar(g),
    (e) => e instanceof GrammarError && /without consuming input/.test(e.message),
  );
  // Right recursion through the same nullable rule is fine.
  assert.ok(matches('root ::= e\ne ::= "(" ws e ")" | "a"\nws ::= [ ]*', "( ( a))"));
});
