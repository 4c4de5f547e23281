/**
 * The seeded random replay of tests/seq_replay_util.ts with one KV stream
 * per sequence on both sides (kvUnified false, llama.cpp's kv_unified =
 * false: 4 streams of 256 cells), compared with llama.cpp after every
 * operation: seq_pos_min/max of every sequence, and every output row's
 * logits.
 */
import { replay } from "./seq_replay_util.ts";

Deno.test("sequence operations replayed on ours and llama.cpp agree, one KV stream per sequence", async () => {
  await replay({
    seed: Number(Deno.env.get("SEQ_REPLAY_SEED") ?? 0x5712),
    nOps: 400,
    kvUnified: false,
    required: [
      "decode failed",
      "decode of several sequences",
      "decode after a K-shift",
      "decode after K-shifts on both sides of a rejected batch",
      "shared tokens refused",
      "cp",
      "keep",
      "div",
    ],
  });
});
