/**
 * `deno task inspect FILE [--json]`: what a GGUF holds, like llama.cpp's
 * gguf-dump: architecture, hyper-parameters, tokenizer summary, chat template
 * presence, all metadata, and the tensor table.
 *
 * @module
 */
import { flag, runCommand } from "./args.ts";
import { ggmlTypeName } from "../ggml/types.ts";
import {
  type GGUFArray,
  type GGUFHeader,
  type GGUFKV,
  GGUFValueType,
  openGGUF,
  typeName,
} from "../gguf/mod.ts";

/** One row of the tensor table. */
export interface InspectTensor {
  /** Tensor name. */
  name: string;
  /** ggml type name (`f32`, `q4_K`, ...). */
  type: string;
  /** Elements per dimension, innermost first. */
  shape: number[];
  /** Bytes of data. */
  bytes: number;
  /** Absolute offset of the data in its file. */
  offset: number;
  /** Split file index. */
  split: number;
}

/** The report `inspect --json` prints. */
export interface InspectReport {
  /** The path given. */
  file: string;
  /** GGUF version. */
  version: number;
  /** File size in bytes. */
  fileSize: number;
  /** Data alignment. */
  alignment: number;
  /** Absolute offset of the data section. */
  dataOffset: number;
  /** `general.architecture`. */
  architecture: string | null;
  /** `general.name`. */
  name: string | null;
  /** `<arch>.*` hyper-parameters (null when absent; per-layer arrays as arrays). */
  hparams: Record<string, number | number[] | null>;
  /** Tokenizer summary (ids null when absent). */
  tokenizer: {
    model: string | null;
    pre: string | null;
    vocabSize: number;
    bos: number | null;
    eos: number | null;
    unk: number | null;
    mergesCount: number;
    addBos: boolean | null;
    addEos: boolean | null;
  };
  /** Whether `tokenizer.chat_template` is present. */
  chatTemplate: boolean;
  /** Every pair: type name and value (arrays as their length and first items). */
  metadata: Record<string, { type: string; value: unknown }>;
  /** The tensor table. */
  tensors: InspectTensor[];
  /** Counts over all tensors. */
  totals: { tensors: number; parameters: number; bytes: number };
}

const SHOWN_ITEMS = 8;

function plain(v: unknown): unknown {
  if (typeof v === "bigint") return Number.isSafeInteger(Number(v)) ? Number(v) : v.toString();
  return v;
}

/** A JSON-friendly value: arrays summarized to their length and first items. */
function summarize(kv: GGUFKV): unknown {
  if (kv.type !== GGUFValueType.ARRAY) return plain(kv.value);
  const a = kv.value as GGUFArray;
  const items = Array.from(a.values as ArrayLike<unknown>).slice(0, SHOWN_ITEMS);
  return {
    length: a.values.length,
    head: items.map((x) => (typeof x === "object" && x !== null ? "[array]" : plain(x))),
  };
}

function num(h: GGUFHeader, key: string): number | number[] | null {
  const kv = h.get(key);
  if (!kv) return null;
  if (kv.type === GGUFValueType.ARRAY) return Array.from(h.numbers(key) ?? [], Number);
  return h.number(key);
}

/** Builds the report for an opened header. */
export function inspectHeader(h: GGUFHeader): InspectReport {
  const arch = h.get("general.architecture") ? h.string("general.architecture") : null;
  const p = (k: string) => num(h, `${arch}.${k}`);
  const opt = <T>(f: () => T, key: string): T | null => (h.get(key) ? f() : null);
  const tokens = h.get("tokenizer.ggml.tokens");
  const merges = h.get("tokenizer.ggml.merges");
  const metadata: InspectReport["metadata"] = {};
  for (const kv of h.kv) metadata[kv.key] = { type: typeName(kv), value: summarize(kv) };
  const tensors = h.tensors.map((t) => ({
    name: t.name,
    type: ggmlTypeName(t.type),
    shape: t.ne,
    bytes: t.size,
    offset: t.fileOffset,
    split: t.split,
  }));
  return {
    file: h.path,
    version: h.version,
    fileSize: h.fileSize,
    alignment: h.alignment,
    dataOffset: h.dataOffset,
    architecture: arch,
    name: opt(() => h.string("general.name"), "general.name"),
    hparams: {
      contextLength: p("context_length"),
      embeddingLength: p("embedding_length"),
      blockCount: p("block_count"),
      feedForwardLength: p("feed_forward_length"),
      headCount: p("attention.head_count"),
      headCountKv: p("attention.head_count_kv"),
      ropeDimensionCount: p("rope.dimension_count"),
      ropeFreqBase: p("rope.freq_base"),
      ropeScalingFactor: p("rope.scaling.factor"),
      rmsEpsilon: p("attention.layer_norm_rms_epsilon"),
      vocabSize: p("vocab_size"),
      // State-space models (Mamba).
      ssmConvKernel: p("ssm.conv_kernel"),
      ssmInnerSize: p("ssm.inner_size"),
      ssmStateSize: p("ssm.state_size"),
      ssmTimeStepRank: p("ssm.time_step_rank"),
      ssmDtBCRms: opt(() => Number(h.bool(`${arch}.ssm.dt_b_c_rms`)), `${arch}.ssm.dt_b_c_rms`),
    },
    tokenizer: {
      model: opt(() => h.string("tokenizer.ggml.model"), "tokenizer.ggml.model"),
      pre: opt(() => h.string("tokenizer.ggml.pre"), "tokenizer.ggml.pre"),
      vocabSize: tokens ? (tokens.value as GGUFArray).values.length : 0,
      bos: opt(() => h.number("tokenizer.ggml.bos_token_id"), "tokenizer.ggml.bos_token_id"),
      eos: opt(() => h.number("tokenizer.ggml.eos_token_id"), "tokenizer.ggml.eos_token_id"),
      unk: opt(
        () => h.number("tokenizer.ggml.unknown_token_id"),
        "tokenizer.ggml.unknown_token_id",
      ),
      mergesCount: merges ? (merges.value as GGUFArray).values.length : 0,
      addBos: opt(() => h.bool("tokenizer.ggml.add_bos_token"), "tokenizer.ggml.add_bos_token"),
      addEos: opt(() => h.bool("tokenizer.ggml.add_eos_token"), "tokenizer.ggml.add_eos_token"),
    },
    chatTemplate: h.get("tokenizer.chat_template") !== undefined,
    metadata,
    tensors,
    totals: {
      tensors: tensors.length,
      parameters: h.tensors.reduce((s, t) => s + t.ne.reduce((a, b) => a * b, 1), 0),
      bytes: h.tensors.reduce((s, t) => s + t.size, 0),
    },
  };
}

