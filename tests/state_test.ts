// State files with contexts (lib/runtime/state.ts): save, load and resume on
// tolstoy-6m (token for token, seeded sampler included), a sequence moved
// into another sequence of a busy context (against llama.cpp's
// llama_state_seq_set_data, bit for bit), and corrupted or mismatched files
// refused with the context unchanged. Cache-level tests: state_kv_test.ts.
import assert from "node:assert/strict";
import { fileURLToPath } from "node:url";
import { SameFileError } from "../lib/fs/atomic.ts";
import { saveKvState } from "../lib/kv/state.ts";
import { Model } from "../lib/model/model.ts";
import { writeRandomLlama } from "../lib/model/random.ts";
import { Context, type ContextOptions } from "../lib/runtime/context.ts";
import { generateText } from "../lib/runtime/generate.ts";
import { assemble, type SectionName, type StateHeader } from "../lib/runtime/state_format.ts";
import { type SamplerChain, samplerChainFromOptions } from "../lib/sample/chain.ts";
import { loadOracle } from "./oracle/oracle.ts";
import { OracleStateContext } from "./oracle/oracle_state.ts";
import {
  loadState,
  readStateHeader,
  saveState,
  StateError,
  stateFromBytes,
  type StateLoadOptions,
  stateToBytes,
} from "../lib/runtime/state.ts";

const MODEL = fileURLToPath(new URL("../models/tolstoy-6m-f16.gguf", import.meta.url));
const MODEL_F32 = fileURLToPath(
  new URL("../../shared/models/tolstoy-6m-f32.gguf", import.meta.url),
);
const PROMPT = "The prince looked at the old countess and said";

function argmax(x: Float32Array): number {
  let b = 0;
  for (let i = 1; i < x.length; i++) if (x[i] > x[b]) b = i;
  return b;
}

// n tokens of sequence `seq`, each picked from the logits before it (greedy
// or by `sampler`), with the logits of every step.
async function continueSeq(
  ctx: Context,
  logits: Float32Array,
  n: number,
  o: { seq?: number; sampler?: SamplerChain } = {},
): Promise<{ tokens: number[]; logits: Float32Array[]; last: Float32Array }> {
  const tokens: number[] = [], seen: Float32Array[] = [];
  for (let i = 0; i < n; i++) {
    const t = o.sampler ? o.sampler.sample(logits) : argmax(logits);
    o.sampler?.accept(t);
    tokens.push(t);
    seen.push(logits);
    const r = await ctx.decodeBatch({ tokens: [t], seqIds: [o.seq ?? 0] });
    logits = r.logits[0];
  }
  return { tokens, logits: seen, last: logits };
}

const SAMPLING = { temperature: 0.9, topK: 40, topP: 0.95, minP: 0.05, seed: 1234 };

Deno.test("state: a saved context resumes token for token, from a file and from bytes", async () => {
  using model = await Model.load(MODEL);
  const opts = { nVocab: model.hparams.nVocab, ...SAMPLING };
  const prompt = model.tokenizer.encode(PROMPT);
  using a = await Context.create(model, { nCtx: 256, threads: 2 });
  const sampler = samplerChainFromOptions(opts);
  let { logits: [logits] } = await a.decode(prompt);
  // a few draws first, so the saved generator is mid-stream
  const head = await continueSeq(a, logits, 4, { sampler });
  logits = head.last;
  const tokens = [...prompt, ...head.tokens];
  const dir = await Deno.makeTempDir();
  const path = `${dir}/a.state`;
  await saveState(a, path, { tokens, logits, sampler });
  const bytes = await stateToBytes(a, { logits });
  const seeded = await continueSeq(a, logits, 16, { sampler });
  a.seqRm(0, tokens.length);
  const greedy = await continueSeq(a, logits, 16);

  using b = await Context.create(model, { nCtx: 256, threads: 2 });
  await b.decode(model.tokenizer.encode("Something else entirely, to be replaced."));
  const resumed = samplerChainFromOptions(opts);
  resumed.sample(logits); // a different generator state, which the load replaces
  const st = await loadState(b, path, { sampler: resumed });
  assert.deepEqual(st.tokens.get(0), tokens);
  assert.deepEqual(st.logits, [logits]);
  assert.equal(b.seqPosMax(0), tokens.length - 1);
  const got = await continueSeq(b, st.logits[0], 16, { sampler: resumed });
  assert.deepEqual(got.tokens, seeded.tokens);
  assert.deepEqual(got.logits, seeded.logits, "bit-identical logits");

  using c = await Context.create(model, { nCtx: 256, threads: 2 });
  const mem = await stateFromBytes(c, bytes);
  assert.equal(mem.tokens.size, 0);
  const again = await continueSeq(c, mem.logits[0], 16);
  assert.deepEqual(again.tokens, greedy.tokens);
  assert.deepEqual(again.logits, greedy.logits);
  // the model file is never overwritten by a state
  await assert.rejects(saveState(a, MODEL), SameFileError);
  await Deno.remove(dir, { recursive: true });
});

