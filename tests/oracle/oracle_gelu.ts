/**
 * ggml's GELU and GeGLU ops (tests/oracle/oracle_gelu.c) as a given CPU
 * variant of llama.cpp computes them: the oracle for our GELU, whose
 * f16 table ggml builds at startup with float code the compiler may have
 * contracted into FMAs.
 *
 * @module
 */
import { join } from "node:path";
import { cstr, openOracle } from "./oracle.ts";
import { ORACLE_BIN } from "./setup.ts";

const SYMBOLS = {
  og_gelu: { parameters: ["buffer", "buffer", "buffer", "buffer", "i64"], result: "i32" },
} as const satisfies Deno.ForeignLibraryInterface;

/** ggml's GELU family as one variant runs it. */
export interface OracleGelu {
  /**
   * ggml_gelu(x), or ggml_geglu_split(x, g) = gelu(x) * g when `g` is
   * given, computed by llama.cpp's `variant` CPU build
   * (libggml-cpu-<variant>.so); null when that file cannot be loaded here.
   */
  gelu(variant: string, x: Float32Array, g?: Float32Array): Float32Array | null;
}

let lib: Deno.DynamicLibrary<typeof SYMBOLS> | null = null;

/** Opens the GELU oracle. */
export async function loadOracleGelu(): Promise<OracleGelu> {
  lib ??= await openOracle(SYMBOLS);
  const s = lib.symbols;
  return {
    gelu(variant, x, g) {
      if (g && g.length !== x.length) throw new RangeError("oracle gelu: x and g lengths differ");
      const y = new Float32Array(x.length);
      const rc = s.og_gelu(
        cstr(join(ORACLE_BIN, `libggml-cpu-${variant}.so`)),
        x as Float32Array<ArrayBuffer>,
        (g ?? null) as Float32Array<ArrayBuffer> | null,
        y,
        BigInt(x.length),
      );
      if (rc === -1) return null;
      if (rc !== 0) throw new Error(`oracle gelu: ggml's graph failed (${rc})`);
      return y;
    },
  };
}
