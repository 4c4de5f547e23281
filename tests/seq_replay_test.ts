/**
 * The seeded random replay of tests/seq_replay_util.ts over one unified KV
 * pool (llama.cpp's kv_unified), 600 operations.
 */
import { replay } from "./seq_replay_util.ts";

Deno.test("sequence operations replayed on ours and llama.cpp agree", async () => {
  await replay({
    // SEQ_REPLAY_SEED replaces the seed (to look for other histories).
    seed: Number(Deno.env.get("SEQ_REPLAY_SEED") ?? 0x13a5),
    nOps: 600,
    required: [
      "decode failed",
      "decode after a K-shift",
      "decode after K-shifts on both sides of a failed decode",
      "decode after K-shifts on both sides of a rejected batch",
      "shared-token decode",
      "keep",
    ],
  });
});
