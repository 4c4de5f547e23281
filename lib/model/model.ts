/**
 * A loaded model: the mapped GGUF file, its hyper-parameters, weight map and
 * tokenizer. Weights stay in the memory map; nothing is copied to the heap.
 *
 * @module
 */
import { ggufFromBytes, ggufFromStream, type GGUFModelFile, openGGUF } from "../gguf/mod.ts";
import { Tokenizer } from "../tokenizer/mod.ts";
import { type HParams, ModelError } from "./hparams.ts";
import { checkedHParams, validateModel } from "./validate.ts";
import { validateBytesOptions, validateLoadOptions } from "./options.ts";
import { WeightMap, type WeightRef } from "./weights.ts";
import type { Architecture } from "./arch/types.ts";

/** Options of {@link Model.load}. */
export interface LoadOptions {
  /** Called with a short message at each loading stage. */
  onProgress?: (stage: string) => void;
  /**
   * What to check beyond the header: "metadata" (default) checks
   * hyper-parameters, weight types and shapes; "data" also reads every
   * weight and rejects NaN/Inf (llama.cpp's `--check-tensors`).
   */
  validate?: "metadata" | "data";
  /**
   * Called as the weights go into the memory the kernels read, with the
   * bytes done so far and the total: {@linkcode Model.fromBytes} (a
   * Response body as it arrives when its length is known, else the copy
   * into WebAssembly memory), and {@linkcode Model.load} where the file is
   * read into WebAssembly memory (no FFI; a memory-mapped file has nothing to
   * report). `done` never decreases; the last call has `done === total`.
   */
  onBytes?: (done: number, total: number) => void;
  /**
   * Stops loading: checked between chunks of that reading and copying and
   * between stages; the load frees what it allocated and rejects with the
   * signal's reason.
   */
  signal?: AbortSignal;
}

/** Raised when a disposed model is used (a new context, a second dispose that must wait). */
export class ModelDisposedError extends Error {
  /** Creates the error. */
  constructor(message: string) {
    super(message);
    this.name = "ModelDisposedError";
  }
}

/**
 * Raised by a model's dispose while contexts created from it are still open:
 * they read its mapped weights, so it refuses rather than unmap under them.
 */
export class ModelInUseError extends Error {
  /** Labels of the open contexts ("Context #3 (nCtx 256, cpu)"). */
  readonly contexts: readonly string[];
  /** Creates the error. */
  constructor(path: string, contexts: readonly string[]) {
    super(
      `${path}: cannot dispose the model, ${contexts.length} context(s) still open ` +
        `(${contexts.join(", ")}); dispose them first`,
    );
    this.name = "ModelInUseError";
    this.contexts = contexts;
  }
}

/**
 * A context's registration with its model (see {@link attachToModel}): the
 * owner reports when it is disposed and when its native memory is gone.
 */
export interface ModelUse {
  /** The object the model tracks (weakly) from now on, in place of the one attached. */
  own(owner: object): void;
  /** Disposed: no longer open, though a compute may still be reading the weights. */
  closing(): void;
  /** Nothing of the owner reads the weights any more. */
  freed(): void;
}

let attach: (m: Model, owner: object, label: string) => ModelUse;

/**
 * Registers `owner` (a context) as a user of `model`'s weights until the
 * returned handle's `freed()`. Throws {@link ModelDisposedError} when the
 * model is disposed. Internal to the runtime: contexts call it.
 */
export function attachToModel(model: Model, owner: object, label: string): ModelUse {
  return attach(model, owner, label);
}

function copyOptions(o: LoadOptions): { onBytes?: LoadOptions["onBytes"]; signal?: AbortSignal } {
  return { onBytes: o.onBytes, signal: o.signal };
}

// A Response body of unknown length, chunk by chunk so that `signal` is honoured.
async function readBody(r: Response, signal: AbortSignal | undefined): Promise<Uint8Array> {
  if (!r.body) return new Uint8Array(await r.arrayBuffer());
  const reader = r.body.getReader(), chunks: Uint8Array[] = [];
  let size = 0;
  try {
    for (;;) {
      signal?.throwIfAborted();
      const { value, done } = await reader.read();
      if (done) break;
      chunks.push(value);
      size += value.byteLength;
    }
  } catch (e) {
    await reader.cancel().catch(() => {});
    throw e;
  }
  const out = new Uint8Array(size);
  let at = 0;
  for (const c of chunks) {
    out.set(c, at);
    at += c.byteLength;
  }
  return out;
}

interface UserEntry {
  readonly label: string;
  /** Weak: a context the caller forgot is collected (its finalizer then frees it). */
  ref: WeakRef<object>;
  open: boolean;
}

/**
 * A model ready for contexts. Dispose it to unmap the file, after its
 * contexts: disposing a model with open contexts throws
 * {@link ModelInUseError} naming them and changes nothing. Contexts that
 * were disposed while computing keep the file mapped until their compute
 * returns; `await using` (Symbol.asyncDispose) waits for that.
 */
export class Model implements Disposable, AsyncDisposable {
  /** The mapped GGUF file(s). */
  readonly file: GGUFModelFile;
  /** Hyper-parameters. */
  readonly hparams: HParams;
  /**
   * The architecture that builds this model's graphs (`hparams.arch` names it).
   * @internal
   */
  readonly arch: Architecture;
  /**
   * The architecture's weight record (its build() reads it).
   * @internal
   */
  readonly weights: unknown;
  /** Every weight the graph reads, with its role. */
  readonly weightRefs: readonly WeightRef[];
  /** Tokenizer from the file's vocabulary. */
  readonly tokenizer: Tokenizer;
  // Contexts not yet freed, open or closing.
  #users = new Map<number, UserEntry>();
  #nextUser = 0;
  #disposed = false;
  #unmapped = Promise.withResolvers<void>();

