/**
 * The container of state files (lib/runtime/state.ts saves and loads
 * contexts with it): a 56-byte preamble (magic `LLMSTATE`, format version,
 * header length, total file length, SHA-256 of the header), a JSON header
 * (model identity, context shape, what the file holds, and per section its
 * name, offset, length and SHA-256), then the sections: `kv` (cells and K/V
 * bytes, lib/kv/state.ts), `tokens` (token ids per sequence), `sampler`
 * (mt19937 states and mirostat's mu) and `logits` (output rows).
 *
 * Checksums are SHA-256 through `crypto.subtle`: it runs natively at GB/s,
 * faster than a CRC32 written in TypeScript over caches of hundreds of MB,
 * and one algorithm serves the header, the sections and the model
 * fingerprint.
 *
 * @module
 */
import { kvStateInfo } from "../kv/state.ts";
import type { SamplerChainState } from "../sample/chain.ts";

/** What a {@link StateError} is about. */
export type StateErrorKind =
  | "magic"
  | "version"
  | "truncated"
  | "checksum"
  | "format"
  | "model"
  | "context"
  | "sampler"
  | "usage";

/** A state file or buffer that cannot be saved or loaded; the context is unchanged. */
export class StateError extends Error {
  /** What is wrong, for programs. */
  readonly kind: StateErrorKind;
  /** Creates the error. */
  constructor(kind: StateErrorKind, message: string, options?: ErrorOptions) {
    super(message, options);
    this.name = "StateError";
    this.kind = kind;
  }
}

/** Format version this build writes and reads. */
export const STATE_VERSION = 1;
const MAGIC = "LLMSTATE";
const PREAMBLE = 56;
const SECTIONS = ["kv", "tokens", "sampler", "logits"] as const;
/** The sections a state file may hold. */
export type SectionName = typeof SECTIONS[number];

/** Which model a state belongs to. */
export interface StateModelIdentity {
  /** general.architecture. */
  readonly arch: string;
  /** Vocabulary size. */
  readonly nVocab: number;
  /** Embedding width. */
  readonly nEmbd: number;
  /** Layers. */
  readonly nLayer: number;
  /** Query heads. */
  readonly nHead: number;
  /** KV heads. */
  readonly nHeadKv: number;
  /** Key width per head. */
  readonly headDimK: number;
  /** Value width per head. */
  readonly headDimV: number;
  /** SHA-256 of the GGUF metadata, tensor infos and the first bytes of every tensor (hex). */
  readonly fingerprint: string;
  /** File name of the model, for messages only. */
  readonly file: string;
}

/** The JSON header of a state file. */
export interface StateHeader {
  /** Who wrote it. */
  readonly writer: string;
  /** The model. */
  readonly model: StateModelIdentity;
  /** The context it was saved from. */
  readonly context: { readonly nCtx: number; readonly nSeqMax: number; readonly kvType: string };
  /** A whole context, or one sequence (`seq`). */
  readonly content: { readonly kind: "context" | "sequence"; readonly seq: number };
  /** Sections in file order. */
  readonly sections: ReadonlyArray<
    {
      readonly name: string;
      readonly offset: number;
      readonly length: number;
      readonly sha256: string;
    }
  >;
}

/** Throws the error of one failed check. */
export type Fail = (kind: StateErrorKind, msg: string, cause?: unknown) => never;

/** The identity fields compared one by one (then the fingerprint). */
export const ID_FIELDS = [
  "arch",
  "nVocab",
  "nEmbd",
  "nLayer",
  "nHead",
  "nHeadKv",
  "headDimK",
  "headDimV",
] as const;

// ---- container -------------------------------------------------------------------

/** SHA-256 of `b`, lowercase hex. */
export async function sha256(b: Uint8Array): Promise<string> {
  const d = new Uint8Array(await crypto.subtle.digest("SHA-256", b as Uint8Array<ArrayBuffer>));
  return Array.from(d, (x) => x.toString(16).padStart(2, "0")).join("");
}

/** The arrays one after the other. */
export function concat(parts: readonly Uint8Array[]): Uint8Array {
  const out = new Uint8Array(parts.reduce((s, p) => s + p.length, 0));
  let o = 0;
  for (const p of parts) out.set(p, o), o += p.length;
  return out;
}

