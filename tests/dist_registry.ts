// A loopback JSR registry for the distribution tests: the files `deno publish
// --dry-run` lists, with bare specifiers unfurled the way `deno publish` does
// before upload, served with JSR's metadata (`meta.json`, `<version>_meta.json`
// with each file's sha256) so that `JSR_URL=http://127.0.0.1:PORT/` makes
// `jsr:@llm-edge/llm-edge` load from it exactly as from jsr.io.
import { fileURLToPath } from "node:url";
import { sha256Hex } from "../ffi/integrity.ts";

export const ROOT = fileURLToPath(new URL("../", import.meta.url)).replace(/\/$/, "");
export const DENO = Deno.execPath();

interface DenoJson {
  name: string;
  version: string;
  exports: Record<string, string>;
  imports: Record<string, string>;
}

export const denoJson: DenoJson = JSON.parse(await Deno.readTextFile(`${ROOT}/deno.json`));

/** Runs `deno publish --dry-run`; returns its success, output and the files it would upload. */
export async function publishDryRun(): Promise<{ ok: boolean; output: string; files: string[] }> {
  const out = await new Deno.Command(DENO, {
    args: ["publish", "--dry-run", "--allow-dirty"],
    cwd: ROOT,
    env: { NO_COLOR: "1" },
    stdout: "piped",
    stderr: "piped",
  }).output();
  const output = new TextDecoder().decode(out.stdout) + new TextDecoder().decode(out.stderr);
  const prefix = `file://${ROOT}/`;
  const files = [...output.matchAll(/^\s+(file:\/\/\S+) \(/gm)]
    .map((m) => m[1])
    .filter((u) => u.startsWith(prefix))
    .map((u) => decodeURIComponent(u.slice(prefix.length)));
  return { ok: out.success, output, files };
}

/** Rewrites bare specifiers of the import map into their targets, as `deno publish` does. */
export function unfurl(source: string, imports: Record<string, string>): string {
  let s = source;
  for (const [bare, target] of Object.entries(imports)) {
    const esc = bare.replace(/[.*+?^${}()|[\]\\/]/g, "\\$&");
    const re = new RegExp(`((?:from|import)\\s*\\(?\\s*)(["'])${esc}(/[^"']*)?\\2`, "g");
    s = s.replace(re, (_m, pre, q, sub) => `${pre}${q}${target}${sub ?? ""}${q}`);
  }
  return s;
}

/** A registry directory; `pkgDir` is where the package version's files lie. */
export interface Registry {
  dir: string;
  pkgDir: string;
  /** Rewrites `<version>_meta.json` from the files now in pkgDir. */
  writeMeta(): Promise<void>;
}

/** Lays out files (paths from the repo root) as a JSR registry under dir. */
export async function makeRegistry(dir: string, files: string[]): Promise<Registry> {
  const { name, version } = denoJson;
  const pkgDir = `${dir}/${name}/${version}`;
  for (const f of files) {
    const dst = `${pkgDir}/${f}`;
    await Deno.mkdir(dst.replace(/\/[^/]*$/, ""), { recursive: true });
    if (f.endsWith(".ts")) {
      await Deno.writeTextFile(
        dst,
        unfurl(await Deno.readTextFile(`${ROOT}/${f}`), denoJson.imports),
      );
    } else {
      await Deno.copyFile(`${ROOT}/${f}`, dst);
    }
  }
  const writeMeta = async () => {
    const manifest: Record<string, { size: number; checksum: string }> = {};
    const walk = async (d: string, rel: string) => {
      for await (const e of Deno.readDir(d)) {
        if (e.isDirectory) await walk(`${d}/${e.name}`, `${rel}/${e.name}`);
        else {
          const b = await Deno.readFile(`${d}/${e.name}`);
          manifest[`${rel}/${e.name}`] = { size: b.length, checksum: `sha256-${sha256Hex(b)}` };
        }
      }
    };
    await walk(pkgDir, "");
    await Deno.writeTextFile(
      `${dir}/${name}/${version}_meta.json`,
      JSON.stringify({ manifest, exports: denoJson.exports }),
    );
    const [scope, pkg] = name.slice(1).split("/");
    await Deno.writeTextFile(
      `${dir}/${name}/meta.json`,
      JSON.stringify({ scope, name: pkg, latest: version, versions: { [version]: {} } }),
    );
  };
  await writeMeta();
  return { dir, pkgDir, writeMeta };
}

/** Serves dir over loopback HTTP, counting requests per path. */
export function serveRegistry(dir: string) {
  const hits = new Map<string, number>();
  const server = Deno.serve({ hostname: "127.0.0.1", port: 0, onListen() {} }, async (req) => {
    const path = decodeURIComponent(new URL(req.url).pathname);
    hits.set(path, (hits.get(path) ?? 0) + 1);
    if (path.includes("..")) return new Response("bad path", { status: 400 });
    try {
      const body = await Deno.readFile(`${dir}${path}`);
      const type = path.endsWith(".ts")
        ? "application/typescript"
        : path.endsWith(".json")
        ? "application/json"
        : "application/octet-stream";
      return new Response(body, { headers: { "content-type": type } });
    } catch {
      return new Response("not found", { status: 404 });
    }
  });
  const url = `http://127.0.0.1:${server.addr.port}/`;
  return { server, url, hits };
}
