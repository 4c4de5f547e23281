/**
 * Embeddings and cosine search: embed a few passages and a query with a
 * context made with `embeddings: true` (a decoder's final hidden states,
 * mean-pooled, euclidean-normalized), then rank the passages by cosine
 * similarity (a dot product of unit vectors).
 *
 *   deno run --allow-read --allow-env --allow-ffi examples/embeddings.ts [model.gguf]
 */
import { Context, embed, Model } from "@llm-edge/llm-edge";

const path = Deno.args[0] ?? new URL("../models/tolstoy-6m-f16.gguf", import.meta.url).pathname;

const passages = [
  "The prince rode to war with his regiment.",
  "Natasha danced at the ball in Moscow.",
  "The French army crossed the river at dawn.",
];
const query = "soldiers and battles";

using model = await Model.load(path);
using ctx = await Context.create(model, { embeddings: true, nSeqMax: 4, nCtx: 512 });
const [q, ...docs] = await embed(ctx, [query, ...passages], { pooling: "mean", normalize: 2 });

const dot = (a: Float32Array, b: Float32Array) => a.reduce((s, x, i) => s + x * b[i], 0);
const ranked = docs.map((d, i) => ({ passage: passages[i], score: dot(q, d) }))
  .sort((a, b) => b.score - a.score);
for (const { passage, score } of ranked) console.log(`${score.toFixed(4)}  ${passage}`);
