/**
 * The graph builder: ggml-like methods that create {@link Tensor} nodes, and
 * `expand()` which appends nodes in dependency-first order
 * (ggml_build_forward_expand), so side effects such as a copy into the KV
 * cache run before later reads of the same cache. Every op node is checked
 * against the op table of ./ops.ts, the rules the backends validate again
 * before a kernel runs, so a graph no kernel can execute fails where it is
 * built; the builder itself adds only what ggml's API asserts beyond that.
 *
 * @module
 */
import type { BufferRef, Dims } from "../ggml/memory.ts";
import { GGMLType } from "../ggml/types.ts";
import {
  f32Bits,
  FlashAttnParam,
  GGMLPrec,
  Op,
  opViolation,
  RopeMode,
  RopeParam,
  SsmScanParam,
} from "./ops.ts";

export type { BufferRef, Dims } from "../ggml/memory.ts";
export { Tensor } from "./tensor.ts";
import { contiguousStrides, dims, fullStrides, GraphError, spanBytes, Tensor } from "./tensor.ts";
import type { FlashAttnOptions, RopeOptions, SoftMaxOptions } from "./op_options.ts";

export type { FlashAttnOptions, RopeOptions, SoftMaxOptions } from "./op_options.ts";

/** An ops DAG under construction. */
export class Graph {
  /** Op nodes in execution order (filled by {@link expand}). */
  readonly nodes: Tensor[] = [];
  /** Weights, inputs and externals reached by {@link expand}. */
  readonly leafs: Tensor[] = [];
  /** Tensors marked with {@link markOutput}. */
  readonly outputs: Tensor[] = [];
  #own = new WeakSet<Tensor>();
  // Tensors that another tensor's offset was derived from (see moveView).
  #aliased = new WeakSet<Tensor>();
  #seen = new Set<Tensor>();
  #layer = -1;

  /** Tag for tensors created from now on (scheduler overrides use it); -1 = none. */
  setLayer(layer: number): void {
    if (!Number.isInteger(layer) || layer < -1) throw new GraphError(`bad layer ${layer}`);
    this.#layer = layer;
  }

  /** The current layer tag. */
  get layer(): number {
    return this.#layer;
  }

  #make(init: ConstructorParameters<typeof Tensor>[0]): Tensor {
    for (const s of init.src ?? []) this.#check(s);
    const t = new Tensor({ layer: this.#layer, ...init });
    this.#own.add(t);
    if (init.viewSrc) { for (const s of init.src ?? []) this.#aliased.add(s); }
    return t;
  }

  #check(t: Tensor): void {
    if (!(t instanceof Tensor) || !this.#own.has(t)) {
      throw new GraphError(`tensor ${(t as Tensor)?.name ?? t} does not belong to this graph`);
    }
  }

  #leaf(
    kind: "weight" | "external",
    name: string,
    type: number,
    shape: readonly number[],
    data: BufferRef,
    strides?: readonly number[],
  ): Tensor {
    const ne = dims(shape);
    const nb = strides ? fullStrides(type, ne, strides) : contiguousStrides(type, ne);
    const bytes = spanBytes(type, ne, nb);
    if (!data || !data.buffer) throw new GraphError(`${kind} ${name}: no buffer`);
    if (
      !Number.isSafeInteger(data.offset) || data.offset < 0 ||
      data.offset + bytes > data.buffer.size
    ) {
      throw new GraphError(
        `${kind} ${name}: ${bytes} bytes at offset ${data.offset} overrun buffer of ${data.buffer.size}`,
      );
    }
    return this.#make({ name, type, ne, nb, kind, data });
  }

  /** A read-only tensor whose bytes already exist (e.g. in a mapped file). */
  weight(name: string, type: number, ne: readonly number[], data: BufferRef): Tensor {
    return this.#leaf("weight", name, type, ne, data);
  }

  /**
   * Persistent state owned outside the graph (KV cache). `nb` gives byte
   * strides of dims 1.. (ggml_view style); default contiguous.
   */
  external(
    name: string,
    type: number,
    ne: readonly number[],
    data: BufferRef,
    nb?: readonly number[],
  ): Tensor {
    return this.#leaf("external", name, type, ne, data, nb);
  }

  /** A tensor the host writes before each run (token ids, positions, mask). */
  input(name: string, type: number, shape: readonly number[]): Tensor {
    const ne = dims(shape);
    return this.#make({ name, type, ne, nb: contiguousStrides(type, ne), kind: "input" });
  }

