// State files: the KV cache as bytes and back (lib/kv/state.ts), sampler
// random state, and the state container with contexts (lib/runtime/state.ts).
// Cache-level expectations are the source cache itself (what was saved is
// what comes back) and llama.cpp's find_slot rule for where a restored
// sequence lands (src/llama-kv-cache.cpp state_read_meta, cont = false).
import assert from "node:assert/strict";
import { bufferGet, bufferSet } from "../lib/ggml/memory.ts";
import { GGMLType, rowSize } from "../lib/ggml/types.ts";
import { type Batch, BatchSplitter, type Ubatch } from "../lib/kv/batch.ts";
import { KvCache, type KvCacheOptions, SwaType } from "../lib/kv/cache.ts";
import { KvError } from "../lib/kv/cells.ts";
import { kvStateInfo, planKvRestore, restoreKvState, saveKvState } from "../lib/kv/state.ts";
import { Mt19937 } from "../lib/sample/rng.ts";
import { samplerChainFromOptions } from "../lib/sample/chain.ts";
import { mulberry32 } from "./rng.ts";
import { fileURLToPath } from "node:url";
import { Context, type ContextOptions } from "../lib/runtime/context.ts";
import { writeRandomLlama } from "../lib/model/random.ts";
import { loadOracle } from "./oracle/oracle.ts";
import { OracleStateContext } from "./oracle/oracle_state.ts";
import { assemble, type SectionName, type StateHeader } from "../lib/runtime/state_format.ts";
import { Model } from "../lib/model/model.ts";
import type { SamplerChain } from "../lib/sample/chain.ts";
import { SameFileError } from "../lib/fs/atomic.ts";
import {
  loadState,
  readStateHeader,
  saveState,
  StateError,
  stateFromBytes,
  type StateLoadOptions,
  stateToBytes,
} from "../lib/runtime/state.ts";

const host = {
  name: "host",
  alloc: (size: number) => ({ backend: "host", size, bytes: new Uint8Array(size), ptr: null }),
  free() {},
};

function cache(o: Partial<KvCacheOptions> = {}): KvCache {
  return new KvCache({
    size: 16,
    nLayer: 2,
    nHeadKv: 2,
    nEmbdHeadK: 4,
    nEmbdHeadV: 3,
    nSeqMax: 4,
    backend: host,
    ...o,
  });
}

function place(kv: KvCache, seq: number, pos: number[]): number[] {
  const s = new BatchSplitter();
  const b: Batch = {
    token: new Int32Array(pos.length),
    pos: Int32Array.from(pos),
    seqId: pos.map(() => [seq]),
  };
  s.init(b, { nSeqMax: kv.nSeqMax });
  const ub: Ubatch = s.splitSimple(1024)!;
  const slot = kv.findSlot(ub);
  assert.ok(slot, "slot expected");
  kv.applyUbatch(slot, ub);
  return [...slot.idxs];
}

// Every byte of K and V storage random, so misplaced rows show.
function scribble(kv: KvCache, seed: number): void {
  const rnd = mulberry32(seed);
  for (let il = 0; il < kv.nLayer; il++) {
    for (const r of Object.values(kv.storage(il))) {
      const n = r.buffer.size - r.offset;
      bufferSet(r.buffer, r.offset, Uint8Array.from({ length: n }, () => rnd() * 256));
    }
  }
}

// The K row and V elements of cell i in layer il, as one byte string.
function cellBytes(kv: KvCache, il: number, i: number): string {
  const { k, v } = kv.storage(il);
  const rk = rowSize(kv.typeK, kv.nEmbdKGqa);
  const parts = [bufferGet(k.buffer, k.offset + i * rk, rk)];
  if (kv.vTrans) {
    const es = rowSize(kv.typeV, 1);
    for (let j = 0; j < kv.nEmbdVGqa; j++) {
      parts.push(bufferGet(v.buffer, v.offset + (j * kv.size + i) * es, es));
    }
  } else {
    const rv = rowSize(kv.typeV, kv.nEmbdVGqa);
    parts.push(bufferGet(v.buffer, v.offset + i * rv, rv));
  }
  return parts.map((p) => [...p].join(",")).join("|");
}

function cellsOf(kv: KvCache) {
  const c = kv.cells;
  return Array.from({ length: kv.size }, (_, i) => ({
    pos: c.pos[i],
    shift: c.shift[i],
    seqs: c.seqs(i),
  }));
}

