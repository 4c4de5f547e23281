/**
 * FLASH_ATTN_EXT operands for the op-level tests (flash_attn_test.ts,
 * flash_attn_f32_test.ts): a case's random Q, K, V and mask, and our op on a
 * backend.
 */
import { f32ToFp16 } from "../lib/ggml/half.ts";
import { quantizeQ8_0Act } from "../lib/ggml/ref_quants.ts";
import type { Backend, Dims, ExecNode, ResolvedTensor } from "../lib/backend/types.ts";
import { f32Bits, FlashAttnParam, GGMLPrec, Op } from "../lib/graph/ops.ts";
import { GGMLType, ggmlTypeInfo } from "../lib/ggml/types.ts";
import type { OracleFlashAttnArgs } from "./oracle/oracle_fa.ts";
import { mulberry32 as rng } from "./rng.ts";

const { F32, F16 } = GGMLType;

export interface FaCase {
  name: string;
  d: number;
  n: number;
  nHead: number;
  nHeadKv: number;
  nKv: number;
  kvType: number;
  mask: "none" | "causal" | "sparse";
  maxBias?: number;
  threads: number;
  /** KV streams (one per sequence of a batch), each query stream over its
   * own; stream s sees its cells up to nKv - s * nKv / streams. Default 1. */
  streams?: number;
}

export interface Operands {
  a: OracleFlashAttnArgs;
  dstNe: Dims;
}

function typeBytes(type: number, vals: Float32Array): Uint8Array {
  if (type === F32) return new Uint8Array(vals.slice().buffer);
  if (type === F16) return new Uint8Array(Uint16Array.from(vals, (x) => f32ToFp16(x)).buffer);
  const out = new Uint8Array((vals.length / 32) * 34);
  quantizeQ8_0Act(vals, out); // ggml's quantize_row_q8_0: the cache store's bits
  return out;
}

export function operands(c: FaCase): Operands {
  const r = rng(c.d * 1000 + c.n * 7 + c.nKv);
  const rand = (len: number, s: number) =>
    Float32Array.from({ length: len }, () => (r() * 2 - 1) * s);
  const ns = c.streams ?? 1;
  const qNe = [c.d, c.n, c.nHead, ns], kNe = [c.d, c.nKv, c.nHeadKv, ns];
  const q = rand(c.d * c.n * c.nHead * ns, 1.5);
  const k = typeBytes(c.kvType, rand(c.d * c.nKv * c.nHeadKv * ns, 1.5));
  const v = typeBytes(c.kvType, rand(c.d * c.nKv * c.nHeadKv * ns, 2));
  const a: OracleFlashAttnArgs = {
    q,
    qNe,
    k,
    kType: c.kvType,
    kNe,
    v,
    vType: c.kvType,
    vNe: kNe,
    scale: 1 / Math.sqrt(c.d),
    maxBias: c.maxBias ?? 0,
    threads: c.threads,
  };
  if (c.mask !== "none") {
    const m = new Uint16Array(c.nKv * c.n * ns);
    for (let st = 0; st < ns; st++) {
      const end = c.nKv - Math.floor((st * c.nKv) / ns); // the stream's cells
      for (let t = 0; t < c.n; t++) {
        for (let j = 0; j < c.nKv; j++) {
          // causal: token t sees cells up to end - n + t; sparse also drops every third cell
          const visible = j <= end - c.n + t && (c.mask === "causal" || j % 3 !== 1);
          m[(st * c.n + t) * c.nKv + j] = visible
            ? (c.maxBias ? f32ToFp16(-Math.abs(j - t)) : 0)
            : 0xfc00;
        }
      }
    }
    a.mask = m;
    a.maskNe = [c.nKv, c.n, 1, ns];
  }
  return { a, dstNe: [c.d, c.nHead, c.n, ns] };
}

/** Stream `st` of 4-D operands alone (a node of one stream). */
export function streamOf(o: Operands, st: number): Operands {
  const { a } = o;
  const one = (ne: readonly number[]) => [ne[0], ne[1], ne[2], 1];
  const cut = (bytes: Uint8Array, ne: readonly number[]) => {
    const per = bytes.length / ne[3];
    return bytes.slice(st * per, (st + 1) * per);
  };
  const qPer = a.q.length / a.qNe[3];
  const b: OracleFlashAttnArgs = {
    ...a,
    q: a.q.slice(st * qPer, (st + 1) * qPer),
    qNe: one(a.qNe),
    k: cut(a.k, a.kNe),
    kNe: one(a.kNe),
    v: cut(a.v, a.vNe),
    vNe: one(a.vNe),
  };
  if (a.mask) {
    const mPer = a.mask.length / a.maskNe![3];
    b.mask = a.mask.slice(st * mPer, (st + 1) * mPer);
    b.maskNe = one(a.maskNe!);
  }
  return { a: b, dstNe: one(o.dstNe) as Dims };
}

export function tensor(
  b: Backend,
  type: number,
  ne: readonly number[],
  bytes: Uint8Array,
): ResolvedTensor {
  const info = ggmlTypeInfo(type)!;
  const nb1 = (ne[0] / info.blockSize) * info.typeSize;
  const nb: Dims = [info.typeSize, nb1, nb1 * ne[1], nb1 * ne[1] * ne[2]];
  const buf = b.alloc(Math.max(bytes.length, 1));
  buf.bytes.set(bytes);
  return { type, ne: [...ne] as Dims, nb, data: { buffer: buf, offset: 0 } };
}

/** Our FLASH_ATTN_EXT on `b`; `precF32`: the node at GGML_PREC_F32. */
export async function ours(b: Backend, o: Operands, precF32 = false): Promise<Float32Array> {
  const { a } = o;
  const src = [
    tensor(b, F32, a.qNe, new Uint8Array(a.q.slice().buffer)),
    tensor(b, a.kType, a.kNe, a.k),
    tensor(b, a.vType, a.vNe, a.v),
  ];
  if (a.mask) src.push(tensor(b, F16, a.maskNe!, new Uint8Array(a.mask.slice().buffer)));
  const n = o.dstNe.reduce((x, y) => x * y);
  const dst = tensor(b, F32, o.dstNe, new Uint8Array(4 * n));
  const params = new Int32Array(16);
  params[0] = f32Bits(a.scale), params[1] = f32Bits(a.maxBias ?? 0);
  params[FlashAttnParam.PREC] = precF32 ? GGMLPrec.F32 : GGMLPrec.DEFAULT;
  const node: ExecNode = { op: Op.FLASH_ATTN_EXT, dst, src, params, name: "fa" };
  await b.compute([node]);
  const out = new Float32Array(dst.data.buffer.bytes.slice(0, 4 * n).buffer);
  for (const t of [...src, dst]) b.free(t.data.buffer);
  return out;
}
