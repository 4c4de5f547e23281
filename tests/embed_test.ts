/**
 * embed() against llama.cpp run as llama-embedding runs it
 * (tests/oracle/oracle_embd.ts: embeddings on, a pooling type, several
 * sequences per batch over a unified cache, llama_get_embeddings_seq /
 * _ith, common_embd_normalize): for bert (random weights, bge vocabulary)
 * and llama-family decoders (tolstoy-6m, and a random llama whose file
 * names LAST pooling), every pooling type, several inputs of different
 * lengths per call, within 1e-4 cosine distance of llama.cpp's rows; the
 * normalizations bit for bit against common_embd_normalize compiled in C;
 * and the errors of bad options.
 */
import assert from "node:assert/strict";
import { join } from "node:path";
import { llamaMeta, llamaTensors, randomVocabSize, writeRandomGGUF } from "../lib/model/random.ts";
import { Model } from "../lib/model/model.ts";
import { Context, ContextError } from "../lib/runtime/context.ts";
import {
  defaultPooling,
  embed,
  type EmbedOptions,
  normalizeEmbedding,
  type Pooling,
  POOLINGS,
  poolRows,
} from "../lib/runtime/embed.ts";
import { OptionError } from "../lib/options.ts";
import { promptIds } from "./arch_parity.ts";
import { writeRandomBert } from "./archs/bert.ts";
import { TOLSTOY } from "./gguf_util.ts";
import { loadOracle, type OracleModel } from "./oracle/oracle.ts";
import { LlamaPooling, oracleNormalize, OraclePooledContext } from "./oracle/oracle_embd.ts";

const DIR = Deno.makeTempDirSync({ prefix: "llm-edge-embed-" });
const BERT = join(DIR, "bert.gguf");
const LLAMA_LAST = join(DIR, "llama-last.gguf");
const LLAMA_RANK = join(DIR, "llama-rank.gguf");
await writeRandomBert(BERT, { type: "f32", nCtxTrain: 128 });
/** A small random llama on tolstoy's vocabulary whose file asks for `pooling_type`. */
async function randomLlama(path: string, pooling: number): Promise<void> {
  const shape = {
    nEmbd: 64,
    nLayer: 2,
    nHead: 4,
    nHeadKv: 2,
    nFF: 128,
    nCtxTrain: 256,
  };
  const nVocab = await randomVocabSize({ tokenizerFrom: TOLSTOY });
  await writeRandomGGUF(path, {
    arch: "llama",
    meta: { ...llamaMeta({ ...shape, nVocab }), pooling_type: pooling },
    tensors: llamaTensors({ ...shape, nVocab }),
    type: "f32",
    std: 0.1,
    seed: 7,
    tokenizerFrom: TOLSTOY,
  });
}
await randomLlama(LLAMA_LAST, LlamaPooling.LAST);
await randomLlama(LLAMA_RANK, LlamaPooling.RANK);

const POOLING_ID: Record<Pooling, number> = {
  none: LlamaPooling.NONE,
  mean: LlamaPooling.MEAN,
  cls: LlamaPooling.CLS,
  last: LlamaPooling.LAST,
};

const TEXTS = [
  "Hello world!",
  "The prince, who had come to the ball late, stood by the door and watched.",
  "War",
  "  Leading spaces, punctuation?! and a somewhat longer sentence that spans more tokens " +
  "than the others, so that sequences of very different lengths share one batch.",
  "Peace.",
];

/** 1 - cos(a, b), in double. */
function cosineDistance(a: Float32Array, b: Float32Array): number {
  assert.equal(a.length, b.length);
  let ab = 0, aa = 0, bb = 0;
  for (let i = 0; i < a.length; i++) {
    ab += a[i] * b[i];
    aa += a[i] * a[i];
    bb += b[i] * b[i];
  }
  return 1 - ab / Math.sqrt(aa * bb);
}

