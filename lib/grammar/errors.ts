/**
 * Typed errors of the grammar code: every failure that input (GBNF text, a
 * JSON schema, a token stream) can cause is one of these, never a plain
 * `Error`, `TypeError` or a stack overflow.
 *
 * @module
 */

/** Base class of every grammar, schema and grammar-matching error. */
export class GrammarError extends Error {
  /** Creates the instance. */
  constructor(message: string) {
    super(message);
    this.name = "GrammarError";
  }
}

/**
 * The grammar cannot go on at sample time: no token of the vocabulary is
 * admitted, a token that cannot continue it was accepted, or an
 * end-of-generation token came before the grammar was complete.
 */
export class GrammarMatchError extends GrammarError {
  /** The token involved, or -1 when no token was (nothing admitted). */
  readonly token: number;

  /** Creates the instance. */
  constructor(message: string, token = -1) {
    super(`grammar: ${message}`);
    this.name = "GrammarMatchError";
    this.token = token;
  }
}

/**
 * A JSON schema that cannot be converted to a grammar: malformed (a keyword
 * of the wrong type, an unresolvable `$ref`), or a case llama.cpp's converter
 * does not support (bounds beyond 64-bit integers, `$ref` cycles it cannot
 * follow, nesting past {@link MAX_SCHEMA_DEPTH}).
 */
export class JsonSchemaError extends GrammarError {
  /** JSON pointer of the offending schema ("#" is the root). */
  readonly pointer: string;

  /** Creates the instance. */
  constructor(message: string, pointer = "#") {
    super(`json schema at ${pointer}: ${message}`);
    this.name = "JsonSchemaError";
    this.pointer = pointer;
  }
}

/** Deepest schema nesting the converter follows before a {@link JsonSchemaError}. */
export const MAX_SCHEMA_DEPTH = 512;
