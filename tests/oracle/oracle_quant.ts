/**
 * ggml's quantization functions (libggml-base) as the oracle for the
 * quantized types: to_float, ggml_quantize_chunk, quantize_row_*_ref.
 *
 * @module
 */
import { join } from "node:path";
import { openOracle } from "./oracle.ts";
import { ORACLE_BIN } from "./setup.ts";

const SYMBOLS = {
  oq_to_float: { parameters: ["i32", "buffer", "buffer", "i64"], result: "i32" },
  oq_quantize: { parameters: ["i32", "buffer", "buffer", "i64", "i64"], result: "i64" },
  oq_quantize_ref: { parameters: ["i32", "buffer", "buffer", "i64"], result: "i32" },
  oq_variant_vec_dot: {
    parameters: ["buffer", "i32", "i64", "buffer", "buffer", "buffer"],
    result: "i32",
  },
} as const satisfies Deno.ForeignLibraryInterface;

/** ggml's quantization entry points. */
export interface OracleQuant {
  /** ggml's to_float of `n` elements of `type`. */
  toFloat(type: number, src: Uint8Array, n: number): Float32Array;
  /** ggml_quantize_chunk(type, ...) without imatrix into `dst`; returns the bytes written. */
  quantize(
    type: number,
    src: Float32Array,
    dst: Uint8Array,
    nrows: number,
    nPerRow: number,
  ): number;
  /** The type's quantize_row_*_ref into `dst`. */
  quantizeRef(type: number, src: Float32Array, dst: Uint8Array): void;
  /**
   * ggml_vec_dot of weight row `x` (`type`) and `y`, quantized by the
   * vec_dot type's from_float, as llama.cpp's `variant` CPU build
   * (libggml-cpu-<variant>.so) computes it; null when that file cannot be
   * loaded here.
   */
  variantVecDot(variant: string, type: number, x: Uint8Array, y: Float32Array): number | null;
}

let lib: Deno.DynamicLibrary<typeof SYMBOLS> | null = null;

/** Opens the ggml quantization oracle. */
export async function loadOracleQuant(): Promise<OracleQuant> {
  lib ??= await openOracle(SYMBOLS);
  const s = lib.symbols;
  return {
    toFloat(type, src, n) {
      const out = new Float32Array(n);
      if (s.oq_to_float(type, src as Uint8Array<ArrayBuffer>, out, BigInt(n)) !== 0) {
        throw new Error(`oracle: type ${type} has no to_float`);
      }
      return out;
    },
    quantize(type, src, dst, nrows, nPerRow) {
      return Number(
        s.oq_quantize(
          type,
          src as Float32Array<ArrayBuffer>,
          dst as Uint8Array<ArrayBuffer>,
          BigInt(nrows),
          BigInt(nPerRow),
        ),
      );
    },
    quantizeRef(type, src, dst) {
      const rc = s.oq_quantize_ref(
        type,
        src as Float32Array<ArrayBuffer>,
        dst as Uint8Array<ArrayBuffer>,
        BigInt(src.length),
      );
      if (rc !== 0) throw new Error(`oracle: type ${type} has no reference quantizer`);
    },
    variantVecDot(variant, type, x, y) {
      const path = new TextEncoder().encode(join(ORACLE_BIN, `libggml-cpu-${variant}.so`) + "\0");
      const out = new Float32Array(1);
      const rc = s.oq_variant_vec_dot(
        path,
        type,
        BigInt(y.length),
        x as Uint8Array<ArrayBuffer>,
        y as Float32Array<ArrayBuffer>,
        out,
      );
      return rc === 0 ? out[0] : null;
    },
  };
}
