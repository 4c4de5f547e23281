// Mamba against llama.cpp on random-weight GGUFs from tests/archs/mamba.ts:
// logits at every prompt position and greedy continuations (the llama
// parity standard, tests/arch_parity.ts) for an F32 model and a larger
// F16 model with a tied head; then two and four sequences decoded in
// shared batches, one of them forked with seqCp after its prompt and
// continued differently, each step compared with llama.cpp's same calls
// (oracle_batch) and each sequence with what it gives alone. Also: a
// missing ssm tensor fails at load naming it and its shape, and a state
// cannot be rewound or shifted.
import assert from "node:assert/strict";
import { Model } from "../lib/model/model.ts";
import { Context } from "../lib/runtime/context.ts";
import { checkDecoderParity, promptIds } from "./arch_parity.ts";
import { writeRandomMamba } from "./archs/mamba.ts";
import { loadOracle, maxAbsDiff, NEAR_TIE, top2 } from "./oracle/oracle.ts";
import { OracleBatchContext } from "./oracle/oracle_batch.ts";

const dir = await Deno.makeTempDir({ prefix: "mamba_parity_" });
const F32 = `${dir}/mamba_f32.gguf`;
const F16 = `${dir}/mamba_f16_tied.gguf`;
await writeRandomMamba(F32, { nEmbd: 64, nLayer: 2, seed: 3 });
await writeRandomMamba(F16, { nEmbd: 128, nLayer: 3, dState: 8, type: "f16", tied: true, seed: 5 });
const N_VOCAB = 512;

Deno.test("mamba f32: logits within 1e-3 of llama.cpp, greedy tokens to the first near-tie", async () => {
  const worst = await checkDecoderParity(F32, {
    label: "mamba f32",
    tol: 1e-3,
    arch: "mamba",
    prompts: [promptIds(9, 1, N_VOCAB, 11), promptIds(37, 1, N_VOCAB, 12)],
    nGen: 24,
  });
  console.log(`mamba f32: logits max |diff| ${worst.toExponential(2)}`);
});

Deno.test("mamba with ssm.dt_b_c_rms (FalconMamba's dt/B/C norms): logits and greedy tokens", async () => {
  const path = `${dir}/mamba_dtbc.gguf`;
  await writeRandomMamba(path, { nEmbd: 64, nLayer: 2, seed: 9, dtBCRms: true });
  const worst = await checkDecoderParity(path, {
    label: "mamba dt_b_c_rms",
    tol: 1e-3,
    arch: "mamba",
    prompts: [promptIds(13, 1, N_VOCAB, 21)],
    nGen: 16,
  });
  console.log(`mamba dt_b_c_rms: logits max |diff| ${worst.toExponential(2)}`);
});

Deno.test("mamba f16, tied output: logits within llama.cpp's f16 rounding, greedy tokens", async () => {
  // The parity standard's f16 tolerance (matrices stored in f16, activations
  // rounded to f16 for the products, as ggml does).
  const worst = await checkDecoderParity(F16, {
    label: "mamba f16 tied",
    tol: 2e-2,
    arch: "mamba",
    prompts: [promptIds(21, 1, N_VOCAB, 13)],
    nGen: 16,
    ctx: { nUbatch: 8, nBatch: 64 }, // several micro-batches per prompt
  });
  console.log(`mamba f16 tied: logits max |diff| ${worst.toExponential(2)}`);
});

/** What one sequence was fed and what came out, in the shared run. */
interface Track {
  tokens: number[];
  logits: Float32Array[]; // after its prompt, then after each fed token
  tieAt: number; // first step whose llama.cpp top-2 gap is a near-tie (Infinity: none)
}

/**
 * Sequences 0..nSeq-1 in shared batches: the prompts of all but the last
 * in one batch, the last forked from sequence 0 with seqCp (fed seq 0's
 * second choice first), then `steps` batches of one token per sequence,
 * each fed llama.cpp's greedy token. Our logits are compared with
 * llama.cpp's at every step; returns the tracks and the worst difference.
 */
