/**
 * Backends own their memory: bytes move in and out of a buffer only through
 * its set/get/copy/clear, every range checked in TypeScript first, and a
 * context's backends are a list of registry names. The main case runs a
 * model split over two device-like backends, whose buffers throw when
 * anything reads their `bytes`, and expects the plain split's logits bit
 * for bit: the scheduler, the KV cache and the context never looked at a
 * buffer's memory themselves.
 */
import assert from "node:assert/strict";
import { fileURLToPath } from "node:url";
import { CpuBackend } from "../lib/backend/cpu.ts";
import { ReferenceBackend } from "../lib/backend/reference.ts";
import { backendNames, createBackend, registerBackend } from "../lib/backend/registry.ts";
import type {
  Backend,
  BackendBuffer,
  ExecNode,
  OpQuery,
  OwnedBuffer,
  ResolvedTensor,
} from "../lib/backend/types.ts";
import {
  bufferClear,
  bufferCopy,
  bufferGet,
  bufferIO,
  bufferSet,
  HostBuffer,
} from "../lib/ggml/memory.ts";
import { mapFile } from "../lib/gguf/mmap.ts";
import { GGMLType } from "../lib/ggml/types.ts";
import { KvCache } from "../lib/kv/cache.ts";
import { Model } from "../lib/model/model.ts";
import { OptionError } from "../lib/options.ts";
import { Context, type ContextOptions } from "../lib/runtime/context.ts";

const MODEL = fileURLToPath(new URL("../models/tolstoy-6m-f16.gguf", import.meta.url));

/** Asserts `f` throws a one-line `type` error whose message matches `re`. */
function throwsLine(f: () => unknown, type: ErrorConstructor, re: RegExp): void {
  assert.throws(f, (e: unknown) => {
    assert.ok(e instanceof type, `got ${e}`);
    assert.match(e.message, re);
    assert.ok(!e.message.includes("\n"), e.message);
    return true;
  });
}

// ---- ranges -----------------------------------------------------------------

Deno.test("buffers: bad offsets and sizes are one-line errors naming buffer, offset and size", async () => {
  using cpu = await CpuBackend.create({ threads: 1 });
  const a = cpu.alloc(64), b = cpu.alloc(64);
  a.set(0, Uint8Array.from({ length: 64 }, (_, i) => i));
  const before = bufferGet(a, 0, 64);
  const outside = /lie outside cpu buffer \(64 bytes\)/;
  throwsLine(() => bufferSet(a, 60, new Uint8Array(8)), RangeError, /^set: 8 bytes at offset 60 /);
  throwsLine(() => a.set(60, new Uint8Array(8)), RangeError, outside);
  throwsLine(() => a.set(-1, new Uint8Array(1)), RangeError, /offset -1 /);
  for (const off of [NaN, 1.5, -4, Infinity, 2 ** 53]) {
    throwsLine(() => bufferGet(a, off, 4), RangeError, outside);
  }
  throwsLine(() => bufferGet(a, 0, 65), RangeError, /^get: 65 bytes at offset 0 lie outside/);
  throwsLine(() => bufferGet(a, 0, -1), RangeError, /-1 bytes/);
  throwsLine(() => a.get(1, new Uint8Array(64)), RangeError, outside);
  throwsLine(
    () => bufferCopy(b, 0, a, 60, 8),
    RangeError,
    /^copy \(source\): 8 bytes at offset 60/,
  );
  throwsLine(() => bufferCopy(b, 57, a, 0, 8), RangeError, /^copy \(destination\): .* 57 /);
  throwsLine(() => b.copy(a, 0, 0, 65), RangeError, outside);
  throwsLine(() => bufferClear(a, 256), RangeError, /value 256 is not a byte/);
  throwsLine(() => a.clear(-1), RangeError, /not a byte/);
  throwsLine(() => bufferSet(a, 0, [1, 2] as never), TypeError, /src is not a Uint8Array/);
  assert.deepEqual(bufferGet(a, 0, 64), before, "a rejected call wrote nothing");
  // in range: exact edges work
  bufferCopy(b, 56, a, 0, 8);
  assert.deepEqual(bufferGet(b, 56, 8), before.subarray(0, 8));
  bufferSet(a, 64, new Uint8Array(0));
  // a freed buffer refuses instead of reaching freed memory
  cpu.free(b);
  throwsLine(() => bufferGet(b, 0, 1), RangeError, /^get: cpu buffer \(64 bytes\) was freed$/);
  throwsLine(() => b.set(0, new Uint8Array(1)), RangeError, /was freed/);
  throwsLine(() => bufferCopy(a, 0, b, 0, 1), RangeError, /was freed/);
});

