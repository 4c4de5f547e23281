/**
 * What the op-by-op parity tests share: the per-layer tensors both engines
 * name (llama.cpp's graph callback names), a bit-level comparison, and the
 * gate that runs them only where our kernels follow the oracle's CPU variant.
 *
 * @module
 */
import { SimdLevel } from "../ffi/symbols.ts";
import type { OracleCpu } from "./oracle/oracle.ts";

/** Per-layer tensors compared, in execution order (suffixed `-<layer>`). */
export const LAYER_TAPS: readonly string[] = [
  "attn_norm",
  "Vcur",
  "Qcur",
  "Kcur",
  "kq",
  "kq_soft_max",
  "kqv",
  "kqv_out",
  "attn_out",
  "ffn_inp",
  "ffn_norm",
  "ffn_gate",
  "ffn_up",
  "ffn_swiglu",
  "ffn_out",
  "l_out",
];

/** Every layer's taps, then the output norm and the logits. */
export function tapNames(nLayer: number): string[] {
  const names: string[] = [];
  for (let il = 0; il < nLayer; il++) for (const t of LAYER_TAPS) names.push(`${t}-${il}`);
  names.push("result_norm", "result_output");
  return names;
}

/** Index and size of the first differing element (NaN-aware bit comparison), or null. */
export function firstDiff(a: Float32Array, b: Float32Array): { i: number; d: number } | null {
  if (a.length !== b.length) return { i: -1, d: Infinity };
  const ua = new Uint32Array(a.buffer, a.byteOffset, a.length);
  const ub = new Uint32Array(b.buffer, b.byteOffset, b.length);
  for (let i = 0; i < a.length; i++) {
    if (ua[i] !== ub[i]) return { i, d: Math.abs(a[i] - b[i]) };
  }
  return null;
}

/** Whether bit-identity is claimed against the oracle's variant, and if not why. */
export interface ParityGate {
  /** Our SIMD level's name ("AVX2", "AVX512", "SCALAR", ...). */
  readonly level: string;
  /** Why the bit-identity tests skip here, or "" when they run. */
  readonly skip: string;
}

/** The gate of the bit-identity tests for the variant the oracle loaded. */
export function parityGate(cpu: OracleCpu): ParityGate {
  const level = Object.entries(SimdLevel).find(([, v]) => v === cpu.simdLevel)?.[0] ?? "?";
  return { level, skip: cpu.exact ? "" : cpu.reason };
}
