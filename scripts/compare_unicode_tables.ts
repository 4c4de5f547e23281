/**
 * Compares the engine-derived Unicode facts in lib/tokenizer/unicode.ts with the
 * tables llama.cpp ships (src/unicode-data.cpp, generated from UnicodeData.txt),
 * to report where the two Unicode versions disagree.
 *
 * Usage: deno run -A scripts/compare_unicode_tables.ts [/path/to/llama.cpp/src/unicode-data.cpp]
 *
 * @module
 */
import { cptFlags, MAX_CODEPOINTS, nfdFirst, toLowerCpt } from "../lib/tokenizer/unicode.ts";

const path = Deno.args[0] ?? "/tmp/llsrc/src/unicode-data.cpp";
const src = Deno.readTextFileSync(path);
const section = (name: string) => {
  const i = src.indexOf(name);
  return src.slice(i, src.indexOf("};", i));
};
const hex = (s: string) => [...s.matchAll(/0x([0-9A-Fa-f]+)/g)].map((m) => parseInt(m[1], 16));

const ranges = hex(section("unicode_ranges_flags")).slice(0); // pairs: start, flags
const theirs = new Uint16Array(MAX_CODEPOINTS);
for (let i = 0; i + 3 < ranges.length; i += 2) {
  theirs.fill(ranges[i + 1], ranges[i], ranges[i + 2]);
}
for (const cp of hex(section("unicode_set_whitespace"))) theirs[cp] |= 0x100;
const lower = new Map<number, number>();
const lw = hex(section("unicode_map_lowercase"));
for (let i = 0; i < lw.length; i += 2) lower.set(lw[i], lw[i + 1]);
const nfd = hex(section("unicode_ranges_nfd"));
const nfdMap = new Map<number, number>();
for (let i = 3; i < nfd.length; i += 3) {
  for (let c = nfd[i]; c <= nfd[i + 1]; c++) nfdMap.set(c, nfd[i + 2]);
}

const diff = { flags: [] as string[], lower: [] as string[], nfd: [] as string[] };
const h = (n: number) => "U+" + n.toString(16).toUpperCase().padStart(4, "0");
for (let cp = 0; cp < MAX_CODEPOINTS; cp++) {
  const ours = cptFlags(cp);
  if (ours !== theirs[cp]) {
    diff.flags.push(`${h(cp)} ours=0x${ours.toString(16)} llama=0x${theirs[cp].toString(16)}`);
  }
  const l = lower.get(cp) ?? cp;
  if (toLowerCpt(cp) !== l) diff.lower.push(`${h(cp)} ours=${h(toLowerCpt(cp))} llama=${h(l)}`);
  const d = nfdMap.get(cp) ?? cp;
  if (nfdFirst(cp) !== d) diff.nfd.push(`${h(cp)} ours=${h(nfdFirst(cp))} llama=${h(d)}`);
}
for (const [k, v] of Object.entries(diff)) {
  console.log(`${k}: ${v.length} differences`);
  for (const line of v.slice(0, Number(Deno.env.get("SHOW") ?? 40))) console.log("  " + line);
}
