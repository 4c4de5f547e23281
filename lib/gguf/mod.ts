/**
 * GGUF files: reading and validating headers, mapping tensor data, writing,
 * and split files. (The ggml type table is lib/ggml/types.ts.)
 *
 * @module
 */
export { GGUFError, GGUFNeedMoreError } from "./error.ts";
export {
  GGUF_VALUE_TYPE_NAMES,
  type GGUFArray,
  type GGUFHeader,
  GGUFHeaderData,
  type GGUFKV,
  type GGUFNumericArray,
  type GGUFScalar,
  type GGUFTensorInfo,
  GGUFValueType,
  typeName,
  valueSize,
} from "./header.ts";
export {
  GGUF_DEFAULT_ALIGNMENT,
  GGUF_MAGIC,
  GGUF_MAX_ARRAY_DEPTH,
  parseGGUF,
  type ParseOptions,
  readGGUF,
} from "./reader.ts";
export {
  ggufFromBytes,
  ggufFromStream,
  GGUFModelFile,
  openGGUF,
  SPLIT_KEYS,
  splitPath,
} from "./model_file.ts";
export type { MappedFile } from "./mmap.ts";
export type { CopyOptions } from "./wasm_file.ts";
export {
  type EncodedHeader,
  encodeGGUFHeader,
  type GGUFWriteInput,
  type GGUFWriteTensor,
  tensorDataSize,
  writeGGUF,
  writeGGUFFile,
} from "./writer.ts";