  #op(op: Op, name: string, type: number, ne: Dims, src: Tensor[]): Tensor {
    return this.#make({ name, type, ne, nb: contiguousStrides(type, ne), kind: "op", op, src });
  }

  // The op table's verdict on node t (params already set), as a GraphError
  // naming the builder call `what`. A copy's exec sources omit its dst view.
  #ruled(what: string, t: Tensor): Tensor {
    const src = execSources(t);
    const why = opViolation(t.op, t, src, t.params);
    if (why) {
      const args = src.map((s) => s.describe()).join(", ");
      throw new GraphError(`${what}: ${why} (${args} -> ${t.describe()})`);
    }
    return t;
  }

  // Result aliases x's storage (ggml_view_tensor + op): in-place ops.
  #inplace(op: Op, name: string, x: Tensor, src: Tensor[]): Tensor {
    if (x.root.kind === "weight") throw new GraphError(`${name}: cannot write weight ${x.name}`);
    return this.#make({
      name,
      type: x.type,
      ne: [...x.ne] as Dims,
      nb: [...x.nb] as Dims,
      kind: "op",
      op,
      src,
      viewSrc: x.root,
      viewOffset: x.viewOffset,
    });
  }

  /** Rows `ids` (I32 [n, ne2 of a, ne3 of a]) of `a`, dequantized to F32. */
  getRows(a: Tensor, ids: Tensor): Tensor {
    this.#check(a), this.#check(ids);
    const ne: Dims = [a.ne[0], ids.ne[0], ids.ne[1], ids.ne[2]];
    return this.#ruled("getRows", this.#op(Op.GET_ROWS, "get_rows", GGMLType.F32, ne, [a, ids]));
  }

  #norm(op: Op, what: string, x: Tensor, eps: number): Tensor {
    this.#check(x);
    if (!(eps >= 0)) throw new GraphError(`${what}: bad eps ${eps}`);
    const t = this.#op(op, what, x.type, [...x.ne] as Dims, [x]);
    t.params[0] = f32Bits(eps);
    return this.#ruled(what, t);
  }

  /** x / sqrt(mean(x²) + eps) over ne0 (no affine part; multiply by the weight after). */
  rmsNorm(x: Tensor, eps: number): Tensor {
    return this.#norm(Op.RMS_NORM, "rms_norm", x, eps);
  }

  /** (x - mean) / sqrt(var + eps) over ne0. */
  norm(x: Tensor, eps: number): Tensor {
    return this.#norm(Op.NORM, "norm", x, eps);
  }

  #binary(op: Op, what: string, a: Tensor, b: Tensor): Tensor {
    this.#check(a), this.#check(b);
    return this.#ruled(what, this.#op(op, what, a.type, [...a.ne] as Dims, [a, b]));
  }

  /** a * b elementwise, b broadcast over a (ggml_can_repeat). */
  mul(a: Tensor, b: Tensor): Tensor {
    return this.#binary(Op.MUL, "mul", a, b);
  }

  /** a + b elementwise, b broadcast over a. */
  add(a: Tensor, b: Tensor): Tensor {
    return this.#binary(Op.ADD, "add", a, b);
  }

  /** ggml_mul_mat: [a.ne1, b.ne1, b.ne2, b.ne3] = a^T b, contracted over ne0; F32 result. */
  mulMat(a: Tensor, b: Tensor): Tensor {
    this.#check(a), this.#check(b);
    const ne: Dims = [a.ne[1], b.ne[1], b.ne[2], b.ne[3]];
    return this.#ruled("mulMat", this.#op(Op.MUL_MAT, "mul_mat", GGMLType.F32, ne, [a, b]));
  }

  /** Rotary embedding of x [headDim, nHead, nTokens, 1] at I32 positions `pos` [nTokens]. */
  rope(x: Tensor, pos: Tensor, o: RopeOptions): Tensor {
    this.#check(x), this.#check(pos);
    const mode = o.mode ?? RopeMode.NORMAL;
    // ggml_rope asserts exactly one position per row of x; the kernels
    // would read only the first ne[2] of a longer vector.
    if (pos.ne[1] * pos.ne[2] * pos.ne[3] !== 1 || pos.ne[0] !== x.ne[2]) {
      throw new GraphError(`rope: positions ${pos.describe()} do not match ${x.describe()}`);
    }
    // The table sees params as int32 slots, where 2.5 would pass as 2.
    if (!Number.isInteger(o.nDims) || !Number.isInteger(mode)) {
      throw new GraphError(`rope: nDims ${o.nDims} and mode ${mode} must be integers`);
    }
    const src = [x, pos];
    const ff = o.freqFactors;
    if (ff) {
      this.#check(ff);
      if (ff.type !== GGMLType.F32 || !ff.isContiguous || ff.ne[0] < o.nDims / 2) {
        throw new GraphError(`rope: freq factors ${ff.describe()} must be F32 [>= ${o.nDims / 2}]`);
      }
      src.push(ff);
    }
    const name = "rope";
    const t = o.inplace ? this.#inplace(Op.ROPE, name, x, src) : this.#op(
      Op.ROPE,
      name,
      x.type,
      [...x.ne] as Dims,
      src,
    );
    const p = t.params;
    p[RopeParam.N_DIMS] = o.nDims;
    p[RopeParam.MODE] = mode;
    p[RopeParam.N_CTX_ORIG] = o.nCtxOrig ?? 0;
    p[RopeParam.FREQ_BASE] = f32Bits(o.freqBase ?? 10000);
    p[RopeParam.FREQ_SCALE] = f32Bits(o.freqScale ?? 1);
    p[RopeParam.EXT_FACTOR] = f32Bits(o.extFactor ?? 0);
    p[RopeParam.ATTN_FACTOR] = f32Bits(o.attnFactor ?? 1);
    p[RopeParam.BETA_FAST] = f32Bits(o.betaFast ?? 32);
    p[RopeParam.BETA_SLOW] = f32Bits(o.betaSlow ?? 1);
    return this.#ruled(name, t);
  }

  /** softmax(x*scale + mask) over ne0 (ggml_soft_max_ext). */
  softMax(x: Tensor, o: SoftMaxOptions = {}): Tensor {
    this.#check(x);
    const m = o.mask;
    // ggml_soft_max_ext asserts whole-tensor contiguity; the kernels need only packed rows.
    for (const [what, t] of [["input", x], ["mask", m]] as const) {
      if (t && !t.isContiguous) {
        throw new GraphError(`softMax: ${what} ${t.describe()} is not contiguous`);
      }
    }
    const maxBias = o.maxBias ?? 0;
    if (maxBias > 0 && !m) throw new GraphError(`softMax: maxBias needs a mask`);
    const t = this.#op(Op.SOFT_MAX, "soft_max", x.type, [...x.ne] as Dims, m ? [x, m] : [x]);
    t.params[0] = f32Bits(o.scale ?? 1);
    t.params[1] = f32Bits(maxBias);
    return this.#ruled("softMax", t);
  }

  /**
   * ggml_flash_attn_ext: softmax(q·k * scale + mask) v per head, for q
   * [D, nTokens, nHead], k [D, nKv, nHeadKv] and v [Dv, nKv, nHeadKv] (not
   * transposed); the result is [Dv, nHead, nTokens] (ggml's permuted layout,
   * contiguous).
   */
  flashAttnExt(q: Tensor, k: Tensor, v: Tensor, o: FlashAttnOptions = {}): Tensor {
    this.#check(q), this.#check(k), this.#check(v);
    const m = o.mask;
    if (m) this.#check(m);
    const ne: Dims = [v.ne[0], q.ne[2], q.ne[1], q.ne[3]];
    const t = this.#op(
      Op.FLASH_ATTN_EXT,
      "flash_attn_ext",
      GGMLType.F32,
      ne,
      m ? [q, k, v, m] : [q, k, v],
    );
    t.params[FlashAttnParam.SCALE] = f32Bits(o.scale ?? 1);
    t.params[FlashAttnParam.MAX_BIAS] = f32Bits(o.maxBias ?? 0);
    t.params[FlashAttnParam.SOFTCAP] = f32Bits(0);
    t.params[FlashAttnParam.PREC] = o.precF32 ? GGMLPrec.F32 : GGMLPrec.DEFAULT;
    return this.#ruled("flashAttnExt", t);
  }

  /**
   * x times the orthonormal n×n Walsh-Hadamard matrix in blocks of n
   * elements (llama_mul_mat_hadamard: a mul_mat that ggml-cpu runs as a fast
   * transform); same shape as x. n is a power of 2 dividing x's element count.
   */
  hadamard(x: Tensor, n: number): Tensor {
    this.#check(x);
    const total = x.ne[0] * x.ne[1] * x.ne[2] * x.ne[3];
    if (!(Number.isInteger(n) && n >= 2 && (n & (n - 1)) === 0 && total % n === 0)) {
      throw new GraphError(`hadamard: block ${n} must be a power of 2 dividing ${x.describe()}`);
    }
    const rows = x.isContiguous ? this.reshape(x, [n, total / n]) : this.cont(x, [n, total / n]);
    const h = this.#ruled(
      "hadamard",
      this.#op(Op.HADAMARD, "hadamard", x.type, [...rows.ne] as Dims, [rows]),
    );
    return this.reshape(h, [...x.ne]);
  }

  #unary(op: Op, what: string, x: Tensor): Tensor {
    this.#check(x);
    return this.#ruled(what, this.#op(op, what, x.type, [...x.ne] as Dims, [x]));
  }

  /** x * sigmoid(x). */
  silu(x: Tensor): Tensor {
    return this.#unary(Op.SILU, "silu", x);
  }

  /** GELU (ggml's tanh approximation). */
  gelu(x: Tensor): Tensor {
    return this.#unary(Op.GELU, "gelu", x);
  }

  /** silu(a) * b (ggml_swiglu_split): same shape and type. */
  swiglu(a: Tensor, b: Tensor): Tensor {
    this.#check(a), this.#check(b);
    return this.#ruled("swiglu", this.#op(Op.SWIGLU, "swiglu", a.type, [...a.ne] as Dims, [a, b]));
  }

  /** gelu(a) * b (ggml_geglu_split): same shape and type. */
  geglu(a: Tensor, b: Tensor): Tensor {
    this.#check(a), this.#check(b);
    return this.#ruled("geglu", this.#op(Op.GEGLU, "geglu", a.type, [...a.ne] as Dims, [a, b]));
  }

  /** x * s. */
  scale(x: Tensor, s: number): Tensor {
    this.#check(x);
    const t = this.#op(Op.SCALE, "scale", x.type, [...x.ne] as Dims, [x]);
    t.params[0] = f32Bits(s);
    return this.#ruled("scale", t);
  }

  /** ggml_concat: `a` then `b` along `dim` (the other dims equal); either may be a strided view. */
  concat(a: Tensor, b: Tensor, dim: number): Tensor {
    this.#check(a), this.#check(b);
    const ne = [...a.ne] as Dims;
    ne[dim] = a.ne[dim] + (b.ne[dim] ?? 0);
    const t = this.#op(Op.CONCAT, "concat", GGMLType.F32, ne, [a, b]);
    t.params[0] = dim;
    return this.#ruled("concat", t);
  }

  /**
   * x * s written over x (ggml_scale_inplace), e.g. zeroing a state row of
   * a recurrent memory through a view of it.
   */
  scaleInplace(x: Tensor, s: number): Tensor {
    this.#check(x);
    const t = this.#inplace(Op.SCALE, "scale_inplace", x, [x]);
    t.params[0] = f32Bits(s);
    return this.#ruled("scaleInplace", t);
  }

  /**
   * ggml_ssm_conv: Mamba's depthwise causal convolution. `sx` F32
   * [dConv - 1 + nT, dInner, nS] (the conv state followed by the tokens,
   * packed rows), `c` F32 [dConv, dInner]; result F32 [dInner, nT, nS] with
   * x[i, t, s] = sum over k < dConv of sx[t + k, i, s] * c[k, i].
   */
  ssmConv(sx: Tensor, c: Tensor): Tensor {
    this.#check(sx), this.#check(c);
    const ne: Dims = [c.ne[1], sx.ne[0] - c.ne[0] + 1, sx.ne[2], 1];
    if (ne[1] < 0) {
      throw new GraphError(`ssmConv: sx ${sx.describe()} shorter than c ${c.describe()}`);
    }
    return this.#ruled("ssmConv", this.#op(Op.SSM_CONV, "ssm_conv", GGMLType.F32, ne, [sx, c]));
  }

  /**
   * ggml_ssm_scan: Mamba's selective scan over nT tokens of nS sequences.
   * `s` F32 [dState, headDim, nHead, nStates] holds every state; sequence j
   * starts from state `ids[j]` (I32 [nS]). `x` [headDim, nHead, nT, nS],
   * `dt` [nHead, nT, nS], `a` [dState, nHead] (Mamba-1, headDim 1, nHead =
   * dInner) or [1, nHead] (Mamba-2), `b` and `c` [dState, nGroup, nT, nS]
   * (packed rows; views with any outer strides). The result is F32 1-D:
   * y [headDim, nHead, nT, nS] packed, then the final state of each
   * sequence, [dState, headDim, nHead, nS] packed (with `k` > 1, Mamba-2
   * only, k such blocks: slot i holds the state after token nT - 1 - i).
   */
  ssmScan(
    s: Tensor,
    x: Tensor,
    dt: Tensor,
    a: Tensor,
    b: Tensor,
    c: Tensor,
    ids: Tensor,
    k = 1,
  ): Tensor {
    for (const t of [s, x, dt, a, b, c, ids]) this.#check(t);
    if (!Number.isSafeInteger(k) || k < 1 || k > 0x7fffffff) {
      throw new GraphError(`ssmScan: bad K ${k}`);
    }
    const n = x.ne[0] * x.ne[1] * x.ne[2] * x.ne[3] + k * s.ne[0] * s.ne[1] * s.ne[2] * ids.ne[0];
    const t = this.#op(Op.SSM_SCAN, "ssm_scan", GGMLType.F32, [n, 1, 1, 1], [
      s,
      x,
      dt,
      a,
      b,
      c,
      ids,
    ]);
    t.params[SsmScanParam.K] = k;
    return this.#ruled("ssmScan", t);
  }

  /**
   * Convert-copy `a` into `dst` (same element count, ggml order). The result
   * aliases dst; executing it writes dst's memory (e.g. a KV cache view).
   */
  cpy(a: Tensor, dst: Tensor): Tensor {
    this.#check(a), this.#check(dst);
    return this.#ruled("cpy", this.#inplace(Op.CPY, `cpy->${dst.root.name}`, dst, [a, dst]));
  }

  /**
   * ggml_set_rows: row `ids[i, i2 % ids.ne1, i3 % ids.ne2]` (I32) of plane (i2, i3) of `dst`
   * becomes row (i, i2, i3) of `a` (F32) converted; the result aliases dst (the KV stores).
   */
  setRows(dst: Tensor, a: Tensor, ids: Tensor): Tensor {
    this.#check(dst), this.#check(a), this.#check(ids);
    const t = this.#inplace(Op.SET_ROWS, `set_rows->${dst.root.name}`, dst, [a, ids, dst]);
    return this.#ruled("setRows", t);
  }

  /** A packed copy of x converted to `type` (ggml_cast). */
  cast(x: Tensor, type: number): Tensor {
    this.#check(x);
    return this.#ruled("cast", this.#op(Op.CPY, "cast", type, [...x.ne] as Dims, [x]));
  }

  /** A packed copy of x, optionally with a new shape of the same element count. */
  cont(x: Tensor, shape?: readonly number[]): Tensor {
    this.#check(x);
    const ne = shape ? dims(shape) : [...x.ne] as Dims;
    return this.#ruled("cont", this.#op(Op.CPY, "cont", x.type, ne, [x]));
  }

  /**
   * Zero-copy view (ggml_view_Nd): `shape` with byte strides `strides` for
   * dims 1.. (missing ones packed), at `offset` bytes from x's first element.
   */
  view(x: Tensor, shape: readonly number[], strides: readonly number[], offset: number): Tensor {
    this.#check(x);
    const ne = dims(shape);
    const nb = fullStrides(x.type, ne, strides);
    return this.#view(x, `view(${x.root.name})`, ne, nb, offset);
  }

  #view(x: Tensor, name: string, ne: Dims, nb: Dims, offset: number): Tensor {
    const root = x.root;
    const off = x.viewOffset + offset;
    const bytes = spanBytes(x.type, ne, nb);
    if (!Number.isSafeInteger(offset) || off < 0 || off + bytes > root.nbytes) {
      throw new GraphError(
        `view: [${ne}] strides [${nb}] at ${offset} exceeds ${x.describe()} (${root.nbytes} bytes)`,
      );
    }
    return this.#make({
      name,
      type: x.type,
      ne,
      nb,
      kind: "view",
      src: [x],
      viewSrc: root,
      viewOffset: off,
    });
  }

  /** Same bytes, new shape (x must be contiguous). */
  reshape(x: Tensor, shape: readonly number[]): Tensor {
    this.#check(x);
    const ne = dims(shape);
    if (!x.isContiguous) throw new GraphError(`reshape: ${x.describe()} is not contiguous`);
    if (ne[0] * ne[1] * ne[2] * ne[3] !== x.nelements) {
      throw new GraphError(`reshape: ${x.describe()} cannot become [${ne}]`);
    }
    return this.#view(x, `reshape(${x.root.name})`, ne, contiguousStrides(x.type, ne), 0);
  }

  /** ggml_permute: axis i of x becomes axis `axes[i]` of the result. */
  permute(x: Tensor, a0: number, a1: number, a2: number, a3: number): Tensor {
    this.#check(x);
    const axes = [a0, a1, a2, a3];
    if (axes.some((a) => !Number.isInteger(a) || a < 0 || a > 3) || new Set(axes).size !== 4) {
      throw new GraphError(`permute: bad axes (${axes}) for ${x.describe()}`);
    }
    const ne = [0, 0, 0, 0] as Dims;
    const nb = [0, 0, 0, 0] as Dims;
    for (let i = 0; i < 4; i++) {
      ne[axes[i]] = x.ne[i];
      nb[axes[i]] = x.nb[i];
    }
    return this.#make({
      name: `permute(${x.root.name})`,
      type: x.type,
      ne,
      nb,
      kind: "view",
      src: [x],
      viewSrc: x.root,
      viewOffset: x.viewOffset,
    });
  }

  /** Swap dims 0 and 1 (zero-copy). */
  transpose(x: Tensor): Tensor {
    return this.permute(x, 1, 0, 2, 3);
  }

  /**
   * Move `node`, an op that writes into another tensor's storage (a
   * {@link cpy} into a view, an in-place op), to `offset` bytes into that
   * storage; a copy's destination view moves with it. This lets a built and
   * planned graph be reused for a step whose only difference is where a
   * copy lands (the cache cells of a decode step). Views made from `node`
   * would not follow, so `node` must have none.
   */
  moveView(node: Tensor, offset: number): void {
    this.#check(node);
    const root = node.viewSrc;
    if (node.kind !== "op" || !root) {
      throw new GraphError(`moveView: ${node.describe()} does not write into another tensor`);
    }
    if (this.#aliased.has(node)) {
      throw new GraphError(`moveView: ${node.describe()} has views that would not move`);
    }
    if (!Number.isSafeInteger(offset) || offset < 0 || offset + node.nbytes > root.nbytes) {
      throw new GraphError(
        `moveView: ${node.describe()} at ${offset} exceeds ${root.describe()} (${root.nbytes} bytes)`,
      );
    }
    // viewOffset is read-only to everyone else; only this check-guarded path changes it.
    (node as { viewOffset: number }).viewOffset = offset;
    const dst = node.op === Op.CPY ? node.src[1] : undefined;
    if (dst?.viewSrc === root) (dst as { viewOffset: number }).viewOffset = offset;
  }

  /**
   * Append `t` and everything it depends on, dependencies first, to
   * {@link nodes} (ggml_build_forward_expand). Call in program order for
   * side effects: a copy into the cache expanded first runs first.
   */
  expand(t: Tensor): void {
    this.#check(t);
    // Iterative post-order walk; deep layer stacks must not hit the JS stack limit.
    const stack: Array<[Tensor, number]> = [[t, 0]];
    while (stack.length) {
      const top = stack[stack.length - 1];
      const [cur, i] = top;
      if (i === 0 && this.#seen.has(cur)) {
        stack.pop();
        continue;
      }
      if (i < cur.src.length) {
        top[1]++;
        const s = cur.src[i];
        if (!this.#seen.has(s)) stack.push([s, 0]);
        continue;
      }
      stack.pop();
      if (this.#seen.has(cur)) continue;
      this.#seen.add(cur);
      if (cur.kind === "op") this.nodes.push(cur);
      else if (cur.kind !== "view") this.leafs.push(cur);
    }
  }

  /** Keep t's values after the run (logits, embeddings) and expand it. */
  markOutput(t: Tensor): void {
    this.expand(t);
    t.isOutput = true;
    if (!this.outputs.includes(t)) this.outputs.push(t);
  }
}

/** The operands a backend sees of `t`: a cpy's or set_rows' last source is the node itself. */
export function execSources(t: Tensor): readonly Tensor[] {
  return t.op === Op.CPY ? t.src.slice(0, 1) : t.op === Op.SET_ROWS ? t.src.slice(0, 2) : t.src;
}