// A cache with holes, shared cells, a pending shift and two sequences.
function busyCache(o: Partial<KvCacheOptions>): KvCache {
  const kv = cache(o);
  place(kv, 0, [0, 1, 2, 3, 4, 5]);
  place(kv, 1, [0, 1, 2]);
  kv.seqCp(0, 2, 0, 3);
  kv.seqRm(0, 4, 5); // a hole at cell 4
  place(kv, 3, [7]);
  kv.seqAdd(1, 1, -1, 2);
  scribble(kv, 7);
  return kv;
}

function catchError(run: () => void): unknown {
  try {
    run();
  } catch (e) {
    return e;
  }
  return null;
}

const LAYOUTS: Array<[string, Partial<KvCacheOptions>]> = [
  ["F16, V transposed", {}],
  ["F32, V in rows", { typeK: GGMLType.F32, typeV: GGMLType.F32, vTrans: false }],
];

for (const [name, o] of LAYOUTS) {
  Deno.test(`kv state: a whole cache comes back cell for cell (${name})`, () => {
    using src = busyCache(o);
    const bytes = saveKvState(src);
    assert.equal(kvStateInfo(bytes).mode, "all");
    for (const size of [16, 32]) {
      using dst = cache({ ...o, size });
      place(dst, 0, [0, 1, 2, 3, 4, 5, 6, 7, 8, 9]); // replaced entirely
      scribble(dst, 99);
      restoreKvState(dst, bytes);
      assert.deepEqual(cellsOf(dst).slice(0, 16), cellsOf(src));
      assert.equal(dst.cells.used, src.cells.used);
      assert.equal(dst.head, src.head);
      assert.equal(dst.hasShift, true);
      for (let il = 0; il < src.nLayer; il++) {
        for (let i = 0; i < src.size; i++) {
          if (!src.cells.isEmpty(i)) assert.equal(cellBytes(dst, il, i), cellBytes(src, il, i));
        }
      }
      if (size === 16) assert.deepEqual(saveKvState(dst), bytes);
    }
  });

  Deno.test(`kv state: one sequence lands where find_slot puts it (${name})`, () => {
    using src = busyCache(o);
    const bytes = saveKvState(src, 2); // cells 0..2, compacted
    const info = kvStateInfo(bytes);
    assert.deepEqual([info.mode, info.seq, info.nCells], ["seq", 2, 3]);
    using dst = cache({ ...o, size: 8 });
    place(dst, 0, [0, 1, 2, 3, 4, 5]);
    place(dst, 1, [0]); // cell 6
    scribble(dst, 5);
    dst.seqRm(0, 1, 3); // frees cells 1, 2; head goes back to 1
    const before0 = saveKvState(dst, 0), before1 = saveKvState(dst, 1);
    const plan = restoreKvState(dst, bytes, 1); // replaces seq 1 (cell 6)
    // find_slot from head 1, one cell at a time: the holes 1, 2, then 6 (freed by seq_rm)
    assert.deepEqual(plan.idxs, [1, 2, 6]);
    assert.deepEqual(plan.idxs.map((i) => [dst.cells.pos[i], dst.cells.seqs(i)]), [
      [0, [1]],
      [1, [1]],
      [2, [1]],
    ]);
    assert.equal(dst.head, 7);
    for (let il = 0; il < src.nLayer; il++) {
      plan.idxs.forEach((i, k) => assert.equal(cellBytes(dst, il, i), cellBytes(src, il, k)));
    }
    assert.deepEqual(saveKvState(dst, 0), before0, "sequence 0 untouched");
    assert.notDeepEqual(saveKvState(dst, 1), before1);
    // saved again from its new place, the sequence reads the same, under its new id
    const again = saveKvState(dst, 1);
    using third = cache(o);
    restoreKvState(third, again, 2);
    assert.deepEqual(saveKvState(third, 2), bytes);
  });
}

Deno.test("kv state: a sequence's cells outside its sliding window are not saved", () => {
  using kv = cache({ nSwa: 3, swaType: SwaType.STANDARD });
  place(kv, 0, [0, 1, 2, 3, 4, 5]);
  // is_masked_swa(p, pos_max = 5): p <= 2 is out of a window of 3
  assert.equal(kvStateInfo(saveKvState(kv, 0)).nCells, 3);
  assert.equal(kvStateInfo(saveKvState(kv)).nCells, 6, "the whole cache keeps them all");
});