async function shared(path: string, nSeq: number, steps: number, tol: number) {
  const oracle = await loadOracle();
  using om = oracle.load(path);
  using oc = await OracleBatchContext.create(om, { nSeqMax: nSeq, nBatch: 256 });
  using model = await Model.load(path);
  using ctx = await Context.create(model, { nSeqMax: nSeq, nBatch: 256, threads: 2 });
  const fork = nSeq - 1;
  const prompts = Array.from({ length: fork }, (_, s) => promptIds(6 + 3 * s, 1, N_VOCAB, 40 + s));
  const tracks: Track[] = Array.from({ length: nSeq }, () => ({
    tokens: [],
    logits: [],
    tieAt: Infinity,
  }));
  let worst = 0;
  const both = async (tokens: number[], seqIds: number[]) => {
    const logits = tokens.map(() => 1);
    const want = oc.decode({ tokens, seqIds, logits });
    assert.equal(want.rc, 0, "llama.cpp decoded the batch");
    const got = await ctx.decodeBatch({ tokens, seqIds, logits });
    assert.deepEqual(got.outputIds, want.outputIds);
    return want.logits.map((w, k) => {
      const d = maxAbsDiff(got.logits[k], w);
      worst = Math.max(worst, d);
      assert.ok(d <= tol, `seq ${seqIds[k]}: logits differ by ${d}`);
      return { want: w, got: got.logits[k] };
    });
  };
  // The prompts, in one batch (logits at every token: split_equal cuts it).
  const pt: number[] = [], ps: number[] = [];
  prompts.forEach((p, s) => p.forEach((t) => (pt.push(t), ps.push(s))));
  const rows = await both(pt, ps);
  const last = new Map<number, { want: Float32Array; got: Float32Array }>();
  rows.forEach((r, i) => last.set(ps[i], r)); // the last row of each sequence wins
  prompts.forEach((p, s) => {
    tracks[s].tokens.push(...p);
    tracks[s].logits.push(last.get(s)!.got);
  });
  // The fork shares sequence 0's state, then takes its second choice.
  oc.seqCp(0, fork);
  ctx.seqCp(0, fork);
  assert.equal(ctx.seqPosMax(fork), oc.seqPosMax(fork));
  tracks[fork].tokens.push(...prompts[0]);
  // The second choice: the largest logit after the argmax.
  const second = (l: Float32Array) => {
    const [a] = top2(l);
    let b = a === 0 ? 1 : 0;
    for (let i = 0; i < l.length; i++) if (i !== a && l[i] > l[b]) b = i;
    return b;
  };
  let next = Array.from({ length: nSeq }, (_, s) => {
    const w = last.get(s === fork ? 0 : s)!.want;
    return s === fork ? second(w) : top2(w)[0];
  });
  for (let step = 0; step < steps; step++) {
    const seqIds = Array.from({ length: nSeq }, (_, s) => s);
    const out = await both(next, seqIds);
    next = out.map((r, s) => {
      tracks[s].tokens.push(next[s]);
      tracks[s].logits.push(r.got);
      const [a, gap] = top2(r.want);
      if (gap < NEAR_TIE) tracks[s].tieAt = Math.min(tracks[s].tieAt, tracks[s].logits.length - 1);
      // Our greedy choice is llama.cpp's up to the first near-tie.
      if (tracks[s].logits.length - 1 < tracks[s].tieAt) assert.equal(top2(r.got)[0], a);
      return a;
    });
  }
  // The fork diverged: its state is not sequence 0's.
  assert.notDeepEqual(tracks[fork].tokens, tracks[0].tokens);
  return { tracks, worst, nPrompt: prompts.map((p) => p.length) };
}

/** Each sequence alone (a fresh one-sequence context): the logits of the shared run. */
async function alone(path: string, tracks: Track[], promptLen: (s: number) => number) {
  using model = await Model.load(path);
  using ctx = await Context.create(model, { nBatch: 256, threads: 2 });
  let worst = 0;
  for (const [s, t] of tracks.entries()) {
    ctx.clear();
    const n = promptLen(s);
    const got = [(await ctx.decode(t.tokens.slice(0, n))).logits[0]];
    for (let i = n; i < t.tokens.length; i++) got.push((await ctx.decode([t.tokens[i]])).logits[0]);
    // The fork has no row of its own after its prompt (it shares sequence 0's).
    const from = s === tracks.length - 1 ? 1 : 0;
    for (let k = from; k < got.length; k++) {
      const d = maxAbsDiff(got[k], t.logits[k - from]);
      worst = Math.max(worst, d);
      assert.ok(d <= 1e-3, `seq ${s} alone, step ${k}: logits differ by ${d}`);
    }
  }
  return worst;
}

