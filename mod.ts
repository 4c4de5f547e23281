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

// ---- errors users catch ----------------------------------------------------
// Every public entry point throws OptionError for a bad option; the rest name
// what went wrong where it went wrong.
export { OptionError } from "./lib/options.ts";
export { SamplingError } from "./lib/sample/options.ts";
export { type AtomicWriteOptions, NotAFileError, SameFileError } from "./lib/fs/atomic.ts";

// ---- models -----------------------------------------------------------------
export { type LoadOptions, Model, ModelDisposedError, ModelInUseError } from "./lib/model/model.ts";
export { type HParams, ModelError, type RopeParams, type SsmParams } from "./lib/model/hparams.ts";
export type { WeightRef, WeightRole } from "./lib/model/weights.ts";
export { SUPPORTED_ARCHS } from "./lib/model/arch/registry.ts";

// ---- contexts and generation ------------------------------------------------
export {
  type BatchDecodeOptions,
  type BatchInput,
  Context,
  ContextBusyError,
  type ContextDecodeOptions,
  ContextDisposedError,
  ContextError,
  ContextLease,
  type ContextOptions,
  type DecodeResult,
  type MemoryOps,
} from "./lib/runtime/context.ts";
export { type BatchStats, type EvaluateOptions, Sequence } from "./lib/runtime/sequence.ts";
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
export {
  loadState,
  readStateHeader,
  saveState,
  STATE_VERSION,
  StateError,
  type StateErrorKind,
  stateFromBytes,
  type StateHeader,
  type StateLoadOptions,
  type StateLoadResult,
  type StateModelIdentity,
  type StateSaveOptions,
  stateToBytes,
} from "./lib/runtime/state.ts";
export type { SamplerChainState } from "./lib/sample/chain.ts";

// ---- embeddings ---------------------------------------------------------------
export {
  defaultPooling,
  embed,
  type EmbedOptions,
  normalizeEmbedding,
  type Pooling,
  POOLINGS,
  poolRows,
} from "./lib/runtime/embed.ts";

// ---- GGUF files and ggml types ----------------------------------------------
export {
  type CopyOptions,
  type GGUFArray,
  GGUFError,
  type GGUFHeader,
  GGUFHeaderData,
  type GGUFKV,
  GGUFModelFile,
  type GGUFNumericArray,
  type GGUFScalar,
  type GGUFTensorInfo,
  GGUFValueType,
  type GGUFWriteInput,
  type GGUFWriteTensor,
  openGGUF,
  readGGUF,
  writeGGUF,
  writeGGUFFile,
} from "./lib/gguf/mod.ts";
export { GGMLType, type GGMLTypeInfo, ggmlTypeInfo, ggmlTypeName } from "./lib/ggml/types.ts";

// ---- tokenizers ---------------------------------------------------------------
export { StreamDecoder, Tokenizer } from "./lib/tokenizer/mod.ts";
export { type DecodeOptions, type EncodeOptions } from "./lib/tokenizer/tokenizer.ts";

// ---- sampling and guidance ----------------------------------------------------
export {
  type GrammarConstraint,
  SamplerChain,
  samplerChainFromOptions,
  type SamplingOptions,
} from "./lib/sample/chain.ts";
export { type Sampler } from "./lib/sample/samplers.ts";
export { TokenCandidates } from "./lib/sample/candidates.ts";
export { applyCfg } from "./lib/sample/cfg.ts";
export { type StepLogprobs, stepLogprobs, type TokenLogprob } from "./lib/sample/logprobs.ts";

// ---- grammars and JSON schema -------------------------------------------------
export {
  GrammarSampler,
  type GrammarSamplerOptions,
  type GrammarVocab,
  GrammarVocabIndex,
} from "./lib/sample/grammar.ts";
export {
  type GrammarRule,
  GrammarSyntaxError,
  type ParsedGrammar,
  parseGrammar,
  type ParseGrammarOptions,
} from "./lib/grammar/parser.ts";
export { GrammarError, GrammarMatchError, JsonSchemaError } from "./lib/grammar/errors.ts";
export { type JsonSchema, jsonSchemaToGrammar } from "./lib/grammar/json_schema.ts";

// ---- quantization ---------------------------------------------------------------
export {
  quantizeModel,
  type QuantizeOptions,
  type QuantizeProgress,
  type QuantizeResult,
} from "./lib/quant/quantize.ts";
export { type QuantPreset } from "./lib/quant/rules.ts";
export { type BackendChoice, type BackendPlan } from "./lib/runtime/backends.ts";
export { createHandler, type Handler, type HandlerOptions } from "./lib/server/handler.ts";
