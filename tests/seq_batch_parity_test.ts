/**
 * Four sequences decoded together in one batch against each decoded alone,
 * and against llama.cpp decoding the same batches (tests/oracle/oracle_batch.ts:
 * kv_unified, flash attention off, the same cache type).
 *
 * Each model runs three prefills of four prompts of different lengths: the
 * prompts one after the other with an output on each one's last token, the
 * same with every token an output, and the prompts interleaved token by
 * token (so their cells interleave in the cache) with last-token outputs;
 * the first and the last are followed by decode steps of one token per
 * sequence in one batch. "Alone" decodes each sequence's tokens by itself
 * (the same sequence id, the other sequences empty). Four runs per
 * variant: ours and llama.cpp, batched and alone.
 *
 * What is compared, per output row (sequence, position):
 * - ours batched vs llama.cpp batched, and ours alone vs llama.cpp alone:
 *   within 1e-4, and bit-identical where our SIMD level follows llama.cpp's
 *   CPU variant (tests/parity_util.ts parityGate);
 * - llama.cpp batched vs llama.cpp alone: printed. They are not always
 *   bit-identical: a graph with one output row multiplies the output head
 *   (and a one-token graph every matrix) as a matrix-vector product, one
 *   with several rows as a matrix-matrix product, whose sums round
 *   differently;
 * - ours batched vs ours alone: bit-identical wherever llama.cpp's are,
 *   elsewhere within max(1e-4, llama.cpp's own difference on that row).
 */
import assert from "node:assert/strict";
import { join } from "node:path";
import { Model } from "../lib/model/model.ts";
import { writeRandomLlama } from "../lib/model/random.ts";
import { Context } from "../lib/runtime/context.ts";
import { loadOracle, maxAbsDiff, type OracleModel } from "./oracle/oracle.ts";
import { type OracleBatch, OracleBatchContext } from "./oracle/oracle_batch.ts";
import { TOLSTOY_F16, TOLSTOY_F32, tolstoyQuantized } from "./oracle/models.ts";
import { parityGate } from "./parity_util.ts";
import { ROOT } from "./quant_util.ts";
import { mulberry32 } from "./rng.ts";

const N_SEQ = 4;
/** Prompt lengths of sequences 0..3. */
const PROMPT_LENS = [11, 23, 4, 16];
/** Decode steps after a prefill, one token per sequence each. */
const N_STEPS = 4;
/** Largest difference allowed where bit-identity is not claimed. */
const TOL = 1e-4;
/** ggml type ids of the KV cache. */
const KV_GGML = { f16: 1, f32: 0, q8_0: 8 } as const;

const cpu = (await loadOracle()).cpu;
const gate = parityGate(cpu);
/** Whether our logits must be bit-identical to llama.cpp's here. */
const EXACT = gate.skip === "";
if (!EXACT) console.log(`seq_batch_parity_test: within ${TOL} only: ${gate.skip}`);

/** A small random llama with grouped-query attention (8 query heads over 2 KV heads). */
const RANDOM_PATH = join(ROOT, ".cache", "seq-batch", "random-gqa-f32.gguf");
// heads of 64, four query heads per K/V head: over a Q8_0 cache with flash
// attention, the default path takes a K/V head's query heads together
// (flash_attn_x86.c's fa_cells_q8_heads)
const RANDOM_64_PATH = join(ROOT, ".cache", "seq-batch", "random-gqa64-f32.gguf");
const RANDOM_SHAPE = { nEmbd: 256, nHead: 8, nHeadKv: 2, nFF: 512, nLayer: 2, std: 0.05, seed: 13 };
const RANDOM_64_SHAPE = { ...RANDOM_SHAPE, nEmbd: 512 };

/** One token of a batch: which sequence and position it is, and whether it is an output. */
interface Slot {
  seq: number;
  pos: number;
  out: boolean;
}

/** A batch with what each of its tokens is. */
interface Planned {
  batch: OracleBatch;
  slots: Slot[];
}

/** Output rows by "seq:pos". */
type Rows = Map<string, Float32Array>;

/** Decodes a batch; the logits of its output rows in batch order. */
type Decoder = (b: OracleBatch) => Promise<Float32Array[]>;