Deno.test("buffers: a mapped file is read-only and its weights are not copied", () => {
  using m = mapFile(MODEL);
  const magic = bufferGet(m, 0, 4);
  assert.equal(new TextDecoder().decode(magic), "GGUF");
  assert.equal(bufferIO(m), m, "the mapping is a buffer with its own IO");
  throwsLine(
    () => bufferSet(m, 0, new Uint8Array(1)),
    RangeError,
    /^set: mapping of .* is read-only$/,
  );
  const ref = new ReferenceBackend().alloc(8);
  throwsLine(() => bufferCopy(m, 0, ref, 0, 8), RangeError, /read-only/);
  throwsLine(() => bufferClear(m), RangeError, /read-only/);
  bufferCopy(ref, 0, m, 0, 8); // from the mapping is fine
  assert.deepEqual(bufferGet(ref, 0, 4), magic);
});

/** A buffer that records calls and never runs them on bad ranges (stands for native code). */
function spyBuffer(size: number) {
  const calls: string[] = [];
  const mem = new HostBuffer("spy", new Uint8Array(size));
  const buf: OwnedBuffer = {
    backend: "spy",
    size,
    ptr: null,
    get bytes(): Uint8Array {
      throw new Error("bytes read");
    },
    set: (o, src) => (calls.push(`set ${o} ${src.length}`), mem.set(o, src)),
    get: (o, dst) => (calls.push(`get ${o} ${dst.length}`), mem.get(o, dst)),
    copy: (src, so, d, n) => (calls.push(`copy ${so} ${d} ${n}`), mem.copy(src, so, d, n)),
    clear: (v) => (calls.push(`clear ${v}`), mem.clear(v)),
  };
  return { buf, calls };
}

Deno.test("buffers: ranges are checked before a buffer's own code runs", () => {
  const { buf, calls } = spyBuffer(32);
  const host = new ReferenceBackend().alloc(32);
  assert.throws(() => bufferSet(buf, 30, new Uint8Array(4)), RangeError);
  assert.throws(() => bufferGet(buf, 33, 0), RangeError);
  assert.throws(() => bufferGet(buf, 0, new Uint8Array(33)), RangeError);
  assert.throws(() => bufferCopy(buf, 0, host, 1, 32), RangeError);
  assert.throws(() => bufferCopy(host, 0, buf, 16, 17), RangeError);
  assert.throws(() => bufferClear(buf, 1.5), RangeError);
  assert.deepEqual(calls, [], "no call reached the buffer");
  bufferSet(buf, 28, Uint8Array.of(1, 2, 3, 4));
  bufferCopy(host, 0, buf, 28, 4); // a host destination asks the source to get
  bufferCopy(buf, 0, host, 0, 4); // the destination decides
  bufferClear(buf, 7);
  assert.deepEqual(calls, ["set 28 4", "get 28 4", "copy 0 0 4", "clear 7"]);
  assert.deepEqual(bufferGet(host, 0, 4), Uint8Array.of(1, 2, 3, 4));
  // half an interface is an error, a plain { bytes } block is host memory
  const half = { backend: "x", size: 4, bytes: new Uint8Array(4), ptr: null, set() {} };
  throwsLine(() => bufferGet(half, 0, 1), TypeError, /x buffer \(4 bytes\) implements only part/);
  const plain: BackendBuffer = { backend: "p", size: 4, bytes: new Uint8Array(4), ptr: null };
  bufferSet(plain, 1, Uint8Array.of(9));
  assert.deepEqual(plain.bytes, Uint8Array.of(0, 9, 0, 0));
});

// ---- a device-like backend ---------------------------------------------------

interface Counts {
  set: number;
  get: number;
  copy: number;
  clear: number;
  /** Copies out of host memory (mapped weights). */
  hostCopies: number;
  /** Operands the kernels read in host memory in place (mapped weights). */
  hostReads: number;
}

