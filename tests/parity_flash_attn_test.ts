/**
 * Flash attention against llama.cpp with flash attention ON
 * (tests/oracle/oracle_batch.ts `flashAttn`: ggml_flash_attn_ext over a
 * non-transposed V cache, F16 mask), on tolstoy-6m (head size 32, so
 * llama.cpp's Hadamard rotation of quantized caches is off), for an F16
 * cache and a Q8_0 cache (K and V), and an F32 cache (cast to F16):
 *
 * - greedy decoding after a prompt fed in nBatch chunks (micro-batches of
 *   32 tokens: ggml's one-row path; of 128: its tiled path), tokens up to
 *   llama.cpp's first near-tie, logits at every step before it;
 * - a batch of three sequences with interleaved prompts (every token an
 *   output), then decode steps of one token per sequence in one batch;
 * - a K-shift: part of a sequence removed, the rest moved back with seqAdd
 *   (a q8_0 K is dequantized, roped and quantized again), then greedy steps
 *   (q8_0 on tolstoy: against ggml's ops, llama.cpp crashes there);
 * - a decode over 768 cells (ggml's split-KV path, 2 threads);
 * - random llamas of head size 64 and 128 with a q8_0 cache, where
 *   llama.cpp rotates q, k and v by a Walsh-Hadamard matrix: greedy steps
 *   and a K-shift end to end;
 * - a random bert (no cache: k and v cast to F16): hidden states
 *   (tests/oracle/oracle_embd.ts with flash attention on).
 *
 * Bit-identical where our SIMD level follows llama.cpp's CPU variant
 * (tests/parity_util.ts parityGate), within 1e-4 elsewhere; the largest
 * logit difference of each part is printed.
 */
import assert from "node:assert/strict";
import { join } from "node:path";
import { Model } from "../lib/model/model.ts";
import { writeRandomLlama } from "../lib/model/random.ts";
import { OptionError } from "../lib/options.ts";
import { writeRandomBert } from "./archs/bert.ts";
import { writeRandomGemma } from "./archs/gemma.ts";
import { writeLlamaVariant } from "./archs/llama_variants.ts";
import { writeRandomPhi3 } from "./archs/phi3.ts";
import { Context } from "../lib/runtime/context.ts";
import { loadOracle, maxAbsDiff, nearTieStep, top2 } from "./oracle/oracle.ts";
import { type OracleBatch, OracleBatchContext } from "./oracle/oracle_batch.ts";
import { OracleEmbdContext } from "./oracle/oracle_embd.ts";
import { TOLSTOY_F16, TOLSTOY_F32 } from "./oracle/models.ts";
import { loadOracleFlashAttn } from "./oracle/oracle_fa.ts";
import { parityGate } from "./parity_util.ts";
import { mulberry32 } from "./rng.ts";

const TOL = 1e-4;
const KV_GGML = { f16: 1, f32: 0, q8_0: 8 } as const;
type Kv = keyof typeof KV_GGML;
// One thread each: with nKv <= 256 no path depends on the count, and the
// oracle's spinning threads would compete with ours on small machines.
const THREADS = 1;

const oracle = await loadOracle();
const gate = parityGate(oracle.cpu);
const EXACT = gate.skip === "";
if (!EXACT) console.log(`parity_flash_attn_test: within ${TOL} only: ${gate.skip}`);

const fmt = (x: number) => x === 0 ? "0" : x.toExponential(2);

/** Both engines with flash attention over the same cache type. */
async function open(kv: Kv, nBatch: number, nSeqMax = 1, path = TOLSTOY_F16) {
  const om = oracle.load(path);
  const oc = await OracleBatchContext.create(om, {
    nCtx: 256,
    nBatch,
    nSeqMax,
    threads: THREADS,
    typeK: KV_GGML[kv],
    typeV: KV_GGML[kv],
    flashAttn: true,
  });
  const model = await Model.load(path);
  const ctx = await Context.create(model, {
    nCtx: 256,
    nBatch,
    nSeqMax,
    threads: THREADS,
    kvType: kv,
    flashAttn: true,
  });
  return {
    om,
    oc,
    ctx,
    [Symbol.dispose]() {
      ctx[Symbol.dispose]();
      model[Symbol.dispose]();
      oc[Symbol.dispose]();
      om[Symbol.dispose]();
    },
  };
}