Deno.test("state: a pending K-shift is saved and runs at the next decode after a load", async () => {
  using model = await Model.load(MODEL);
  const prompt = model.tokenizer.encode(PROMPT);
  using a = await Context.create(model, { nCtx: 256, threads: 2 });
  await a.decode(prompt);
  a.seqRm(0, 2, 5);
  a.seqAdd(0, 5, -1, -3); // a context shift whose keys are not re-rotated yet
  assert.ok(a.kvCache!.hasShift);
  const bytes = await stateToBytes(a);
  using b = await Context.create(model, { nCtx: 256, threads: 2 });
  await stateFromBytes(b, bytes);
  assert.ok(b.kvCache!.hasShift);
  assert.deepEqual(saveKvState(b.kvCache!), saveKvState(a.kvCache!));
  const first = (await a.decode([prompt[1]])).logits[0];
  const want = await continueSeq(a, first, 8);
  const got = await continueSeq(b, (await b.decode([prompt[1]])).logits[0], 8);
  assert.deepEqual(got.logits, want.logits);
});

Deno.test("state: a sequence saved from seq 0 continues in seq 2 of another context", async () => {
  using model = await Model.load(MODEL);
  const prompt = model.tokenizer.encode(PROMPT);
  using a = await Context.create(model, { nCtx: 256, nSeqMax: 3, threads: 2 });
  const natasha = model.tokenizer.encode("Natasha");
  await a.decodeBatch({ tokens: natasha, seqIds: natasha.map(() => 1) });
  let { logits: [logits] } = await a.decodeBatch({ tokens: prompt, seqIds: prompt.map(() => 0) });
  const bytes = await stateToBytes(a, { seq: 0, tokens: prompt, logits });
  const want = await continueSeq(a, logits, 12);

  using b = await Context.create(model, { nCtx: 256, nSeqMax: 3, threads: 2 });
  const other = model.tokenizer.encode("Pierre walked through the snow");
  await b.decodeBatch({ tokens: other, seqIds: other.map(() => 0) });
  await b.decodeBatch({ tokens: [5, 6, 7], seqIds: [2, 2, 2] }); // replaced by the load
  const before0 = saveKvState(b.kvCache!, 0);
  const st = await stateFromBytes(b, bytes, { dstSeq: 2 });
  assert.equal(st.seq, 2);
  assert.deepEqual(st.tokens.get(2), prompt);
  assert.equal(b.seqPosMax(2), prompt.length - 1);
  assert.deepEqual(saveKvState(b.kvCache!, 0), before0, "sequence 0 untouched");
  logits = st.logits[0];
  const got = await continueSeq(b, logits, 12, { seq: 2 });
  // Other cells around it change the order of the attention sums, not the picks.
  assert.deepEqual(got.tokens, want.tokens);
  got.logits.forEach((l, i) => {
    const d = l.reduce((m, x, j) => Math.max(m, Math.abs(x - want.logits[i][j])), 0);
    assert.ok(d < 1e-3, `step ${i}: logits differ by ${d}`);
  });
});

// A state rebuilt with `edit` applied to its header and sections, with fresh
// checksums: corruptions that only the checks behind the checksums catch.
interface EditableHeader {
  model: Record<string, unknown>;
  content: unknown;
  [k: string]: unknown;
}

async function rebuild(
  bytes: Uint8Array,
  edit: (h: EditableHeader, s: Map<string, Uint8Array>) => void,
): Promise<Uint8Array> {
  const orig = await readStateHeader(bytes);
  const base = 56 + new DataView(bytes.buffer, bytes.byteOffset).getUint32(12, true);
  const s = new Map<string, Uint8Array>(
    orig.sections.map((x) => [x.name, bytes.slice(base + x.offset, base + x.offset + x.length)]),
  );
  const h = structuredClone(orig) as unknown as EditableHeader;
  edit(h, s);
  return await assemble(h as unknown as StateHeader, [...s] as Array<[SectionName, Uint8Array]>);
}