/** Memory the host cannot see: `bytes` throws; set/get/copy/clear delegate. */
class DeviceBuffer implements OwnedBuffer {
  readonly ptr = null;
  constructor(readonly backend: string, readonly inner: OwnedBuffer, readonly n: Counts) {}
  get size(): number {
    return this.inner.size;
  }
  get bytes(): Uint8Array {
    throw new Error(`bytes of a ${this.backend} (device) buffer were read`);
  }
  set(offset: number, src: Uint8Array): void {
    this.n.set++;
    bufferSet(this.inner, offset, src);
  }
  get(offset: number, dst: Uint8Array): void {
    this.n.get++;
    bufferGet(this.inner, offset, dst);
  }
  copy(src: BackendBuffer, srcOffset: number, dstOffset: number, n: number): void {
    this.n.copy++;
    if (src.backend === "host") this.n.hostCopies++;
    if (src instanceof DeviceBuffer && src.backend === this.backend) {
      bufferCopy(this.inner, dstOffset, src.inner, srcOffset, n);
    } else {
      // Another backend's memory: staged through the host, as a device would.
      bufferSet(this.inner, dstOffset, bufferGet(src, srcOffset, n));
    }
  }
  clear(value: number): void {
    this.n.clear++;
    bufferClear(this.inner, value);
  }
}

/** Wraps a host backend as if it were a device: its buffers are {@link DeviceBuffer}s. */
class DeviceLike implements Backend {
  readonly n: Counts = { set: 0, get: 0, copy: 0, clear: 0, hostCopies: 0, hostReads: 0 };
  // Stable identities, so the inner backend's per-array and per-node caches still work.
  #nodes = new WeakMap<ExecNode, ExecNode>();
  #arrays = new WeakMap<readonly ExecNode[], ExecNode[]>();
  constructor(readonly name: string, readonly inner: Backend) {}
  supportsOp(q: OpQuery): boolean {
    return this.inner.supportsOp(q);
  }
  alloc(size: number): DeviceBuffer {
    return new DeviceBuffer(this.name, this.inner.alloc(size) as OwnedBuffer, this.n);
  }
  free(buf: BackendBuffer): void {
    this.inner.free((buf as DeviceBuffer).inner);
  }
  #tensor(t: ResolvedTensor): ResolvedTensor {
    const b = t.data.buffer;
    if (!(b instanceof DeviceBuffer)) {
      this.n.hostReads++; // host memory (mapped weights): read in place
      return t;
    }
    if (b.backend !== this.name) throw new Error(`${this.name} given ${b.backend} memory`);
    return { ...t, data: { buffer: b.inner, offset: t.data.offset } };
  }
  compute(nodes: readonly ExecNode[], signal?: AbortSignal): Promise<void> {
    let out = this.#arrays.get(nodes);
    if (!out) this.#arrays.set(nodes, out = []);
    out.length = nodes.length;
    nodes.forEach((n, i) => {
      let m = this.#nodes.get(n);
      if (!m) {
        m = { ...n, dst: this.#tensor(n.dst), src: n.src.map((s) => this.#tensor(s)) };
        this.#nodes.set(n, m);
      }
      out[i] = m;
    });
    return this.inner.compute(out, signal);
  }
  [Symbol.dispose](): void {
    this.inner[Symbol.dispose]();
  }
}

Deno.test("buffers: the KV cache clears device memory through the buffer", () => {
  const dev = new DeviceLike("dev", new ReferenceBackend());
  using kv = new KvCache({
    size: 8,
    nLayer: 2,
    nHeadKv: 1,
    nEmbdHeadK: 4,
    nEmbdHeadV: 4,
    typeK: GGMLType.F32,
    typeV: GGMLType.F32,
    backend: dev,
  });
  const k = kv.storage(1).k;
  bufferSet(k.buffer, k.offset, new Uint8Array(16).fill(5));
  kv.clear(true);
  assert.equal(dev.n.clear, 1);
  assert.deepEqual(bufferGet(k.buffer, k.offset, 16), new Uint8Array(16));
});

