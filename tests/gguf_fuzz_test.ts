/**
 * GGUF fuzzing: thousands of seeded mutations of small real headers. Each
 * either parses or throws GGUFError (never another exception, never a hang),
 * and on a subset our verdict is compared with llama.cpp's gguf_init_from_file.
 */
import assert from "node:assert/strict";
import {
  type GGUFArray,
  GGUFError,
  type GGUFHeader,
  GGUFNeedMoreError,
  GGUFValueType,
  openGGUF,
  parseGGUF,
  readGGUF,
  writeGGUF,
} from "../lib/gguf/mod.ts";
import { oracleAccepts } from "./oracle/oracle_gguf.ts";
import { tempFile, TOLSTOY } from "./gguf_util.ts";
import { mulberry32 as rng } from "./rng.ts";

/** Shrinks an array value to its first n items. */
function head(a: GGUFArray, n: number): GGUFArray {
  return { itemType: a.itemType, values: a.values.slice(0, n) as GGUFArray["values"] };
}

/**
 * Bases to mutate: tolstoy's real metadata (arrays cut to 48 items) with its
 * first five tensors and their real data, and the same with general.alignment
 * and a v2 header, so every code path of a real model file is exercised.
 */
async function bases(): Promise<Uint8Array[]> {
  using m = await openGGUF(TOLSTOY);
  const kv = m.header.kv.map((p) =>
    p.type === GGUFValueType.ARRAY ? { ...p, value: head(p.value as GGUFArray, 48) } : p
  );
  const tensors = m.header.tensors.filter((t) => t.size <= 4096).slice(0, 5).map((t) => ({
    name: t.name,
    type: t.type,
    ne: t.ne,
    data: m.tensorBytes(t.name).slice(),
  }));
  tensors.push({ name: "q", type: 8, ne: [64, 2], data: new Uint8Array(136).fill(7) });
  return [
    writeGGUF({ kv, tensors }),
    writeGGUF({
      version: 2,
      kv: [...kv, { key: "general.alignment", type: GGUFValueType.UINT32, value: 64 }],
      tensors: tensors.slice(0, 3),
    }),
  ];
}

/** Offsets of every tensor's offset field, found by walking the header. */
function offsetFields(h: GGUFHeader, bytes: Uint8Array): number[] {
  const enc = new TextEncoder();
  const out: number[] = [];
  let from = 0;
  for (const t of h.tensors) {
    const name = enc.encode(t.name);
    let at = from;
    // The name is preceded by its u64 length; search for length+name.
    search: for (; at < bytes.length; at++) {
      if (bytes[at] !== name.length) continue;
      for (let i = 0; i < name.length; i++) if (bytes[at + 8 + i] !== name[i]) continue search;
      break;
    }
    const field = at + 8 + name.length + 4 + 8 * t.nDims + 4;
    out.push(field);
    from = field + 8;
  }
  return out;
}

const HUGE = [2n ** 63n - 1n, 2n ** 64n - 1n, 2n ** 32n, 2n ** 31n, 1n << 40n, 0n, 65n, 2n ** 62n];

/** One mutation of `base`, chosen by `r`; `hdr` is where the header ends. */
function mutate(base: Uint8Array, hdr: number, offs: number[], r: () => number): Uint8Array {
  const pick = (n: number) => Math.floor(r() * n);
  const kind = pick(8);
  let b = base.slice();
  const dv = () => new DataView(b.buffer);
  switch (kind) {
    case 0: // bit flips in the header
      for (let i = 0, n = 1 + pick(4); i < n; i++) b[pick(hdr)] ^= 1 << pick(8);
      break;
    case 1: // truncation
      b = b.slice(0, pick(base.length));
      break;
    case 2: // a huge count or length at a random spot
      dv().setBigUint64(Math.min(pick(hdr), b.length - 8), HUGE[pick(HUGE.length)], true);
      break;
    case 3: // swapped tensor offsets
      if (offs.length >= 2) {
        const i = pick(offs.length), j = (i + 1 + pick(offs.length - 1)) % offs.length;
        const a = dv().getBigUint64(offs[i], true);
        dv().setBigUint64(offs[i], dv().getBigUint64(offs[j], true), true);
        dv().setBigUint64(offs[j], a, true);
      }
      break;
    case 4: // a tensor offset nudged
      if (offs.length) {
        const o = offs[pick(offs.length)];
        dv().setBigUint64(o, dv().getBigUint64(o, true) + BigInt(pick(80) - 40), true);
      }
      break;
    case 5: // a random u32 (types, n_dims, versions)
      dv().setUint32(
        Math.min(pick(hdr), b.length - 4),
        [pick(50), 2 ** 31, 0xffffffff][pick(3)],
        true,
      );
      break;
    case 6: { // bytes deleted from the header
      const at = pick(hdr), n = 1 + pick(16);
      b = new Uint8Array([...b.subarray(0, at), ...b.subarray(at + n)]);
      break;
    }
    default: // random bytes
      for (let i = 0, n = 1 + pick(8); i < n; i++) b[pick(hdr)] = pick(256);
  }
  return b;
}