Deno.test("kv state: bad states are refused naming the problem, the cache unchanged", () => {
  using src = busyCache({});
  const whole = saveKvState(src);
  const seq = saveKvState(src, 0);
  using dst = busyCache({});
  scribble(dst, 3);
  const before = saveKvState(dst);
  const poke = (b: Uint8Array, word: number, v: number) => {
    const c = b.slice();
    new DataView(c.buffer).setInt32(word * 4, v, true);
    return c;
  };
  const cases: Array<[string, () => void, RegExp]> = [
    ["tag", () => planKvRestore(dst, poke(whole, 0, 1)), /bad tag/],
    ["mode", () => planKvRestore(dst, poke(whole, 1, 7)), /bad mode 7/],
    ["truncated", () => planKvRestore(dst, whole.subarray(0, 30)), /truncated at offset 28/],
    ["short data", () => planKvRestore(dst, whole.subarray(0, whole.length - 1)), /truncated/],
    ["extra", () => planKvRestore(dst, Uint8Array.of(...whole, 0)), /1 bytes after/],
    ["layers", () => planKvRestore(dst, poke(whole, 7, 3)), /nLayer 3 in the state, 2/],
    ["K type", () => planKvRestore(dst, poke(whole, 8, 0)), /K type f32 in the state, f16/],
    ["index", () => planKvRestore(dst, poke(whole, 14, 99)), /index 99 out of order or range/],
    ["position", () => planKvRestore(dst, poke(whole, 15, -3)), /bad position -3/],
    ["seq id", () => planKvRestore(dst, poke(whole, 18, 9)), /bad sequence id 9/],
    ["small cache", () => {
      using tiny = cache({ size: 4 });
      planKvRestore(tiny, whole);
    }, /cells up to 9 are used, the cache has 4/],
    ["few sequences", () => {
      using one = cache({ nSeqMax: 1 });
      planKvRestore(one, whole);
    }, /bad sequence count|sequence 3 outside/],
    ["dst range", () => planKvRestore(dst, seq, 4), /destination sequence 4 outside \[0, 4\)/],
    ["whole into seq", () => planKvRestore(dst, whole, 1), /no sequence to put into 1/],
    ["no room", () => {
      using full = cache({ size: 8 });
      place(full, 1, [0, 1, 2, 3, 4, 5]);
      planKvRestore(full, seq, 2);
    }, /no room for the 5 cells of sequence 0/],
  ];
  for (const [what, run, re] of cases) {
    const e = catchError(run);
    assert.ok(e instanceof KvError && re.test(e.message), `${what}: ${e}`);
    assert.deepEqual(saveKvState(dst), before, `${what}: cache changed`);
  }
});

Deno.test("rng state: mt19937 and a seeded chain continue the same draws", () => {
  const a = new Mt19937(42);
  for (let i = 0; i < 1000; i++) a.next(); // mid-buffer
  const b = new Mt19937(1);
  b.setState(a.getState());
  assert.deepEqual(
    Array.from({ length: 700 }, () => b.next()),
    Array.from({ length: 700 }, () => a.next()),
  );
  assert.throws(() => b.setState(new Uint32Array(3)), /3 words, expected 625/);
  const bad = a.getState();
  bad[624] = 700;
  assert.throws(() => b.setState(bad), /position 700 outside/);

  const logits = Float32Array.from({ length: 50 }, (_, i) => Math.sin(i));
  const opts = { nVocab: 50, temperature: 0.9, topK: 0, topP: 1, minP: 0, seed: 7 };
  const ch = samplerChainFromOptions(opts);
  for (let i = 0; i < 5; i++) ch.sample(logits);
  const st = ch.getState();
  const fresh = samplerChainFromOptions(opts);
  assert.equal(fresh.checkState(st), null);
  fresh.setState(st);
  const next = (c: typeof ch) => Array.from({ length: 20 }, () => c.sample(logits));
  assert.deepEqual(next(fresh), next(ch));
  const miro = samplerChainFromOptions({ nVocab: 50, mirostat: 2 });
  assert.match(miro.checkState(st)!, /samplers in the state|is "/);
  assert.throws(() => miro.setState(st), /sampler state: /);
});

// ---- contexts ------------------------------------------------------------------

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
