/**
 * The error every public entry point throws for a bad option, and the small
 * checks that produce it. Validators live next to what they guard
 * (lib/runtime/options.ts, lib/sample/options.ts, lib/model/validate.ts);
 * this module only gives them one error shape: option name, value, allowed.
 *
 * @module
 */

/**
 * A public option has a value outside what it accepts. `option` names it
 * (`nCtx`, `topK`, `logitBias[3]`), `value` is what was given and `allowed`
 * says what would be accepted.
 *
 * @example
 * ```ts
 * import { Context, Model, OptionError } from "@llm-edge/llm-edge";
 *
 * using model = await Model.load("model.gguf");
 * try {
 *   await Context.create(model, { nCtx: -1 });
 * } catch (e) {
 *   if (e instanceof OptionError) console.error(e.option, e.allowed);
 * }
 * ```
 */
export class OptionError extends RangeError {
  /** The option's name (dotted or indexed for nested values). */
  readonly option: string;
  /** The value given. */
  readonly value: unknown;
  /** What the option accepts, in words. */
  readonly allowed: string;

  /** Creates the error; the message is `<where>: option <option> = <value>: allowed <allowed>`. */
  constructor(where: string, option: string, value: unknown, allowed: string) {
    super(`${where}: ${option} = ${show(value)} is not allowed (allowed: ${allowed})`);
    this.name = "OptionError";
    this.option = option;
    this.value = value;
    this.allowed = allowed;
  }
}

/** A value for an error message: strings quoted, objects as JSON when short. */
export function show(v: unknown): string {
  if (typeof v === "string") return JSON.stringify(v);
  if (typeof v === "number" || typeof v === "bigint" || typeof v === "boolean") return String(v);
  if (v === undefined || v === null) return String(v);
  if (typeof v === "function") return "a function";
  try {
    const s = JSON.stringify(v);
    if (s !== undefined) return s.length > 60 ? s.slice(0, 57) + "..." : s;
  } catch {
    // circular: fall through
  }
  return Object.prototype.toString.call(v);
}

/** Checks of one options object for one entry point (`where` starts every message). */
export class OptionChecker {
  /** Entry point name, e.g. `Context.create`. */
  readonly where: string;
  /** Creates a checker. */
  constructor(where: string) {
    this.where = where;
  }

  /** Throws an {@link OptionError}. */
  fail(option: string, value: unknown, allowed: string): never {
    throw new OptionError(this.where, option, value, allowed);
  }

  /** `o` is undefined or a plain object whose keys are all in `known`. */
  object(o: unknown, known: readonly string[], name = "options"): void {
    if (o === undefined) return;
    if (o === null || typeof o !== "object" || Array.isArray(o)) {
      this.fail(name, o, "an object");
    }
    for (const k of Object.keys(o)) {
      if (!known.includes(k)) this.fail(`${name}.${k}`, "(unknown option)", known.join(", "));
    }
  }

  /** An integer in [min, max] (absent is fine). */
  int(name: string, v: unknown, min: number, max = Number.MAX_SAFE_INTEGER): void {
    if (v === undefined) return;
    if (typeof v !== "number" || !Number.isInteger(v) || v < min || v > max) {
      this.fail(name, v, `an integer in ${min}..${max === Number.MAX_SAFE_INTEGER ? "" : max}`);
    }
  }

  /** A finite number in [min, max] (absent is fine); `what` overrides the allowed text. */
  num(name: string, v: unknown, min = -Infinity, max = Infinity, what?: string): void {
    if (v === undefined) return;
    if (typeof v !== "number" || !Number.isFinite(v) || v < min || v > max) {
      const range = min === -Infinity && max === Infinity
        ? "a finite number"
        : `a finite number in ${min === -Infinity ? "" : min}..${max === Infinity ? "" : max}`;
      this.fail(name, v, what ?? range);
    }
  }

  /** A finite number greater than `min`. */
  above(name: string, v: unknown, min: number): void {
    if (v === undefined) return;
    if (typeof v !== "number" || !Number.isFinite(v) || !(v > min)) {
      this.fail(name, v, `a finite number > ${min}`);
    }
  }

  /** One of `values` (absent is fine). */
  oneOf(name: string, v: unknown, values: readonly unknown[]): void {
    if (v === undefined) return;
    if (!values.includes(v)) this.fail(name, v, values.map(show).join(", "));
  }

  /** A boolean (absent is fine). */
  bool(name: string, v: unknown): void {
    if (v !== undefined && typeof v !== "boolean") this.fail(name, v, "true or false");
  }

  /** A string (absent is fine). */
  str(name: string, v: unknown): void {
    if (v !== undefined && typeof v !== "string") this.fail(name, v, "a string");
  }

  /** A function (absent is fine). */
  fn(name: string, v: unknown): void {
    if (v !== undefined && typeof v !== "function") this.fail(name, v, "a function");
  }
}

/**
 * Checks token ids: each an integer in 0..nVocab-1. `where` names the entry
 * point; the error names the first bad index and value.
 */
export function checkTokenIds(where: string, tokens: ArrayLike<number>, nVocab: number): void {
  if (tokens === null || typeof tokens !== "object" || typeof tokens.length !== "number") {
    throw new OptionError(where, "tokens", tokens, "an array of token ids");
  }
  for (let i = 0; i < tokens.length; i++) {
    const t = tokens[i];
    // NaN, 1.5 and ±Infinity would become 0, 1 and 0 in an Int32Array.
    if (typeof t !== "number" || !Number.isInteger(t) || t < 0 || t >= nVocab) {
      throw new OptionError(where, `tokens[${i}]`, t, `an integer token id in 0..${nVocab - 1}`);
    }
  }
}