/** Bytes the parsed header holds in values: must never exceed the file. */
function heldBytes(h: GGUFHeader): number {
  const arr = (a: GGUFArray): number =>
    a.itemType === GGUFValueType.STRING
      ? (a.values as string[]).reduce((s, v) => s + 8 + v.length, 0)
      : a.itemType === GGUFValueType.ARRAY
      ? (a.values as GGUFArray[]).reduce((s, v) => s + 12 + arr(v), 0)
      : a.itemType === GGUFValueType.BOOL
      ? a.values.length
      : (a.values as Uint8Array).byteLength;
  let n = 0;
  for (const p of h.kv) {
    n += p.key.length;
    if (p.type === GGUFValueType.ARRAY) n += arr(p.value as GGUFArray);
    else if (typeof p.value === "string") n += p.value.length;
  }
  return n;
}

type Verdict = { ok: true; h: GGUFHeader } | { ok: false; e: GGUFError };

function verdict(b: Uint8Array, path?: string): Verdict {
  const t0 = performance.now();
  try {
    const h = parseGGUF(b, { path, fileSize: b.length });
    assert.ok(heldBytes(h) <= b.length, "holds more than the file");
    return { ok: true, h };
  } catch (e) {
    if (!(e instanceof GGUFError)) throw new Error(`not a GGUFError: ${e}`, { cause: e });
    assert.ok(!(e instanceof GGUFNeedMoreError), "'need more' with the whole file given");
    return { ok: false, e };
  } finally {
    assert.ok(performance.now() - t0 < 1000, "parse took over a second");
  }
}

const N = 2400;

Deno.test(`gguf fuzz: ${N} mutations parse or throw GGUFError`, async () => {
  const bs = await bases();
  const hs = bs.map((b) => parseGGUF(b, { fileSize: b.length }));
  const r = rng(0x5eed);
  let accepted = 0;
  for (let i = 0; i < N; i++) {
    const k = i % bs.length;
    const m = mutate(bs[k], hs[k].dataOffset, offsetFields(hs[k], bs[k]), r);
    let v: Verdict;
    try {
      v = verdict(m);
    } catch (e) {
      throw new Error(`mutation ${i}: ${e}`, { cause: e });
    }
    if (v.ok) accepted++;
  }
  // Both outcomes must be common, or the mutations test nothing.
  assert.ok(accepted > N / 20 && accepted < N * 0.95, `${accepted} of ${N} accepted`);
});

Deno.test("gguf fuzz: readGGUF on 300 mutated files agrees with parseGGUF", async () => {
  const bs = await bases();
  const hs = bs.map((b) => parseGGUF(b, { fileSize: b.length }));
  const r = rng(0xf11e);
  const path = Deno.makeTempFileSync({ suffix: ".gguf" });
  try {
    for (let i = 0; i < 300; i++) {
      const k = i % bs.length;
      const m = mutate(bs[k], hs[k].dataOffset, offsetFields(hs[k], bs[k]), r);
      Deno.writeFileSync(path, m);
      const want = verdict(m, path);
      try {
        const h = await readGGUF(path);
        assert.ok(want.ok, `file ${i}: readGGUF accepts what parseGGUF refuses`);
        assert.deepEqual(h.kv, want.h.kv);
        assert.deepEqual(h.tensors, want.h.tensors);
      } catch (e) {
        if (e instanceof assert.AssertionError) throw e;
        assert.ok(e instanceof GGUFError && !(e instanceof GGUFNeedMoreError), `file ${i}: ${e}`);
        assert.ok(!want.ok, `file ${i}: readGGUF refuses what parseGGUF accepts: ${e}`);
        assert.equal(e.message, want.e.message);
      }
    }
  } finally {
    Deno.removeSync(path);
  }
});

/** Known, deliberate differences from gguf.cpp (see the report in lib/gguf/reader.ts). */
function explain(ours: Verdict, llama: number): string | null {
  if (!ours.ok && llama === 1) {
    if (/not positive|n_dims 0 |overflow/.test(ours.e.message)) return "stricter on shapes";
  }
  if (ours.ok && llama !== 1) {
    const nested = ours.h.kv.some((p) =>
      p.type === GGUFValueType.ARRAY && (p.value as GGUFArray).itemType === GGUFValueType.ARRAY
    );
    if (nested) return "arrays of arrays";
  }
  return null;
}

Deno.test("gguf fuzz: 200 mutated files get llama.cpp's verdict", async () => {
  const bs = await bases();
  const hs = bs.map((b) => parseGGUF(b, { fileSize: b.length }));
  const r = rng(0x11a3a);
  const unexplained: string[] = [];
  const known = new Map<string, number>();
  let agree = 0;
  for (let i = 0; i < 200; i++) {
    const k = i % bs.length;
    const m = mutate(bs[k], hs[k].dataOffset, offsetFields(hs[k], bs[k]), r);
    const path = tempFile(m);
    try {
      const ours = verdict(m, path);
      const llama = await oracleAccepts(path);
      if (ours.ok === (llama === 1)) {
        agree++;
        continue;
      }
      const why = explain(ours, llama);
      if (why) known.set(why, (known.get(why) ?? 0) + 1);
      else {unexplained.push(
          `${i}: ours ${ours.ok ? "accept" : ours.e.message}; llama.cpp ${llama}`,
        );}
    } finally {
      Deno.removeSync(path);
    }
  }
  assert.deepEqual(unexplained, []);
  assert.ok(agree >= 190, `agree on ${agree}/200 (known differences: ${[...known]})`);
});
