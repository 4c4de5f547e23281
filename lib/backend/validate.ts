/**
 * Backend-independent checks of an ExecNode before any kernel sees it: known
 * types, integer shapes, every tensor's byte extent inside its buffer, a
 * writable destination, and the op's rules from the table in
 * lib/graph/ops.ts. The CPU backend relies on these so that native code
 * never reads or writes out of bounds.
 *
 * @module
 */
import { Op, opSources, opViolation } from "../graph/ops.ts";
import { byteExtent } from "../ggml/memory.ts";
import { ggmlTypeInfo } from "../ggml/types.ts";
import type { ExecNode, ResolvedTensor } from "./types.ts";

/** Raised when a node or tensor is malformed; names the node and field. */
export class NodeValidationError extends Error {
  /** Creates the error. */
  constructor(message: string) {
    super(message);
    this.name = "NodeValidationError";
  }
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
  const ext = byteExtent(info, t.ne, t.nb);
  if (!Number.isSafeInteger(ext) || off + ext > t.data.buffer.size) {
    fail(
      where,
      `extent [${off}, ${off + ext}) lies outside its ${t.data.buffer.backend} buffer of ` +
        `${t.data.buffer.size} bytes`,
    );
  }
}

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
  const n = opSources(node.op);
  if (!n) fail(where, "unsupported op");
  if (node.src.length < n[0] || node.src.length > n[1]) {
    fail(where, `takes ${n[0]}..${n[1]} sources, got ${node.src.length}`);
  }
  if (!(node.params instanceof Int32Array) || node.params.length > 16) {
    fail(where, "params must be an Int32Array of at most 16 slots");
  }
  // Memory first: the op rules below may index any field of a checked tensor.
  checkTensor(node.dst, " dst");
  for (let i = 0; i < node.src.length; i++) checkTensor(node.src[i], SRC_LABELS[i] ?? ` src${i}`);
  if (node.dst.data.buffer.backend === "host") fail(where, "dst lies in a read-only mapping");
  const why = opViolation(node.op, node.dst, node.src, node.params);
  if (why) fail(where, why);
}

// The SET_ROWS nodes checked by the current checkAllRowIds call (reused:
// this runs before every compute, and a decode step should allocate nothing).
const checked: ExecNode[] = [];

/**
 * {@link checkRowIds} for every SET_ROWS node of `nodes`, once per ids
 * tensor and destination height (every layer's store reads the same ids).
 */
export function checkAllRowIds(nodes: readonly ExecNode[]): void {
  checked.length = 0;
  try {
    for (let i = 0; i < nodes.length; i++) {
      const n = nodes[i];
      if (n.op !== Op.SET_ROWS) continue;
      let seen = false;
      for (let k = 0; k < checked.length && !seen; k++) seen = sameIds(checked[k], n);
      if (seen) continue;
      checkRowIds(n);
      checked.push(n);
    }
  } finally {
    checked.length = 0; // no node kept alive between calls
  }
}

// Whether checking n's ids would check exactly what m's check did.
function sameIds(m: ExecNode, n: ExecNode): boolean {
  const a = m.src[1], b = n.src[1];
  if (a.data.buffer !== b.data.buffer || a.data.offset !== b.data.offset) return false;
  if (m.dst.ne[1] !== n.dst.ne[1] || m.src[0].ne[1] !== n.src[0].ne[1]) return false;
  for (let i = 0; i < 3; i++) if (a.ne[i] !== b.ne[i] || a.nb[i] !== b.nb[i]) return false;
  return true;
}

function badRowId(n: ExecNode, i: number, i1: number, i2: number, id: number): never {
  fail(
    n.name ? ` (${n.name})` : "",
    `set_rows: ids[${i}, ${i1}, ${i2}] = ${id} outside the ${n.dst.ne[1]} rows of dst`,
  );
}

/**
 * Checks the row ids of a SET_ROWS node against its destination's rows: its
 * kernel writes where they point, and they are data (an input refilled every
 * step), so the host backends (CPU, WebAssembly, reference) run this before
 * every compute, not once per encoded node.
 */
export function checkRowIds(n: ExecNode): void {
  if (n.op !== Op.SET_ROWS) return;
  const ids = n.src[1], rows = n.dst.ne[1];
  const bytes = ids.data.buffer.bytes;
  if (bytes.byteLength < ids.data.buffer.size) fail(n.name ? ` (${n.name})` : "", "ids unreadable");
  const n0 = n.src[0].ne[1], n1 = ids.ne[1], n2 = ids.ne[2];
  const at = bytes.byteOffset + ids.data.offset;
  if (n1 === 1 && n2 === 1 && (n0 <= 1 || ids.nb[0] === 4) && at % 4 === 0 && LITTLE_ENDIAN) {
    // One packed vector (the KV stores' ids): a typed-array scan.
    const v = new Int32Array(bytes.buffer, at, n0);
    for (let i = 0; i < n0; i++) if (!(v[i] >= 0 && v[i] < rows)) badRowId(n, i, 0, 0, v[i]);
    return;
  }
  const v = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  for (let i2 = 0; i2 < n2; i2++) {
    for (let i1 = 0; i1 < n1; i1++) {
      const base = ids.data.offset + i1 * ids.nb[1] + i2 * ids.nb[2];
      for (let i = 0; i < n0; i++) {
        const id = v.getInt32(base + i * ids.nb[0], true);
        if (!(id >= 0 && id < rows)) badRowId(n, i, i1, i2, id);
      }
    }
  }
}

const LITTLE_ENDIAN = new Uint8Array(new Uint32Array([1]).buffer)[0] === 1;