function sectionAt(bytes: Uint8Array, h: StateHeader, name: string): number {
  const base = 56 + new DataView(bytes.buffer, bytes.byteOffset).getUint32(12, true);
  return base + h.sections.find((s) => s.name === name)!.offset;
}

function edited(bytes: Uint8Array, f: (b: Uint8Array, dv: DataView) => void): Uint8Array {
  const b = bytes.slice();
  f(b, new DataView(b.buffer));
  return b;
}

async function savedFrom(
  model: Model,
  o: ContextOptions,
  batches: Array<[number[], number]>,
  save: Parameters<typeof stateToBytes>[1] = {},
): Promise<Uint8Array> {
  using ctx = await Context.create(model, { nCtx: 256, threads: 2, ...o });
  for (const [tokens, seq] of batches) {
    await ctx.decodeBatch({ tokens, seqIds: tokens.map(() => seq) });
  }
  return await stateToBytes(ctx, save);
}

Deno.test("state: corrupted, truncated and mismatched states are refused, the context unchanged", async () => {
  using model = await Model.load(MODEL);
  using modelF32 = await Model.load(MODEL_F32);
  const dir = await Deno.makeTempDir();
  const randomPath = `${dir}/random.gguf`;
  await writeRandomLlama(randomPath, {
    nEmbd: 64,
    nLayer: 2,
    nHead: 4,
    nHeadKv: 2,
    nFF: 128,
    tokenizerFrom: MODEL,
  });
  using random = await Model.load(randomPath);
  const nVocab = model.hparams.nVocab;
  const prompt = model.tokenizer.encode(PROMPT);
  const words = model.tokenizer.encode("Pierre walked through the snow to the house of Rostov");

  // the good state: whole context with tokens, sampler and logits
  const sampler = samplerChainFromOptions({ nVocab, ...SAMPLING });
  const good = await (async () => {
    using s = await Context.create(model, { nCtx: 256, threads: 2 });
    const { logits } = await s.decode(words);
    sampler.sample(logits[0]);
    return await stateToBytes(s, { tokens: words, logits, sampler });
  })();
  const h = await readStateHeader(good);
  const long = Array.from({ length: 270 }, (_, i) => words[i % words.length]);
  const others = {
    seq2: await savedFrom(model, { nSeqMax: 3 }, [[words, 0], [prompt, 2]], { seq: 2 }),
    whole3: await savedFrom(model, { nSeqMax: 3 }, [[words, 0], [prompt, 2]]),
    big: await savedFrom(model, { nCtx: 512 }, [[long, 0]]),
    kvF32: await savedFrom(model, { kvType: "f32" }, [[words, 0]]),
    f32Model: await savedFrom(modelF32, {}, [[words, 0]]),
    random: await savedFrom(random, {}, [[words, 0]]),
  };

  // the context the loads must leave alone, and its logits for a probe token
  using t = await Context.create(model, { nCtx: 256, threads: 2 });
  await t.decode(prompt);
  const probe = async () => {
    const r = await t.decode([words[0]]);
    t.seqRm(0, prompt.length);
    return r.logits[0];
  };
  const l0 = await probe();
  const kv0 = saveKvState(t.kvCache!);

  const miro = samplerChainFromOptions({ nVocab, mirostat: 2, seed: 3 });
  const cases: Array<[string, Uint8Array | Promise<Uint8Array>, RegExp, StateLoadOptions?]> = [
    [
      "magic",
      edited(good, (b) => b[0] ^= 0xff),
      /bad magic "\\xb3LMSTATE" \(expected "LLMSTATE"\)/,
    ],
    ["version", edited(good, (_, dv) => dv.setUint32(8, 2, true)), /format version 2 unsupported/],
    ["truncated preamble", good.slice(0, 40), /truncated at offset 40: the preamble/],
    [
      "truncated data",
      good.slice(0, good.length - 1000),
      new RegExp(
        `truncated at offset ${
          good.length - 1000
        }, in section logits: the file should have ${good.length}`,
      ),
    ],
    ["trailing bytes", Uint8Array.of(...good, 1, 2, 3), /3 unexpected bytes after offset/],
    [
      "length field",
      edited(good, (_, dv) => dv.setBigUint64(16, BigInt(good.length + 8), true)),
      /truncated at offset \d+: the file should have \d+ bytes/,
    ],
    [
      "header length field",
      edited(good, (_, dv) => dv.setUint32(12, 1 << 30, true)),
      /header length 1073741824 runs past the end/,
    ],
    ["header hash", edited(good, (b) => b[30] ^= 1), /header checksum mismatch/],
    ["header byte", edited(good, (b) => b[56 + 20] ^= 4), /header checksum mismatch/],
    [
      "kv cells",
      edited(good, (b) => b[sectionAt(good, h, "kv") + 60] ^= 1),
      /section kv checksum mismatch/,
    ],
    [
      "kv data",
      edited(good, (b) => b[sectionAt(good, h, "tokens") - 1] ^= 1),
      /section kv checksum/,
    ],
    [
      "tokens",
      edited(good, (b) => b[sectionAt(good, h, "tokens") + 9] ^= 1),
      /section tokens checksum mismatch/,
    ],
    [
      "sampler",
      edited(good, (b) => b[sectionAt(good, h, "sampler") + 40] ^= 1),
      /section sampler checksum mismatch/,
    ],
    ["logits", edited(good, (b) => b[good.length - 2] ^= 1), /section logits checksum mismatch/],
    [
      "identity field",
      rebuild(good, (hh) => hh.model.nLayer = 7),
      /model mismatch: nLayer: file 7 vs context 6/,
    ],
    [
      "unknown section",
      rebuild(good, (_, s) => s.set("extra", new Uint8Array(4))),
      /unknown section extra/,
    ],
    [
      "content kind",
      rebuild(good, (hh) => hh.content = { kind: "sequence", seq: 0 }),
      /section kv holds a whole cache, the header says sequence 0/,
    ],
    [
      "cell sequence id",
      rebuild(good, (_, s) => new DataView(s.get("kv")!.buffer).setUint32(4 * 18, 5, true)),
      /section kv: kv state: cell 0 \(index 0\): bad sequence id 5/,
    ],
    [
      "token id",
      rebuild(good, (_, s) => new DataView(s.get("tokens")!.buffer).setInt32(4 * 6, 99999, true)),
      /section tokens: tokens\[0\]\[3\] = 99999 >= nVocab/,
    ],
    ["same shape, other weights", others.f32Model, /model mismatch: fingerprint .*tolstoy-6m-f32/],
    ["other model", others.random, /model mismatch: nEmbd: file 64 vs context 256/],
    ["context too small", others.big, /context too small: the state uses 270 cells/],
    ["KV type", others.kvF32, /KV type: file f32 vs context f16/],
    ["sequence id", others.seq2, /sequence 2 out of range: context has nSeqMax 1/],
    [
      "whole, more sequences",
      others.whole3,
      /the state uses sequence 2, out of range: context has nSeqMax 1/,
    ],
    ["destination", good, /dstSeq 1: the file holds a whole context/, { dstSeq: 1 }],
    [
      "sampler chain",
      good,
      /sampler state does not fit the chain: 7 samplers in the state, 2 in the chain/,
      { sampler: miro },
    ],
    ["no sampler", others.big, /the file holds no sampler state/, { sampler }],
  ];
  assert.ok(cases.length >= 20);
  const seen = new Set<string>();
  for (const [what, data, re, opts] of cases) {
    const path = `${dir}/${what.replaceAll(" ", "_")}.state`;
    await Deno.writeFile(path, await data);
    const e = await loadState(t, path, opts).then(() => null, (e) => e);
    assert.ok(e instanceof StateError, `${what}: ${e}`);
    assert.ok(e.message.startsWith(`${path}: `) && re.test(e.message), `${what}: ${e.message}`);
    assert.ok(!e.message.includes("\n"), `${what}: one line`);
    seen.add(e.message.slice(path.length));
    assert.deepEqual(saveKvState(t.kvCache!), kv0, `${what}: cache changed`);
    assert.deepEqual(await probe(), l0, `${what}: logits changed`);
  }
  assert.ok(seen.size >= 20, `${seen.size} distinct messages`);
  // and the good one loads
  const st = await loadState(t, await writeTo(`${dir}/good.state`, good));
  assert.deepEqual(st.tokens.get(0), words);
  assert.notDeepEqual(saveKvState(t.kvCache!), kv0);
  await Deno.remove(dir, { recursive: true });
});

