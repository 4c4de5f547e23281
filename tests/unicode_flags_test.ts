// The two-level category table (lib/tokenizer/unicode.ts) against the flat
// decoding of the generated runs it is built from, at every code point.
import assert from "node:assert/strict";
import { CATEGORY_RUNS } from "../lib/tokenizer/unicode_data.ts";
import { CptFlag, cptFlags, MAX_CODEPOINTS } from "../lib/tokenizer/unicode.ts";

Deno.test("cptFlags: the block table holds every code point's flags", () => {
  const flat = new Uint16Array(MAX_CODEPOINTS);
  let at = 0;
  for (const run of CATEGORY_RUNS.split(",")) {
    const [flag, n] = run.split(":");
    flat.fill(parseInt(flag, 16), at, at += parseInt(n, 36));
  }
  assert.equal(at, MAX_CODEPOINTS);
  const ws = /^\p{White_Space}$/u;
  for (let cp = 0; cp < MAX_CODEPOINTS; cp++) {
    if (cp < 0xd800 || cp > 0xdfff) {
      if (ws.test(String.fromCodePoint(cp))) flat[cp] |= CptFlag.WHITESPACE;
    }
  }
  let bad = -1;
  for (let cp = 0; cp < MAX_CODEPOINTS && bad < 0; cp++) if (cptFlags(cp) !== flat[cp]) bad = cp;
  assert.equal(bad, -1, `U+${bad.toString(16)}: ${cptFlags(bad)} vs ${flat[bad]}`);
  for (const cp of [-1, MAX_CODEPOINTS, NaN, 1.5e9]) assert.equal(cptFlags(cp), CptFlag.UNDEFINED);
});