for (const nSeq of [2, 4]) {
  Deno.test(`mamba: ${nSeq} sequences in shared batches (one forked) = llama.cpp's same calls = each alone`, async () => {
    const { tracks, worst, nPrompt } = await shared(F32, nSeq, 6, 1e-3);
    const fork = nSeq - 1;
    const aloneWorst = await alone(F32, tracks, (s) => nPrompt[s === fork ? 0 : s]);
    console.log(
      `mamba ${nSeq} seqs: vs llama.cpp max |diff| ${worst.toExponential(2)}, ` +
        `vs alone ${aloneWorst.toExponential(2)}`,
    );
  });
}

Deno.test("mamba: states cannot be rewound or shifted; seqRm of a partial range returns false", async () => {
  using model = await Model.load(F32);
  using ctx = await Context.create(model, { nSeqMax: 2, threads: 1 });
  await ctx.decode(promptIds(5, 1, N_VOCAB, 7));
  assert.equal(ctx.seqRm(0, 2, -1), false);
  assert.equal(ctx.seqPosMax(0), 4);
  assert.throws(() => ctx.truncate(3), /cannot be rewound/);
  // A diverging Sequence is cleared and evaluated again.
  const seq = ctx.sequence();
  await seq.evaluate([1, 2, 3]);
  await seq.truncate(1);
  assert.deepEqual(seq.tokens, []);
  assert.equal(ctx.seqPosMax(seq.id), -1);
  await seq.evaluate([4, 5]);
  await assert.rejects(() => seq.erase(0, 1), /context shift is not possible/);
  seq[Symbol.dispose]();
});

Deno.test("mamba: a missing or misshapen ssm tensor fails at load naming it and its shape", async () => {
  const bad = `${dir}/mamba_bad.gguf`;
  await writeRandomMamba(bad, { nEmbd: 32, nLayer: 1, dConv: 3 });
  // Rewrite the header's conv kernel so ssm_conv1d no longer fits.
  const { readGGUF } = await import("../lib/gguf/mod.ts");
  const h = await readGGUF(bad);
  assert.equal(h.number("mamba.ssm.conv_kernel"), 3);
  const bytes = await Deno.readFile(bad);
  const key = new TextEncoder().encode("mamba.ssm.conv_kernel");
  const at = bytes.findIndex((_, i) => key.every((b, j) => bytes[i + j] === b));
  // key, then u32 type, then the u32 value
  new DataView(bytes.buffer).setUint32(at + key.length + 4, 4, true);
  await Deno.writeFile(bad, bytes);
  await assert.rejects(
    () => Model.load(bad),
    /tensor blk\.0\.ssm_conv1d\.weight has shape \[3,64\].*expected \[4,64\]/,
  );
});

Deno.test("mamba: state files carry the recurrent states (whole context and one sequence)", async () => {
  const { stateToBytes, stateFromBytes } = await import("../lib/runtime/state.ts");
  using model = await Model.load(F32);
  using a = await Context.create(model, { nSeqMax: 2, threads: 1 });
  using b = await Context.create(model, { nSeqMax: 2, threads: 1 });
  const prompt = promptIds(11, 1, N_VOCAB, 21);
  await a.decodeBatch({
    tokens: [...prompt, ...prompt.slice(0, 4)],
    seqIds: [...prompt.map(() => 0), 1, 1, 1, 1],
  });
  const whole = await stateToBytes(a);
  const one = await stateToBytes(a, { seq: 0 });
  const next = [7, 8, 9];
  const cont = async (c: Context, seq: number) => {
    const r = await c.decodeBatch({ tokens: next, seqIds: next.map(() => seq), logits: [1, 1, 1] });
    return r.logits;
  };
  await stateFromBytes(b, whole);
  assert.equal(b.seqPosMax(1), 3);
  const want = await cont(a, 0);
  const got = await cont(b, 0);
  got.forEach((l, i) => assert.equal(maxAbsDiff(l, want[i]), 0, `whole state, token ${i}`));
  // Sequence 0 as saved, into sequence 1 of a fresh context.
  using c = await Context.create(model, { nSeqMax: 2, threads: 1 });
  await stateFromBytes(c, one, { dstSeq: 1 });
  assert.equal(c.seqPosMax(1), prompt.length - 1);
  const got1 = await cont(c, 1);
  got1.forEach((l, i) => assert.equal(maxAbsDiff(l, want[i]), 0, `sequence state, token ${i}`));
});