/**
 * What llama-embedding prints for `inputs` (token ids): its batching loop
 * (a batch is flushed when the next input would overflow nBatch or every
 * sequence is taken), llama_get_embeddings_seq / _ith rows, then
 * common_embd_normalize.
 */
async function llamaEmbedding(
  om: OracleModel,
  inputs: number[][],
  o: { pooling: number; nBatch: number; nSeqMax: number; normalize: number },
): Promise<{ rows: Float32Array[]; pooling: number }> {
  using oc = await OraclePooledContext.create(om, {
    pooling: o.pooling,
    nCtx: 512,
    nBatch: o.nBatch,
    nSeqMax: o.nSeqMax,
  });
  const rows: Float32Array[] = [];
  let batch: number[][] = [], used = 0;
  const flush = async () => {
    for (const r of oc.embedBatch(batch).flat()) rows.push(await oracleNormalize(r, o.normalize));
    batch = [];
    used = 0;
  };
  for (const ids of inputs) {
    if (batch.length > 0 && (used + ids.length > o.nBatch || batch.length >= o.nSeqMax)) {
      await flush();
    }
    batch.push(ids);
    used += ids.length;
  }
  await flush();
  return { rows, pooling: oc.pooling };
}

/** Our rows against llama.cpp's: same count, each within 1e-4 cosine distance; returns the worst. */
function compareRows(label: string, got: Float32Array[], want: Float32Array[]): number {
  assert.equal(got.length, want.length, `${label}: rows`);
  let worst = 0;
  got.forEach((g, i) => {
    const d = cosineDistance(g, want[i]);
    assert.ok(d < 1e-4, `${label}: row ${i}: cosine distance ${d}`);
    worst = Math.max(worst, d);
  });
  return worst;
}

interface Case {
  label: string;
  path: string;
  /** The inputs: tokenized texts (checked equal to llama.cpp's) or random ids. */
  inputs: (om: OracleModel, model: Model) => (string | number[])[];
}

const CASES: Case[] = [
  { label: "bert", path: BERT, inputs: () => TEXTS },
  { label: "tolstoy-6m", path: TOLSTOY, inputs: () => TEXTS },
  {
    label: "random llama",
    path: LLAMA_LAST,
    inputs: (_, m) => [
      ...TEXTS.slice(0, 2),
      promptIds(40, 3, m.hparams.nVocab, 1),
      promptIds(1, 3, m.hparams.nVocab, 2),
    ],
  },
];

/** Token ids of each input, as llama-embedding tokenizes strings (add and parse special). */
function tokenIds(om: OracleModel, model: Model, inputs: (string | number[])[]): number[][] {
  return inputs.map((x) => {
    if (typeof x !== "string") return x;
    const want = om.tokenize(x, { addSpecial: true, parseSpecial: true });
    assert.deepEqual(model.tokenizer.encode(x, { parseSpecial: true }), want, JSON.stringify(x));
    return want;
  });
}

for (const c of CASES) {
  Deno.test(`embed ${c.label}: every pooling type matches llama-embedding`, async () => {
    const oracle = await loadOracle();
    using om = oracle.load(c.path);
    using model = await Model.load(c.path);
    // Batches of at most 4 sequences and 64 tokens: several batches per call
    // (llama.cpp's graph reserve wants nSeqMax to divide the micro-batch).
    const nBatch = 64, nSeqMax = 4;
    using ctx = await Context.create(model, {
      threads: 2,
      nCtx: 512,
      nBatch,
      nSeqMax,
      embeddings: true,
    });
    const inputs = c.inputs(om, model);
    const ids = tokenIds(om, model, inputs);
    assert.ok(ids.reduce((a, t) => a + t.length, 0) > nBatch, "the inputs span several batches");
    for (const pooling of [undefined, ...POOLINGS]) {
      const want = await llamaEmbedding(om, ids, {
        pooling: pooling === undefined ? LlamaPooling.UNSPECIFIED : POOLING_ID[pooling],
        nBatch,
        nSeqMax,
        normalize: 2,
      });
      if (pooling === undefined) {
        // The default is the file's pooling_type, as llama.cpp picks it.
        assert.equal(POOLING_ID[defaultPooling(model)], want.pooling, `${c.label}: default`);
      }
      const got = await embed(ctx, inputs, { pooling });
      const n = pooling === "none" || (!pooling && want.pooling === 0)
        ? ids.reduce((a, t) => a + t.length, 0)
        : ids.length;
      assert.equal(got.length, n);
      const worst = compareRows(`${c.label} ${pooling ?? "default"}`, got, want.rows);
      console.log(
        `${c.label} ${pooling ?? `default (${defaultPooling(model)})`}: ${got.length} rows, ` +
          `worst cosine distance ${worst.toExponential(2)}`,
      );
    }
  });
}