type Both = Awaited<ReturnType<typeof open>>;

/** One batch in both engines; the output rows of each. */
async function decodeBoth(b: Both, batch: OracleBatch): Promise<[Float32Array[], Float32Array[]]> {
  const r = b.oc.decode(batch);
  assert.equal(r.rc, 0, `llama_decode returned ${r.rc}`);
  const ours = await b.ctx.decodeBatch(batch);
  assert.deepEqual(ours.outputIds, r.outputIds);
  return [ours.logits, r.logits];
}

/** Asserts one row pair and returns its max |diff|. */
function checkRow(label: string, got: Float32Array, want: Float32Array): number {
  const d = maxAbsDiff(got, want);
  assert.ok(d <= TOL, `${label}: logits differ by ${d}`);
  if (EXACT) assert.equal(d, 0, `${label}: logits not bit-identical (max |diff| ${d})`);
  return d;
}

/**
 * Feeds `prompt` to sequence 0 from position `pos0` in chunks of nBatch,
 * then greedy steps (llama.cpp's token fed to both): tokens compared up to
 * llama.cpp's first near-tie, logits at every step. Returns [steps before
 * the first near-tie, max |diff|].
 */
async function greedy(
  b: Both,
  label: string,
  prompt: number[],
  pos0: number,
  nBatch: number,
  steps: number,
): Promise<[number, number]> {
  let pos = pos0, worst = 0;
  let last: [Float32Array, Float32Array] | null = null;
  for (let i = 0; i < prompt.length; i += nBatch) {
    const chunk = prompt.slice(i, i + nBatch);
    const isLast = i + nBatch >= prompt.length;
    const [o, t] = await decodeBoth(b, {
      tokens: chunk,
      pos: chunk.map((_, k) => pos + k),
      seqIds: chunk.map(() => 0),
      logits: chunk.map((_, k) => isLast && k === chunk.length - 1),
    });
    pos += chunk.length;
    if (isLast) last = [o[0], t[0]];
  }
  const gaps: number[] = [];
  const pairs: [Float32Array, Float32Array][] = [];
  for (let s = 0; s < steps; s++) {
    const [o, t] = last!;
    const [tok, gap] = top2(t);
    gaps.push(gap);
    pairs.push([o, t]);
    if (top2(o)[0] !== tok && gap >= 0.01) {
      assert.fail(`${label}: step ${s}: ours ${top2(o)[0]}, llama.cpp ${tok} (gap ${gap})`);
    }
    const [o2, t2] = await decodeBoth(b, { tokens: [tok], pos: [pos++], seqIds: [0] });
    last = [o2[0], t2[0]];
  }
  // Both engines are fed llama.cpp's token, so their inputs agree at every
  // step and the logits are compared at all of them; the tokens only before
  // llama.cpp's first near-tie (checked above).
  for (let s = 0; s < steps; s++) {
    worst = Math.max(worst, checkRow(`${label}: step ${s}`, pairs[s][0], pairs[s][1]));
  }
  return [nearTieStep(gaps), worst];
}

function tokens(seed: number, n: number, nVocab: number): number[] {
  const r = mulberry32(seed);
  return Array.from({ length: n }, () => 3 + Math.floor(r() * (nVocab - 3)));
}

