/**
 * Op codes shared by the graph builder, the scheduler and every backend.
 * The numbers are the ABI of kernels/include/llm_edge.h (`enum le_op`).
 *
 * @module
 */

/** Graph op codes (values equal `enum le_op` in the C ABI). */
export const Op = {
  NONE: 0,
  GET_ROWS: 1,
  RMS_NORM: 2,
  MUL: 3,
  ADD: 4,
  MUL_MAT: 5,
  ROPE: 6,
  SOFT_MAX: 7,
  SILU: 8,
  SWIGLU: 9,
  CPY: 10,
  SCALE: 11,
  NORM: 12,
  GELU: 13,
  SSM_CONV: 14,
  SSM_SCAN: 15,
  GEGLU: 16,
} as const;

/** A graph op code. */
export type Op = typeof Op[keyof typeof Op];

/** Number of int32 parameter slots each node carries. */
export const MAX_PARAMS = 16;
/** Most sources an op takes. */
export const MAX_SRC = 3;

/** Parameter slots of ROPE (f32 values are stored as bit patterns). */
export const RopeParam = {
  N_DIMS: 0,
  MODE: 1,
  N_CTX_ORIG: 2,
  FREQ_BASE: 3,
  FREQ_SCALE: 4,
  EXT_FACTOR: 5,
  ATTN_FACTOR: 6,
  BETA_FAST: 7,
  BETA_SLOW: 8,
} as const;

/** RoPE modes (ggml's values). */
export const RopeMode = { NORMAL: 0, NEOX: 2 } as const;

const f32 = new Float32Array(1);
const i32 = new Int32Array(f32.buffer);

/** The int32 bit pattern of an f32 value, for storing floats in params. */
export function f32Bits(x: number): number {
  f32[0] = x;
  return i32[0];
}

/** The f32 value whose bit pattern is `bits`. */
export function bitsF32(bits: number): number {
  i32[0] = bits;
  return f32[0];
}