/** A state file from its header (section table filled in here) and sections. */
export async function assemble(
  header: StateHeader,
  sections: ReadonlyArray<[SectionName, Uint8Array]>,
): Promise<Uint8Array> {
  // Offsets depend on the header's length, which depends on the offsets:
  // offsets are relative to the end of the header instead.
  let off = 0;
  const table = [];
  for (const [name, data] of sections) {
    table.push({ name, offset: off, length: data.length, sha256: await sha256(data) });
    off += data.length;
  }
  const json = new TextEncoder().encode(JSON.stringify({ ...header, sections: table }));
  const total = PREAMBLE + json.length + off;
  const pre = new Uint8Array(PREAMBLE);
  const dv = new DataView(pre.buffer);
  pre.set(new TextEncoder().encode(MAGIC));
  dv.setUint32(8, STATE_VERSION, true);
  dv.setUint32(12, json.length, true);
  dv.setBigUint64(16, BigInt(total), true);
  const hh = await sha256(json);
  for (let i = 0; i < 32; i++) pre[24 + i] = parseInt(hh.slice(2 * i, 2 * i + 2), 16);
  return concat([pre, json, ...sections.map(([, d]) => d)]);
}

/** A checked state file: its header and its sections by name. */
export interface ReadState {
  /** The header. */
  header: StateHeader;
  /** Section bytes (views into the file). */
  sections: Map<SectionName, Uint8Array>;
}

/**
 * Checks a state file's preamble, header, section table and checksums, and
 * that its kv section holds what the header says; `bad` throws.
 */
export async function readState(bytes: Uint8Array, bad: Fail): Promise<ReadState> {
  if (bytes.length < PREAMBLE) {
    bad("truncated", `truncated at offset ${bytes.length}: the preamble takes ${PREAMBLE} bytes`);
  }
  const magic = bytes.subarray(0, 8);
  if (new TextDecoder().decode(magic) !== MAGIC) {
    const shown = Array.from(
      magic,
      (x) =>
        x >= 0x20 && x < 0x7f ? String.fromCharCode(x) : `\\x${x.toString(16).padStart(2, "0")}`,
    )
      .join("");
    bad("magic", `bad magic "${shown}" (expected "${MAGIC}"): not an llm-edge state`);
  }
  const dv = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  const version = dv.getUint32(8, true);
  if (version !== STATE_VERSION) {
    bad("version", `format version ${version} unsupported (this build reads ${STATE_VERSION})`);
  }
  const hlen = dv.getUint32(12, true);
  const total = dv.getBigUint64(16, true);
  const size = BigInt(bytes.length);
  if (size < total && PREAMBLE + hlen > bytes.length) {
    bad(
      "truncated",
      `truncated at offset ${bytes.length}, in the header: the file should have ${total} bytes`,
    );
  }
  if (PREAMBLE + hlen > bytes.length) {
    bad("format", `header length ${hlen} runs past the end of the file (${bytes.length} bytes)`);
  }
  const json = bytes.subarray(PREAMBLE, PREAMBLE + hlen);
  const want = Array.from(bytes.subarray(24, 56), (x) => x.toString(16).padStart(2, "0")).join("");
  if (await sha256(json) !== want) bad("checksum", "header checksum mismatch (sha256)");
  let header: StateHeader;
  try {
    header = JSON.parse(new TextDecoder("utf-8", { fatal: true }).decode(json));
  } catch (e) {
    return bad("format", `header is not JSON: ${(e as Error).message}`);
  }
  checkHeaderShape(header, bad);
  if (size < total) {
    // The header is intact: say which section the file ends in.
    const end = bytes.length - PREAMBLE - hlen;
    const cut = header.sections.find((s) => s.offset <= end && end < s.offset + s.length);
    bad(
      "truncated",
      `truncated at offset ${bytes.length}${cut ? `, in section ${cut.name}` : ""}: ` +
        `the file should have ${total} bytes`,
    );
  }
  if (size > total) bad("format", `${size - total} unexpected bytes after offset ${total}`);
  const sections = new Map<SectionName, Uint8Array>();
  let off = 0;
  const base = PREAMBLE + hlen;
  for (const s of header.sections) {
    if (!SECTIONS.includes(s.name as SectionName)) bad("format", `unknown section ${s.name}`);
    if (sections.has(s.name as SectionName)) bad("format", `section ${s.name} appears twice`);
    if (s.offset !== off) bad("format", `section ${s.name} at offset ${s.offset}, expected ${off}`);
    if (base + off + s.length > bytes.length) {
      bad("truncated", `section ${s.name} truncated at offset ${bytes.length}`);
    }
    const data = bytes.subarray(base + off, base + off + s.length);
    if (await sha256(data) !== s.sha256) {
      bad("checksum", `section ${s.name} checksum mismatch (sha256)`);
    }
    sections.set(s.name as SectionName, data);
    off += s.length;
  }
  if (base + off !== bytes.length) {
    bad("format", `sections end at offset ${base + off}, the file has ${bytes.length} bytes`);
  }
  if (!sections.has("kv")) bad("format", "no kv section");
  let info;
  try {
    info = kvStateInfo(sections.get("kv")!);
  } catch (e) {
    return bad("format", `section kv: ${(e as Error).message}`, e);
  }
  const seq = header.content.kind === "sequence" ? header.content.seq : -1;
  if (info.mode !== (seq === -1 ? "all" : "seq") || info.seq !== seq) {
    bad(
      "format",
      `section kv holds ${info.mode === "all" ? "a whole cache" : `sequence ${info.seq}`}, ` +
        `the header says ${header.content.kind} ${seq}`,
    );
  }
  return { header, sections };
}