for (const kv of ["f16", "q8_0"] as const) {
  for (const nBatch of [32, 128]) {
    Deno.test(`flash attention, ${kv} cache: greedy after a prompt in ${nBatch}-token batches`, async () => {
      using b = await open(kv, nBatch);
      const prompt = tokens(11 + nBatch, 100, b.om.nVocab);
      const [upto, worst] = await greedy(b, `${kv}/${nBatch}`, prompt, 0, nBatch, 24);
      console.log(
        `flash ${kv}, nBatch ${nBatch}: ${upto} greedy steps before llama.cpp's first near-tie, ` +
          `logits max |diff| ${fmt(worst)}`,
      );
    });
  }

  Deno.test(`flash attention, ${kv} cache: three sequences in one batch`, async () => {
    const nSeq = 3, lens = [9, 21, 14];
    using b = await open(kv, 128, nSeq);
    const prompts = lens.map((n, s) => tokens(100 + s, n, b.om.nVocab));
    const order: [number, number][] = [];
    for (let i = 0; i < Math.max(...lens); i++) {
      for (let s = 0; s < nSeq; s++) if (i < lens[s]) order.push([s, i]);
    }
    let worst = 0, rows = 0;
    const check = (o: Float32Array[], t: Float32Array[], what: string) => {
      assert.equal(o.length, t.length);
      o.forEach((
        row,
        k,
      ) => (worst = Math.max(worst, checkRow(`${kv} ${what} row ${k}`, row, t[k]))));
      rows += o.length;
    };
    const [o, t] = await decodeBoth(b, {
      tokens: order.map(([s, i]) => prompts[s][i]),
      pos: order.map(([, i]) => i),
      seqIds: order.map(([s]) => s),
      logits: order.map(() => true),
    });
    check(o, t, "prefill");
    const next = [...lens];
    for (let step = 0; step < 4; step++) {
      const toks = tokens(200 + step, nSeq, b.om.nVocab);
      const [o2, t2] = await decodeBoth(b, {
        tokens: toks,
        pos: next.map((p) => p),
        seqIds: [0, 1, 2],
        logits: [true, true, true],
      });
      check(o2, t2, `step ${step}`);
      for (let s = 0; s < nSeq; s++) next[s]++;
    }
    console.log(`flash ${kv}, 3 sequences: ${rows} rows, max |diff| ${fmt(worst)}`);
  });

  if (kv === "f16") {
    // build_attn_mha casts an F32 cache's K and V views to F16 for flash attention.
    Deno.test("flash attention, f32 cache: greedy after a prompt in 32-token batches", async () => {
      using b = await open("f32", 32);
      const [upto, worst] = await greedy(b, "f32/32", tokens(43, 100, b.om.nVocab), 0, 32, 24);
      console.log(`flash f32, nBatch 32: ${upto} greedy steps, max |diff| ${fmt(worst)}`);
    });

    Deno.test(`flash attention, f16 cache: K-shift (seqRm + seqAdd) then greedy`, async () => {
      using b = await open(kv, 64);
      const prompt = tokens(7, 90, b.om.nVocab);
      await greedy(b, `${kv} before shift`, prompt, 0, 64, 1);
      // drop positions 20..49 and move 50.. back by 30 (llama-server's context shift)
      for (const m of [b.oc, b.ctx]) {
        assert.equal(m.seqRm(0, 20, 50), true);
        m.seqAdd(0, 50, -1, -30);
      }
      assert.equal(b.ctx.seqPosMax(0), b.oc.seqPosMax(0));
      const more = tokens(8, 20, b.om.nVocab);
      const [upto, worst] = await greedy(
        b,
        `${kv} after shift`,
        more,
        b.oc.seqPosMax(0) + 1,
        64,
        24,
      );
      console.log(
        `flash ${kv}, after a K-shift: ${upto} greedy steps before the first near-tie, ` +
          `max |diff| ${fmt(worst)}`,
      );
    });
  }
}

