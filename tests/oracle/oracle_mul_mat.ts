/**
 * ggml's MUL_MAT (tests/oracle/oracle_mul_mat.c) as a given CPU variant of
 * llama.cpp computes it: the oracle for our mul_mat tiles and panels, whose
 * per-output operation order must be that build's (vec_dot for one column,
 * llamafile's tinyBLAS for several).
 *
 * @module
 */
import { join } from "node:path";
import { cstr, openOracle } from "./oracle.ts";
import { ORACLE_BIN } from "./setup.ts";

const SYMBOLS = {
  om_mul_mat: {
    parameters: [
      "buffer",
      "i32",
      "i64",
      "i64",
      "i64",
      "i64",
      "i64",
      "buffer",
      "buffer",
      "buffer",
      "i32",
    ],
    result: "i32",
  },
  om_mul_mat_repacked: {
    parameters: ["buffer", "i32", "i64", "i64", "i64", "buffer", "buffer", "buffer", "i32"],
    result: "i32",
  },
} as const satisfies Deno.ForeignLibraryInterface;

/** Shape of one mul_mat: a [k, m, ne2a] (weights) times b [k, n, ne2] (f32). */
export interface MulMatShape {
  /** ggml type of a. */
  type: number;
  /** Row length. */
  k: number;
  /** Rows of a (outputs per column). */
  m: number;
  /** Columns of b. */
  n: number;
  /** Matrices of a (b's matrices are spread over them, ne2 / ne2a each). */
  ne2a: number;
  /** Matrices of b. */
  ne2: number;
}

/** ggml's MUL_MAT as one variant runs it. */
export interface OracleMulMat {
  /**
   * mul_mat(a, b) → f32 [m, n, ne2], `a` the raw contiguous rows of
   * `shape.type`, computed by llama.cpp's `variant` CPU build
   * (libggml-cpu-<variant>.so) with `threads` threads; null when that file
   * cannot be loaded here.
   */
  mulMat(
    variant: string,
    shape: MulMatShape,
    a: Uint8Array,
    b: Float32Array,
    threads?: number,
  ): Float32Array | null;
  /**
   * The same product of a 2-D `a` (k x m) loaded the way llama.cpp loads a
   * weight it repacks (the variant's CPU_REPACK buffer: Q4_0 / Q4_K with
   * m % 8 == 0 where the variant repacks them), so its repack gemv/gemm
   * kernels compute it; null when the variant cannot be loaded or has no
   * repack for this weight.
   */
  mulMatRepacked(
    variant: string,
    shape: { type: number; k: number; m: number; n: number },
    a: Uint8Array,
    b: Float32Array,
    threads?: number,
  ): Float32Array | null;
}

let lib: Deno.DynamicLibrary<typeof SYMBOLS> | null = null;

/** Opens the MUL_MAT oracle. */
export async function loadOracleMulMat(): Promise<OracleMulMat> {
  lib ??= await openOracle(SYMBOLS);
  const s = lib.symbols;
  return {
    mulMat(variant, { type, k, m, n, ne2a, ne2 }, a, b, threads = 1) {
      if (b.length !== k * n * ne2) throw new RangeError("oracle mul_mat: b is not k * n * ne2");
      const out = new Float32Array(m * n * ne2);
      const rc = s.om_mul_mat(
        cstr(join(ORACLE_BIN, `libggml-cpu-${variant}.so`)),
        type,
        BigInt(k),
        BigInt(m),
        BigInt(ne2a),
        BigInt(n),
        BigInt(ne2),
        a as Uint8Array<ArrayBuffer>,
        b as Float32Array<ArrayBuffer>,
        out,
        threads,
      );
      if (rc === -1) return null;
      if (rc !== 0) throw new Error(`oracle mul_mat: ggml refused or failed (${rc})`);
      return out;
    },
    mulMatRepacked(variant, { type, k, m, n }, a, b, threads = 1) {
      if (b.length !== k * n) throw new RangeError("oracle mul_mat: b is not k * n");
      const out = new Float32Array(m * n);
      const rc = s.om_mul_mat_repacked(
        cstr(join(ORACLE_BIN, `libggml-cpu-${variant}.so`)),
        type,
        BigInt(k),
        BigInt(m),
        BigInt(n),
        a as Uint8Array<ArrayBuffer>,
        b as Float32Array<ArrayBuffer>,
        out,
        threads,
      );
      if (rc === -1 || rc === -3 || rc === -4) return null;
      if (rc !== 0) throw new Error(`oracle mul_mat (repacked): ggml failed (${rc})`);
      return out;
    },
  };
}
