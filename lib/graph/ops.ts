/**
 * Op codes shared by the graph builder, the scheduler and every backend, and
 * the one table of each op's rules: how many sources it takes, which types
 * the kernels implement, and its shape and stride rule. The graph builder
 * checks every node it makes against the table, and so does the backends'
 * validateNode before a kernel runs; the C side (kernels/src/ops.c) trusts
 * that and keeps only asserts against crashes.
 * The op numbers are the ABI of kernels/include/llm_edge.h (`enum le_op`).
 *
 * @module
 */
import type { Dims } from "../ggml/memory.ts";
import { GGMLType, ggmlTypeInfo, ggmlTypeName, vecDotType } from "../ggml/types.ts";

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
  GEGLU: 14,
  FLASH_ATTN_EXT: 15,
  SSM_CONV: 16,
  SSM_SCAN: 17,
  CONCAT: 18,
  HADAMARD: 19,
  SET_ROWS: 20,
} as const;

/** A graph op code. */
export type Op = typeof Op[keyof typeof Op];

/** Number of int32 parameter slots each node carries. */
export const MAX_PARAMS = 16;
/** Most sources an op takes. */
export const MAX_SRC = 7;

/** Parameter slots of FLASH_ATTN_EXT (f32 bit patterns). */
export const FlashAttnParam = { SCALE: 0, MAX_BIAS: 1, SOFTCAP: 2, PREC: 3 } as const;

/** ggml_prec values of FLASH_ATTN_EXT's PREC slot (ggml_flash_attn_ext_set_prec). */
export const GGMLPrec = { DEFAULT: 0, F32: 10 } as const;

/** Cache types FLASH_ATTN_EXT reads for K and V (ggml-cpu's kernel takes any type with a vec_dot; these are the ones we build caches in). */
export const FLASH_ATTN_KV_TYPES: readonly number[] = [GGMLType.F32, GGMLType.F16, GGMLType.Q8_0];

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

const { F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, I32 } =
  GGMLType;

/** Types whose rows the kernels can read (dequantize / multiply). */
export const COMPUTE_TYPES: readonly number[] = [
  F32,
  F16,
  BF16,
  Q8_0,
  Q4_0,
  Q4_1,
  Q5_0,
  Q5_1,
  Q2_K,
  Q3_K,
  Q4_K,
  Q5_K,
  Q6_K,
];

/**
 * Types a CPY may write: the K-quants' search-based quantizers exist only in
 * C, so the reference backend could not mirror a copy into them.
 */
export const CPY_DST_TYPES: readonly number[] = [F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1];

const FLOAT_TYPES: readonly number[] = [F32, F16, BF16];

/** What an op rule sees of a tensor: graph tensors and resolved backend tensors both fit. */
export interface Operand {
  /** ggml type id. */
  readonly type: number;
  /** Elements per dimension. */
  readonly ne: Dims;
  /** Byte strides. */
  readonly nb: Dims;
}

/** The rules of one op, for nodes as the kernels execute them (dst = op(src...)). */
interface OpRule {
  /** Fewest and most sources. */
  readonly src: readonly [number, number];
  /** Whether the kernels implement this dst type and these source types. */
  types(dst: number, src: readonly number[]): boolean;
  /** The broken shape or stride rule, or undefined; runs only after `types` passed. */
  layout?(d: Operand, src: readonly Operand[], params: Int32Array): string | undefined;
}

const typeSize = (type: number) => ggmlTypeInfo(type)!.typeSize;
const sameShape = (a: Operand, b: Operand) =>
  a.ne[0] === b.ne[0] && a.ne[1] === b.ne[1] && a.ne[2] === b.ne[2] && a.ne[3] === b.ne[3];
