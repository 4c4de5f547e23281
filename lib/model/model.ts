/**
 * A loaded model: the mapped GGUF file, its hyper-parameters, weight map and
 * tokenizer. Weights stay in the memory map; nothing is copied to the heap.
 *
 * @module
 */
import { type GGUFModelFile, openGGUF } from "../gguf/mod.ts";
import { Tokenizer } from "../tokenizer/mod.ts";
import type { HParams } from "./hparams.ts";
import { checkedHParams, validateModel } from "./validate.ts";
import { validateLoadOptions } from "../runtime/options.ts";
import { type LlamaWeights, mapLlamaWeights } from "./weights.ts";

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
}

/** A model ready for contexts. Dispose it to unmap the file. */
export class Model implements Disposable {
  /** The mapped GGUF file(s). */
  readonly file: GGUFModelFile;
  /** Hyper-parameters. */
  readonly hparams: HParams;
  /** Weight map. */
  readonly weights: LlamaWeights;
  /** Tokenizer from the file's vocabulary. */
  readonly tokenizer: Tokenizer;

  private constructor(
    file: GGUFModelFile,
    hparams: HParams,
    weights: LlamaWeights,
    tokenizer: Tokenizer,
  ) {
    this.file = file;
    this.hparams = hparams;
    this.weights = weights;
    this.tokenizer = tokenizer;
  }

  /** Opens, maps and checks a GGUF model. */
  static async load(path: string, options: LoadOptions = {}): Promise<Model> {
    validateLoadOptions(path, options);
    const say = options.onProgress ?? (() => {});
    say(`reading ${path}`);
    const file = await openGGUF(path);
    try {
      const hp = checkedHParams(file.header);
      say(`mapping ${file.header.tensors.length} tensors`);
      const weights = mapLlamaWeights(file, hp);
      validateModel(file, weights, options);
      say("building tokenizer");
      const tokenizer = Tokenizer.fromGGUF(file.header);
      return new Model(file, hp, weights, tokenizer);
    } catch (e) {
      file[Symbol.dispose]();
      throw e;
    }
  }

  /** Unmaps the file. Contexts of this model must be disposed first. */
  [Symbol.dispose](): void {
    this.file[Symbol.dispose]();
  }
}
