/**
 * GBNF parsing and matching against llama.cpp's grammar engine: the shared
 * fixture grammars, 200 strings each (random valid samples and mutations),
 * malformed grammars, and token-level filtering over real vocabularies.
 */
import assert from "node:assert/strict";
import { CompiledGrammar, GrammarState } from "../lib/grammar/matcher.ts";
import { GrammarSyntaxError, parseGrammar } from "../lib/grammar/parser.ts";
import { GrammarSampler, type GrammarVocabIndex } from "../lib/sample/grammar.ts";
import { loadOracle } from "./oracle/oracle.ts";
import { loadSamplingOracle } from "./oracle/oracle_sample.ts";
import { mutate, rand, walk } from "./grammar_walk.ts";

const DIR = new URL("../../shared/fixtures/grammars/", import.meta.url);
const FIXTURES = [...Deno.readDirSync(DIR)].filter((e) => e.name.endsWith(".gbnf")).map((e) =>
  e.name
).sort();
const sampling = await loadSamplingOracle();

function oursMatch(g: CompiledGrammar, text: string): boolean {
  const st = new GrammarState(g);
  for (const ch of text) if (!st.acceptCodePoint(ch.codePointAt(0)!)) return false;
  return st.canEnd;
}

Deno.test("fixture grammars: 200 strings each get llama.cpp's accept/reject answer", () => {
  assert.ok(FIXTURES.length >= 8);
  for (const name of FIXTURES) {
    const src = Deno.readTextFileSync(new URL(name, DIR));
    assert.ok(sampling.grammarBuilds(src), `${name}: llama.cpp builds it`);
    const g = new CompiledGrammar(parseGrammar(src));
    const r = rand(name.length * 7919);
    const valid: string[] = [];
    for (let tries = 0; valid.length < 70 && tries < 400; tries++) {
      const s = walk(src, r, 5 + Math.floor(r() * 40));
      if (s !== null) valid.push(s);
    }
    assert.ok(valid.length >= 20, `${name}: walk produced ${valid.length} samples`);
    const strings = [...valid];
    while (strings.length < 200) {
      let s = valid[Math.floor(r() * valid.length)];
      const edits = 1 + Math.floor(r() * 3);
      for (let i = 0; i < edits; i++) s = mutate(s, r);
      strings.push(s);
    }
    let accepted = 0;
    for (const s of strings) {
      const want = sampling.grammarMatches(src, s);
      assert.equal(oursMatch(g, s), want, `${name}: ${JSON.stringify(s)}`);
      if (want) accepted++;
    }
    // Both answers must occur, or the comparison says little.
    assert.ok(accepted >= valid.length && accepted < strings.length, `${name}: ${accepted}/200`);
  }
});

const GOOD = [
  'root ::= [a-z]{2,5} "x"{3} ("y" | "z"){1,} [0-9]{0,2}',
  'root ::= "\\x41\\u00e9\\U0001F600\\t\\n\\r\\\\\\"\\[\\]" [\\-a\\]]',
  "root ::= . [^abc] [^a-c0-9]*\n# comment\n",
  'root ::= ( "a"\n  | "b" ) # inline\nother ::= "q"',
  'root ::= "a" |\n "b"',
  'root ::= x x\nx ::= "1"? "2"*',
  "root ::= <[5]> !<[7]>",
  'root ::= ("ab" | "a")* "b"',
];

Deno.test("edge-case grammars build in both and match the same strings", () => {
  const r = rand(11);
  for (const src of GOOD) {
    assert.ok(sampling.grammarBuilds(src), src);
    const g = new CompiledGrammar(parseGrammar(src));
    if (src.includes("<[")) continue;
    for (let i = 0; i < 60; i++) {
      let s = walk(src, r, 3 + Math.floor(r() * 10)) ?? "";
      if (i % 2) s = mutate(s, r);
      assert.equal(
        oursMatch(g, s),
        sampling.grammarMatches(src, s),
        `${src}: ${JSON.stringify(s)}`,
      );
    }
  }
});

// Positions point at the offending character (1-based; end of input is one past the last).
const BAD: [string, number, number][] = [
  ['root ::= "abc', 1, 14],
  ["root ::= [a-z", 1, 14],
  ["root ::= foo", 1, 10],
  ['root = "a"', 1, 6],
  ['root ::= "a" )', 1, 14],
  ['root ::= ("a"', 1, 14],
  ['root ::= "\\q"', 1, 11],
  ['root ::= "\\x4"', 1, 13],
  ['root ::= * "a"', 1, 10],
  ['root ::= "a"{', 1, 14],
  ['root ::= "a"{2', 1, 15],
  ['root ::= "a"{2,3', 1, 17],
  ['root ::= "a"{3000}', 1, 13],
  ['other ::= "a"', 1, 1],
  ['root ::= root "a"', 1, 1],
  ['root ::= "a"\nbad ::= "b" |\n  "c" "d" ]', 3, 11],
  ['root ::= "a"{100}{100}', 1, 18],
  ["root ::= <foo>", 1, 10],
];

Deno.test("malformed grammars: line:column errors, and llama.cpp rejects them too", () => {
  for (const [src, line, col] of BAD) {
    assert.equal(sampling.grammarBuilds(src), false, `llama.cpp builds ${JSON.stringify(src)}`);
    assert.throws(() => parseGrammar(src), (e: unknown) => {
      assert.ok(e instanceof GrammarSyntaxError, String(e));
      assert.match(e.message, /^grammar:\d+:\d+: /);
      assert.deepEqual([e.line, e.column], [line, col], `${JSON.stringify(src)}: ${e.message}`);
      return true;
    });
  }
});

const MODELS = [
  "../shared/models/tolstoy-6m-f32.gguf",
  "../shared/fixtures/models/llama-2-tiny-random.gguf",
];

Deno.test("grammar sampler allows exactly llama.cpp's tokens over real vocabularies", async () => {
  const oracle = await loadOracle();
  for (const path of MODELS) {
    using model = oracle.load(path, { vocabOnly: true });
    const eog = sampling.eogTokens(model);
    const vocab = {
      nVocab: model.nVocab,
      pieces: (id: number) => model.pieceBytes(id, { special: true }),
      eogTokens: eog,
    };
    let index: GrammarVocabIndex | undefined;
    for (const name of ["json.gbnf", "arithmetic.gbnf", "japanese.gbnf", "c.gbnf", "list.gbnf"]) {
      const src = Deno.readTextFileSync(new URL(name, DIR));
      const ours = new GrammarSampler(src, vocab, { index });
      index = ours.index;
      using ref = sampling.grammarSampler(model, src);
      const r = rand(name.length + model.nVocab);
      for (let step = 0; step < 12; step++) {
        const want = ref.allowed();
        const got = ours.allowedMask();
        let nAllowed = 0;
        for (let id = 0; id < model.nVocab; id++) {
          assert.equal(got[id], want[id], `${path} ${name} step ${step}: token ${id}`);
          nAllowed += want[id];
        }
        const choices = [];
        for (let id = 0; id < model.nVocab; id++) if (want[id] && !eog.has(id)) choices.push(id);
        if (!choices.length) break;
        // Prefer multi-byte and byte-fallback pieces now and then to exercise partial UTF-8.
        const partial = choices.filter((id) => vocab.pieces(id).some((b) => b >= 0x80));
        const pool = partial.length && r() < 0.4 ? partial : choices;
        const tok = pool[Math.floor(r() * pool.length)];
        assert.ok(ours.allows(tok));
        ours.accept(tok);
        ref.accept(tok);
        assert.ok(nAllowed > 0);
      }
    }
  }
});
