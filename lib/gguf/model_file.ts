/**
 * A GGUF model opened for use: the header (merged across split files) and a
 * read-only memory map of each file, through which tensor data is reached.
 *
 * @module
 */
import { GGUFError } from "./error.ts";
import type { GGUFHeaderData, GGUFTensorInfo } from "./header.ts";
import { mapFile, type MappedFile } from "./mmap.ts";
import { loadLibrary } from "../../ffi/library.ts";
import { ffiAvailable } from "../../ffi/wasm.ts";
import { bytesIntoWasm, type CopyOptions, readFileIntoWasm, streamIntoWasm } from "./wasm_file.ts";
import { parseGGUF, readGGUF } from "./reader.ts";

/** Keys llama.cpp's gguf-split writes into every split. */
export const SPLIT_KEYS = {
  no: "split.no",
  count: "split.count",
  tensorsCount: "split.tensors.count",
} as const;

const SPLIT_RE = /^(.*)-(\d{5})-of-(\d{5})\.gguf$/;

/** llama.cpp's name of split `no` (0-based) of `count`: `PREFIX-0000N-of-0000M.gguf`. */
export function splitPath(prefix: string, no: number, count: number): string {
  const p5 = (n: number) => String(n).padStart(5, "0");
  return `${prefix}-${p5(no + 1)}-of-${p5(count)}.gguf`;
}

/** An opened model file (or set of split files) with its tensor data mapped. */
export class GGUFModelFile implements Disposable {
  /** Header of split 0, listing the tensors of every split. */
  readonly header: GGUFHeaderData;
  /** Paths of the files, by split index. */
  readonly paths: readonly string[];
  #maps: MappedFile[];

  /** Takes ownership of `maps` (one per split, in order). */
  constructor(header: GGUFHeaderData, paths: string[], maps: MappedFile[]) {
    this.header = header;
    this.paths = paths;
    this.#maps = maps;
  }

  #info(name: string): GGUFTensorInfo {
    const t = this.header.tensor(name);
    if (!t) {
      throw new GGUFError("no such tensor", { path: this.header.path, offset: 0, field: name });
    }
    if (this.#maps.length === 0) throw new Error(`${this.header.path}: model file is closed`);
    return t;
  }

  /** The tensor's bytes: a zero-copy view over the file's memory map. */
  tensorBytes(name: string): Uint8Array {
    const t = this.#info(name);
    return this.#maps[t.split].bytes.subarray(t.fileOffset, t.fileOffset + t.size);
  }

  /**
   * Where the tensor lives, for the graph: the mapped file's buffer and the
   * offset in it. Engine plumbing (model weights), not public API.
   *
   * @internal
   */
  tensorRef(name: string): { buffer: MappedFile; offset: number } {
    const t = this.#info(name);
    return { buffer: this.#maps[t.split], offset: t.fileOffset };
  }

  /**
   * Whether every file is mapped at a native address (false when read into
   * WebAssembly memory: the kernels of the CPU backend cannot reach it).
   */
  get native(): boolean {
    return this.#maps.every((m) => m.ptr !== null);
  }

  /** Unmaps the files; views from tensorBytes must not be used afterwards. */
  [Symbol.dispose](): void {
    for (const m of this.#maps) m[Symbol.dispose]();
    this.#maps = [];
  }
}

/**
 * Opens a GGUF model: reads and validates the header(s), follows split files
 * (`*-00001-of-0000N.gguf`, as gguf-split writes them) and maps every file.
 */
export async function openGGUF(path: string, options: CopyOptions = {}): Promise<GGUFModelFile> {
  const first = await readGGUF(path);
  const count = first.get(SPLIT_KEYS.count) ? first.number(SPLIT_KEYS.count) : 1;
  const paths = [path];
  let header = first;
  if (count > 1) {
    const no = first.number(SPLIT_KEYS.no, 0);
    const fail = (detail: string, field: string): never => {
      throw new GGUFError(detail, { path, offset: 0, field });
    };
    if (no !== 0) fail(`split ${no} given; open the first split (00001)`, SPLIT_KEYS.no);
    const m = SPLIT_RE.exec(path);
    if (!m) fail(`split files must be named PREFIX-00001-of-${count}.gguf`, SPLIT_KEYS.count);
    const tensors = [...first.tensors];
    const names = new Set(tensors.map((t) => t.name));
    for (let i = 1; i < count; i++) {
      const p = splitPath(m![1], i, count);
      const h = await readGGUF(p);
      if (h.number(SPLIT_KEYS.no, -1) !== i) {
        throw new GGUFError(`expected split ${i}`, { path: p, offset: 0, field: SPLIT_KEYS.no });
      }
      for (const t of h.tensors) {
        if (names.has(t.name)) {
          throw new GGUFError("tensor also present in an earlier split", {
            path: p,
            offset: t.fileOffset,
            field: t.name,
          });
        }
        names.add(t.name);
        tensors.push({ ...t, split: i });
      }
      paths.push(p);
    }
    const expected = first.number(SPLIT_KEYS.tensorsCount, tensors.length);
    if (expected !== tensors.length) {
      fail(
        `${expected} tensors expected across splits, ${tensors.length} found`,
        SPLIT_KEYS.tensorsCount,
      );
    }
    header = first.withTensors(tensors);
  }
  const maps: MappedFile[] = [];
  try {
    if (!ffiAvailable()) {
      // No FFI (no --allow-ffi, not Deno): the files go into the WebAssembly kernels' memory.
      for (const p of paths) maps.push(await readFileIntoWasm(p, options));
      return new GGUFModelFile(header, paths, maps);
    }
    // The async loader builds the native library on first use when needed.
    const lib = await loadLibrary();
    for (const p of paths) maps.push(mapFile(p, lib));
  } catch (e) {
    for (const mp of maps) mp[Symbol.dispose]();
    throw e;
  }
  return new GGUFModelFile(header, paths, maps);
}

function bytesHeader(bytes: Uint8Array, name: string): GGUFHeaderData {
  const header = parseGGUF(bytes, { path: name, fileSize: bytes.byteLength });
  if (header.get(SPLIT_KEYS.count) && header.number(SPLIT_KEYS.count) > 1) {
    throw new GGUFError("a split model cannot be loaded from bytes; merge the splits first", {
      path: name,
      offset: 0,
      field: SPLIT_KEYS.count,
    });
  }
  return header;
}

/**
 * A GGUF model from its bytes (`name` stands for the path in errors): the
 * header is parsed from them and the bytes copied into the WebAssembly
 * kernels' memory (progress and cancellation: `options`), so the model runs
 * on the wasm backend. Split models are refused: join them first
 * (llama-gguf-split --merge).
 */
export async function ggufFromBytes(
  bytes: Uint8Array,
  name: string,
  options: CopyOptions = {},
): Promise<GGUFModelFile> {
  const header = bytesHeader(bytes, name);
  return new GGUFModelFile(header, [name], [await bytesIntoWasm(bytes, name, options)]);
}

/**
 * {@linkcode ggufFromBytes} for a body of known length (a fetch Response
 * with Content-Length): streamed straight into WebAssembly memory, then
 * parsed there.
 */
export async function ggufFromStream(
  body: ReadableStream<Uint8Array>,
  size: number,
  name: string,
  options: CopyOptions = {},
): Promise<GGUFModelFile> {
  const file = await streamIntoWasm(body, size, name, options);
  try {
    // parseGGUF copies what it keeps (strings, arrays), so no view of wasm memory outlives it
    return new GGUFModelFile(bytesHeader(file.bytes, name), [name], [file]);
  } catch (e) {
    file[Symbol.dispose]();
    throw e;
  }
}