function plan(tokens: number[][], start: number[], outs: (s: number, i: number) => boolean, order: [
  number,
  number,
][]): Planned {
  const slots = order.map(([s, i]) => ({ seq: s, pos: start[s] + i, out: outs(s, i) }));
  return {
    batch: {
      tokens: order.map(([s, i]) => tokens[s][i]),
      pos: slots.map((t) => t.pos),
      seqIds: slots.map((t) => t.seq),
      logits: slots.map((t) => t.out),
    },
    slots,
  };
}

/** (seq, index) pairs: sequence after sequence, or round-robin. */
function orderOf(lens: number[], seqs: number[], interleaved: boolean): [number, number][] {
  const out: [number, number][] = [];
  if (!interleaved) {
    for (const s of seqs) for (let i = 0; i < lens[s]; i++) out.push([s, i]);
    return out;
  }
  for (let i = 0; i < Math.max(...seqs.map((s) => lens[s])); i++) {
    for (const s of seqs) if (i < lens[s]) out.push([s, i]);
  }
  return out;
}

async function run(dec: Decoder, p: Planned, into: Rows): Promise<void> {
  const rows = await dec(p.batch);
  const outs = p.slots.filter((t) => t.out);
  assert.equal(rows.length, outs.length, "output rows");
  outs.forEach((t, k) => into.set(`${t.seq}:${t.pos}`, rows[k]));
}

interface Variant {
  name: string;
  interleaved: boolean;
  allOutputs: boolean;
  steps: boolean;
}

const VARIANTS: Variant[] = [
  { name: "last-token outputs", interleaved: false, allOutputs: false, steps: true },
  { name: "all outputs", interleaved: false, allOutputs: true, steps: false },
  { name: "interleaved prompts", interleaved: true, allOutputs: false, steps: true },
];

/**
 * One variant's rows: the prefill of all prompts (batched: one batch;
 * alone: each sequence by itself after a clear), then the steps.
 */
async function rowsOf(
  dec: Decoder,
  clear: () => void,
  prompts: number[][],
  steps: number[][],
  v: Variant,
  batched: boolean,
): Promise<Rows> {
  const rows: Rows = new Map();
  const lens = prompts.map((p) => p.length);
  const outs = (s: number, i: number) => v.allOutputs || i === lens[s] - 1;
  const seqs = [...Array(N_SEQ).keys()];
  /** Step k: one token per sequence of `only`, each after its prompt and k earlier steps. */
  const step = (k: number, only: number[]) =>
    plan(
      seqs.map((s) => [steps[k][s]]),
      lens.map((n) => n + k),
      () => true,
      only.map((s) => [s, 0]),
    );
  const nSteps = v.steps ? steps.length : 0;
  clear();
  if (batched) {
    await run(dec, plan(prompts, [0, 0, 0, 0], outs, orderOf(lens, seqs, v.interleaved)), rows);
    for (let k = 0; k < nSteps; k++) await run(dec, step(k, seqs), rows);
    return rows;
  }
  for (const s of seqs) {
    clear();
    await run(dec, plan(prompts, [0, 0, 0, 0], outs, orderOf(lens, [s], false)), rows);
    for (let k = 0; k < nSteps; k++) await run(dec, step(k, [s]), rows);
  }
  return rows;
}

/** Per-row max |diff| of two runs over the same rows. */
function diffs(a: Rows, b: Rows, label: string): Map<string, number> {
  assert.deepEqual([...a.keys()].sort(), [...b.keys()].sort(), `${label}: rows`);
  return new Map([...a].map(([k, l]) => [k, maxAbsDiff(l, b.get(k)!)]));
}

const maxOf = (d: Map<string, number>) => Math.max(0, ...d.values());
const fmt = (x: number) => x === 0 ? "0" : x.toExponential(2);

/** Context settings both sides share: kv_unified (default true) and flash attention (default off). */
interface Layout {
  kvUnified?: boolean;
  flashAttn?: boolean;
}

