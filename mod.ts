/**
 * llm-edge: run LLMs from GGUF files in Deno, with the same tokens and
 * logits as llama.cpp. TypeScript owns the engine (GGUF, tokenizers, graph,
 * scheduler, KV cache, sampling, grammar); C kernels run the hot loops
 * through `Deno.dlopen`.
 *
 * ```ts
 * import { Context, generate, Model } from "@llm-edge/llm-edge";
 *
 * using model = await Model.load("model.gguf");
 * using ctx = await Context.create(model, { nCtx: 2048 });
 * for await (const tok of generate(ctx, "Once upon a time", { maxTokens: 64 })) {
 *   await Deno.stdout.write(new TextEncoder().encode(tok.text));
 * }
 * ```
 *
 * @module
 */

// models and contexts
export { type LoadOptions, Model } from "./lib/model/model.ts";
export { type HParams, ModelError, readHParams, type RopeParams } from "./lib/model/hparams.ts";
export { Context, ContextError, type ContextOptions, type DecodeResult } from "./lib/runtime/context.ts";
export {
  generate,
  type GenerateOptions,
  type GenerateResult,
  type GenerateTimings,
  type GeneratedToken,
  generateText,
  samplerFor,
} from "./lib/runtime/generate.ts";

// GGUF files
export {
  GGUFError,
  type GGUFHeader,
  type GGUFKV,
  GGUFModelFile,
  type GGUFTensorInfo,
  GGUFValueType,
  openGGUF,
  readGGUF,
  writeGGUF,
  writeGGUFFile,
} from "./lib/gguf/mod.ts";
export { GGMLType, ggmlTypeInfo, ggmlTypeName } from "./lib/gguf/types.ts";

// tokenizers
export { StreamDecoder, Tokenizer } from "./lib/tokenizer/mod.ts";

// sampling, guidance, grammar
export { SamplerChain, samplerChainFromOptions, type SamplingOptions } from "./lib/sample/chain.ts";
export { applyCfg } from "./lib/sample/cfg.ts";
export { GrammarSampler } from "./lib/grammar/sampler.ts";
export { GrammarSyntaxError, parseGrammar } from "./lib/grammar/parser.ts";
export { type JsonSchema, jsonSchemaToGrammar } from "./lib/grammar/json_schema.ts";

// quantization
export { quantizeModel, type QuantizeOptions } from "./lib/quant/quantize.ts";
