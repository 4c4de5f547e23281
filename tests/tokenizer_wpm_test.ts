/**
 * Regressions against llama.cpp: WPM (bert) on one very long word — it was
 * quadratic (100k chars took 3.1 s) and overflowed the stack at 1 MB — and
 * `decode` dropping a leading U+FEFF that llama.cpp's detokenize keeps.
 */
import assert from "node:assert/strict";
import { OptionError } from "../lib/options.ts";
import { loadOracle } from "./oracle/oracle.ts";
import { loadTokenizer, TOLSTOY, VOCAB_DIR, vocabFiles } from "./tokenizer_util.ts";

const BERT = VOCAB_DIR + "ggml-vocab-bert-bge.gguf";
const keepBom = new TextDecoder("utf-8", { ignoreBOM: true });

Deno.test("WPM: one 100k-char word is linear and 1 MB words tokenize as llama.cpp", async () => {
  const oracle = await loadOracle();
  using ref = oracle.load(BERT, { vocabOnly: true });
  const tok = await loadTokenizer(BERT);
  tok.encode("warm up", { addSpecial: false });
  const opts = { addSpecial: false, parseSpecial: false };

  const word = "ab".repeat(50_000);
  const t0 = performance.now();
  const got = tok.encode(word, opts);
  const ms = performance.now() - t0;
  assert.deepEqual(got, ref.tokenize(word, opts));
  // Was 3.1 s (a backwards scan per token); about 0.1 s now. The bound leaves
  // room for a loaded machine while still failing the quadratic version.
  assert.ok(ms < 1500, `100k-char word took ${ms.toFixed(0)} ms`);

  // 1 MB words: a Latin run and a Cyrillic/Devanagari mix with a stray mark.
  for (const w of ["a".repeat(1 << 20), "Привет\u0301हिन्दी".repeat(80_000)]) {
    assert.deepEqual(tok.encode(w, opts), ref.tokenize(w, opts), `${w.length}-char word`);
  }
});

Deno.test("decode keeps a leading U+FEFF, as llama.cpp's detokenize does", async () => {
  const oracle = await loadOracle();
  let kept = 0;
  for (const file of [...vocabFiles(), TOLSTOY]) {
    using ref = oracle.load(file, { vocabOnly: true });
    const tok = await loadTokenizer(file);
    for (const text of ["\ufeffhello", "\ufeff", "\ufeff\ufeffa b"]) {
      const ids = ref.tokenize(text, { addSpecial: false, parseSpecial: false });
      for (const removeSpecial of [false, true]) {
        const want = keepBom.decode(ref.detokenizeBytes(ids, { removeSpecial }));
        const got = tok.decode(ids, { removeSpecial });
        assert.equal(got, want, `${file} ${JSON.stringify(text)}`);
        if (want.startsWith("\ufeff")) kept++;
      }
    }
  }
  // Vocabs that keep the character must be among the fixtures (bert drops it as Cf).
  assert.ok(kept > 10, `only ${kept} detokenizations start with U+FEFF`);
});

Deno.test("Tokenizer.decode rejects ids that are not integer token ids (1.5 was silently empty)", async () => {
  const tk = await loadTokenizer(TOLSTOY);
  for (const id of [1.5, NaN, Infinity, -1, tk.vocab.texts.length]) {
    assert.throws(() => tk.decode([id]), (e: unknown) => e instanceof OptionError, `id ${id}`);
  }
  assert.equal(typeof tk.decode([tk.vocab.texts.length - 1]), "string");
});
