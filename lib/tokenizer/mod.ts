/**
 * Tokenizers identical to llama.cpp's: SPM, BPE with pre-tokenizers, WPM,
 * special tokens, detokenization.
 *
 * @module
 */
export {
  type DecodeOptions,
  type EncodeOptions,
  StreamDecoder,
  Tokenizer,
  type TokenizerOptions,
} from "./tokenizer.ts";
export { WordCache, type WordCacheOptions } from "./word_cache.ts";
export {
  type SpecialName,
  TokenAttr,
  TokenizerError,
  Vocab,
  type VocabData,
  vocabDataFromGGUF,
  type VocabType,
} from "./vocab.ts";
export { PreTokenizer } from "./pretokenize.ts";
export { type PreType, preType } from "./pre_types.ts";
