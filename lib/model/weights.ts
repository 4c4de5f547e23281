/**
 * Weight tensors of a model, looked up by llama.cpp's tensor names and
 * checked against the hyper-parameters before any graph uses them. Each
 * architecture declares its weights through a {@link WeightMap}, which
 * records every tensor it handed out with the role the graph gives it, so
 * load-time validation checks exactly the tensors the graph will read.
 *
 * @module
 */
import type { GGUFModelFile } from "../gguf/mod.ts";
import type { Graph, Tensor } from "../graph/graph.ts";
import { ggmlTypeName } from "../ggml/types.ts";
import { ModelError } from "./hparams.ts";

/**
 * How the graph reads a weight, which decides the types it may have:
 * "matrix" (MUL_MAT), "embedding" (GET_ROWS rows), "norm" (MUL with f32
 * activations), "bias" (ADD with f32 activations), "factors" (RoPE
 * frequency divisors, f32), "ssm" (Mamba's convolution and scan
 * parameters, f32).
 */
export type WeightRole = "matrix" | "embedding" | "norm" | "bias" | "factors" | "ssm";

/** A weight as the graph needs it: where it is, its type and shape. */
export interface WeightRef {
  /** Tensor name in the GGUF file. */
  readonly name: string;
  /** ggml type id. */
  readonly type: number;
  /** Shape, ggml order. */
  readonly ne: readonly number[];
  /** How the graph reads it. */
  readonly role: WeightRole;
}

/**
 * Finds weights of one model file by name and checks their shapes; an
 * architecture's `weights()` calls {@link need} and {@link optional}.
 */
export class WeightMap {
  readonly #file: GGUFModelFile;
  readonly #refs: WeightRef[] = [];

  /** A map over `file`'s tensors. */
  constructor(file: GGUFModelFile) {
    this.#file = file;
  }

  /** The model file's path, for architectures' own error messages. */
  get path(): string {
    return this.#file.header.path;
  }

  /** Every weight handed out so far, in the order asked for. */
  get refs(): readonly WeightRef[] {
    return this.#refs;
  }

  /** The tensor `name` with `shape` (ggml order); a ModelError names it when missing or misshapen. */
  need(name: string, role: WeightRole, shape: readonly number[]): WeightRef {
    const ref = this.optional(name, role, shape);
    if (!ref) {
      throw new ModelError(
        `${this.#file.header.path}: missing tensor ${name} (expected shape [${shape}])`,
      );
    }
    return ref;
  }

  /** Like {@link need}, but a missing tensor gives undefined (a misshapen one still throws). */
  optional(name: string, role: WeightRole, shape: readonly number[]): WeightRef | undefined {
    const h = this.#file.header;
    const t = h.tensor(name);
    if (!t) return undefined;
    const ne = [...t.ne];
    while (ne.length < shape.length) ne.push(1);
    if (ne.length !== shape.length || ne.some((n, i) => n !== shape[i])) {
      throw new ModelError(
        `${h.path}: tensor ${name} has shape [${t.ne}] (${
          ggmlTypeName(t.type)
        }), expected [${shape}]`,
      );
    }
    const ref = { name, type: t.type, ne, role };
    this.#refs.push(ref);
    return ref;
  }
}

/** Makes graph leaves for weights, one leaf per tensor per graph. */
export class WeightLeaves {
  #file: GGUFModelFile;
  #g: Graph;
  #cache = new Map<string, Tensor>();

  /** Leaves of `file`'s tensors in graph `g`. */
  constructor(file: GGUFModelFile, g: Graph) {
    this.#file = file;
    this.#g = g;
  }

  /** The graph leaf of weight `w`. */
  get(w: WeightRef): Tensor {
    let t = this.#cache.get(w.name);
    if (!t) {
      t = this.#g.weight(w.name, w.type, w.ne, this.#file.tensorRef(w.name));
      this.#cache.set(w.name, t);
    }
    return t;
  }
}