// Packed elements along dim 0 (what every kernel's inner loop assumes).
const rowsOf = (t: Operand, type: number) => t.type === type && t.nb[0] === typeSize(type);
const nel = (t: Operand) => t.ne[0] * t.ne[1] * t.ne[2] * t.ne[3];
const f32Rows = (...ts: Operand[]) => ts.every((t) => rowsOf(t, F32));

// Unary ops over F32 rows; SOFT_MAX adds an optional mask.
const UNARY: OpRule = {
  src: [1, 1],
  types: (d, [s0]) => s0 === F32 && d === F32,
  layout: (d, [a]) =>
    !f32Rows(a, d)
      ? "rows must be contiguous F32"
      : !sameShape(a, d)
      ? "dst must be shaped like src0"
      : undefined,
};

const BINARY: OpRule = {
  src: [2, 2],
  types: (d, [s0, s1]) => s0 === F32 && s1 === F32 && d === F32,
  layout(d, [a, b]) {
    if (!f32Rows(a, b, d)) return "rows must be contiguous F32";
    if (!sameShape(a, d)) return "dst must be shaped like src0";
    for (let i = 0; i < 4; i++) {
      if (!(b.ne[i] > 0 && a.ne[i] % b.ne[i] === 0)) {
        return `src1 does not broadcast onto src0 (ne[${i}] ${b.ne[i]} must divide ${a.ne[i]})`;
      }
    }
  },
};

/** Gated units (silu or gelu of src0, times src1): three same-shape F32 tensors. */
const GLU: OpRule = {
  src: [2, 2],
  types: BINARY.types,
  layout: (d, [a, b]) =>
    !f32Rows(a, b, d)
      ? "rows must be contiguous F32"
      : !(sameShape(a, d) && sameShape(b, d))
      ? "all three tensors must share a shape"
      : undefined,
};

const isMatrix = (t: Operand) => t.ne[2] === 1 && t.ne[3] === 1;
const contiguous = (t: Operand) =>
  t.nb[0] === typeSize(t.type) && t.nb[1] === t.nb[0] * t.ne[0] &&
  t.nb[2] === t.nb[1] * t.ne[1] && t.nb[3] === t.nb[2] * t.ne[2];

/** Slot of SSM_SCAN's params: K, the states kept per sequence (ggml_ssm_scan's K). */
export const SsmScanParam = { K: 0 } as const;

/**
 * ggml_ssm_conv (ggml.c and ggml-cpu's asserts): sx [d_conv-1+n_t, d_inner,
 * n_s] with packed rows, c [d_conv, d_inner] packed, dst [d_inner, n_t, n_s].
 */
const SSM_CONV: OpRule = {
  src: [2, 2],
  types: (d, [s0, s1]) => s0 === F32 && s1 === F32 && d === F32,
  layout(d, [sx, c]) {
    if (!(rowsOf(sx, F32) && sx.nb[1] === 4 * sx.ne[0] && sx.ne[3] === 1)) {
      return "sx must be 3-D F32 with packed rows";
    }
    if (!(contiguous(c) && isMatrix(c))) return "c must be a contiguous F32 matrix";
    const nT = sx.ne[0] - c.ne[0] + 1;
    if (!(nT >= 0 && sx.ne[1] === c.ne[1])) {
      return "shapes: sx [d_conv - 1 + n_t, d_inner, n_s] for c [d_conv, d_inner]";
    }
    if (
      !(contiguous(d) && d.ne[0] === c.ne[1] && d.ne[1] === nT && d.ne[2] === sx.ne[2] &&
        d.ne[3] === 1)
    ) {
      return "dst must be contiguous [d_inner, n_t, n_s]";
    }
  },
};

/**
 * ggml_ssm_scan: s [d_state, head_dim, n_head, >= n_s] (all states; ids pick
 * each sequence's), x [head_dim, n_head, n_t, n_s], dt [n_head, n_t, n_s],
 * A [d_state, n_head] (Mamba-1) or [1, n_head] (Mamba-2), B and C
 * [d_state, n_group, n_t, n_s] (packed rows, any outer strides), ids I32
 * [n_s]; dst F32 1-D: y, then K states per sequence.
 */
