/**
 * The ggml tensor type table: every type llama.cpp knows, with its block size
 * and bytes per block, so files holding types we cannot compute are still
 * described by name. It sits in lib/ggml, the bottom layer, because GGUF
 * files, graphs, backends, quantizers and the KV cache all size rows with it.
 *
 * @module
 */

/** ggml tensor type ids, as stored in GGUF tensor infos. */
export const GGMLType = {
  F32: 0,
  F16: 1,
  Q4_0: 2,
  Q4_1: 3,
  Q5_0: 6,
  Q5_1: 7,
  Q8_0: 8,
  Q8_1: 9,
  Q2_K: 10,
  Q3_K: 11,
  Q4_K: 12,
  Q5_K: 13,
  Q6_K: 14,
  Q8_K: 15,
  IQ2_XXS: 16,
  IQ2_XS: 17,
  IQ3_XXS: 18,
  IQ1_S: 19,
  IQ4_NL: 20,
  IQ3_S: 21,
  IQ2_S: 22,
  IQ4_XS: 23,
  I8: 24,
  I16: 25,
  I32: 26,
  I64: 27,
  F64: 28,
  IQ1_M: 29,
  BF16: 30,
  TQ1_0: 34,
  TQ2_0: 35,
  MXFP4: 39,
  NVFP4: 40,
  Q1_0: 41,
  Q2_0: 42,
} as const;

/** A ggml tensor type id. */
export type GGMLType = typeof GGMLType[keyof typeof GGMLType];

/** Size facts of one ggml type. */
export interface GGMLTypeInfo {
  /** The type id. */
  readonly id: number;
  /** llama.cpp's name for it (`q4_K`, `f16`, ...). */
  readonly name: string;
  /** Elements per block. */
  readonly blockSize: number;
  /** Bytes per block. */
  readonly typeSize: number;
}

// Block sizes and bytes per block as llama.cpp's ggml.c type_traits and
// ggml-common.h block structs give them (read off sizeof() at that revision).
const TABLE: Array<[string, number, number, number]> = [
  ["f32", 0, 1, 4],
  ["f16", 1, 1, 2],
  ["q4_0", 2, 32, 18],
  ["q4_1", 3, 32, 20],
  ["q5_0", 6, 32, 22],
  ["q5_1", 7, 32, 24],
  ["q8_0", 8, 32, 34],
  ["q8_1", 9, 32, 36],
  ["q2_K", 10, 256, 84],
  ["q3_K", 11, 256, 110],
  ["q4_K", 12, 256, 144],
  ["q5_K", 13, 256, 176],
  ["q6_K", 14, 256, 210],
  ["q8_K", 15, 256, 292],
  ["iq2_xxs", 16, 256, 66],
  ["iq2_xs", 17, 256, 74],
  ["iq3_xxs", 18, 256, 98],
  ["iq1_s", 19, 256, 50],
  ["iq4_nl", 20, 32, 18],
  ["iq3_s", 21, 256, 110],
  ["iq2_s", 22, 256, 82],
  ["iq4_xs", 23, 256, 136],
  ["i8", 24, 1, 1],
  ["i16", 25, 1, 2],
  ["i32", 26, 1, 4],
  ["i64", 27, 1, 8],
  ["f64", 28, 1, 8],
  ["iq1_m", 29, 256, 56],
  ["bf16", 30, 1, 2],
  ["tq1_0", 34, 256, 54],
  ["tq2_0", 35, 256, 66],
  ["mxfp4", 39, 32, 17],
  ["nvfp4", 40, 64, 36],
  ["q1_0", 41, 128, 18],
  ["q2_0", 42, 64, 18],
];

const BY_ID = new Map<number, GGMLTypeInfo>(
  TABLE.map(([name, id, blockSize, typeSize]) => [id, { id, name, blockSize, typeSize }]),
);

/** Facts of type `id`, or `undefined` when llama.cpp knows no such type. */
export function ggmlTypeInfo(id: number): GGMLTypeInfo | undefined {
  return BY_ID.get(id);
}

/** The type whose llama.cpp name is `name` (case-insensitive). */
export function ggmlTypeByName(name: string): GGMLTypeInfo | undefined {
  const lower = name.toLowerCase();
  for (const t of BY_ID.values()) if (t.name.toLowerCase() === lower) return t;
  return undefined;
}

/** llama.cpp's name of type `id`, or `type<id>` for an unknown id. */
export function ggmlTypeName(id: number): string {
  return BY_ID.get(id)?.name ?? `type${id}`;
}

/**
 * Bytes that a row of `n` elements of type `id` takes (ggml_row_size); `n`
 * must be a multiple of the block size. Throws RangeError otherwise.
 */
export function rowSize(id: number, n: number): number {
  const t = BY_ID.get(id);
  if (!t) throw new RangeError(`unknown ggml type ${id}`);
  if (n % t.blockSize !== 0) {
    throw new RangeError(
      `row of ${n} elements is not a multiple of ${t.name} block size ${t.blockSize}`,
    );
  }
  return (n / t.blockSize) * t.typeSize;
}

/**
 * The type mul_mat converts f32 activations to for weights of `type`
 * (ggml's vec_dot_type), or undefined when the type cannot be multiplied.
 */
export function vecDotType(type: number): number | undefined {
  switch (type) {
    case GGMLType.F32:
    case GGMLType.F16:
    case GGMLType.BF16:
    case GGMLType.Q8_0:
      return type;
    case GGMLType.Q4_0:
    case GGMLType.Q5_0:
      return GGMLType.Q8_0;
    case GGMLType.Q4_1:
    case GGMLType.Q5_1:
      return GGMLType.Q8_1;
    case GGMLType.Q2_K:
    case GGMLType.Q3_K:
    case GGMLType.Q4_K:
    case GGMLType.Q5_K:
    case GGMLType.Q6_K:
      return GGMLType.Q8_K;
    default:
      return undefined;
  }
}
