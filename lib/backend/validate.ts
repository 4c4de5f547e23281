/**
 * Backend-independent checks of an ExecNode before any kernel sees it: known
 * types, integer shapes, every tensor's byte extent inside its buffer, and
 * each op's type and shape rules (ggml's). The CPU backend relies on these so
 * that native code never reads or writes out of bounds.
 *
 * @module
 */
import { Op } from "../graph/ops.ts";
import { GGMLType, ggmlTypeInfo, ggmlTypeName } from "../gguf/types.ts";
import type { ExecNode, OpQuery, ResolvedTensor } from "./types.ts";
import { vecDotType } from "./ref_quants.ts";

/** Raised when a node or tensor is malformed; names the node and field. */
export class NodeValidationError extends Error {
  /** Creates the error. */
  constructor(message: string) {
    super(message);
    this.name = "NodeValidationError";
  }
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

/** Bytes spanned by `t` from its element [0,0,0,0] (0 for an empty tensor). */
export function tensorExtent(t: ResolvedTensor): number {
  const info = ggmlTypeInfo(t.type)!;
  if (t.ne.some((n) => n === 0)) return 0;
  let last = info.typeSize;
  last += (t.ne[0] / info.blockSize - 1) * t.nb[0];
  for (let i = 1; i < 4; i++) last += (t.ne[i] - 1) * t.nb[i];
  return last;
}

function fail(where: string, msg: string): never {
  throw new NodeValidationError(`${where}: ${msg}`);
}

/** Checks one tensor's description and that it lies inside its buffer. */
export function checkTensor(t: ResolvedTensor, where: string): void {
  const info = ggmlTypeInfo(t.type);
  if (!info) fail(where, `unknown type ${t.type}`);
  if (t.ne.length !== 4 || t.nb.length !== 4) fail(where, "ne and nb must have 4 entries");
  for (let i = 0; i < 4; i++) {
    if (!Number.isSafeInteger(t.ne[i]) || t.ne[i] < 0) fail(where, `ne[${i}]=${t.ne[i]} invalid`);
    if (!Number.isSafeInteger(t.nb[i]) || t.nb[i] < 0) fail(where, `nb[${i}]=${t.nb[i]} invalid`);
  }
  if (t.ne[0] % info.blockSize !== 0) {
    fail(where, `ne[0]=${t.ne[0]} is not a multiple of ${info.name} block size ${info.blockSize}`);
  }
  const off = t.data.offset;
  if (!Number.isSafeInteger(off) || off < 0) fail(where, `data offset ${off} invalid`);
  const ext = tensorExtent(t);
  if (!Number.isSafeInteger(ext) || off + ext > t.data.buffer.size) {
    fail(
      where,
      `extent [${off}, ${off + ext}) lies outside its ${t.data.buffer.backend} buffer of ` +
        `${t.data.buffer.size} bytes`,
    );
  }
}

const sameShape = (a: ResolvedTensor, b: ResolvedTensor) =>
  a.ne[0] === b.ne[0] && a.ne[1] === b.ne[1] && a.ne[2] === b.ne[2] && a.ne[3] === b.ne[3];
const rowsOf = (t: ResolvedTensor, type: number) =>
  t.type === type && t.nb[0] === ggmlTypeInfo(type)!.typeSize;
const nel = (t: ResolvedTensor) => t.ne[0] * t.ne[1] * t.ne[2] * t.ne[3];

/** Whether an op with these types is implemented (by both CPU and reference backends). */
export function opSupported(q: OpQuery): boolean {
  const [s0, s1] = q.srcTypes;
  switch (q.op) {
    case Op.NONE:
      return true;
    case Op.GET_ROWS:
      return COMPUTE_TYPES.includes(s0) && s1 === I32 && q.dstType === F32;
    case Op.MUL_MAT:
      return COMPUTE_TYPES.includes(s0) && s1 === F32 && q.dstType === F32;
    case Op.ROPE:
      return (s0 === F32 || s0 === F16) && s1 === I32 && q.dstType === s0;
    case Op.SOFT_MAX:
      return s0 === F32 && q.dstType === F32 && (s1 === undefined || s1 === F32 || s1 === F16);
    case Op.CPY:
      return FLOAT_TYPES.includes(s0) && CPY_DST_TYPES.includes(q.dstType);
    case Op.MUL:
    case Op.ADD:
    case Op.SWIGLU:
    case Op.GEGLU:
      return s0 === F32 && s1 === F32 && q.dstType === F32;
    case Op.RMS_NORM:
    case Op.NORM:
    case Op.SCALE:
    case Op.SILU:
    case Op.GELU:
      return s0 === F32 && q.dstType === F32;
    default:
      return false;
  }
}

const NSRC: Record<number, [number, number]> = {
  [Op.NONE]: [0, 3],
  [Op.GET_ROWS]: [2, 2],
  [Op.RMS_NORM]: [1, 1],
  [Op.MUL]: [2, 2],
  [Op.ADD]: [2, 2],
  [Op.MUL_MAT]: [2, 2],
  [Op.ROPE]: [2, 3],
  [Op.SOFT_MAX]: [1, 2],
  [Op.SILU]: [1, 1],
  [Op.SWIGLU]: [2, 2],
  [Op.CPY]: [1, 1],
  [Op.SCALE]: [1, 1],
  [Op.NORM]: [1, 1],
  [Op.GELU]: [1, 1],
  [Op.GEGLU]: [2, 2],
};

// checkNode reports problems relative to the node (": msg", " dst: msg");
// validateNode prefixes the node's label only on failure, so steady-state
// validation builds no strings.

/** Validates node `index` fully; throws NodeValidationError on the first problem. */
export function validateNode(node: ExecNode, index: number): void {
  try {
    checkNode(node);
  } catch (e) {
    if (!(e instanceof NodeValidationError)) throw e;
    const label = `node ${index}${node.name ? ` (${node.name})` : ""} op ${node.op}`;
    throw new NodeValidationError(`${label}${e.message}`);
  }
}

const SRC_LABELS = [" src0", " src1", " src2", " src3"];

function checkNode(node: ExecNode): void {
  const where = "";
  const n = NSRC[node.op];
  if (!n) fail(where, "unsupported op");
  if (node.src.length < n[0] || node.src.length > n[1]) {
    fail(where, `takes ${n[0]}..${n[1]} sources, got ${node.src.length}`);
  }
  if (!(node.params instanceof Int32Array) || node.params.length > 16) {
    fail(where, "params must be an Int32Array of at most 16 slots");
  }
  checkTensor(node.dst, " dst");
  for (let i = 0; i < node.src.length; i++) checkTensor(node.src[i], SRC_LABELS[i] ?? ` src${i}`);
  if (node.dst.data.buffer.backend === "host") fail(where, "dst lies in a read-only mapping");
  const q = { op: node.op, dstType: node.dst.type, srcTypes: node.src.map((s) => s.type) };
  if (!opSupported(q)) {
    fail(
      where,
      `types not supported: dst ${ggmlTypeName(q.dstType)}, src ${
        q.srcTypes.map(ggmlTypeName).join(",")
      }`,
    );
  }
  const d = node.dst, [a, b] = node.src;
  const need = (cond: boolean, msg: string) => cond || fail(where, msg);
  switch (node.op) {
    case Op.GET_ROWS:
      need(rowsOf(d, F32), "dst rows must be contiguous F32");
      need(rowsOf(b, I32) || b.ne[0] <= 1, "ids must be contiguous I32");
      need(
        d.ne[0] === a.ne[0] && d.ne[1] === b.ne[0] && d.ne[2] === b.ne[1] && d.ne[3] === b.ne[2] &&
          a.ne[2] === b.ne[1] && a.ne[3] === b.ne[2] && b.ne[3] === 1,
        "shapes: dst [a0, b0, b1, b2] with a2 = b1, a3 = b2",
      );
      need(a.nb[0] === ggmlTypeInfo(a.type)!.typeSize, "src0 rows must be contiguous");
      break;
    case Op.MUL_MAT: {
      need(vecDotType(a.type) !== undefined, "src0 type cannot be multiplied");
      need(a.nb[0] === ggmlTypeInfo(a.type)!.typeSize, "src0 rows must be contiguous");
      need(b.nb[0] === 4 && d.nb[0] === 4, "src1 and dst need nb[0] = 4");
      need(
        a.ne[0] === b.ne[0] && d.ne[0] === a.ne[1] && d.ne[1] === b.ne[1] &&
          d.ne[2] === b.ne[2] && d.ne[3] === b.ne[3],
        "shapes: a [K, M, .], b [K, N, ..], dst [M, N, ..]",
      );
      need(
        a.ne[2] > 0 && a.ne[3] > 0 && b.ne[2] % a.ne[2] === 0 && b.ne[3] % a.ne[3] === 0,
        "src1 dims 2,3 must be multiples of src0's (broadcast)",
      );
      break;
    }
    case Op.MUL:
    case Op.ADD:
      need(rowsOf(a, F32) && rowsOf(b, F32) && rowsOf(d, F32), "rows must be contiguous F32");
      need(sameShape(a, d), "dst must be shaped like src0");
      for (let i = 0; i < 4; i++) {
        need(b.ne[i] > 0 && a.ne[i] % b.ne[i] === 0, `src1 ne[${i}] must divide src0 ne[${i}]`);
      }
      break;
    case Op.SWIGLU:
    case Op.GEGLU:
      need(rowsOf(a, F32) && rowsOf(b, F32) && rowsOf(d, F32), "rows must be contiguous F32");
      need(sameShape(a, d) && sameShape(b, d), "all three tensors must share a shape");
      break;
    case Op.RMS_NORM:
    case Op.NORM:
    case Op.SCALE:
    case Op.SILU:
    case Op.GELU:
    case Op.SOFT_MAX:
      need(rowsOf(a, F32) && rowsOf(d, F32), "rows must be contiguous F32");
      need(sameShape(a, d), "dst must be shaped like src0");
      if (node.op === Op.SOFT_MAX && b) {
        need(b.nb[0] === ggmlTypeInfo(b.type)!.typeSize, "mask rows must be contiguous");
        need(b.ne[0] === a.ne[0] && b.ne[1] >= a.ne[1], "mask must be [ne0, >= ne1, ..]");
        need(
          b.ne[2] > 0 && b.ne[3] > 0 && a.ne[2] % b.ne[2] === 0 && a.ne[3] % b.ne[3] === 0,
          "mask dims 2,3 must divide src0's",
        );
      }
      break;
    case Op.ROPE: {
      const nd = node.params[0], mode = node.params[1];
      const ts = ggmlTypeInfo(a.type)!.typeSize;
      need(
        a.nb[0] === ts && d.nb[0] === ts && sameShape(a, d),
        "src0/dst same shape, contiguous rows",
      );
      need(rowsOf(b, I32) && b.ne[0] >= a.ne[2], "positions: contiguous I32, one per ne[2]");
      need(nd > 0 && nd % 2 === 0 && nd <= a.ne[0], "n_dims must be even, 0 < n_dims <= ne0");
      need(mode === 0 || mode === 2, "mode must be 0 (normal) or 2 (neox)");
      if (node.src[2]) {
        need(
          rowsOf(node.src[2], F32) && node.src[2].ne[0] >= nd / 2,
          "freq factors: F32 [n_dims/2]",
        );
      }
      break;
    }
    case Op.CPY: {
      need(nel(a) === nel(d), "element counts differ");
      const bs = ggmlTypeInfo(d.type)!.blockSize;
      if (bs > 1) {
        need(sameShape(a, d) && rowsOf(a, F32), "quantizing copy: same shape, contiguous F32 src");
        need(d.nb[0] === ggmlTypeInfo(d.type)!.typeSize, "quantized dst rows must be contiguous");
      }
      break;
    }
  }
}