const SSM_SCAN: OpRule = {
  src: [7, 7],
  types: (d, t) =>
    d === F32 && t.length === 7 && t.slice(0, 6).every((x) => x === F32) && t[6] === I32,
  layout(d, [s, x, dt, a, b, c, ids], params) {
    const K = params[SsmScanParam.K];
    if (!(K >= 1)) return `K ${K} must be >= 1`;
    if (!contiguous(s)) return "s must be contiguous";
    if (!contiguous(dt) || !contiguous(a)) return "dt and A must be contiguous";
    if (!(rowsOf(x, F32) && x.nb[1] === 4 * x.ne[0])) {
      return "x needs packed [head_dim, n_head] planes";
    }
    for (const [what, t] of [["B", b], ["C", c]] as const) {
      if (!(rowsOf(t, F32) && t.nb[1] === 4 * t.ne[0])) {
        return `${what} needs packed [d_state, n_group] planes`;
      }
    }
    if (!sameShape(b, c)) return "B and C must share a shape";
    const [dState, headDim, nHead, nT, nS] = [s.ne[0], x.ne[0], x.ne[1], x.ne[2], x.ne[3]];
    if (!(dt.ne[0] === nHead && dt.ne[1] === nT && dt.ne[2] === nS && dt.ne[3] === 1)) {
      return "dt must be [n_head, n_t, n_s]";
    }
    if (!(s.ne[1] === headDim && s.ne[2] === nHead && s.ne[3] >= 1)) {
      return "s must be [d_state, head_dim, n_head, n_states]";
    }
    if (!(b.ne[0] === dState && b.ne[2] === nT && b.ne[3] === nS)) {
      return "B and C must be [d_state, n_group, n_t, n_s]";
    }
    if (!(b.ne[1] >= 1 && nHead % b.ne[1] === 0)) {
      return `n_group ${b.ne[1]} must divide n_head ${nHead}`;
    }
    if (
      !(ids.ne[0] === nS && ids.ne[1] === 1 && ids.ne[2] === 1 && ids.ne[3] === 1 &&
        rowsOf(ids, I32))
    ) {
      return "ids must be a contiguous I32 vector [n_s]";
    }
    if (!(isMatrix(a) && a.ne[1] === nHead)) return "A must be a matrix [d_state or 1, n_head]";
    if (a.ne[0] !== 1 && !(a.ne[0] === dState && K === 1)) {
      return "A must be [1, n_head] (Mamba-2) or [d_state, n_head] with K = 1 (Mamba-1)";
    }
    const n = nel(x) + K * dState * headDim * nHead * nS;
    if (!(contiguous(d) && d.ne[0] === n && d.ne[1] === 1 && d.ne[2] === 1 && d.ne[3] === 1)) {
      return `dst must be contiguous [${n}] (y, then K states per sequence)`;
    }
  },
};

