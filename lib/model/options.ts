/**
 * The check of {@link Model.load}'s arguments, run first so that a bad value
 * is an {@link OptionError} naming it. It lives with the model, not with the
 * runtime's option checks, because lib/model sits below lib/runtime.
 *
 * @module
 */
import { OptionChecker } from "../options.ts";

/** What {@link Model.load} checks: metadata, types and shapes; "data" also scans weights. */
export const LOAD_VALIDATE = ["metadata", "data"] as const;

// onBytes and signal, common to Model.load and Model.fromBytes.
function progressOptions(c: OptionChecker, o: unknown): void {
  const opts = o as { onBytes?: unknown; signal?: unknown } | undefined;
  c.fn("onBytes", opts?.onBytes);
  const s = opts?.signal;
  if (s !== undefined && !(typeof AbortSignal === "function" && s instanceof AbortSignal)) {
    c.fail("signal", s, "an AbortSignal");
  }
}

/** Throws an OptionError for invalid {@link Model.load} arguments. */
export function validateLoadOptions(path: unknown, o: unknown): void {
  const c = new OptionChecker("Model.load");
  if (typeof path !== "string" || path === "") c.fail("path", path, "a file path");
  c.object(o, ["onProgress", "validate", "onBytes", "signal"]);
  const opts = o as { onProgress?: unknown; validate?: unknown } | undefined;
  c.fn("onProgress", opts?.onProgress);
  c.oneOf("validate", opts?.validate, LOAD_VALIDATE);
  progressOptions(c, o);
}

/** Throws an OptionError for invalid {@link Model.fromBytes} arguments. */
export function validateBytesOptions(source: unknown, o: unknown): void {
  const c = new OptionChecker("Model.fromBytes");
  const ok = source instanceof ArrayBuffer || source instanceof Uint8Array ||
    (typeof Response === "function" && source instanceof Response);
  if (!ok) c.fail("source", source, "an ArrayBuffer, a Uint8Array or a Response");
  c.object(o, ["onProgress", "validate", "name", "onBytes", "signal"]);
  const opts = o as { onProgress?: unknown; validate?: unknown; name?: unknown } | undefined;
  c.fn("onProgress", opts?.onProgress);
  c.oneOf("validate", opts?.validate, LOAD_VALIDATE);
  progressOptions(c, o);
  if (opts?.name !== undefined && (typeof opts.name !== "string" || opts.name === "")) {
    c.fail("name", opts.name, "a non-empty string");
  }
}