Deno.test("embed: normalizations against common_embd_normalize (bert mean, tolstoy last)", async () => {
  const oracle = await loadOracle();
  for (const [path, pooling] of [[BERT, "mean"], [TOLSTOY, "last"]] as const) {
    using om = oracle.load(path);
    using model = await Model.load(path);
    using ctx = await Context.create(model, { threads: 2, nSeqMax: 4, embeddings: true });
    const ids = tokenIds(om, model, TEXTS.slice(0, 4));
    const raw = (await llamaEmbedding(om, ids, {
      pooling: POOLING_ID[pooling],
      nBatch: 512,
      nSeqMax: 4,
      normalize: -1,
    })).rows;
    for (const normalize of [-1, 0, 1, 2, 3, 7]) {
      const got = await embed(ctx, TEXTS.slice(0, 4), { pooling, normalize });
      let worst = 0;
      for (const [i, r] of raw.entries()) {
        const want = await oracleNormalize(r, normalize);
        worst = Math.max(worst, cosineDistance(got[i], want));
        // The scale too, not only the direction.
        const ratio = Math.hypot(...got[i]) / Math.hypot(...want);
        assert.ok(Math.abs(ratio - 1) < 1e-3, `normalize ${normalize} row ${i}: scale ${ratio}`);
      }
      assert.ok(worst < 1e-4, `${path} normalize ${normalize}: cosine distance ${worst}`);
      console.log(
        `${model.hparams.arch} ${pooling} normalize ${normalize}: worst ${worst.toExponential(2)}`,
      );
    }
  }
});

Deno.test("normalizeEmbedding is common_embd_normalize's arithmetic", async () => {
  let s = 12345;
  const rand = () => {
    s ^= s << 13, s >>>= 0, s ^= s >>> 17, s ^= s << 5, s >>>= 0;
    return s / 2 ** 32 - 0.5;
  };
  const vectors = [
    Float32Array.from({ length: 384 }, () => rand() * 3),
    Float32Array.from({ length: 7 }, () => rand() * 1e-3),
    new Float32Array(16), // all zero: the scale is 0, as llama.cpp's
  ];
  for (const v of vectors) {
    for (const norm of [-1, 0, 1, 2, 3, 4, 10]) {
      const want = await oracleNormalize(v, norm);
      const got = normalizeEmbedding(v, norm);
      for (let i = 0; i < v.length; i++) {
        // pow (p > 2) is the C library's in one, V8's in the other: within an ulp or so.
        const tol = norm > 2 ? Math.abs(want[i]) * 1e-6 : 0;
        assert.ok(
          Math.abs(got[i] - want[i]) <= tol,
          `norm ${norm} [${i}]: ${got[i]} vs llama.cpp ${want[i]}`,
        );
      }
    }
  }
  // Pooling of rows: first, last, mean.
  const rows = [Float32Array.of(1, 2), Float32Array.of(3, 4), Float32Array.of(5, 9)];
  assert.deepEqual([...poolRows(rows, "cls")], [1, 2]);
  assert.deepEqual([...poolRows(rows, "last")], [5, 9]);
  assert.deepEqual([...poolRows(rows, "mean")], [3, 5]);
});