function checkHeaderShape(h: StateHeader, bad: Fail): void {
  const obj = (v: unknown, name: string) => {
    if (typeof v !== "object" || v === null) bad("format", `header field ${name} missing`);
    return v as Record<string, unknown>;
  };
  const int = (o: Record<string, unknown>, k: string, name: string, min = 0) => {
    const v = o[k];
    if (!Number.isSafeInteger(v) || (v as number) < min) {
      bad("format", `header field ${name}.${k} is ${JSON.stringify(v)}, not an integer >= ${min}`);
    }
  };
  const str = (o: Record<string, unknown>, k: string, name: string) => {
    if (typeof o[k] !== "string") bad("format", `header field ${name}.${k} missing`);
  };
  obj(h, "(root)");
  const m = obj(h.model, "model");
  for (const k of ID_FIELDS) k === "arch" ? str(m, k, "model") : int(m, k, "model", 1);
  str(m, "fingerprint", "model"), str(m, "file", "model");
  const c = obj(h.context, "context");
  int(c, "nCtx", "context", 1), int(c, "nSeqMax", "context", 1), str(c, "kvType", "context");
  const t = obj(h.content, "content");
  if (t.kind !== "context" && t.kind !== "sequence") bad("format", `content.kind ${t.kind}`);
  int(t, "seq", "content", t.kind === "context" ? -1 : 0);
  if (t.kind === "context" && t.seq !== -1) {
    bad("format", `content.seq ${t.seq} for a whole context`);
  }
  if (!Array.isArray(h.sections)) bad("format", "header field sections missing");
  h.sections.forEach((s, i) => {
    const o = obj(s, `sections[${i}]`);
    str(o, "name", `sections[${i}]`), str(o, "sha256", `sections[${i}]`);
    int(o, "offset", `sections[${i}]`), int(o, "length", `sections[${i}]`);
  });
}

// ---- tokens, sampler and logits sections ------------------------------------------

/** The `tokens` section: count, then per sequence (ascending) its id, length and ids. */
export function encodeTokens(m: Map<number, ArrayLike<number>>): Uint8Array {
  const seqs = [...m.keys()].sort((a, b) => a - b);
  const n = seqs.reduce((s, q) => s + 2 + m.get(q)!.length, 1);
  const out = new Int32Array(n);
  let o = 0;
  out[o++] = seqs.length;
  for (const s of seqs) {
    const list = m.get(s)!;
    out[o++] = s, out[o++] = list.length;
    for (let i = 0; i < list.length; i++) out[o++] = list[i];
  }
  return new Uint8Array(out.buffer);
}

/** Reads the `tokens` section, checking ids and sequence numbers against the header. */
export function decodeTokens(
  b: Uint8Array | undefined,
  h: StateHeader,
  nVocab: number,
  fail: Fail,
): Map<number, number[]> {
  const m = new Map<number, number[]>();
  if (!b) return m;
  const dv = new DataView(b.buffer, b.byteOffset, b.byteLength);
  let o = 0;
  const next = (what: string) => {
    if (o + 4 > b.length) fail("format", `section tokens: truncated at offset ${o} (${what})`);
    const x = dv.getInt32(o, true);
    o += 4;
    return x;
  };
  const count = next("count");
  for (let k = 0; k < count; k++) {
    const s = next("sequence id"), n = next("length");
    const ok = h.content.kind === "sequence" ? s === h.content.seq : s < h.context.nSeqMax;
    if (s < 0 || !ok || m.has(s)) fail("format", `section tokens: bad sequence id ${s}`);
    if (n < 0 || o + 4 * n > b.length) {
      fail("format", `section tokens: bad length ${n} of sequence ${s}`);
    }
    const list: number[] = [];
    for (let i = 0; i < n; i++) {
      const t = next("token");
      if (t < 0 || t >= nVocab) {
        fail("format", `section tokens: tokens[${s}][${i}] = ${t} >= nVocab`);
      }
      list.push(t);
    }
    m.set(s, list);
  }
  if (o !== b.length) fail("format", `section tokens: ${b.length - o} bytes left over`);
  return m;
}

