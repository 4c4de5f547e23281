/**
 * The parsed GGUF header: metadata key/values, tensor infos, and typed
 * accessors over them.
 *
 * @module
 */
import { GGUFError } from "./error.ts";

/** GGUF metadata value type ids, as stored in the file. */
export const GGUFValueType = {
  UINT8: 0,
  INT8: 1,
  UINT16: 2,
  INT16: 3,
  UINT32: 4,
  INT32: 5,
  FLOAT32: 6,
  BOOL: 7,
  STRING: 8,
  ARRAY: 9,
  UINT64: 10,
  INT64: 11,
  FLOAT64: 12,
} as const;

/** A GGUF metadata value type id. */
export type GGUFValueType = typeof GGUFValueType[keyof typeof GGUFValueType];

/** llama.cpp's short names of the value types (`u32`, `str`, `arr`, ...), by id. */
export const GGUF_VALUE_TYPE_NAMES: readonly string[] = [
  "u8",
  "i8",
  "u16",
  "i16",
  "u32",
  "i32",
  "f32",
  "bool",
  "str",
  "arr",
  "u64",
  "i64",
  "f64",
];

/** Bytes of one fixed-size value of `type`, or 0 for strings and arrays. */
export function valueSize(type: number): number {
  return [1, 1, 2, 2, 4, 4, 4, 1, 0, 0, 8, 8, 8][type] ?? 0;
}

/** Typed arrays a numeric GGUF array is held in. */
export type GGUFNumericArray =
  | Uint8Array
  | Int8Array
  | Uint16Array
  | Int16Array
  | Uint32Array
  | Int32Array
  | Float32Array
  | BigUint64Array
  | BigInt64Array
  | Float64Array;

/** An array value: its item type and the items. */
export interface GGUFArray {
  /** Value type of every item (ARRAY for arrays of arrays). */
  readonly itemType: number;
  /** Items: strings, nested arrays, booleans, or a typed array of numbers. */
  readonly values: string[] | GGUFArray[] | boolean[] | GGUFNumericArray;
}

/** A scalar value; 64-bit integers are bigints. */
export type GGUFScalar = number | bigint | boolean | string;

/** One metadata key/value pair. */
export interface GGUFKV {
  /** The key, e.g. `general.architecture`. */
  readonly key: string;
  /** The value type (ARRAY for arrays; see `GGUFArray.itemType`). */
  readonly type: number;
  /** The value. */
  readonly value: GGUFScalar | GGUFArray;
}

/** Where a tensor is and what it holds. */
export interface GGUFTensorInfo {
  /** Tensor name, e.g. `blk.0.attn_q.weight`. */
  readonly name: string;
  /** Number of dimensions as stored (1..4). */
  readonly nDims: number;
  /** Elements per dimension, innermost first (nDims entries). */
  readonly ne: number[];
  /** ggml type id. */
  readonly type: number;
  /** Offset of the data relative to the data section, as stored. */
  readonly offset: number;
  /** Bytes of data, from the ggml type table. */
  readonly size: number;
  /** Index of the split file holding the data (0 for single files). */
  readonly split: number;
  /** Absolute offset of the data in its file. */
  readonly fileOffset: number;
}

/** Everything before the tensor data, with typed accessors. */
export interface GGUFHeader {
  /** File the header came from. */
  readonly path: string;
  /** Format version (2 or 3). */
  readonly version: number;
  /** Metadata in file order. */
  readonly kv: GGUFKV[];
  /** Tensor infos in file order. */
  readonly tensors: GGUFTensorInfo[];
  /** Data alignment (`general.alignment`, default 32). */
  readonly alignment: number;
  /** Absolute offset of the data section. */
  readonly dataOffset: number;
  /** Size of the file in bytes. */
  readonly fileSize: number;
  /** The pair stored under `key`. */
  get(key: string): GGUFKV | undefined;
  /** A string value; throws GGUFError when missing (without fallback) or not a string. */
  string(key: string, fallback?: string): string;
  /** Any integer or float value as a number; 64-bit values beyond 2^53 throw. */
  number(key: string, fallback?: number): number;
  /** A bool value. */
  bool(key: string, fallback?: boolean): boolean;
  /** A string array, or undefined when missing. */
  strings(key: string): string[] | undefined;
  /** A numeric array, or undefined when missing. */
  numbers(key: string): GGUFNumericArray | undefined;
  /** The tensor named `name`. */
  tensor(name: string): GGUFTensorInfo | undefined;
}

/** Construction data of a header. */
export interface HeaderInit {
  path: string;
  version: number;
  kv: GGUFKV[];
  /** Absolute offsets of each kv (same order), for error messages. */
  kvOffsets: number[];
  tensors: GGUFTensorInfo[];
  alignment: number;
  dataOffset: number;
  fileSize: number;
}