Deno.test("mamba: an aborted decode removes the sequences it advanced; a refused one changes nothing", async () => {
  using model = await Model.load(F32);
  using ctx = await Context.create(model, { nSeqMax: 2, nUbatch: 4, nBatch: 64, threads: 1 });
  await ctx.decodeBatch({ tokens: [5, 6, 7], seqIds: [1, 1, 1] });
  // A position gap is refused before anything runs.
  await assert.rejects(() => ctx.decodeBatch({ tokens: [8], seqIds: [1], pos: [9] }));
  assert.equal(ctx.seqPosMax(1), 2);
  // Aborted after its first micro-batch: sequence 0 was advanced part way.
  const ac = new AbortController();
  const run = ctx.decode(promptIds(12, 1, N_VOCAB, 3), { signal: ac.signal });
  queueMicrotask(() => ac.abort(new Error("stop")));
  await assert.rejects(run);
  const p0 = ctx.seqPosMax(0);
  assert.ok(p0 === -1, `sequence 0 removed, not left at position ${p0}`);
  assert.equal(ctx.seqPosMax(1), 2, "sequence 1 untouched");
});

Deno.test("mamba: a missing ssm tensor fails at load naming it and its expected shape", async () => {
  const bad = `${dir}/mamba_missing.gguf`;
  await writeRandomMamba(bad, { nEmbd: 32, nLayer: 1 });
  const bytes = await Deno.readFile(bad);
  // The tensor-info name "blk.0.ssm_d" (u64 length 11, then the bytes) becomes "blk.0.ssm_q".
  const name = new TextEncoder().encode("blk.0.ssm_d");
  const at = bytes.findIndex((b, i) =>
    b === 11 && bytes[i + 1] === 0 && name.every((c, j) => bytes[i + 8 + j] === c)
  );
  assert.ok(at >= 0);
  bytes[at + 8 + name.length - 1] = "q".charCodeAt(0);
  await Deno.writeFile(bad, bytes);
  await assert.rejects(
    () => Model.load(bad),
    /missing tensor blk\.0\.ssm_d \(expected shape \[64\]\)/,
  );
});

Deno.test("mamba CLI: generate --temp 0 prints llama.cpp's greedy tokens; inspect shows the ssm keys", async () => {
  const run = (args: string[]) =>
    new Deno.Command(Deno.execPath(), {
      args: ["run", "-A", ...args],
      stdout: "piped",
      stderr: "piped",
    })
      .output();
  // A real vocabulary, so that text prompts tokenize (tolstoy-6m's).
  const cli = `${dir}/mamba_cli.gguf`;
  const vocab = new URL("../../shared/models/tolstoy-6m-f16.gguf", import.meta.url).pathname;
  await writeRandomMamba(cli, { nEmbd: 64, nLayer: 2, seed: 7, tokenizerFrom: vocab });
  const prompt = "The prince said that";
  const out = await run([
    "lib/cli/generate.ts",
    "--model",
    cli,
    "--format",
    "json",
    "--temp",
    "0",
    "-n",
    "12",
    "--prompt",
    prompt,
  ]);
  assert.ok(out.success, new TextDecoder().decode(out.stderr));
  const r = JSON.parse(new TextDecoder().decode(out.stdout));
  const oracle = await loadOracle();
  using om = oracle.load(cli);
  using oc = om.context({ nCtx: 256 });
  const g = oc.greedy(om.tokenize(prompt, { addSpecial: true }), 12);
  const upto = g.gaps.findIndex((x) => x < NEAR_TIE);
  const end = upto < 0 ? 12 : upto + 1;
  assert.deepEqual(r.tokens.slice(0, end), g.tokens.slice(0, end));
  const info = await run(["lib/cli/inspect.ts", cli]);
  const text = new TextDecoder().decode(info.stdout);
  assert.ok(info.success);
  for (const k of ["ssmConvKernel=4", "ssmInnerSize=128", "ssmStateSize=16", "ssmTimeStepRank="]) {
    assert.ok(text.includes(k), `inspect output lacks ${k}:\n${text}`);
  }
});