/** Asserts `f` rejects with a one-line error of class `cls` whose message matches `re`. */
async function rejects(
  f: () => Promise<unknown>,
  cls: typeof OptionError | typeof ContextError,
  re: RegExp,
): Promise<void> {
  await assert.rejects(f, (e: unknown) => {
    assert.ok(e instanceof cls, String(e));
    assert.ok(!(e as Error).message.includes("\n"), (e as Error).message);
    assert.match((e as Error).message, re);
    return true;
  });
}

Deno.test("embed: bad options and inputs are one-line errors naming the field", async () => {
  using model = await Model.load(TOLSTOY);
  using ctx = await Context.create(model, { threads: 1, nBatch: 32, embeddings: true });
  const bad: [unknown, unknown, RegExp][] = [
    [
      ["a"],
      { pooling: "max" },
      /^embed: pooling = "max" is not allowed .*"none", "mean", "cls", "last"/,
    ],
    [["a"], { normalize: 1.5 }, /^embed: normalize = 1\.5 /],
    [["a"], { normalize: -2 }, /^embed: normalize = -2 /],
    [["a"], { pool: "mean" }, /^embed: options\.pool = /],
    [["a"], { addSpecial: 1 }, /^embed: addSpecial = 1 /],
    ["a", {}, /^embed: inputs = "a" .*an array/],
    [["a", 5], {}, /^embed: inputs\[1\] = 5 /],
    [["a", [1, 2, 1e9]], {}, /^embed: inputs\[1\]\[2\] = 1000000000 .*token id in 0\.\./],
    [["a", []], {}, /^embed: inputs\[1\] = \[\] .*at least one token/],
  ];
  for (const [inputs, opts, re] of bad) {
    await rejects(() => embed(ctx, inputs as string[], opts as EmbedOptions), OptionError, re);
  }
  // Longer than one batch holds: both numbers named.
  await rejects(
    () => embed(ctx, ["a", promptIds(33, 3, 1000, 1)]),
    ContextError,
    /^embed: inputs\[1\] has 33 tokens, more than the 32 one batch of Context #\d+ .* holds/,
  );
  // A decoder's context without embeddings: logits are no embeddings.
  using plain = await Context.create(model, { threads: 1 });
  await rejects(() => embed(plain, ["a"]), ContextError, /embeddings: true/);
  // A file whose default pooling is a reranker head.
  using rank = await Model.load(LLAMA_RANK);
  using rctx = await Context.create(rank, { threads: 1, embeddings: true });
  await rejects(() => embed(rctx, ["a"]), OptionError, /pooling_type = 4 \(RANK/);
  assert.equal((await embed(rctx, ["a"], { pooling: "cls" })).length, 1);
  assert.deepEqual(await embed(ctx, []), []); // nothing to embed is no error
  // A live Sequence would lose its cells to embed's clear: refused until disposed.
  {
    using _seq = ctx.sequence();
    await rejects(() => embed(ctx, ["a"]), ContextError, /sequence 0 .* held by a Sequence/);
  }
  assert.equal((await embed(ctx, ["a"], { pooling: "last" })).length, 1);
  // A signal aborted before the call: it rejects with the reason, and the context still works.
  const reason = new Error("stop");
  await assert.rejects(() => embed(ctx, ["a"], { signal: AbortSignal.abort(reason) }), reason);
  assert.equal((await embed(ctx, ["a", "b"])).length, 2 * 2); // BOS + one token each, unpooled
  // An encoder: the training context bounds one input.
  using bert = await Model.load(BERT);
  using bctx = await Context.create(bert, { threads: 1 });
  await rejects(
    () => embed(bctx, [promptIds(129, 999, 30000, 1)]),
    ContextError,
    /inputs\[0\] has 129 tokens, more than the 128 .*training context 128/,
  );
});
