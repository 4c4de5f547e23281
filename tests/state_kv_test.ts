// The KV cache as bytes and back (lib/kv/state.ts) and the random state of
// samplers (Mt19937, SamplerChain). Expectations are the source cache itself
// (what was saved is what comes back) and llama.cpp's find_slot rule for
// where a restored sequence lands (src/llama-kv-cache.cpp state_read_meta,
// cont = false); tests/state_test.ts checks that rule against llama.cpp.
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
