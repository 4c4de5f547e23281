/**
 * SHA-256 of library files and the record written beside a cached library,
 * so a truncated or altered cache entry is noticed before it is opened.
 *
 * @module
 */

/** Hex SHA-256 of bytes (synchronous: the sync loader verifies the cache too). */
export function sha256Hex(bytes: Uint8Array): string {
  return nodeCrypto().createHash("sha256").update(bytes).digest("hex");
}

/** Where a cached library came from. */
export type CacheOrigin = "prebuilt" | "source";

/** The JSON record beside a cached library (`<lib>.json`). */
export interface CacheRecord {
  /** Hex SHA-256 of the library file. */
  sha256: string;
  /** Downloaded prebuilt or built from the kernel sources. */
  origin: CacheOrigin;
  /** The URL it was fetched or built from. */
  from: string;
}

/** Reads and checks a cache record; null when absent or malformed. */
export function readCacheRecord(path: string): CacheRecord | null {
  let raw: unknown;
  try {
    raw = JSON.parse(Deno.readTextFileSync(`${path}.json`));
  } catch (e) {
    if (e instanceof Deno.errors.NotCapable) throw e;
    return null;
  }
  const r = raw as Partial<CacheRecord>;
  if (
    typeof r !== "object" || r === null || typeof r.sha256 !== "string" ||
    !/^[0-9a-f]{64}$/.test(r.sha256) || (r.origin !== "prebuilt" && r.origin !== "source") ||
    typeof r.from !== "string"
  ) return null;
  return { sha256: r.sha256, origin: r.origin, from: r.from };
}

/**
 * Writes a library and its record into dir: each through a temporary file
 * renamed into place (the record last), so a reader never sees half a file
 * and concurrent writers leave one whole copy.
 */
export async function writeCachedLibrary(
  dir: string,
  name: string,
  bytes: Uint8Array,
  from: Omit<CacheRecord, "sha256">,
): Promise<string> {
  const record: CacheRecord = { sha256: sha256Hex(bytes), origin: from.origin, from: from.from };
  await Deno.mkdir(dir, { recursive: true });
  const path = `${dir}/${name}`;
  const tmp = `${path}.tmp-${Deno.pid}-${crypto.randomUUID().slice(0, 8)}`;
  await Deno.writeFile(tmp, bytes, { mode: 0o755 });
  await Deno.rename(tmp, path);
  await Deno.writeTextFile(`${tmp}.json`, JSON.stringify(record) + "\n");
  await Deno.rename(`${tmp}.json`, `${path}.json`);
  return path;
}

/**
 * node:crypto through `process.getBuiltinModule` (Deno, Node), not a static
 * import: a browser bundle of mod.ts cannot import node: modules, and never
 * checks a native library's checksum.
 */
function nodeCrypto(): typeof import("node:crypto") {
  const p = (globalThis as { process?: { getBuiltinModule?: (id: string) => unknown } }).process;
  const m = p?.getBuiltinModule?.("node:crypto") as typeof import("node:crypto") | undefined;
  if (!m) throw new Error("sha256: node:crypto is not available in this runtime");
  return m;
}