async function writeTo(path: string, bytes: Uint8Array): Promise<string> {
  await Deno.writeFile(path, bytes);
  return path;
}

Deno.test("state: a sequence restored into a busy context matches llama.cpp's llama_state_seq_set_data", async () => {
  const oracle = await loadOracle();
  using om = oracle.load(MODEL);
  using model = await Model.load(MODEL);
  const tok = (s: string) => model.tokenizer.encode(s);
  const prompt = tok(PROMPT), natasha = tok("Natasha"), other = tok("Pierre walked in the snow");
  const shape = { nCtx: 256, nSeqMax: 3 };
  // A: seq 1 first, so seq 0's cells do not start at cell 0; save seq 0
  using oa = await OracleStateContext.create(om, shape);
  using a = await Context.create(model, { ...shape, threads: 2 });
  oa.decode(natasha, 1), oa.decode(prompt, 0);
  await a.decodeBatch({ tokens: natasha, seqIds: natasha.map(() => 1) });
  await a.decode(prompt);
  const theirs = oa.seqGet(0);
  const ours = await stateToBytes(a, { seq: 0 });
  // B: a hole (seq 0's positions 2..3) and a seq 2 that the restore replaces
  using ob = await OracleStateContext.create(om, shape);
  using b = await Context.create(model, { ...shape, threads: 2 });
  let last = ob.decode(other, 0);
  ob.decode([5, 6, 7], 2), ob.seqRm(0, 2, 4);
  await b.decode(other);
  await b.decodeBatch({ tokens: [5, 6, 7], seqIds: [2, 2, 2] });
  b.seqRm(0, 2, 4);
  ob.seqSet(theirs, 2, prompt.length);
  await stateFromBytes(b, ours, { dstSeq: 2 });
  // find_slot from head 2, one cell at a time: the hole first, then past seq 0's cells
  const cells = [...b.kvCache!.cells.pos.keys()].filter((i) => b.kvCache!.cells.seqHas(i, 2));
  assert.deepEqual(cells.slice(0, 2), [2, 3]);
  // the same next logits, bit for bit, in the restored sequence and the others
  let t = argmax(last);
  for (let step = 0; step < 6; step++) {
    const seq = step % 3 === 2 ? 0 : 2;
    last = ob.decode([t], seq);
    const r = await b.decodeBatch({ tokens: [t], seqIds: [seq] });
    assert.deepEqual(r.logits[0], last, `step ${step} (seq ${seq})`);
    t = argmax(last);
  }
});