/** Every op's rules, by op code (a code missing here is not an op). */
const OP_RULES: Readonly<Record<number, OpRule>> = {
  [Op.NONE]: { src: [0, 3], types: () => true },
  [Op.GET_ROWS]: {
    src: [2, 2],
    types: (d, [s0, s1]) => COMPUTE_TYPES.includes(s0) && s1 === I32 && d === F32,
    layout(d, [a, b]) {
      if (!rowsOf(d, F32)) return "dst rows must be contiguous F32";
      if (!(rowsOf(b, I32) || b.ne[0] <= 1)) return "ids must be contiguous I32";
      if (
        !(d.ne[0] === a.ne[0] && d.ne[1] === b.ne[0] && d.ne[2] === b.ne[1] &&
          d.ne[3] === b.ne[2] && a.ne[2] === b.ne[1] && a.ne[3] === b.ne[2] && b.ne[3] === 1)
      ) return "shapes: dst [a0, b0, b1, b2] with a2 = b1, a3 = b2";
      if (a.nb[0] !== typeSize(a.type)) return "src0 rows must be contiguous";
    },
  },
  [Op.RMS_NORM]: UNARY,
  [Op.MUL]: BINARY,
  [Op.ADD]: BINARY,
  [Op.MUL_MAT]: {
    src: [2, 2],
    types: (d, [s0, s1]) => COMPUTE_TYPES.includes(s0) && s1 === F32 && d === F32,
    layout(d, [a, b]) {
      if (vecDotType(a.type) === undefined) return "src0 type cannot be multiplied";
      if (a.nb[0] !== typeSize(a.type)) return "src0 rows must be contiguous";
      if (b.nb[0] !== 4 || d.nb[0] !== 4) return "src1 and dst need nb[0] = 4";
      if (
        !(a.ne[0] === b.ne[0] && d.ne[0] === a.ne[1] && d.ne[1] === b.ne[1] &&
          d.ne[2] === b.ne[2] && d.ne[3] === b.ne[3])
      ) return "cannot multiply: shapes must be a [K, M, ..], b [K, N, ..], dst [M, N, ..]";
      if (!(a.ne[2] > 0 && a.ne[3] > 0 && b.ne[2] % a.ne[2] === 0 && b.ne[3] % a.ne[3] === 0)) {
        return "cannot multiply: src1 dims 2,3 must be multiples of src0's (broadcast)";
      }
    },
  },
  [Op.ROPE]: {
    src: [2, 3],
    types: (d, [s0, s1]) => (s0 === F32 || s0 === F16) && s1 === I32 && d === s0,
    layout(d, [a, b, ff], params) {
      const nd = params[RopeParam.N_DIMS], mode = params[RopeParam.MODE];
      const ts = typeSize(a.type);
      if (!(a.nb[0] === ts && d.nb[0] === ts && sameShape(a, d))) {
        return "src0/dst same shape, contiguous rows";
      }
      if (!(rowsOf(b, I32) && b.ne[0] >= a.ne[2])) {
        return "positions: contiguous I32, one per ne[2]";
      }
      if (!(nd > 0 && nd % 2 === 0 && nd <= a.ne[0])) {
        return `nDims ${nd} must be even and in 1..ne0 (${a.ne[0]})`;
      }
      if (mode !== RopeMode.NORMAL && mode !== RopeMode.NEOX) {
        return "mode must be 0 (normal) or 2 (neox)";
      }
      if (ff && !(rowsOf(ff, F32) && ff.ne[0] >= nd / 2)) return "freq factors: F32 [n_dims/2]";
    },
  },
  [Op.SOFT_MAX]: {
    src: [1, 2],
    types: (d, [s0, s1]) =>
      s0 === F32 && d === F32 && (s1 === undefined || s1 === F32 || s1 === F16),
    layout(d, [a, m], params) {
      const base = UNARY.layout!(d, [a], params);
      if (base || !m) return base;
      if (m.nb[0] !== typeSize(m.type)) return "mask rows must be contiguous";
      if (!(m.ne[0] === a.ne[0] && m.ne[1] >= a.ne[1])) return "mask must be [ne0, >= ne1, ..]";
      if (!(m.ne[2] > 0 && m.ne[3] > 0 && a.ne[2] % m.ne[2] === 0 && a.ne[3] % m.ne[3] === 0)) {
        return "mask dims 2,3 must divide src0's";
      }
    },
  },
  [Op.SILU]: UNARY,
  [Op.SWIGLU]: GLU,
  [Op.GEGLU]: GLU,
  [Op.CPY]: {
    src: [1, 1],
    types: (d, [s0]) =>
      (FLOAT_TYPES.includes(s0) && CPY_DST_TYPES.includes(d)) || (s0 === Q8_0 && d === F32),
    layout(d, [a]) {
      if (nel(a) !== nel(d)) return "element counts differ";
      if (ggmlTypeInfo(a.type)!.blockSize > 1) {
        // dequantizing copy (ggml_cast of a quantized cache view): whole rows
        if (!(sameShape(a, d) && rowsOf(d, F32))) {
          return "dequantizing copy: same shape, contiguous F32 dst";
        }
        if (a.nb[0] !== typeSize(a.type)) return "quantized src rows must be contiguous";
        return;
      }
      if (ggmlTypeInfo(d.type)!.blockSize > 1) {
        if (!(sameShape(a, d) && rowsOf(a, F32))) {
          return "quantizing copy: same shape, contiguous F32 src";
        }
        if (d.nb[0] !== typeSize(d.type)) return "quantized dst rows must be contiguous";
      }
    },
  },
  [Op.SCALE]: UNARY,
  [Op.CONCAT]: {
    src: [2, 2],
    types: BINARY.types,
    layout(d, [a, b], params) {
      const dim = params[0];
      if (!(Number.isInteger(dim) && dim >= 0 && dim < 4)) return `dim ${dim} must be 0..3`;
      if (!rowsOf(d, F32)) return "dst rows must be contiguous F32";
      for (let i = 0; i < 4; i++) {
        const want = i === dim ? a.ne[i] + b.ne[i] : a.ne[i];
        if (d.ne[i] !== want || (i !== dim && b.ne[i] !== a.ne[i])) {
          return `shapes: src1 must match src0 but along dim ${dim}, dst their concatenation`;
        }
      }
    },
  },
  [Op.SET_ROWS]: {
    // ggml_set_rows with F32 rows and I32 ids (what the KV stores write):
    // dst row ids[i, i2 % ne11, i3 % ne12] of plane (i2, i3) = src0 row (i, i2, i3).
    src: [2, 2],
    types: (d, [s0, s1]) => s0 === F32 && s1 === I32 && CPY_DST_TYPES.includes(d),
    layout(d, [a, ids]) {
      if (!rowsOf(a, F32)) return "src0 rows must be contiguous F32";
      if (d.nb[0] !== typeSize(d.type)) return "dst rows must be contiguous";
      if (!(rowsOf(ids, I32) || ids.ne[0] <= 1)) return "ids must be contiguous I32";
      if (!(d.ne[0] === a.ne[0] && d.ne[2] === a.ne[2] && d.ne[3] === a.ne[3])) {
        return "shapes: src0 [dst ne0, n, dst ne2, dst ne3]";
      }
      if (
        !(ids.ne[0] === a.ne[1] && ids.ne[1] > 0 && ids.ne[2] > 0 && ids.ne[3] === 1 &&
          a.ne[2] % ids.ne[1] === 0 && a.ne[3] % ids.ne[2] === 0)
      ) return "ids must be [n, a divisor of ne2, a divisor of ne3]";
    },
  },
  [Op.NORM]: UNARY,
  [Op.GELU]: UNARY,
  [Op.HADAMARD]: {
    src: [1, 1],
    types: UNARY.types,
    layout(d, [a], params) {
      const base = UNARY.layout!(d, [a], params);
      if (base) return base;
      const n = a.ne[0];
      if (!(n >= 2 && (n & (n - 1)) === 0)) return `row length ${n} must be a power of 2`;
    },
  },
  [Op.FLASH_ATTN_EXT]: {
    src: [3, 4],
    types: (d, [q, k, v, m]) =>
      d === F32 && q === F32 && FLASH_ATTN_KV_TYPES.includes(k) &&
      FLASH_ATTN_KV_TYPES.includes(v) && (m === undefined || m === F16),
    layout(d, [q, k, v, m], params) {
      if (!(rowsOf(q, F32) && k.nb[0] === typeSize(k.type) && v.nb[0] === typeSize(v.type))) {
        return "q, k and v rows must be contiguous";
      }
      if (!(q.ne[0] === k.ne[0] && k.ne[1] === v.ne[1])) {
        return "shapes: q [D, n, h], k [D, nKv, hKv], v [Dv, nKv, hKv]";
      }
      if (!(k.ne[2] > 0 && v.ne[2] > 0 && q.ne[2] % k.ne[2] === 0 && q.ne[2] % v.ne[2] === 0)) {
        return "k/v heads must divide q heads";
      }
      if (!(k.ne[3] > 0 && v.ne[3] > 0 && q.ne[3] % k.ne[3] === 0 && q.ne[3] % v.ne[3] === 0)) {
        return "k/v dim 3 must divide q's";
      }
      if (
        !(d.ne[0] === v.ne[0] && d.ne[1] === q.ne[2] && d.ne[2] === q.ne[1] && d.ne[3] === q.ne[3])
      ) {
        return "dst must be [Dv, nHead, n, ne3 of q]";
      }
      if (!(rowsOf(d, F32) && d.nb[1] === 4 * d.ne[0] && d.nb[2] === d.nb[1] * d.ne[1])) {
        return "dst must be contiguous";
      }
      const bs = (t: Operand) => ggmlTypeInfo(t.type)!.blockSize;
      if (k.ne[0] % bs(k) !== 0 || v.ne[0] % bs(v) !== 0) {
        return "D must be a multiple of the block";
      }
      if (m) {
        if (m.nb[0] !== 2) return "mask rows must be contiguous";
        if (!(m.ne[0] === k.ne[1] && m.ne[1] >= q.ne[1])) return "mask must be [nKv, >= n, ..]";
        if (!(m.ne[2] > 0 && m.ne[3] > 0 && q.ne[2] % m.ne[2] === 0 && q.ne[3] % m.ne[3] === 0)) {
          return "mask dims 2,3 must divide q's";
        }
      }
      if (bitsF32(params[FlashAttnParam.SOFTCAP]) !== 0) return "logit softcap is not implemented";
      if (!(bitsF32(params[FlashAttnParam.MAX_BIAS]) >= 0)) return "max_bias must be >= 0";
      const prec = params[FlashAttnParam.PREC];
      if (prec !== GGMLPrec.DEFAULT && prec !== GGMLPrec.F32) return `prec ${prec} is not 0 or 10`;
    },
  },
  [Op.SSM_CONV]: SSM_CONV,
  [Op.SSM_SCAN]: SSM_SCAN,
};

