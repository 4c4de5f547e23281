/**
 * The backend interface: what the scheduler hands a backend and what a
 * backend promises back. A backend knows ops and memory, nothing of models.
 *
 * @module
 */
import type { Op } from "../graph/ops.ts";

export type { Op };

/** Four dimensions, ggml order (index 0 innermost). */
export type Dims = [number, number, number, number];

/** A block of memory owned by one backend. */
export interface BackendBuffer {
  /** Name of the backend that owns it ("cpu", "ref", ...). */
  readonly backend: string;
  /** Size in bytes. */
  readonly size: number;
  /** The bytes, seen from JavaScript (for native buffers, a zero-copy view). */
  readonly bytes: Uint8Array;
  /** Native address of bytes[0], or null for JavaScript-heap buffers. */
  readonly ptr: Deno.PointerValue | null;
}

/** Where a tensor's element [0,0,0,0] lives. */
export interface BufferRef {
  /** The buffer holding the tensor. */
  readonly buffer: BackendBuffer;
  /** Byte offset of element [0,0,0,0] inside it. */
  readonly offset: number;
}

/** A tensor with its memory resolved: what a backend executes on. */
export interface ResolvedTensor {
  /** ggml type id. */
  readonly type: number;
  /** Elements per dimension. */
  readonly ne: Dims;
  /** Byte strides. */
  readonly nb: Dims;
  /** Where element [0,0,0,0] lives. */
  readonly data: BufferRef;
}

/** One op to execute: dst = op(src...). */
export interface ExecNode {
  /** The op code. */
  readonly op: Op;
  /** Output tensor. */
  readonly dst: ResolvedTensor;
  /** Inputs (src0, src1, optional src2). */
  readonly src: readonly ResolvedTensor[];
  /** MAX_PARAMS int32 slots (floats as bit patterns, see ops.ts). */
  readonly params: Int32Array;
  /** For error messages. */
  readonly name?: string;
}

/** What a backend is asked about an op before the scheduler gives it one. */
export interface OpQuery {
  /** The op code. */
  readonly op: Op;
  /** ggml type of the output. */
  readonly dstType: number;
  /** ggml types of the inputs. */
  readonly srcTypes: readonly number[];
}

/** A compute backend. */
export interface Backend extends Disposable {
  /** Short name ("cpu", "ref"). */
  readonly name: string;
  /** Whether this backend can run `q`. */
  supportsOp(q: OpQuery): boolean;
  /** A zero-filled buffer of `size` bytes, aligned to at least 64. */
  alloc(size: number): BackendBuffer;
  /** Release a buffer from alloc(). */
  free(buf: BackendBuffer): void;
  /**
   * Execute nodes in order. Every tensor must live in this backend's
   * buffers, or in host-visible memory it can read (weights mapped from disk).
   */
  compute(nodes: readonly ExecNode[], signal?: AbortSignal): Promise<void>;
}