async function checkModel(
  label: string,
  path: string,
  kvType: "f16" | "f32" | "q8_0",
  layout: Layout = {},
): Promise<void> {
  const oracle = await loadOracle();
  using om: OracleModel = oracle.load(path);
  using oc = await OracleBatchContext.create(om, {
    nCtx: 256,
    nSeqMax: N_SEQ,
    typeK: KV_GGML[kvType],
    typeV: KV_GGML[kvType],
    ...layout,
  });
  using model = await Model.load(path);
  using ctx = await Context.create(model, {
    nCtx: 256,
    nBatch: 256,
    nSeqMax: N_SEQ,
    threads: 2,
    kvType,
    ...layout,
  });
  // llama.cpp's n_ctx after its padding (and, per stream, n_ctx_seq's)
  assert.equal(ctx.nCtx, oc.nCtx, `${label}: nCtx`);

  const rand = mulberry32(0x5eb1);
  const tok = () => 3 + Math.floor(rand() * (om.nVocab - 3));
  const prompts = PROMPT_LENS.map((n) => Array.from({ length: n }, tok));
  const steps = Array.from({ length: N_STEPS }, () => Array.from({ length: N_SEQ }, tok));

  const theirs: Decoder = (b) => {
    const r = oc.decode(b);
    if (r.rc !== 0) throw new Error(`${label}: llama_decode returned ${r.rc}`);
    return Promise.resolve(r.logits);
  };
  const ours: Decoder = async (b) => {
    const r = await ctx.decodeBatch(b);
    return r.logits;
  };

  for (const v of VARIANTS) {
    const tb = await rowsOf(theirs, () => oc.clear(), prompts, steps, v, true);
    const ta = await rowsOf(theirs, () => oc.clear(), prompts, steps, v, false);
    const ub = await rowsOf(ours, () => ctx.clear(), prompts, steps, v, true);
    const ua = await rowsOf(ours, () => ctx.clear(), prompts, steps, v, false);
    const what = `${label}, ${v.name}`;

    const vsBatched = diffs(ub, tb, `${what}: ours vs llama.cpp, batched`);
    const vsAlone = diffs(ua, ta, `${what}: ours vs llama.cpp, alone`);
    const theirRel = diffs(tb, ta, `${what}: llama.cpp batched vs alone`);
    const ourRel = diffs(ub, ua, `${what}: ours batched vs alone`);
    const same = [...theirRel.values()].filter((d) => d === 0).length;
    console.log(
      `${what}: ${tb.size} rows; ours vs llama.cpp max |diff| batched ${fmt(maxOf(vsBatched))}, ` +
        `alone ${fmt(maxOf(vsAlone))}; batched vs alone: llama.cpp ${same}/${theirRel.size} ` +
        `rows bit-identical (max |diff| ${fmt(maxOf(theirRel))}), ours max |diff| ` +
        fmt(maxOf(ourRel)),
    );

    for (const [name, d] of [["batched", vsBatched], ["alone", vsAlone]] as const) {
      for (const [row, x] of d) {
        assert.ok(x <= TOL, `${what}: ours vs llama.cpp, ${name}, row ${row}: |diff| ${x}`);
        if (EXACT) {
          assert.equal(x, 0, `${what}: ours vs llama.cpp, ${name}, row ${row} not bit-identical`);
        }
      }
    }
    for (const [row, x] of ourRel) {
      const t = theirRel.get(row)!;
      if (t === 0) {
        assert.equal(
          x,
          0,
          `${what}: row ${row}: llama.cpp's batched and alone are ` +
            `bit-identical, ours differ by ${x}`,
        );
      } else {
        assert.ok(
          x <= Math.max(TOL, t),
          `${what}: row ${row}: ours batched vs alone ${x} ` +
            `(llama.cpp's ${t})`,
        );
      }
    }
  }
}

