/**
 * Tensor nodes of the ops DAG and ggml's shape/stride arithmetic.
 *
 * A tensor either owns storage (leaves with data, inputs, op results) or is a
 * view into another tensor's storage (`viewSrc` is always the storage root,
 * never another view, so offsets compose once).
 *
 * @module
 */
import { type BufferRef, byteExtent, type Dims, packedStrides } from "../ggml/memory.ts";
import { ggmlTypeInfo, ggmlTypeName } from "../ggml/types.ts";
import { MAX_PARAMS, Op } from "./ops.ts";

export type { BufferRef, Dims } from "../ggml/memory.ts";
export { Op } from "./ops.ts";

/** What a tensor is. */
export type TensorKind =
  /** Read-only data that already lives somewhere (mapped weights). */
  | "weight"
  /** Host-set each step (token ids, positions, masks). */
  | "input"
  /** Persistent state owned outside the graph (KV cache). */
  | "external"
  /** Result of an op. */
  | "op"
  /** Zero-copy reinterpretation of another tensor's storage. */
  | "view";

/** Thrown when an op's arguments violate ggml's shape or type rules. */
export class GraphError extends Error {
  /** Creates the error. */
  constructor(message: string) {
    super(message);
    this.name = "GraphError";
  }
}

/** Facts of a ggml type; throws for a type llama.cpp does not know. */
export function typeFacts(type: number): { blockSize: number; typeSize: number } {
  const t = ggmlTypeInfo(type);
  if (!t) throw new GraphError(`unknown ggml type ${type}`);
  return t;
}

/** Contiguous strides of shape `ne` (ggml_new_tensor); GraphError for a partial block. */
export function contiguousStrides(type: number, ne: Dims): Dims {
  const t = typeFacts(type);
  if (ne[0] % t.blockSize !== 0) {
    throw new GraphError(
      `ne0=${ne[0]} is not a multiple of ${ggmlTypeName(type)} block size ${t.blockSize}`,
    );
  }
  return packedStrides(t, ne);
}

/** Bytes spanned by a tensor with these strides (ggml_nbytes for packed rows). */
export function spanBytes(type: number, ne: Dims, nb: Dims): number {
  if (ne[0] <= 0 || ne[1] <= 0 || ne[2] <= 0 || ne[3] <= 0) return 0;
  return byteExtent(typeFacts(type), ne, nb);
}

/** Normalise a 1..4 element shape to four dims. */
export function dims(ne: readonly number[]): Dims {
  if (ne.length < 1 || ne.length > 4) {
    throw new GraphError(`shape needs 1..4 dims, got ${ne.length}`);
  }
  const out: Dims = [1, 1, 1, 1];
  for (let i = 0; i < ne.length; i++) {
    const n = ne[i];
    if (!Number.isSafeInteger(n) || n < 0) throw new GraphError(`bad dimension ${n} in [${ne}]`);
    out[i] = n;
  }
  return out;
}

let nextId = 1;

/** One node of the graph. Create through {@link Graph}, not directly. */
export class Tensor {
  /** Unique id (creation order). */
  readonly id: number = nextId++;
  /** Debug name. */
  name: string;
  /** ggml type id of the elements. */
  readonly type: number;
  /** Shape, ggml order. */
  readonly ne: Dims;
  /** Byte strides. */
  readonly nb: Dims;
  /** Leaf, op result or view. */
  readonly kind: TensorKind;
  /** Op producing this tensor (NONE for leaves and views). */
  readonly op: Op;
  /** Operands; for views, the viewed tensor; for cpy-into, [src, dst]. */
  readonly src: readonly Tensor[];
  /** Op parameters (MAX_PARAMS int32 slots). */
  readonly params: Int32Array = new Int32Array(MAX_PARAMS);
  /** Storage root this tensor aliases (views, in-place ops), else null. */
  readonly viewSrc: Tensor | null;
  /** Byte offset into the storage root. */
  readonly viewOffset: number;
  /** Where the data already is (weights, externals), else null. */
  readonly data: BufferRef | null;
  /** Model layer tag (-1 when none), used by scheduler overrides. */
  readonly layer: number;
  /** Values must survive the graph run (never reused). */
  isOutput = false;

  /** @internal */
  constructor(init: {
    name: string;
    type: number;
    ne: Dims;
    nb: Dims;
    kind: TensorKind;
    op?: Op;
    src?: Tensor[];
    viewSrc?: Tensor | null;
    viewOffset?: number;
    data?: BufferRef | null;
    layer?: number;
  }) {
    this.name = init.name;
    this.type = init.type;
    this.ne = init.ne;
    this.nb = init.nb;
    this.kind = init.kind;
    this.op = init.op ?? Op.NONE;
    this.src = init.src ?? [];
    this.viewSrc = init.viewSrc ?? null;
    this.viewOffset = init.viewOffset ?? 0;
    this.data = init.data ?? null;
    this.layer = init.layer ?? -1;
  }

  /** The tensor that owns the bytes this one reads (itself unless aliasing). */
  get root(): Tensor {
    return this.viewSrc ?? this;
  }

  /** Number of elements. */
  get nelements(): number {
    return this.ne[0] * this.ne[1] * this.ne[2] * this.ne[3];
  }

  /** Bytes spanned (ggml_nbytes). */
  get nbytes(): number {
    // type, ne and nb never change: computed once (moveView asks every step).
    if (this.#nbytes < 0) this.#nbytes = spanBytes(this.type, this.ne, this.nb);
    return this.#nbytes;
  }
  #nbytes = -1;

  /** Whether the elements are packed in ggml order (ggml_is_contiguous). */
  get isContiguous(): boolean {
    return isContiguousN(this, 0);
  }

  /** Whether the op is executed (an op result, including in-place ones). */
  get isNode(): boolean {
    return this.kind === "op";
  }

  /** Shape as text for error messages: `name[ne0,ne1,ne2,ne3]:type`. */
  describe(): string {
    return `${this.name}[${this.ne.join(",")}]:${ggmlTypeName(this.type)}`;
  }
}

/**
 * ggml_is_contiguous_n: dims >= n are packed; dims < n (other than 0) may be
 * padded. n=0 is full contiguity.
 */
export function isContiguousN(t: { type: number; ne: Dims; nb: Dims }, n: number): boolean {
  const { blockSize, typeSize } = typeFacts(t.type);
  let next = typeSize;
  if (t.ne[0] !== blockSize && t.nb[0] !== next) return false;
  next *= t.ne[0] / blockSize;
  for (let i = 1; i < 4; i++) {
    if (t.ne[i] === 1) continue;
    if (i > n) {
      if (t.nb[i] !== next) return false;
      next *= t.ne[i];
    } else {
      next = t.ne[i] * t.nb[i];
    }
  }
  return true;
}

/**
 * Strides for dims 1.. given (ggml view style); nb0 is the type size and
 * missing higher strides are packed after the last given one.
 */
export function fullStrides(type: number, ne: Dims, given: readonly number[]): Dims {
  const nb = contiguousStrides(type, ne);
  if (given.length > 3) throw new GraphError(`at most 3 strides (dims 1..3), got ${given.length}`);
  for (let i = 0; i < given.length; i++) {
    const s = given[i];
    if (!Number.isSafeInteger(s) || s < 0) throw new GraphError(`bad stride ${s}`);
    nb[i + 1] = s;
  }
  for (let i = Math.max(2, given.length + 1); i < 4; i++) nb[i] = nb[i - 1] * ne[i - 1];
  return nb;
}