/** The `sampler` section: per sampler its name, flags, mt19937 state and mu. */
export function encodeSampler(st: SamplerChainState): Uint8Array {
  const enc = new TextEncoder();
  const parts: Uint8Array[] = [];
  const u32 = (x: number) => parts.push(new Uint8Array(Uint32Array.of(x).buffer));
  u32(st.samplers.length);
  for (const s of st.samplers) {
    const name = enc.encode(s.name);
    u32(name.length), parts.push(name);
    u32((s.rng ? 1 : 0) | (s.mu !== undefined ? 2 : 0));
    if (s.rng) parts.push(new Uint8Array(Uint32Array.from(s.rng).buffer));
    if (s.mu !== undefined) parts.push(new Uint8Array(Float64Array.of(s.mu).buffer));
  }
  return concat(parts);
}

/** Reads the `sampler` section. */
export function decodeSampler(
  b: Uint8Array,
  fail: Fail,
): SamplerChainState {
  const dv = new DataView(b.buffer, b.byteOffset, b.byteLength);
  let o = 0;
  const need = (n: number, what: string) => {
    if (o + n > b.length) fail("format", `section sampler: truncated at offset ${o} (${what})`);
  };
  const u32 = (what: string) => {
    need(4, what);
    const x = dv.getUint32(o, true);
    o += 4;
    return x;
  };
  const samplers = [];
  const count = u32("count");
  for (let k = 0; k < count; k++) {
    const len = u32("name length");
    need(len, "name");
    const name = new TextDecoder().decode(b.subarray(o, o + len));
    o += len;
    const flags = u32("flags");
    if (flags > 3) fail("format", `section sampler: sampler ${k} has bad flags ${flags}`);
    let rng: Uint32Array | undefined, mu: number | undefined;
    if (flags & 1) {
      need(625 * 4, "mt19937 state");
      rng = Uint32Array.from({ length: 625 }, (_, i) => dv.getUint32(o + 4 * i, true));
      o += 625 * 4;
    }
    if (flags & 2) {
      need(8, "mu");
      mu = dv.getFloat64(o, true);
      o += 8;
    }
    samplers.push({ name, ...(rng ? { rng } : {}), ...(mu !== undefined ? { mu } : {}) });
  }
  if (o !== b.length) fail("format", `section sampler: ${b.length - o} bytes left over`);
  return { samplers };
}

/** The `logits` section: count, then per row its width and float32 values. */
export function encodeLogits(rows: readonly Float32Array[]): Uint8Array {
  const parts: Uint8Array[] = [new Uint8Array(Uint32Array.of(rows.length).buffer)];
  for (const r of rows) {
    parts.push(new Uint8Array(Uint32Array.of(r.length).buffer), new Uint8Array(r.slice().buffer));
  }
  return concat(parts);
}

/** Reads the `logits` section; every row must be `widths` wide (vocabulary or embedding). */
export function decodeLogits(
  b: Uint8Array | undefined,
  widths: readonly number[],
  fail: Fail,
): Float32Array[] {
  if (!b) return [];
  const dv = new DataView(b.buffer, b.byteOffset, b.byteLength);
  const rows: Float32Array[] = [];
  let o = 0;
  const u32 = (what: string) => {
    if (o + 4 > b.length) fail("format", `section logits: truncated at offset ${o} (${what})`);
    o += 4;
    return dv.getUint32(o - 4, true);
  };
  const n = u32("count");
  for (let k = 0; k < n; k++) {
    const w = u32("width");
    if (!widths.includes(w)) fail("format", `section logits: row ${k} has ${w} values`);
    if (o + 4 * w > b.length) fail("format", `section logits: row ${k} truncated at offset ${o}`);
    rows.push(Float32Array.from({ length: w }, (_, i) => dv.getFloat32(o + 4 * i, true)));
    o += 4 * w;
  }
  if (o !== b.length) fail("format", `section logits: ${b.length - o} bytes left over`);
  return rows;
}
