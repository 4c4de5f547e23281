/**
 * The dist manifest (`dist/manifest.json`, written by `deno task build:dist`
 * and published with the package): for each platform, the prebuilt
 * library's file and SHA-256. It is read over the network, so every field is
 * checked before use.
 *
 * @module
 */

/** One prebuilt library. */
export interface ManifestEntry {
  /** Path relative to dist/, e.g. `linux-x64/libllm_edge.so`. */
  file: string;
  /** Hex SHA-256 of the file. */
  sha256: string;
  /** Size in bytes. */
  size: number;
}

/** The parsed manifest. */
export interface DistManifest {
  /** Package version the libraries were built for. */
  version: string;
  /** The libraries' `le_abi_version()`. */
  abi: number;
  /** Prebuilt libraries by platform tag (`linux-x64`, `linux-arm64`). */
  libraries: Record<string, ManifestEntry>;
  /** The kernel sources (paths from the package root), fetched to build where no prebuilt fits. */
  sources: SourceEntry[];
}

/** One kernel source file. */
export interface SourceEntry {
  /** Path from the package root, e.g. `kernels/src/core.c`. */
  path: string;
  /** Hex SHA-256 of the file. */
  sha256: string;
}

const REL_PATH = /^[A-Za-z0-9._-]+(\/[A-Za-z0-9._-]+)*$/;
const SHA256 = /^[0-9a-f]{64}$/;

function relPath(p: unknown): p is string {
  return typeof p === "string" && REL_PATH.test(p) && !p.split("/").includes("..");
}

/** Raised for a manifest that is not what build:dist writes. */
export class ManifestError extends Error {
  /** Creates the error. */
  constructor(message: string) {
    super(message);
    this.name = "ManifestError";
  }
}

/** Validates parsed JSON as a {@linkcode DistManifest}; throws ManifestError naming the field. */
export function parseManifest(json: unknown, source = "manifest"): DistManifest {
  const bad = (field: string) => new ManifestError(`${source}: invalid or missing ${field}`);
  if (typeof json !== "object" || json === null) throw bad("object");
  const m = json as Record<string, unknown>;
  if (typeof m.version !== "string") throw bad("version");
  if (!Number.isInteger(m.abi)) throw bad("abi");
  if (typeof m.libraries !== "object" || m.libraries === null) throw bad("libraries");
  const libraries: Record<string, ManifestEntry> = {};
  for (const [platform, v] of Object.entries(m.libraries as Record<string, unknown>)) {
    const e = v as Record<string, unknown>;
    const at = `libraries.${platform}`;
    if (typeof e !== "object" || e === null) throw bad(at);
    // a relative path inside dist/: no scheme, no absolute path, no "..", no backslash
    if (!relPath(e.file)) throw bad(`${at}.file`);
    if (typeof e.sha256 !== "string" || !SHA256.test(e.sha256)) throw bad(`${at}.sha256`);
    if (!Number.isSafeInteger(e.size) || (e.size as number) <= 0) throw bad(`${at}.size`);
    libraries[platform] = { file: e.file, sha256: e.sha256, size: e.size as number };
  }
  if (!Array.isArray(m.sources)) throw bad("sources");
  const sources = m.sources.map((v: unknown, i: number): SourceEntry => {
    const e = v as Record<string, unknown>;
    if (typeof e !== "object" || e === null || !relPath(e.path) || !e.path.startsWith("kernels/")) {
      throw bad(`sources[${i}].path`);
    }
    if (typeof e.sha256 !== "string" || !SHA256.test(e.sha256)) throw bad(`sources[${i}].sha256`);
    return { path: e.path, sha256: e.sha256 };
  });
  return { version: m.version, abi: m.abi as number, libraries, sources };
}