Deno.test("state: a load never goes under a Sequence object's feet", async () => {
  using model = await Model.load(MODEL);
  const prompt = model.tokenizer.encode(PROMPT);
  using a = await Context.create(model, { nCtx: 256, nSeqMax: 2, threads: 2 });
  await a.decode(prompt);
  const whole = await stateToBytes(a), seq = await stateToBytes(a, { seq: 0 });
  using b = await Context.create(model, { nCtx: 256, nSeqMax: 2, threads: 2 });
  using held = b.sequence();
  await held.evaluate(prompt.slice(0, 3));
  const before = saveKvState(b.kvCache!);
  await assert.rejects(stateFromBytes(b, whole), /sequence 0 is held by a Sequence object/);
  await assert.rejects(stateFromBytes(b, seq), /or load into a free sequence \(dstSeq\)/);
  assert.deepEqual(saveKvState(b.kvCache!), before);
  await stateFromBytes(b, seq, { dstSeq: 1 });
  assert.equal(b.seqPosMax(1), prompt.length - 1);
  assert.deepEqual(held.tokens, prompt.slice(0, 3));
});

Deno.test("state: a Sequence saves its tokens and a Sequence of another context resumes them", async () => {
  using model = await Model.load(MODEL);
  await using a = await Context.create(model, { nCtx: 256, nSeqMax: 2, threads: 1 });
  await using b = await Context.create(model, { nCtx: 256, nSeqMax: 3, threads: 1 });
  using s = a.sequence();
  const first = await generateText(s, PROMPT, { maxTokens: 6, temperature: 0 });
  const bytes = await stateToBytes(a, { seq: s });
  using other = b.sequence(), t = b.sequence();
  await other.evaluate([1, 2, 3]);
  const r = await stateFromBytes(b, bytes, { into: t });
  assert.equal(r.seq, t.id);
  assert.deepEqual(t.tokens, s.tokens);
  assert.equal(other.nPast, 3); // the other sequence keeps its cells
  // The next turn on both: only the new tokens are evaluated, the same tokens come out.
  const next = PROMPT + first.text + " and";
  const ra = await generateText(s, next, { maxTokens: 8, temperature: 0 });
  const rb = await generateText(t, next, { maxTokens: 8, temperature: 0 });
  assert.equal(rb.timings.reusedTokens, ra.timings.reusedTokens);
  assert.ok(rb.timings.reusedTokens > 0);
  assert.deepEqual(rb.tokens, ra.tokens);
  await assert.rejects(
    () => stateFromBytes(b, bytes, { into: s }),
    /not a live Sequence of this context/,
  );
});
