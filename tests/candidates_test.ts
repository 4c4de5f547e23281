// TokenCandidates.topOrder against a full sort: the k best positions, best
// first, the earlier of two equal logits first, with one fixed order for
// signed zeros, infinities and NaNs (orderBits), on both of its paths (a
// heap up to 256 winners, llama.cpp's buckets beyond) and arrays full of ties.
import assert from "node:assert/strict";
import { TokenCandidates } from "../lib/sample/candidates.ts";
import { mulberry32 } from "./rng.ts";

// The float's order as an unsigned int, from its bits: -NaN lowest, -0 just
// below +0, +NaN highest. Written again here (candidates.ts keeps its own
// private) so the reference does not rest on the code it checks.
function orderBits(b: number): number {
  return b & 0x80000000 ? ~b >>> 0 : (b | 0x80000000) >>> 0;
}

function reference(logits: Float32Array, k: number): number[] {
  const bits = new Uint32Array(logits.buffer, logits.byteOffset, logits.length);
  const keys = Array.from(bits, (b, i) => [orderBits(b), i] as const);
  keys.sort((a, b) => b[0] - a[0] || a[1] - b[1]);
  return keys.slice(0, k).map(([, i]) => i);
}

const NEG_NAN = new Float32Array(new Uint32Array([0xffc00000]).buffer)[0];
const SPECIAL = [0, -0, Infinity, -Infinity, NaN, NEG_NAN, 1, -1, 0.5];

Deno.test("topOrder: the k best, ties in position order, on the heap and bucket paths", () => {
  const r = mulberry32(7);
  for (const n of [50, 300, 4096]) {
    const c = new TokenCandidates(n);
    for (let trial = 0; trial < 12; trial++) {
      // Few distinct values (ties everywhere), specials mixed in, or all distinct.
      const distinct = [3, 40, 0][trial % 3];
      const logits = Float32Array.from({ length: n }, () => {
        if (r() < 0.05) return SPECIAL[Math.floor(r() * SPECIAL.length)];
        return distinct ? Math.floor(r() * distinct) / 4 : (r() - 0.5) * 40;
      });
      for (const k of [1, 2, 40, 255, 256, 257, n]) {
        if (k > n) continue;
        c.load(logits);
        const got = Array.from(c.topOrder(k));
        assert.deepEqual(got, reference(logits, k), `n ${n} trial ${trial} k ${k}`);
      }
    }
  }
});