// A one-token decode over >= 512 cells takes ggml's split-KV path, whose
// partial sums depend on the thread count: both engines run 2 threads here.
Deno.test("flash attention, f16 cache: decode steps over 768 cells (ggml's split-KV path, 2 threads)", async () => {
  using om = oracle.load(TOLSTOY_F16);
  const opts = { nCtx: 1024, nBatch: 512, threads: 2 };
  using oc = await OracleBatchContext.create(om, { ...opts, typeK: 1, typeV: 1, flashAttn: true });
  using model = await Model.load(TOLSTOY_F16);
  using ctx = await Context.create(model, { ...opts, kvType: "f16", flashAttn: true });
  const b = { om, oc, ctx } as unknown as Both;
  const prompt = tokens(3, 520, om.nVocab);
  const [upto, worst] = await greedy(b, "f16 split", prompt, 0, 512, 6);
  console.log(`flash f16, 520 cached tokens: ${upto} greedy steps, max |diff| ${fmt(worst)}`);
});

// Head sizes divisible by 64: llama.cpp's quantized cache holds q, k and v
// times a Walsh-Hadamard matrix (attn_rot_k: blocks of the largest power of
// 2 dividing the head size; attn_rot_v: 64), and its K-shift rotates back,
// ropes, and rotates again; random llamas of head size 64 and 128.
const ROT_DIR = Deno.makeTempDirSync({ prefix: "llm-edge-fa-rot-" });
const ROT_MODELS = [
  { head: 64, path: join(ROT_DIR, "llama-head64.gguf"), nEmbd: 256, nHead: 4, nHeadKv: 2 },
  { head: 128, path: join(ROT_DIR, "llama-head128.gguf"), nEmbd: 256, nHead: 2, nHeadKv: 1 },
];
for (const m of ROT_MODELS) {
  await writeRandomLlama(m.path, {
    nEmbd: m.nEmbd,
    nHead: m.nHead,
    nHeadKv: m.nHeadKv,
    nFF: 512,
    nLayer: 2,
    type: "f32",
    std: 0.05,
    seed: m.head,
    tokenizerFrom: TOLSTOY_F32,
  });
}
globalThis.addEventListener("unload", () => Deno.removeSync(ROT_DIR, { recursive: true }));

for (const m of ROT_MODELS) {
  Deno.test(`flash attention, q8_0 cache, head size ${m.head} (Hadamard-rotated cache): greedy, then a K-shift`, async () => {
    using b = await open("q8_0", 64, 1, m.path);
    const prompt = tokens(m.head, 90, b.om.nVocab);
    const [upto, worst] = await greedy(b, `head ${m.head}`, prompt, 0, 64, 12);
    for (const x of [b.oc, b.ctx]) {
      assert.equal(x.seqRm(0, 20, 50), true);
      x.seqAdd(0, 50, -1, -30);
    }
    const more = tokens(m.head + 1, 10, b.om.nVocab);
    const [upto2, worst2] = await greedy(
      b,
      `head ${m.head} shifted`,
      more,
      b.oc.seqPosMax(0) + 1,
      64,
      12,
    );
    console.log(
      `flash q8_0, head ${m.head}: ${upto} greedy steps, max |diff| ${fmt(worst)}; after a ` +
        `K-shift ${upto2} steps, max |diff| ${fmt(worst2)}`,
    );
  });
}

// Without a cache (bert) llama.cpp's flash path casts k and v to F16 and
// masks with F16; the whole input is one micro-batch.
Deno.test("flash attention without a cache: random bert hidden states", async () => {
  const path = join(ROT_DIR, "bert.gguf");
  await writeRandomBert(path, { type: "f32", nHeadKv: 2, nCtxTrain: 128 });
  using om = oracle.load(path);
  using oc = await OracleEmbdContext.create(om, { nCtx: 128, nBatch: 128, flashAttn: true });
  using model = await Model.load(path);
  using ctx = await Context.create(model, { threads: 1, flashAttn: true });
  let worst = 0;
  for (const n of [5, 70]) {
    const ids = tokens(n, n, om.nVocab);
    const want = oc.encode(ids);
    const got = (await ctx.decode(ids, { allLogits: true })).embeddings!;
    for (let i = 0; i < n; i++) {
      worst = Math.max(worst, checkRow(`bert ${n}: ${i}`, got[i], want[i]));
    }
  }
  console.log(`flash bert (no cache): max |diff| ${fmt(worst)}`);
});

