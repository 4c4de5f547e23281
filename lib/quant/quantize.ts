/**
 * Model quantization (llama_model_quantize without an importance matrix):
 * reads a GGUF, picks each tensor's type with llama.cpp's rules, converts
 * tensor by tensor with the native reference quantizers, and streams the new
 * file out so at most one tensor is held in memory.
 *
 * @module
 */
import { loadLibrary } from "../../ffi/library.ts";
import { GGUFValueType } from "../gguf/header.ts";
import type { GGUFKV } from "../gguf/header.ts";
import { openGGUF, SPLIT_KEYS } from "../gguf/mod.ts";
import { ggmlTypeInfo, ggmlTypeName, rowSize } from "../ggml/types.ts";
import { writeGGUFFile } from "../gguf/writer.ts";
import { assertDistinctFiles } from "../fs/atomic.ts";
import { DEQUANT } from "../ggml/ref_quants.ts";
import { QUANT_PRESETS, type QuantPreset, TypeChooser } from "./rules.ts";

/** Raised for unusable quantize requests (unknown preset, unsupported source type). */
export class QuantizeError extends Error {
  /** Creates the error. */
  constructor(message: string) {
    super(message);
    this.name = "QuantizeError";
  }
}

/** Progress of {@linkcode quantizeModel}, reported after each tensor. */
export interface QuantizeProgress {
  /** Tensors done. */
  readonly done: number;
  /** Tensors in the model. */
  readonly total: number;
  /** Name of the tensor just written. */
  readonly name: string;
  /** Its source and written type names. */
  readonly from: string;
  /** Written type name. */
  readonly to: string;
}

/** Options of {@linkcode quantizeModel}. */
export interface QuantizeOptions {
  /** Called after each tensor. */
  onProgress?: (p: QuantizeProgress) => void;
}

/** What {@linkcode quantizeModel} did. */
export interface QuantizeResult {
  /** Written type id per tensor name, in file order. */
  readonly types: Map<string, number>;
  /** Input and output sizes of the tensor data in bytes. */
  readonly bytesIn: number;
  /** Output tensor bytes. */
  readonly bytesOut: number;
}

/** Looks a preset up by name (`q4_k_m`, case-insensitive). */
export function quantPreset(name: string): QuantPreset {
  const p = QUANT_PRESETS.get(name.toLowerCase());
  if (!p) {
    throw new QuantizeError(
      `unknown quantization type ${name}; one of ${[...QUANT_PRESETS.keys()].join(", ")}`,
    );
  }
  return p;
}

const MAX_CHUNK_ELEMS = 1 << 22; // f32 staging per native call: 16 MiB

/**
 * Quantizes `input` to `output` with `preset` (a name or a {@linkcode QuantPreset}).
 * `output` is written atomically; when it is the input file itself (the same
 * path, a symlink or a hard link to it) the call throws SameFileError and
 * touches nothing.
 */
export async function quantizeModel(
  input: string,
  output: string,
  preset: string | QuantPreset,
  options: QuantizeOptions = {},
): Promise<QuantizeResult> {
  const p = typeof preset === "string" ? quantPreset(preset) : preset;
  // Before the input is mapped: writing over it would truncate the mapping.
  await assertDistinctFiles(output, [input]);
  const lib = await loadLibrary();
  using file = await openGGUF(input);
  const h = file.header;
  const arch = h.string("general.architecture", "llama");
  const nLayer = h.number(`${arch}.block_count`, 0);
  const nHead = h.number(`${arch}.attention.head_count`, 1);
  const nGqa = nHead / h.number(`${arch}.attention.head_count_kv`, nHead);
  const chooser = new TypeChooser(p, { nLayer, nGqa }, h.tensors);

  const types = new Map<string, number>();
  for (const t of h.tensors) types.set(t.name, chooser.choose(t));

  const u32 = (key: string, value: number): GGUFKV => ({ key, type: GGUFValueType.UINT32, value });
  const drop = new Set<string>([SPLIT_KEYS.no, SPLIT_KEYS.count, SPLIT_KEYS.tensorsCount]);
  const kv: GGUFKV[] = h.kv.filter((k) => !drop.has(k.key));
  for (
    const [key, value] of [["general.quantization_version", 2], ["general.file_type", p.ftype]]
  ) {
    const i = kv.findIndex((k) => k.key === key);
    if (i >= 0) kv[i] = u32(key as string, value as number);
    else kv.push(u32(key as string, value as number));
  }

  let done = 0, bytesIn = 0, bytesOut = 0;
  const tensors = h.tensors.map((t) => {
    const to = types.get(t.name)!;
    return {
      name: t.name,
      type: to,
      ne: t.ne,
      data: () => {
        const src = file.tensorBytes(t.name);
        const out = to === t.type
          ? src.slice()
          : convert(lib.symbols, t.name, t.type, to, src, t.ne);
        bytesIn += src.length;
        bytesOut += out.length;
        options.onProgress?.({
          done: ++done,
          total: h.tensors.length,
          name: t.name,
          from: ggmlTypeName(t.type),
          to: ggmlTypeName(to),
        });
        return out;
      },
    };
  });
  // Atomic, and checked again against every split of the input.
  await writeGGUFFile(output, { version: 3, alignment: h.alignment, kv, tensors }, {
    inputs: file.paths,
  });
  return { types, bytesIn, bytesOut };
}

type Symbols = Awaited<ReturnType<typeof loadLibrary>>["symbols"];

/** Source rows → f32 → `to`, a few rows per native call. */
function convert(
  sym: Symbols,
  name: string,
  from: number,
  to: number,
  src: Uint8Array,
  ne: readonly number[],
): Uint8Array {
  const fi = ggmlTypeInfo(from)!, ti = ggmlTypeInfo(to)!;
  const dq = DEQUANT.get(from);
  if (!dq) throw new QuantizeError(`${name}: cannot read source type ${fi.name}`);
  const rowLen = ne[0], nRows = ne.reduce((a, b) => a * b, 1) / rowLen;
  const inRow = rowSize(from, rowLen), outRow = rowSize(to, rowLen);
  const out = new Uint8Array(nRows * outRow);
  const rowsPer = Math.max(1, Math.floor(MAX_CHUNK_ELEMS / rowLen));
  const f32 = new Float32Array(Math.min(nRows, rowsPer) * rowLen);
  const f64 = new Float64Array(rowLen);
  const view = new DataView(src.buffer, src.byteOffset, src.byteLength);
  for (let r0 = 0; r0 < nRows; r0 += rowsPer) {
    const nr = Math.min(rowsPer, nRows - r0);
    for (let r = 0; r < nr; r++) {
      if (from === 0) {
        f32.set(
          new Float32Array(src.slice((r0 + r) * inRow, (r0 + r + 1) * inRow).buffer),
          r * rowLen,
        );
      } else {
        dq(view, (r0 + r) * inRow, f64, rowLen);
        f32.set(f64, r * rowLen);
      }
    }
    const dst = out.subarray(r0 * outRow, (r0 + nr) * outRow);
    const rc = sym.le_quantize_row(to, f32.subarray(0, nr * rowLen), dst, BigInt(nr * rowLen));
    if (rc !== 0) throw new QuantizeError(`${name}: native quantizer failed for ${ti.name}`);
  }
  return out;
}