Deno.test("oracle_batch: one sequence matches oracle.c; a batch that does not fit returns 1", async () => {
  const oracle = await loadOracle();
  using om = oracle.load(TOLSTOY_F16);
  using single = om.context({ nCtx: 256 });
  using oc = await OracleBatchContext.create(om, { nCtx: 256, nSeqMax: N_SEQ });
  assert.equal(oc.nCtx, 256);
  const rand = mulberry32(7);
  const prompt = Array.from({ length: 40 }, () => 3 + Math.floor(rand() * (om.nVocab - 3)));
  const want = single.decode(prompt, true);
  const got = oc.decode({
    tokens: prompt,
    seqIds: prompt.map(() => 2),
    logits: prompt.map(() => 1),
  });
  assert.equal(got.rc, 0);
  assert.deepEqual(got.outputIds, [...prompt.keys()]);
  for (let i = 0; i < prompt.length; i++) assert.deepEqual(got.logits[i], want[i], `row ${i}`);
  assert.deepEqual([oc.seqPosMin(2), oc.seqPosMax(2), oc.seqPosMax(0)], [0, 39, -1]);
  // 40 + 200 of 256 cells used: 30 more do not fit and leave the cache as it was
  const more = prompt.concat(prompt, prompt, prompt, prompt).slice(0, 200);
  assert.equal(oc.decode({ tokens: more, seqIds: more.map(() => 1) }).rc, 0);
  const seq0 = { tokens: more.slice(0, 30), seqIds: Array(30).fill(0) };
  assert.equal(oc.decode(seq0).rc, 1);
  assert.deepEqual([oc.seqPosMax(0), oc.seqPosMax(1), oc.seqPosMax(2)], [-1, 199, 39]);
  assert.equal(oc.seqRm(1, 190, -1), true); // 26 free
  assert.equal(oc.decode(seq0).rc, 1);
  assert.equal(oc.seqRm(1, 180, 190), true); // 36 free
  assert.equal(oc.decode(seq0).rc, 0);
  assert.deepEqual([oc.seqPosMin(0), oc.seqPosMax(0), oc.seqPosMax(1)], [0, 29, 179]);
});

Deno.test("4 sequences in one batch: tolstoy-6m f16", async () => {
  await checkModel("tolstoy f16", TOLSTOY_F16, "f16");
});

Deno.test("4 sequences in one batch: tolstoy-6m q8_0", async () => {
  await checkModel("tolstoy q8_0", await tolstoyQuantized("Q8_0"), "f16");
});

Deno.test("4 sequences in one batch, one KV stream each: tolstoy-6m f16", async () => {
  await checkModel("tolstoy f16 kvUnified false", TOLSTOY_F16, "f16", { kvUnified: false });
});

Deno.test("4 sequences in one batch, one KV stream each: tolstoy-6m f16, flash attention", async () => {
  await checkModel("tolstoy f16 kvUnified false fa", TOLSTOY_F16, "f16", {
    kvUnified: false,
    flashAttn: true,
  });
});

Deno.test("4 sequences in one batch: random llama (GQA, heads of 64), q8_0 and f16 caches, flash attention", async () => {
  Deno.mkdirSync(join(ROOT, ".cache", "seq-batch"), { recursive: true });
  await writeRandomLlama(RANDOM_64_PATH, {
    ...RANDOM_64_SHAPE,
    type: "f32",
    tokenizerFrom: TOLSTOY_F32,
  });
  await checkModel("random llama, heads of 64, q8_0 fa", RANDOM_64_PATH, "q8_0", {
    flashAttn: true,
  });
  await checkModel("random llama, heads of 64, q8_0 fa, kvUnified false", RANDOM_64_PATH, "q8_0", {
    flashAttn: true,
    kvUnified: false,
  });
  // over F16 with a stream each: every stream's heads of one K/V head together (fa_heads_rows)
  await checkModel("random llama, heads of 64, f16 fa, kvUnified false", RANDOM_64_PATH, "f16", {
    flashAttn: true,
    kvUnified: false,
  });
});

Deno.test("4 sequences in one batch: random llama (GQA), f32 cache", async () => {
  Deno.mkdirSync(join(ROOT, ".cache", "seq-batch"), { recursive: true });
  await writeRandomLlama(RANDOM_PATH, { ...RANDOM_SHAPE, type: "f32", tokenizerFrom: TOLSTOY_F32 });
  await checkModel("random llama f32", RANDOM_PATH, "f32");
  await checkModel("random llama f32 kvUnified false", RANDOM_PATH, "f32", { kvUnified: false });
});