// Other architectures with flash attention (random weights): gemma (head
// size 32 beside nEmbd/nHead, multi-query), phi3 (fused qkv, a sliding
// window of 16), qwen2 (q/k/v biases, NeoX RoPE); f16 and q8_0 caches.
const ARCHS: { name: string; write: (path: string) => Promise<unknown> }[] = [
  { name: "gemma", write: (path) => writeRandomGemma(path, { type: "f32", nVocab: 256 }) },
  {
    name: "phi3",
    write: (path) =>
      writeRandomPhi3(path, {
        type: "f32",
        name: "random-p3",
        slidingWindow: 16,
        seed: 4,
        std: 0.08,
      }),
  },
  {
    name: "qwen2",
    write: (path) => writeLlamaVariant(path, { arch: "qwen2", qkvBias: true, outputBias: true }),
  },
];
for (const a of ARCHS) {
  const path = join(ROT_DIR, `${a.name}.gguf`);
  await a.write(path);
  for (const kv of ["f16", "q8_0"] as const) {
    Deno.test(`flash attention, ${kv} cache: random ${a.name}`, async () => {
      using b = await open(kv, 32, 1, path);
      const [upto, worst] = await greedy(
        b,
        `${a.name} ${kv}`,
        tokens(9, 40, b.om.nVocab),
        0,
        32,
        12,
      );
      console.log(`flash ${kv}, random ${a.name}: ${upto} greedy steps, max |diff| ${fmt(worst)}`);
    });
  }
}

// llama.cpp cannot K-shift a quantized cache at this revision when its
// Hadamard rotation is off (head sizes not divisible by 64, tolstoy's 32):
// build_rope_shift passes the missing rotation matrix (k_rot = NULL) to
// llama_mul_mat_hadamard, which dereferences it, and llama_decode crashes
// (SIGSEGV; seen with this oracle). So the q8_0 K-shift is compared with
// ggml's own ops: the cached keys after our shift graph against
// build_rope_shift's quantized branch without the rotation (cast to F32,
// rope by each cell's delta, copy back), run by the oracle's CPU variant on
// the same bytes and deltas.
Deno.test("flash attention, q8_0 cache: the K-shift equals ggml's cast + rope + cpy", async () => {
  using model = await Model.load(TOLSTOY_F16);
  using ctx = await Context.create(model, {
    nCtx: 256,
    nBatch: 64,
    threads: THREADS,
    kvType: "q8_0",
    flashAttn: true,
  });
  const ofa = await loadOracleFlashAttn();
  const hp = model.hparams, kv = ctx.kvCache!;
  await ctx.decode(tokens(7, 90, hp.nVocab));
  const rowBytes = (hp.nHeadKv * hp.headDimK / 32) * 34;
  const layerBytes = (il: number) => {
    const { buffer, offset } = kv.storage(il).k;
    return buffer.bytes.slice(offset, offset + rowBytes * kv.size);
  };
  const before = Array.from({ length: hp.nLayer }, (_, il) => layerBytes(il));
  assert.equal(ctx.seqRm(0, 20, 50), true);
  ctx.seqAdd(0, 50, -1, -30);
  const deltas = kv.shiftInput();
  const r = hp.rope;
  const rope = {
    nRot: r.nDims,
    mode: r.mode,
    nCtxOrig: r.nCtxOrig,
    f: [r.freqBase, r.freqScale, r.extFactor, r.attnFactor, r.betaFast, r.betaSlow] as const,
  };
  const want = before.map((bytes) =>
    ofa.kShift(
      oracle.cpu.name,
      { bytes, type: 8, nEmbdHead: hp.headDimK, nHeadKv: hp.nHeadKv, size: kv.size },
      rope,
      deltas,
      THREADS,
    )!
  );
  // the next decode runs the shift, then stores one new key (at position 60)
  await ctx.decodeBatch({ tokens: [42], pos: [60], seqIds: [0] });
  const newCell = kv.cells.pos.indexOf(60);
  let cellsDiffering = 0, moved = 0;
  for (let il = 0; il < hp.nLayer; il++) {
    const got = layerBytes(il);
    for (let c = 0; c < kv.size; c++) {
      if (c === newCell) continue;
      const a = got.subarray(c * rowBytes, (c + 1) * rowBytes);
      const w = want[il].subarray(c * rowBytes, (c + 1) * rowBytes);
      if (deltas[c] !== 0) moved++;
      if (a.some((x, i) => x !== w[i])) cellsDiffering++;
    }
  }
  console.log(
    `q8_0 K-shift: ${moved} shifted cell rows over ${hp.nLayer} layers, ` +
      `${cellsDiffering} cell rows differ from ggml's`,
  );
  assert.ok(moved > 0);
  if (EXACT) assert.equal(cellsDiffering, 0);
});

