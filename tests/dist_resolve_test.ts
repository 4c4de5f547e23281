// Each step of the native library's resolution order (ffi/resolve.ts), with
// the environment injected: LLM_EDGE_LIB, beside the executable, the package's
// build/, the checksum-verified cache, the published prebuilt (checked against
// the manifest), and the error naming every step. The source build and the
// https path run for real in dist_jsr_test.ts.
import assert from "node:assert/strict";
import { fileURLToPath, pathToFileURL } from "node:url";
import { loadLibrary } from "../ffi/library.ts";
import { NativeLibraryError, resolveLibrary, type ResolveOptions } from "../ffi/resolve.ts";
import { parseManifest } from "../ffi/manifest.ts";
import { sha256Hex } from "../ffi/integrity.ts";
import { stderrProgress } from "../ffi/progress.ts";
import { VERSION } from "../ffi/version.ts";
import { LIB_NAME, platformTag, userCacheDir } from "../ffi/platform.ts";
import { writeDist } from "../scripts/build_dist.ts";

const ROOT = fileURLToPath(new URL("../", import.meta.url)).replace(/\/$/, "");
const lib = await loadLibrary();
const bytes = await Deno.readFile(lib.path);
const lines: string[] = [];
const quiet = { line: (m: string) => void lines.push(m), bytes() {} };

/** A package laid out in a temp dir, and the options that make it the whole world. */
async function world(setup: (dir: string) => Promise<void> = async () => {}) {
  const dir = await Deno.makeTempDir({ prefix: "llm-edge-resolve-" });
  await Deno.mkdir(`${dir}/pkg`);
  await setup(dir);
  const options: ResolveOptions = {
    env: () => undefined,
    packageRoot: pathToFileURL(`${dir}/pkg/`),
    execPath: `${dir}/bin/app`,
    cacheDir: `${dir}/cache`,
    platform: "linux-x64",
    checkout: false,
    compilers: ["llm-edge-no-such-cc"],
    progress: quiet,
  };
  return { dir, options, [Symbol.asyncDispose]: () => Deno.remove(dir, { recursive: true }) };
}

async function put(path: string, data: Uint8Array = bytes) {
  await Deno.mkdir(path.replace(/\/[^/]*$/, ""), { recursive: true });
  await Deno.writeFile(path, data);
}

Deno.test("VERSION is deno.json's version, the cache key", async () => {
  const json = JSON.parse(await Deno.readTextFile(`${ROOT}/deno.json`));
  assert.equal(VERSION, json.version);
  assert.equal(
    userCacheDir((n) => ({ XDG_CACHE_HOME: "/x", HOME: "/h" })[n], "9.9.9", "linux-arm64"),
    "/x/llm-edge/9.9.9/linux-arm64",
  );
  assert.equal(
    userCacheDir((n) => n === "HOME" ? "/h" : undefined),
    `/h/.cache/llm-edge/${VERSION}/${platformTag()}`,
  );
  assert.equal(platformTag("linux", "aarch64"), "linux-arm64");
});

Deno.test("step 1: LLM_EDGE_LIB wins, and a wrong one is an error, not a fallback", async () => {
  await using w = await world(async (d) => await put(`${d}/bin/${LIB_NAME}`));
  const env = (p: string) => (n: string) => n === "LLM_EDGE_LIB" ? p : undefined;
  const r = await resolveLibrary({ ...w.options, env: env(lib.path) });
  assert.deepEqual([r.step, r.path], ["env", lib.path]);
  await assert.rejects(
    resolveLibrary({ ...w.options, env: env(`${w.dir}/nope.so`) }),
    (e: unknown) => e instanceof NativeLibraryError && e.message.includes(`${w.dir}/nope.so`),
  );
});

Deno.test("step 2: beside the executable (deno compile)", async () => {
  await using w = await world(async (d) => {
    await put(`${d}/bin/${LIB_NAME}`);
    await put(`${d}/pkg/build/${LIB_NAME}`);
  });
  const r = await resolveLibrary(w.options);
  assert.deepEqual([r.step, r.path], ["executable", `${w.dir}/bin/${LIB_NAME}`]);
  assert.deepEqual(r.tried.map((t) => t.step), ["env"]);
});

Deno.test("step 3: the package's own build/ when it is on disk", async () => {
  await using w = await world(async (d) => await put(`${d}/pkg/build/${LIB_NAME}`));
  const r = await resolveLibrary(w.options);
  assert.deepEqual([r.step, r.path], ["package", `${w.dir}/pkg/build/${LIB_NAME}`]);
});

Deno.test("steps 4-5: prebuilt verified into the cache, reused; a corrupted cache is replaced", async () => {
  await using w = await world(async (d) => {
    await writeDist({ outDir: `${d}/pkg/dist`, libraries: { "linux-x64": lib.path } });
  });
  const first = await resolveLibrary(w.options);
  assert.deepEqual([first.step, first.path], ["prebuilt", `${w.dir}/cache/${LIB_NAME}`]);
  assert.deepEqual(await Deno.readFile(first.path), bytes);
  assert.ok(lines.some((l) => l.startsWith("fetching the prebuilt")));
  const again = await resolveLibrary(w.options);
  assert.deepEqual([again.step, again.origin], ["cache", "prebuilt"]);
  // flip one byte: the cache entry no longer matches its record
  const bad = bytes.slice();
  bad[100] ^= 1;
  await Deno.writeFile(first.path, bad);
  const healed = await resolveLibrary(w.options);
  assert.equal(healed.step, "prebuilt");
  assert.ok(healed.tried.some((t) => t.step === "cache" && /checksum mismatch/.test(t.result)));
  assert.equal(sha256Hex(await Deno.readFile(healed.path)), sha256Hex(bytes));
});

