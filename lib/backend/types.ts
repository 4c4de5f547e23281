/**
 * The backend interface: what the scheduler hands a backend and what a
 * backend promises back. A backend knows ops and memory, nothing of models.
 *
 * @module
 */
import type { Op } from "../graph/ops.ts";
import type { BackendBuffer, BufferIO, BufferRef, Dims, OwnedBuffer } from "../ggml/memory.ts";

export type { BackendBuffer, BufferIO, BufferRef, Dims, Op, OwnedBuffer };

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
  /**
   * Ops whose kernels may write their result over their first source (the
   * same type and layout, read by no later node): the scheduler then gives
   * both one block of the arena, as ggml-alloc does for its in-place ops.
   * Absent: none.
   */
  readonly inPlaceOps?: ReadonlySet<Op>;
  /**
   * The smallest multiple of 64 the attended KV window may be padded to
   * with this backend's kernels still giving llama.cpp's bits (unfused
   * attention; see KvCacheOptions.windowPad). Absent: llama.cpp's 256.
   */
  readonly kvWindowPad?: number;
  /**
   * A zero-filled buffer of `size` bytes, aligned to at least 64. Others
   * move bytes in and out of it only through its {@link BufferIO} (see
   * lib/ggml/memory.ts), so the memory need not be host-addressable.
   */
  alloc(size: number): BackendBuffer;
  /** Release a buffer from alloc(). */
  free(buf: BackendBuffer): void;
  /**
   * Execute nodes in order. Every tensor must live in this backend's
   * buffers, or in host-visible memory it can read (weights mapped from disk).
   */
  compute(nodes: readonly ExecNode[], signal?: AbortSignal): Promise<void>;
}
