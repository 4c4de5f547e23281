/**
 * llama.cpp's GGUF reader (gguf.h) as the oracle for lib/gguf: everything
 * gguf_init_from_file reports about a file, in plain JavaScript values.
 *
 * @module
 */
import { cstr, openOracle } from "./oracle.ts";

const SYMBOLS = {
  og_open: { parameters: ["buffer"], result: "pointer" },
  og_close: { parameters: ["pointer"], result: "void" },
  og_accepts: { parameters: ["buffer"], result: "i32" },
  og_version: { parameters: ["pointer"], result: "u32" },
  og_alignment: { parameters: ["pointer"], result: "i64" },
  og_data_offset: { parameters: ["pointer"], result: "i64" },
  og_n_kv: { parameters: ["pointer"], result: "i64" },
  og_key: { parameters: ["pointer", "i64", "buffer", "i32"], result: "i32" },
  og_kv_type: { parameters: ["pointer", "i64"], result: "i32" },
  og_arr_type: { parameters: ["pointer", "i64"], result: "i32" },
  og_arr_n: { parameters: ["pointer", "i64"], result: "i64" },
  og_val_bytes: { parameters: ["pointer", "i64", "buffer"], result: "i32" },
  og_val_str: { parameters: ["pointer", "i64", "buffer", "i32"], result: "i32" },
  og_arr_str: { parameters: ["pointer", "i64", "i64", "buffer", "i32"], result: "i32" },
  og_arr_data: { parameters: ["pointer", "i64", "buffer", "i64"], result: "i64" },
  og_n_tensors: { parameters: ["pointer"], result: "i64" },
  og_tensor_name: { parameters: ["pointer", "i64", "buffer", "i32"], result: "i32" },
  og_tensor_type: { parameters: ["pointer", "i64"], result: "i32" },
  og_tensor_offset: { parameters: ["pointer", "i64"], result: "i64" },
  og_tensor_size: { parameters: ["pointer", "i64"], result: "i64" },
  og_tensor_shape: { parameters: ["pointer", "i64", "buffer"], result: "i32" },
} as const satisfies Deno.ForeignLibraryInterface;

type Lib = Deno.DynamicLibrary<typeof SYMBOLS>;
let lib: Lib | null = null;

/** One metadata pair as llama.cpp holds it; scalars as raw little-endian bytes. */
export interface OracleKV {
  key: string;
  /** gguf_type of the pair (9 = array). */
  type: number;
  /** Item type for arrays. */
  arrType?: number;
  /** Scalar string, or string array items. */
  str?: string;
  strs?: string[];
  /** Raw bytes of a non-string scalar or of a numeric array's items. */
  raw?: Uint8Array;
}

/** One tensor as llama.cpp holds it. */
export interface OracleTensor {
  name: string;
  type: number;
  offset: number;
  size: number;
  /** All four ne (1 beyond n_dims). */
  ne: number[];
  /** ggml_n_dims (trailing 1s trimmed). */
  nDims: number;
}

/** Everything gguf_init_from_file reports for a file. */
export interface OracleGGUF {
  version: number;
  alignment: number;
  dataOffset: number;
  kv: OracleKV[];
  tensors: OracleTensor[];
}

const dec = new TextDecoder("utf-8", { ignoreBOM: true });

function str(f: (b: Uint8Array<ArrayBuffer>, n: number) => number): string {
  let buf = new Uint8Array(256);
  let n = f(buf, buf.length);
  if (n >= buf.length) {
    buf = new Uint8Array(n + 1);
    n = f(buf, buf.length);
  }
  return dec.decode(buf.subarray(0, n));
}

async function open(): Promise<Lib> {
  lib ??= await openOracle(SYMBOLS);
  return lib;
}

/**
 * Whether llama.cpp accepts the file: 1 yes, 0 gguf_init_from_file rejects it,
 * -1 it parses but some tensor data lies beyond the end (llama_model_loader's check).
 */
export async function oracleAccepts(path: string): Promise<number> {
  return (await open()).symbols.og_accepts(cstr(path));
}

/** Reads `path` with llama.cpp's gguf API; null when it rejects the file. */
export async function oracleReadGGUF(path: string): Promise<OracleGGUF | null> {
  const s = (await open()).symbols;
  const h = s.og_open(cstr(path));
  if (!h) return null;
  try {
    const kv: OracleKV[] = [];
    const nKv = Number(s.og_n_kv(h));
    for (let i = 0; i < nKv; i++) {
      const I = BigInt(i);
      const key = str((b, n) => s.og_key(h, I, b, n));
      const type = s.og_kv_type(h, I);
      const e: OracleKV = { key, type };
      if (type === 8) e.str = str((b, n) => s.og_val_str(h, I, b, n));
      else if (type === 9) {
        e.arrType = s.og_arr_type(h, I);
        const n = Number(s.og_arr_n(h, I));
        if (e.arrType === 8) {
          e.strs = [];
          for (let j = 0; j < n; j++) {
            e.strs.push(str((b, l) => s.og_arr_str(h, I, BigInt(j), b, l)));
          }
        } else {
          const bytes = Number(s.og_arr_data(h, I, null, 0n));
          e.raw = new Uint8Array(bytes);
          s.og_arr_data(h, I, e.raw, BigInt(bytes));
        }
      } else {
        const out = new Uint8Array(8);
        e.raw = out.slice(0, s.og_val_bytes(h, I, out));
      }
      kv.push(e);
    }
    const tensors: OracleTensor[] = [];
    const nT = Number(s.og_n_tensors(h));
    for (let i = 0; i < nT; i++) {
      const I = BigInt(i);
      const ne4 = new BigInt64Array(4);
      const nDims = s.og_tensor_shape(h, I, new Uint8Array(ne4.buffer));
      tensors.push({
        name: str((b, n) => s.og_tensor_name(h, I, b, n)),
        type: s.og_tensor_type(h, I),
        offset: Number(s.og_tensor_offset(h, I)),
        size: Number(s.og_tensor_size(h, I)),
        ne: Array.from(ne4, Number),
        nDims,
      });
    }
    return {
      version: s.og_version(h),
      alignment: Number(s.og_alignment(h)),
      dataOffset: Number(s.og_data_offset(h)),
      kv,
      tensors,
    };
  } finally {
    s.og_close(h);
  }
}