/** Fewest and most sources of `op`, or undefined when `op` is no op. */
export function opSources(op: number): readonly [number, number] | undefined {
  return OP_RULES[op]?.src;
}

/**
 * Whether the kernels implement `op` with these types (both the CPU and the
 * reference backend answer supportsOp with this).
 */
export function opSupported(
  q: { readonly op: number; readonly dstType: number; readonly srcTypes: readonly number[] },
): boolean {
  return OP_RULES[q.op]?.types(q.dstType, q.srcTypes) ?? false;
}

/**
 * The first rule of `op` that dst = op(src...) breaks (source count, types,
 * shapes and strides), or undefined when it keeps them all. Tensors must
 * already be known-typed four-dimensional shapes; buffers are not looked at.
 */
export function opViolation(
  op: number,
  d: Operand,
  src: readonly Operand[],
  params: Int32Array,
): string | undefined {
  const rule = OP_RULES[op];
  if (!rule) return "unsupported op";
  const [lo, hi] = rule.src;
  if (src.length < lo || src.length > hi) return `takes ${lo}..${hi} sources, got ${src.length}`;
  const srcTypes = src.map((s) => s.type);
  if (!rule.types(d.type, srcTypes)) {
    return `types not supported: dst ${ggmlTypeName(d.type)}, src ${
      srcTypes.map(ggmlTypeName).join(",")
    }`;
  }
  return rule.layout?.(d, src, params);
}