/** The GGUFHeader implementation returned by the parser. */
export class GGUFHeaderData implements GGUFHeader {
  readonly path: string;
  readonly version: number;
  readonly kv: GGUFKV[];
  readonly tensors: GGUFTensorInfo[];
  readonly alignment: number;
  readonly dataOffset: number;
  readonly fileSize: number;
  #byKey = new Map<string, number>();
  #kvOffsets: number[];
  #byName = new Map<string, GGUFTensorInfo>();

  /** Indexes `init`'s keys and tensor names. */
  constructor(init: HeaderInit) {
    this.path = init.path;
    this.version = init.version;
    this.kv = init.kv;
    this.tensors = init.tensors;
    this.alignment = init.alignment;
    this.dataOffset = init.dataOffset;
    this.fileSize = init.fileSize;
    this.#kvOffsets = init.kvOffsets;
    init.kv.forEach((kv, i) => this.#byKey.set(kv.key, i));
    for (const t of init.tensors) this.#byName.set(t.name, t);
  }

  /** A copy of this header whose tensor list is `tensors` (used to merge split files). */
  withTensors(tensors: GGUFTensorInfo[]): GGUFHeaderData {
    return new GGUFHeaderData({ ...this, kvOffsets: this.#kvOffsets, tensors });
  }

  get(key: string): GGUFKV | undefined {
    const i = this.#byKey.get(key);
    return i === undefined ? undefined : this.kv[i];
  }

  #fail(key: string, detail: string): never {
    const i = this.#byKey.get(key);
    throw new GGUFError(detail, {
      path: this.path,
      offset: i === undefined ? 0 : this.#kvOffsets[i],
      field: key,
    });
  }

  #need(key: string): GGUFKV {
    const kv = this.get(key);
    if (!kv) this.#fail(key, "missing key");
    return kv;
  }

  string(key: string, fallback?: string): string {
    const kv = this.get(key);
    if (!kv && fallback !== undefined) return fallback;
    const v = this.#need(key);
    if (v.type !== GGUFValueType.STRING) this.#fail(key, `expected str, found ${typeName(v)}`);
    return v.value as string;
  }

  number(key: string, fallback?: number): number {
    const kv = this.get(key);
    if (!kv && fallback !== undefined) return fallback;
    const v = this.#need(key);
    if (typeof v.value === "number") return v.value;
    if (typeof v.value === "bigint") {
      if (
        v.value > BigInt(Number.MAX_SAFE_INTEGER) || v.value < BigInt(Number.MIN_SAFE_INTEGER)
      ) {
        this.#fail(key, `value ${v.value} does not fit a JavaScript number exactly`);
      }
      return Number(v.value);
    }
    this.#fail(key, `expected a number, found ${typeName(v)}`);
  }

  bool(key: string, fallback?: boolean): boolean {
    const kv = this.get(key);
    if (!kv && fallback !== undefined) return fallback;
    const v = this.#need(key);
    if (v.type !== GGUFValueType.BOOL) this.#fail(key, `expected bool, found ${typeName(v)}`);
    return v.value as boolean;
  }

  strings(key: string): string[] | undefined {
    const kv = this.get(key);
    if (!kv) return undefined;
    const a = kv.value as GGUFArray;
    if (kv.type !== GGUFValueType.ARRAY || a.itemType !== GGUFValueType.STRING) {
      this.#fail(key, `expected arr[str], found ${typeName(kv)}`);
    }
    return a.values as string[];
  }

  numbers(key: string): GGUFNumericArray | undefined {
    const kv = this.get(key);
    if (!kv) return undefined;
    const a = kv.value as GGUFArray;
    if (kv.type !== GGUFValueType.ARRAY || valueSize(a.itemType) === 0) {
      this.#fail(key, `expected a numeric array, found ${typeName(kv)}`);
    }
    if (a.itemType === GGUFValueType.BOOL) {
      this.#fail(key, "expected a numeric array, found arr[bool]");
    }
    return a.values as GGUFNumericArray;
  }

  tensor(name: string): GGUFTensorInfo | undefined {
    return this.#byName.get(name);
  }
}

/** llama.cpp-style type name of a pair: `u32`, `arr[str]`, ... */
export function typeName(kv: { type: number; value: GGUFScalar | GGUFArray }): string {
  if (kv.type === GGUFValueType.ARRAY) {
    return `arr[${GGUF_VALUE_TYPE_NAMES[(kv.value as GGUFArray).itemType] ?? "?"}]`;
  }
  return GGUF_VALUE_TYPE_NAMES[kv.type] ?? `type${kv.type}`;
}
