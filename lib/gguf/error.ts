/**
 * Errors raised while reading or validating GGUF files.
 *
 * @module
 */

/** A malformed or unsupported GGUF file: names the file, the byte offset and the field. */
export class GGUFError extends Error {
  /** File the bytes came from, when known. */
  readonly path?: string;
  /** Absolute byte offset in the file where the bad field starts. */
  readonly offset: number;
  /** The field that failed (`magic`, `kv[3].value`, `tensor[7].ne[1]`, ...). */
  readonly field: string;

  /** Builds the error; `detail` says what is wrong with the field. */
  constructor(detail: string, opts: { path?: string; offset: number; field: string }) {
    super(`${opts.path ?? "<gguf>"}: byte ${opts.offset}: ${opts.field}: ${detail}`);
    this.name = "GGUFError";
    this.path = opts.path;
    this.offset = opts.offset;
    this.field = opts.field;
  }
}

/**
 * The header continues past the bytes given to `parseGGUF` (but not past the
 * file): the caller should read at least `needed` bytes and parse again.
 */
export class GGUFNeedMoreError extends GGUFError {
  /** Length of the file prefix that would let parsing proceed past this point. */
  readonly needed: number;

  /** Builds the error for a read of the field at `offset` that needs `needed` bytes of prefix. */
  constructor(needed: number, opts: { path?: string; offset: number; field: string }) {
    super(`need ${needed} bytes of header, have fewer`, opts);
    this.name = "GGUFNeedMoreError";
    this.needed = needed;
  }
}