Deno.test("buffers: a split over device-like backends gives the plain split's logits bit for bit", async () => {
  const devs: DeviceLike[] = [];
  using _cpu = registerBackend("dev-cpu", async (o) => {
    const d = new DeviceLike("dev-cpu", await CpuBackend.create({ threads: o.threads }));
    devs.push(d);
    return d;
  });
  using _ref = registerBackend("dev-ref", () => {
    const d = new DeviceLike("dev-ref", new ReferenceBackend());
    devs.push(d);
    return Promise.resolve(d);
  });
  using model = await Model.load(MODEL);
  const run = async (opts: ContextOptions) => {
    await using ctx = await Context.create(model, { nCtx: 256, nBatch: 8, threads: 2, ...opts });
    const ids = model.tokenizer.encode("The prince said that");
    // Two micro-batches (nBatch 8), then single steps that reuse the graph.
    const out = (await ctx.decode([...ids, ...ids], { allLogits: true })).logits;
    for (const t of [5, 9, 13]) out.push(...(await ctx.decode([t])).logits);
    return { out, label: ctx.label };
  };
  const plain = await run({ backend: { cpuLayers: 3 } });
  const dev = await run({ backends: ["dev-cpu", "dev-ref"], layerSplit: [3] });
  assert.match(dev.label, /\(nCtx 256, dev-cpu:3\+dev-ref\)$/);
  assert.equal(dev.out.length, plain.out.length);
  dev.out.forEach((l, i) => assert.deepEqual(l, plain.out[i], `logits row ${i}`));
  const [c, r] = devs;
  assert.deepEqual([c.name, r.name], ["dev-cpu", "dev-ref"]);
  // Inputs went in with set (token ids on the CPU side), activations crossed
  // with copy (into the reference side) and logits came out with get.
  assert.ok(c.n.set > 0 && r.n.copy > 0 && r.n.get > 0, JSON.stringify([c.n, r.n]));
  // Weights stayed in the file mapping, read by the kernels in place.
  assert.ok(c.n.hostReads > 0 && r.n.hostReads > 0);
  assert.equal(c.n.hostCopies + r.n.hostCopies, 0);
  // The general form with the built-in names is the shorthand.
  const general = await run({ backends: ["cpu", "ref"], layerSplit: [3] });
  general.out.forEach((l, i) => assert.deepEqual(l, plain.out[i], `logits row ${i}`));
});

// ---- the option ---------------------------------------------------------------

Deno.test("backends option: registry names, layer split, one-line errors naming the option", async () => {
  assert.deepEqual(backendNames().slice(0, 2), ["cpu", "ref"]);
  assert.throws(() => registerBackend("cpu", () => Promise.reject()), /already registered/);
  {
    using _x = registerBackend("misnamed", () => Promise.resolve(new ReferenceBackend()));
    await assert.rejects(createBackend("misnamed"), /returned a backend named ref/);
  }
  await assert.rejects(createBackend("misnamed"), /no backend named "misnamed"/);
  using model = await Model.load(MODEL); // 6 layers
  const cases: [ContextOptions, string, RegExp][] = [
    [{ backends: [] }, "backends", /a non-empty array of backend names \("cpu", "ref"/],
    [{ backends: "cpu" as never }, "backends", /non-empty array/],
    [{ backends: ["cpu", "gpu"] }, "backends[1]", /"gpu" .*a backend name \("cpu", "ref"/],
    [{ backends: ["cpu", "cpu"] }, "backends[1]", /each backend once/],
    [{ backend: "cpu", backends: ["cpu"] }, "backends", /either backend or backends/],
    [{ layerSplit: [3] }, "layerSplit", /only together with backends/],
    [{ backends: ["cpu", "ref"], layerSplit: [] }, "layerSplit", /1 layer count/],
    [{ backends: ["cpu", "ref"], layerSplit: [7] }, "layerSplit", /summing to 0\.\.6/],
    [{ backends: ["cpu", "ref"], layerSplit: [-1] }, "layerSplit", /integers >= 0/],
    [{ backends: ["cpu", "ref"], layerSplit: [1.5] }, "layerSplit", /1\.5/],
    [{ backends: ["cpu"], layerSplit: [0] }, "layerSplit", /0 layer count/],
  ];
  for (const [opts, option, re] of cases) {
    await assert.rejects(() => Context.create(model, opts), (e: unknown) => {
      assert.ok(e instanceof OptionError, `${option}: got ${e}`);
      assert.equal(e.option, option);
      assert.match(e.message, re);
      assert.ok(!e.message.includes("\n"));
      return true;
    });
  }
  assert.deepEqual(model.openContexts, [], "nothing stays registered");
  // One backend, no split: the plain CPU context; the choice is kept as data.
  await using a = await Context.create(model, { nCtx: 256, threads: 1, backends: ["cpu"] });
  await using b = await Context.create(model, { nCtx: 256, threads: 1 });
  assert.deepEqual(a.backendChoice, { backends: ["cpu"] });
  assert.equal(b.backendChoice, "cpu");
  assert.deepEqual((await a.decode([1, 2, 3])).logits, (await b.decode([1, 2, 3])).logits);
});
