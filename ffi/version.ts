/**
 * The package version, the key of the per-user library cache
 * (`$XDG_CACHE_HOME/llm-edge/<version>/<platform>/`). A test keeps it equal
 * to deno.json's `version`.
 *
 * @module
 */

/** This package's version. */
export const VERSION = "0.1.0";