  static {
    attach = (m, owner, label) => m.#attach(owner, label);
  }

  private constructor(
    file: GGUFModelFile,
    hparams: HParams,
    arch: Architecture,
    weights: unknown,
    weightRefs: readonly WeightRef[],
    tokenizer: Tokenizer,
  ) {
    this.weightRefs = weightRefs;
    this.file = file;
    this.hparams = hparams;
    this.arch = arch;
    this.weights = weights;
    this.tokenizer = tokenizer;
  }

  /** Whether the model was disposed (its file may still be mapped for a closing context). */
  get disposed(): boolean {
    return this.#disposed;
  }

  /** Opens, maps and checks a GGUF model. */
  static async load(path: string, options: LoadOptions = {}): Promise<Model> {
    validateLoadOptions(path, options);
    options.signal?.throwIfAborted();
    const say = options.onProgress ?? (() => {});
    say(`reading ${path}`);
    return Model.#fromFile(await openGGUF(path, copyOptions(options)), options);
  }

  /**
   * A model from a whole GGUF file's bytes, for where there is no file
   * system (a browser, an edge function): an `ArrayBuffer`, a `Uint8Array`
   * or a fetch `Response` (read to its end). The bytes are copied into the
   * WebAssembly kernels' memory, so contexts use the wasm backend (their
   * default for such a model).
   * `options.name` stands for the path in messages (default "(bytes)").
   *
   * ```ts ignore
   * using model = await Model.fromBytes(await fetch("tolstoy-6m-f16.gguf"));
   * ```
   */
  static async fromBytes(
    source: ArrayBuffer | Uint8Array | Response,
    options: LoadOptions & { name?: string } = {},
  ): Promise<Model> {
    validateBytesOptions(source, options);
    options.signal?.throwIfAborted();
    const name = options.name ??
      (source instanceof Response && source.url ? source.url : "(bytes)");
    const copy = copyOptions(options);
    options.onProgress?.(`reading ${name}`);
    if (!(source instanceof Response)) {
      const bytes = source instanceof Uint8Array ? source : new Uint8Array(source);
      return Model.#fromFile(await ggufFromBytes(bytes, name, copy), options);
    }
    if (!source.ok) {
      throw new ModelError(`${name}: HTTP ${source.status} ${source.statusText}`.trimEnd());
    }
    // A known length (and no content coding, under which Content-Length counts
    // the coded bytes) streams the body straight into WebAssembly memory.
    const length = Number(source.headers.get("content-length") ?? NaN);
    const coding = source.headers.get("content-encoding");
    if (
      source.body && Number.isSafeInteger(length) && length >= 0 &&
      (!coding || coding === "identity")
    ) {
      return Model.#fromFile(await ggufFromStream(source.body, length, name, copy), options);
    }
    const bytes = await readBody(source, options.signal);
    return Model.#fromFile(await ggufFromBytes(bytes, name, copy), options);
  }

  static #fromFile(file: GGUFModelFile, options: LoadOptions): Model {
    const say = options.onProgress ?? (() => {});
    try {
      options.signal?.throwIfAborted();
      const { arch, hp } = checkedHParams(file.header);
      say(`mapping ${file.header.tensors.length} tensors`);
      const map = new WeightMap(file);
      const weights = arch.weights(map, hp);
      validateModel(file, map.refs, options);
      say("building tokenizer");
      const tokenizer = Tokenizer.fromGGUF(file.header);
      return new Model(file, hp, arch, weights, map.refs, tokenizer);
    } catch (e) {
      file[Symbol.dispose]();
      throw e;
    }
  }

  #attach(owner: object, label: string): ModelUse {
    if (this.#disposed) {
      throw new ModelDisposedError(`${this.file.header.path}: the model is disposed`);
    }
    const id = this.#nextUser++;
    const entry: UserEntry = { label, ref: new WeakRef(owner), open: true };
    this.#users.set(id, entry);
    return {
      own: (o) => {
        entry.ref = new WeakRef(o);
      },
      closing: () => {
        entry.open = false;
      },
      freed: () => {
        if (!this.#users.delete(id)) return;
        if (this.#disposed && this.#users.size === 0) this.#unmap();
      },
    };
  }

  /** Labels of the contexts still open on this model. */
  get openContexts(): string[] {
    return [...this.#users.values()].filter((u) => u.open && u.ref.deref()).map((u) => u.label);
  }

  #unmap(): void {
    this.file[Symbol.dispose]();
    this.#unmapped.resolve();
  }

  /**
   * Unmaps the file, or throws {@link ModelInUseError} if contexts of this
   * model are still open. When only disposed contexts are still finishing a
   * compute, the file is unmapped as the last of them returns.
   */
  [Symbol.dispose](): void {
    if (this.#disposed) return;
    const open = this.openContexts;
    if (open.length) throw new ModelInUseError(this.file.header.path, open);
    this.#disposed = true;
    if (this.#users.size === 0) this.#unmap();
  }

  /** Like {@link Model[Symbol.dispose]}, then waits until the file is unmapped. */
  async [Symbol.asyncDispose](): Promise<void> {
    this[Symbol.dispose]();
    await this.#unmapped.promise;
  }
}
