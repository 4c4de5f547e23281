/**
 * ggml's FLASH_ATTN_EXT (tests/oracle/oracle_fa.c) as a given CPU variant of
 * llama.cpp computes it: the op-level oracle of our flash attention kernel.
 *
 * @module
 */
import { join } from "node:path";
import { cstr, openOracle } from "./oracle.ts";
import { ORACLE_BIN } from "./setup.ts";

const SYMBOLS = {
  ofa_flash_attn: {
    parameters: [
      "buffer",
      "buffer",
      "i32",
      "i32",
      "buffer",
      "buffer",
      "buffer",
      "buffer",
      "f32",
      "f32",
      "i32",
      "buffer",
    ],
    result: "i32",
  },
  ofa_k_shift: {
    parameters: [
      "buffer",
      "i32",
      "buffer",
      "i64",
      "i64",
      "i64",
      "i32",
      "i32",
      "i32",
      "buffer",
      "buffer",
      "i32",
    ],
    result: "i32",
  },
} as const satisfies Deno.ForeignLibraryInterface;

/** RoPE settings of {@link OracleFlashAttn.kShift} (ggml_rope_ext's arguments). */
export interface OracleRope {
  /** Rotated elements per head. */
  nRot: number;
  /** ggml rope mode (0 normal, 2 neox). */
  mode: number;
  /** n_ctx_orig. */
  nCtxOrig: number;
  /** freq_base, freq_scale, ext_factor, attn_factor, beta_fast, beta_slow. */
  f: readonly [number, number, number, number, number, number];
}

/** One flash attention call's operands (contiguous tensors, ggml layouts). */
export interface OracleFlashAttnArgs {
  /** q [D, n, nHead, ne3] F32. */
  q: Float32Array;
  /** Shape of q. */
  qNe: readonly number[];
  /** k bytes, type `kType`, shape `kNe` [D, nKv, nHeadKv, ne3]. */
  k: Uint8Array;
  /** ggml type id of k. */
  kType: number;
  /** Shape of k. */
  kNe: readonly number[];
  /** v bytes, type `vType`, shape `vNe` [Dv, nKv, nHeadKv, ne3]. */
  v: Uint8Array;
  /** ggml type id of v. */
  vType: number;
  /** Shape of v. */
  vNe: readonly number[];
  /** F16 bits of the mask [nKv, >= n, ..], or none. */
  mask?: Uint16Array;
  /** Shape of the mask. */
  maskNe?: readonly number[];
  /** kq scale. */
  scale: number;
  /** ALiBi max bias. */
  maxBias?: number;
  /** Threads (ggml's decode path splits the cache by thread count). */
  threads: number;
}

/** ggml's flash attention as one variant runs it. */
export interface OracleFlashAttn {
  /**
   * The [Dv, nHead, n, ne3] result of ggml_flash_attn_ext computed by
   * llama.cpp's `variant` CPU build; null when that file cannot be loaded here.
   */
  flashAttn(variant: string, a: OracleFlashAttnArgs): Float32Array | null;
  /**
   * The quantized branch of llama.cpp's K-shift (cast to F32, rope by each
   * cell's delta, copy back) on one layer's K bytes, returned as new bytes;
   * null when the variant cannot be loaded here.
   */
  kShift(
    variant: string,
    k: { bytes: Uint8Array; type: number; nEmbdHead: number; nHeadKv: number; size: number },
    rope: OracleRope,
    shift: Int32Array,
    threads: number,
  ): Uint8Array | null;
}

let lib: Deno.DynamicLibrary<typeof SYMBOLS> | null = null;

/** Opens the flash attention oracle. */
export async function loadOracleFlashAttn(): Promise<OracleFlashAttn> {
  lib ??= await openOracle(SYMBOLS);
  const s = lib.symbols;
  return {
    flashAttn(variant, a) {
      const ne = BigInt64Array.from(
        [...a.qNe, ...a.kNe, ...a.vNe, ...(a.maskNe ?? [0, 0, 0, 0])].map(BigInt),
      );
      const out = new Float32Array(a.vNe[0] * a.qNe[2] * a.qNe[1] * a.qNe[3]);
      const rc = s.ofa_flash_attn(
        cstr(join(ORACLE_BIN, `libggml-cpu-${variant}.so`)),
        ne,
        a.kType,
        a.vType,
        a.q as Float32Array<ArrayBuffer>,
        a.k as Uint8Array<ArrayBuffer>,
        a.v as Uint8Array<ArrayBuffer>,
        (a.mask ?? null) as Uint16Array<ArrayBuffer> | null,
        a.scale,
        a.maxBias ?? 0,
        a.threads,
        out,
      );
      if (rc === -1) return null;
      if (rc !== 0) throw new Error(`oracle flash attn: ggml's graph failed (${rc})`);
      return out;
    },
    kShift(variant, k, rope, shift, threads) {
      const bytes = k.bytes.slice();
      const rc = s.ofa_k_shift(
        cstr(join(ORACLE_BIN, `libggml-cpu-${variant}.so`)),
        k.type,
        bytes,
        BigInt(k.nEmbdHead),
        BigInt(k.nHeadKv),
        BigInt(k.size),
        rope.nRot,
        rope.mode,
        rope.nCtxOrig,
        Float32Array.from(rope.f),
        shift as Int32Array<ArrayBuffer>,
        threads,
      );
      if (rc === -1) return null;
      if (rc !== 0) throw new Error(`oracle k-shift: ggml's graph failed (${rc})`);
      return bytes;
    },
  };
}
