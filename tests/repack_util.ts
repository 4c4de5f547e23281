/**
 * Shared by the repacked-weight tests (repack_test.ts, repack_q8_fast_test.ts):
 * one MUL_MAT node of a weight in a (mapped) buffer against f32 columns on a
 * CPU backend, and a bit-for-bit comparison of outputs.
 */
import assert from "node:assert/strict";
import { join } from "node:path";
import type { CpuBackend } from "../lib/backend/cpu.ts";
import type { Dims, ExecNode, ResolvedTensor } from "../lib/backend/types.ts";
import type { BackendBuffer } from "../lib/ggml/memory.ts";
import { Op } from "../lib/graph/ops.ts";
import { GGMLType } from "../lib/ggml/types.ts";

const { F32, Q4_0, Q4_K, Q8_0 } = GGMLType;

/** Elements and bytes per block of the weight types these tests use. */
export const BLOCK: Record<number, [number, number]> = {
  [Q4_0]: [32, 18],
  [Q4_K]: [256, 144],
  [Q8_0]: [32, 34],
};

/** A contiguous tensor of `type` (F32 when not in BLOCK) at `offset` of `buffer`. */
export function tensor(type: number, ne: Dims, buffer: BackendBuffer, offset = 0): ResolvedTensor {
  const [n, esize] = BLOCK[type] ?? [1, 4], row = (ne[0] * esize) / n;
  const nb: Dims = [esize, row, row * ne[1], row * ne[1] * ne[2]];
  return { type, ne, nb, data: { buffer, offset } };
}

/** mul_mat of weights `wbuf` (at `off`, K x M of `type`) and `b` (K x N f32) on `cpu`. */
export async function mulMat(
  cpu: CpuBackend,
  wbuf: BackendBuffer,
  off: number,
  k: number,
  m: number,
  b: Float32Array,
  type: number,
): Promise<Float32Array> {
  const n = b.length / k;
  const bb = cpu.alloc(b.byteLength), db = cpu.alloc(m * n * 4);
  bb.bytes.set(new Uint8Array(b.buffer));
  const node = {
    op: Op.MUL_MAT as ExecNode["op"],
    dst: tensor(F32, [m, n, 1, 1], db),
    src: [tensor(type, [k, m, 1, 1], wbuf, off), tensor(F32, [k, n, 1, 1], bb)],
    params: new Int32Array(16),
    name: "mul_mat",
  } as ExecNode;
  await cpu.compute([node]);
  const out = new Float32Array(db.bytes.slice(0, m * n * 4).buffer);
  cpu.free(bb);
  cpu.free(db);
  return out;
}

/** Asserts equal bits, naming the first output (row, column) that differs. */
export function assertSameBits(
  got: Float32Array,
  want: Float32Array,
  m: number,
  label: string,
): void {
  const g = new Uint32Array(got.buffer), w = new Uint32Array(want.buffer);
  const bad = g.findIndex((x, i) => x !== w[i]);
  assert.equal(
    bad,
    -1,
    `${label}: output ${bad} (row ${bad % m}, column ${Math.floor(bad / m)}) ` +
      `got ${got[bad]}, want ${want[bad]}`,
  );
}

/**
 * Writes `parts` into one file in `dir`, 2 bytes apart (offsets that are
 * not 64-byte aligned, as a GGUF's tensors may be), for mapping.
 */
export async function weightsFile(
  dir: string,
  parts: Uint8Array[],
): Promise<{ path: string; offsets: number[] }> {
  const offsets: number[] = [];
  let size = 2;
  for (const p of parts) offsets.push(size), size += p.length + 2;
  const file = new Uint8Array(size);
  parts.forEach((p, i) => file.set(p, offsets[i]));
  const path = join(dir, "w.bin");
  await Deno.writeFile(path, file);
  return { path, offsets };
}
