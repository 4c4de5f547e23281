/**
 * ggml's SSM_CONV and SSM_SCAN ops (tests/oracle/oracle_ssm.c) as a given
 * CPU variant of llama.cpp computes them: the oracle for our Mamba kernels.
 *
 * @module
 */
import { join } from "node:path";
import { cstr, openOracle } from "./oracle.ts";
import { ORACLE_BIN } from "./setup.ts";

const SYMBOLS = {
  og_ssm: {
    parameters: ["buffer", "i32", "buffer", "buffer", "buffer", "i32", "i32", "buffer", "i64"],
    result: "i32",
  },
} as const satisfies Deno.ForeignLibraryInterface;

/** An F32 source: its ggml shape (ne0 first) and packed values. */
export interface OracleF32 {
  /** Elements per dimension, up to four (missing ones are 1). */
  ne: readonly number[];
  /** Packed values, ne0 fastest. */
  data: Float32Array;
}

/** The ggml SSM ops as one variant runs them. */
export interface OracleSsm {
  /** ggml_ssm_conv(sx, c): F32 [dInner, nT, nS]; null when the variant cannot be loaded here. */
  conv(variant: string, sx: OracleF32, c: OracleF32, threads?: number): Float32Array | null;
  /**
   * ggml_ssm_scan(s, x, dt, A, B, C, ids, k): the 1-D result (y, then the
   * states); null when the variant cannot be loaded here.
   */
  scan(
    variant: string,
    src: { s: OracleF32; x: OracleF32; dt: OracleF32; a: OracleF32; b: OracleF32; c: OracleF32 },
    ids: Int32Array,
    k?: number,
    threads?: number,
  ): Float32Array | null;
}

let lib: Deno.DynamicLibrary<typeof SYMBOLS> | null = null;

const ne4 = (t: OracleF32) => [0, 1, 2, 3].map((i) => t.ne[i] ?? 1);
const count = (t: OracleF32) => ne4(t).reduce((a, b) => a * b, 1);

/** Opens the SSM oracle. */
export async function loadOracleSsm(): Promise<OracleSsm> {
  lib ??= await openOracle(SYMBOLS);
  const s = lib.symbols;
  const call = (
    variant: string,
    op: number,
    ts: OracleF32[],
    ids: Int32Array | null,
    k: number,
    threads: number,
    nOut: number,
  ) => {
    for (const t of ts) {
      if (t.data.length !== count(t)) throw new RangeError("oracle ssm: data length != shape");
    }
    const ne = BigInt64Array.from(ts.flatMap(ne4).map(BigInt));
    const data = new Float32Array(ts.reduce((a, t) => a + t.data.length, 0));
    let o = 0;
    for (const t of ts) data.set(t.data, o), o += t.data.length;
    const out = new Float32Array(nOut);
    const rc = s.og_ssm(
      cstr(join(ORACLE_BIN, `libggml-cpu-${variant}.so`)),
      op,
      ne,
      data,
      ids ?? new Int32Array(1),
      k,
      threads,
      out,
      BigInt(nOut),
    );
    if (rc === -1) return null;
    if (rc !== 0) throw new Error(`oracle ssm: ggml's graph failed (${rc})`);
    return out;
  };
  return {
    conv: (variant, sx, c, threads = 1) => {
      const [, nr, ns] = ne4(sx);
      const nT = ne4(sx)[0] - ne4(c)[0] + 1;
      return call(variant, 0, [sx, c], null, 1, threads, nr * nT * ns);
    },
    scan: (variant, src, ids, k = 1, threads = 1) => {
      const ts = [src.s, src.x, src.dt, src.a, src.b, src.c];
      const [dState, headDim, nHead] = ne4(src.s);
      const n = count(src.x) + k * dState * headDim * nHead * ids.length;
      return call(variant, 1, ts, ids, k, threads, n);
    },
  };
}