function short(v: unknown): string {
  if (typeof v === "string") {
    const s = JSON.stringify(v);
    return s.length > 60 ? s.slice(0, 57) + '..."' : s;
  }
  if (v && typeof v === "object" && "length" in v && "head" in v) {
    const a = v as { length: number; head: unknown[] };
    return `[${a.head.map(short).join(", ")}${
      a.length > a.head.length ? ", ..." : ""
    }] (${a.length})`;
  }
  // f32 values print at f32 precision, not as their exact double expansion.
  if (typeof v === "number" && !Number.isInteger(v)) return String(Number(v.toPrecision(8)));
  return String(v);
}

/** The human-readable report. */
export function formatReport(r: InspectReport): string {
  const lines: string[] = [];
  lines.push(
    `${r.file}: GGUF v${r.version}, ${r.fileSize} bytes, alignment ${r.alignment}, data at ${r.dataOffset}`,
  );
  lines.push(`architecture: ${r.architecture ?? "(none)"}${r.name ? `  name: ${r.name}` : ""}`);
  const hp = Object.entries(r.hparams).filter(([, v]) => v !== null);
  if (hp.length) lines.push("hyper-parameters: " + hp.map(([k, v]) => `${k}=${v}`).join(" "));
  const t = r.tokenizer;
  lines.push(
    `tokenizer: ${t.model ?? "(none)"}${t.pre ? ` (pre ${t.pre})` : ""}, ${t.vocabSize} tokens, ` +
      `bos ${t.bos ?? "-"}, eos ${t.eos ?? "-"}, ${t.mergesCount} merges`,
  );
  lines.push(`chat template: ${r.chatTemplate ? "yes" : "no"}`);
  lines.push("", `metadata (${Object.keys(r.metadata).length} keys):`);
  Object.entries(r.metadata).forEach(([k, m], i) => {
    lines.push(`${String(i + 1).padStart(5)}: ${m.type.padEnd(10)} ${k} = ${short(m.value)}`);
  });
  lines.push(
    "",
    `tensors (${r.totals.tensors}, ${r.totals.parameters} parameters, ${r.totals.bytes} bytes):`,
  );
  const w = Math.max(4, ...r.tensors.map((x) => x.name.length));
  lines.push(
    `${"#".padStart(5)}  ${"name".padEnd(w)}  ${"type".padEnd(7)} ${"shape".padEnd(22)} ${
      "bytes".padStart(11)
    } ${"offset".padStart(12)}`,
  );
  r.tensors.forEach((x, i) => {
    lines.push(
      `${String(i + 1).padStart(5)}  ${x.name.padEnd(w)}  ${x.type.padEnd(7)} ${
        x.shape.join(" x ").padEnd(22)
      } ` +
        `${String(x.bytes).padStart(11)} ${String(x.offset).padStart(12)}${
          x.split ? ` (split ${x.split})` : ""
        }`,
    );
  });
  return lines.join("\n");
}

const SPEC = {
  name: "inspect",
  summary: "Shows what a GGUF file holds: metadata, hyper-parameters, tokenizer, tensors.",
  positionals: [{ name: "FILE.gguf", description: "the GGUF file (first split of a split model)" }],
  flags: { json: flag.boolean({ description: "print one JSON object instead of text" }) },
  notes: ["Exit codes: 0, 1 unreadable or invalid file, 2 usage."],
};

/** Runs the CLI with `args`; returns the exit code. */
export function main(args: string[]): Promise<number> {
  return runCommand(SPEC, args, async ({ values, positionals }) => {
    using m = await openGGUF(positionals[0]);
    const report = inspectHeader(m.header);
    console.log(values.json ? JSON.stringify(report) : formatReport(report));
    return 0;
  });
}

if (import.meta.main) Deno.exit(await main(Deno.args));
