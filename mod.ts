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

// option checks: every public entry point throws OptionError for a bad option
export { OptionError } from "./lib/options.ts";
export { SamplingError } from "./lib/sample/options.ts";

// models and contexts
export { type LoadOptions, Model, ModelDisposedError, ModelInUseError } from "./lib/model/model.ts";
export { type HParams, ModelError, readHParams, type RopeParams } from "./lib/model/hparams.ts";
export type { WeightRef, WeightRole } from "./lib/model/weights.ts";
export { architecture, SUPPORTED_ARCHS } from "./lib/model/arch/registry.ts";
export type { Architecture, MemoryKind, OutputKind } from "./lib/model/arch/types.ts";
export {
  Context,
  ContextBusyError,
  type ContextDecodeOptions,
  ContextDisposedError,
  ContextError,
  ContextLease,
  type ContextOptions,
  type DecodeResult,
} from "./lib/runtime/context.ts";
export { type AtomicWriteOptions, NotAFileError, SameFileError } from "./lib/fs/atomic.ts";
export {
  generate,
  type GeneratedToken,
  type GenerateOptions,
  type GenerateResult,
  generateStream,
  generateText,
  type GenerateTimings,
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
export { GrammarError, GrammarMatchError, JsonSchemaError } from "./lib/grammar/errors.ts";
export { type JsonSchema, jsonSchemaToGrammar } from "./lib/grammar/json_schema.ts";

// quantization
export { quantizeModel, type QuantizeOptions } from "./lib/quant/quantize.ts";
export { CompiledGrammar, GrammarState } from "./lib/grammar/matcher.ts";
export { type DecodeOptions, type EncodeOptions } from "./lib/tokenizer/tokenizer.ts";
export { type GGMLTypeInfo } from "./lib/gguf/types.ts";
export {
  type GGUFArray,
  GGUFHeaderData,
  type GGUFNumericArray,
  type GGUFScalar,
} from "./lib/gguf/header.ts";
export { type GGUFWriteInput } from "./lib/gguf/writer.ts";
export { type GrammarConstraint } from "./lib/sample/chain.ts";
export { GrammarVocabIndex } from "./lib/grammar/sampler.ts";
export { type MappedFile } from "./lib/gguf/mmap.ts";
export { type ParsedGrammar, type ParseGrammarOptions } from "./lib/grammar/parser.ts";
export { type QuantPreset } from "./lib/quant/rules.ts";
export { type QuantizeProgress, type QuantizeResult } from "./lib/quant/quantize.ts";
export { type Sampler } from "./lib/sample/samplers.ts";
export { TokenCandidates } from "./lib/sample/candidates.ts";
export { Vocab } from "./lib/tokenizer/vocab.ts";
export { type BackendBuffer, type BufferIO, type OwnedBuffer } from "./lib/backend/types.ts";
export { type BackendChoice, type BackendPlan } from "./lib/runtime/backends.ts";
export { type GGUFWriteTensor } from "./lib/gguf/writer.ts";
export { type GrammarRule } from "./lib/grammar/parser.ts";
export { GrammarStack, type PartialUtf8 } from "./lib/grammar/matcher.ts";
export { PieceTrie } from "./lib/grammar/sampler.ts";
export { type PreType } from "./lib/tokenizer/pre_types.ts";
export { type SpecialName, type VocabType } from "./lib/tokenizer/vocab.ts";
export { type TrieNode } from "./lib/grammar/sampler.ts";