Deno.test("step 5: a prebuilt that does not match the manifest is never cached", async () => {
  await using w = await world(async (d) => {
    await writeDist({ outDir: `${d}/pkg/dist`, libraries: { "linux-x64": lib.path } });
    const bad = bytes.slice();
    bad[200] ^= 1;
    await Deno.writeFile(`${d}/pkg/dist/linux-x64/${LIB_NAME}`, bad);
  });
  const err = await resolveLibrary(w.options).then(() => null, (e) => e);
  assert.ok(err instanceof NativeLibraryError);
  assert.deepEqual(err.tried.map((t) => t.step), [
    "env",
    "executable",
    "package",
    "cache",
    "prebuilt",
    "source",
  ]);
  assert.match(err.tried[4].result, /checksum mismatch/);
  assert.match(err.tried[5].result, /no C compiler/);
  await assert.rejects(Deno.stat(`${w.dir}/cache/${LIB_NAME}`), Deno.errors.NotFound);
  // another platform has no entry: said so
  const arm = await resolveLibrary({ ...w.options, platform: "linux-arm64" }).catch((e) => e);
  assert.match(arm.message, /the manifest has no linux-arm64 library/);
});

Deno.test("a git checkout uses its build/ only: never a cache or prebuilt older than its kernels", async () => {
  await using w = await world(async (d) => {
    await put(`${d}/cache/${LIB_NAME}`);
    await writeDist({ outDir: `${d}/pkg/dist`, libraries: { "linux-x64": lib.path } });
  });
  const err = await resolveLibrary({ ...w.options, checkout: true }).catch((e) => e);
  assert.ok(err instanceof NativeLibraryError);
  assert.deepEqual(err.tried.map((t) => t.step), ["env", "executable", "package", "source"]);
  assert.match(err.message, /install make and a C compiler/);
});

Deno.test("the manifest is validated field by field", () => {
  const ok = {
    version: "0.1.0",
    abi: 1,
    libraries: {
      "linux-x64": { file: "linux-x64/libllm_edge.so", sha256: "a".repeat(64), size: 9 },
    },
    sources: [{ path: "kernels/src/core.c", sha256: "b".repeat(64) }],
  };
  assert.equal(parseManifest(ok).libraries["linux-x64"].size, 9);
  const bad = (patch: (m: typeof ok) => void, field: RegExp) => {
    const m = structuredClone(ok);
    patch(m);
    assert.throws(() => parseManifest(m), field);
  };
  bad((m) => m.libraries["linux-x64"].file = "../../etc/passwd", /libraries\.linux-x64\.file/);
  bad((m) => m.libraries["linux-x64"].file = "/abs.so", /libraries\.linux-x64\.file/);
  bad((m) => m.libraries["linux-x64"].sha256 = "xyz", /sha256/);
  bad((m) => m.sources[0].path = "lib/evil.ts", /sources\[0\]\.path/);
  bad((m) => m.abi = 1.5, /abi/);
});

Deno.test("progress: redrawn on a terminal, plain lines otherwise, nothing when quiet", () => {
  const run = (opts: { tty: boolean; quiet: boolean }) => {
    let out = "";
    const p = stderrProgress({ ...opts, write: (t) => void (out += t) });
    p.bytes("fetching", 512, 1024);
    p.line("done");
    return out;
  };
  assert.equal(run({ tty: false, quiet: false }), "llm-edge: done\n");
  assert.equal(run({ tty: true, quiet: true }), "");
  const tty = run({ tty: true, quiet: false });
  assert.match(
    tty,
    new RegExp(
      "^\r\u001b\\[Kllm-edge: fetching 1 KiB / 1 KiB \\(50%\\)\r\u001b\\[Kllm-edge: done\n$",
    ),
  );
});

Deno.test("a denied permission is reported naming the flag", async () => {
  const script = `
    import { loadLibrary } from ${JSON.stringify(`${ROOT}/ffi/library.ts`)};
    try { await loadLibrary(); } catch (e) { console.log(e.name + ": " + e.message); }`;
  const attempt = async (perms: string[]) => {
    const child = new Deno.Command(Deno.execPath(), {
      args: ["run", ...perms, "-"],
      stdin: "piped",
      stdout: "piped",
      stderr: "piped",
      env: { LLM_EDGE_LIB: lib.path },
    }).spawn();
    const w = child.stdin.getWriter();
    await w.write(new TextEncoder().encode(script));
    await w.close();
    return new TextDecoder().decode((await child.output()).stdout);
  };
  assert.match(
    await attempt(["--allow-read", "--allow-env"]),
    /NativeLibraryError: cannot open .*: not permitted; run with --allow-ffi=/,
  );
  assert.equal(
    (await attempt(["--allow-env"])).trim(),
    `NativeLibraryError: LLM_EDGE_LIB=${lib.path} cannot be read: not permitted; ` +
      `run with --allow-read=${lib.path}`,
  );
});
