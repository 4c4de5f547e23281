/**
 * llama.cpp's own tokenizer fixtures (tests/test-tokenizer-0: add_special=false,
 * parse_special=false): every .inp string must give the .out ids exactly.
 */
import { utf8Length } from "../lib/tokenizer/vocab.ts";
import assert from "node:assert/strict";
import { loadTokenizer, VOCAB_DIR } from "./tokenizer_util.ts";

const SEP = "\n__ggml_vocab_test__\n";
const cases = [...Deno.readDirSync(VOCAB_DIR)].map((e) => e.name).filter((n) =>
  n.endsWith(".gguf.inp")
).sort();

Deno.test("tokenizer fixtures: all vocab fixtures are present", () => {
  assert.ok(cases.length >= 10, `found ${cases.length} .inp files in ${VOCAB_DIR}`);
});

for (const inp of cases) {
  const gguf = inp.slice(0, -4);
  Deno.test(`tokenizer fixtures: ${gguf}`, async () => {
    const tok = await loadTokenizer(VOCAB_DIR + gguf);
    const texts = Deno.readTextFileSync(VOCAB_DIR + inp).split(SEP);
    const lines = Deno.readTextFileSync(VOCAB_DIR + gguf + ".out").split("\n");
    assert.ok(texts.length > 10);
    texts.forEach((text, i) => {
      const line = lines[i].trim();
      const want = line === "" ? [] : line.split(" ").map(Number);
      assert.deepEqual(tok.encode(text, { addSpecial: false }), want, JSON.stringify(text));
    });
  });
}

Deno.test("utf8Length counts TextEncoder's bytes, lone surrogates as U+FFFD", () => {
  const enc = new TextEncoder();
  const cases = ["", "a", "é", "€", "😀", "\ud800", "\udc00", "a\ud800b", "\ud800\ud800\udc00"];
  cases.push("\udc00\ud800", "\u{10ffff}", "x\ud83d");
  let a = 7;
  const r = () => (a = (Math.imul(a, 1664525) + 1013904223) >>> 0);
  for (let k = 0; k < 5000; k++) {
    cases.push(String.fromCharCode(...Array.from({ length: r() % 8 }, () => r() % 0x10000)));
  }
  for (const c of cases) assert.equal(utf8Length(c), enc.encode(c).length, JSON.stringify(c));
});
