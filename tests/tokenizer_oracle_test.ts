/**
 * Differential test against llama.cpp: for every vocab fixture and the tolstoy
 * model, 1,000 seeded hostile strings must tokenize to the same ids (with and
 * without parseSpecial) and detokenize to the same bytes; every token's piece
 * must match too. Then, on every file, strings mixing Devanagari, Cyrillic and
 * Arabic with their combining marks (virama, nukta, harakat, stress accents)
 * and joiners, the mixes BERT normalisation (NFD, accent stripping) is most
 * likely to get wrong.
 */
import assert from "node:assert/strict";
import { loadOracle } from "./oracle/oracle.ts";
import {
  loadTokenizer,
  mixedScriptText,
  randomText,
  rng,
  TOLSTOY,
  vocabFiles,
} from "./tokenizer_util.ts";

const N = Number(Deno.env.get("TOKENIZER_CASES") ?? 1000);
const files = [...vocabFiles(), TOLSTOY];
const hex = (b: Uint8Array) => [...b].map((x) => x.toString(16).padStart(2, "0")).join("");

for (const [fi, file] of files.entries()) {
  const name = file.split("/").pop()!;
  Deno.test(`tokenizer vs llama.cpp: ${name}`, async () => {
    const oracle = await loadOracle();
    using ref = oracle.load(file, { vocabOnly: true });
    const tok = await loadTokenizer(file);
    assert.equal(tok.nVocab, ref.nVocab);
    assert.equal(tok.bos, ref.bos);
    assert.equal(tok.eos, ref.eos);

    for (let id = 0; id < tok.nVocab; id++) {
      for (const special of [false, true]) {
        const lstrip = id & 1;
        const ours = tok.pieceBytes(id, { special, lstrip });
        // The shim's piece buffer is 256 bytes; longer pieces go through detokenize.
        const theirs = ours.length < 256
          ? ref.pieceBytes(id, { special, lstrip })
          : ref.detokenizeBytes([id], { unparseSpecial: special });
        const mine = ours.length < 256 ? ours : tok.decodeBytes([id], { unparseSpecial: special });
        assert.equal(hex(mine), hex(theirs), `piece of ${id} special=${special}`);
      }
    }

    const specials = tok.vocab.specials.map((id) => tok.vocab.texts[id]).slice(0, 64);
    const r = rng(0x5eed + fi);
    for (let i = 0; i < N; i++) {
      const text = randomText(r, specials);
      const addSpecial = r() < 0.5;
      for (const parseSpecial of [false, true]) {
        const want = ref.tokenize(text, { addSpecial, parseSpecial });
        const got = tok.encode(text, { addSpecial, parseSpecial });
        assert.deepEqual(got, want, `encode ${JSON.stringify(text)} parseSpecial=${parseSpecial}`);
        const removeSpecial = r() < 0.5, unparseSpecial = r() < 0.5;
        const opts = { removeSpecial, unparseSpecial };
        assert.equal(
          hex(tok.decodeBytes(want, opts)),
          hex(ref.detokenizeBytes(want, opts)),
          `decode ${JSON.stringify(want)} ${JSON.stringify(opts)}`,
        );
      }
    }
  });
}

for (const [fi, file] of files.entries()) {
  const name = file.split("/").pop()!;
  Deno.test(`tokenizer vs llama.cpp: ${name}, mixed scripts and combining marks`, async () => {
    const oracle = await loadOracle();
    using ref = oracle.load(file, { vocabOnly: true });
    const tok = await loadTokenizer(file);
    const r = rng(0xde7a + fi);
    for (let i = 0; i < 300; i++) {
      const text = mixedScriptText(r);
      const addSpecial = r() < 0.5;
      const want = ref.tokenize(text, { addSpecial, parseSpecial: false });
      const got = tok.encode(text, { addSpecial, parseSpecial: false });
      assert.deepEqual(got, want, `encode ${JSON.stringify(text)}`);
      assert.equal(
        hex(tok.decodeBytes(want)),
        hex(ref.detokenizeBytes(want, {})),
        `decode ${JSON.stringify(want)}`,
      );
    }
  });
}