Deno.test("flashAttn and kvType: refusals are OptionErrors naming the option and the reason", async () => {
  const dir = Deno.makeTempDirSync({ prefix: "llm-edge-fa-" });
  try {
    const head64 = join(dir, "llama-head64.gguf");
    await writeRandomLlama(head64, {
      nEmbd: 128,
      nHead: 2,
      nHeadKv: 2,
      nFF: 256,
      nLayer: 1,
      type: "f32",
      tokenizerFrom: TOLSTOY_F32,
    });
    using tolstoy = await Model.load(TOLSTOY_F16);
    using big = await Model.load(head64);
    const cases: [Model, Record<string, unknown>, string, RegExp][] = [
      // llama.cpp refuses a quantized V cache without flash attention
      [tolstoy, { kvType: "q8_0" }, "kvType", /needs flashAttn: true/],
      [tolstoy, { kvType: "q8_0", flashAttn: false }, "kvType", /needs flashAttn: true/],
      [tolstoy, { kvType: "q4_0", flashAttn: true }, "kvType", /"q8_0"/],
      [tolstoy, { flashAttn: "yes" }, "flashAttn", /true or false/],
    ];
    for (const [m, opts, option, why] of cases) {
      await assert.rejects(
        () => Context.create(m, { nCtx: 256, ...opts }),
        (e: Error) =>
          e instanceof OptionError && e.option === option && why.test(e.message) &&
          !e.message.includes("\n"),
        `${JSON.stringify(opts)}`,
      );
    }
    // head size 64 with an f16 cache is fine with flash attention
    using ok = await Context.create(big, { nCtx: 256, flashAttn: true, threads: 1 });
    assert.equal((await ok.decode([1, 2, 3])).logits.length, 1);
  } finally {
    Deno.removeSync(dir, { recursive: true });
  }
});

// The reference computes softmax(q·k)·v in float64; the C kernel follows
// ggml, whose one-row path accumulates an F16 V in f16 (ggml_vec_mad_f16),
// hence the looser bound for the f16 cache.
for (const [kvType, tol] of [["f16", 5e-3], ["q8_0", 1e-3]] as const) {
  Deno.test(`flash attention on the reference backend agrees with the CPU backend (${kvType} cache)`, async () => {
    using model = await Model.load(TOLSTOY_F32);
    const opts = { nCtx: 256, nBatch: 16, kvType, flashAttn: true, threads: 1 } as const;
    using cpuCtx = await Context.create(model, opts);
    using refCtx = await Context.create(model, { ...opts, backend: "ref" });
    const prompt = tokens(5, 24, model.hparams.nVocab);
    const [a, b] = [await cpuCtx.decode(prompt), await refCtx.decode(prompt)];
    const d = maxAbsDiff(a.logits[0], b.logits[0]);
    console.log(`flash ${kvType}: cpu vs reference max |diff| ${fmt(d)}`);
    assert.ok(d < tol, `cpu vs reference logits differ by ${d}`);
  });
}
