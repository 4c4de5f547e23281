// Issue 17's acceptance: `deno publish --dry-run` passes, and the published
// package works when imported from a registry: a loopback JSR registry
// (tests/dist_registry.ts) serves the dry run's files, and a script in a
// temporary directory with a fresh DENO_DIR and cache imports
// `jsr:@llm-edge/llm-edge` from it and generates: with the prebuilt library
// fetched (then reused from the cache), with the prebuilt gone (built from the
// fetched kernel sources), with neither possible (the error naming every step)
// and without --allow-net (the error naming the flag).
import assert from "node:assert/strict";
import { Context, generateText, Model } from "../mod.ts";
import { loadLibrary } from "../ffi/library.ts";
import { sha256Hex } from "../ffi/integrity.ts";
import { LIB_NAME } from "../ffi/platform.ts";
import { writeDist } from "../scripts/build_dist.ts";
import { WASM_DIST_FILE, WASM_MT_DIST_FILE } from "../ffi/wasm.ts";
import { WASM_SKIP, wasmModules, wasmTestName } from "./wasm_util.ts";
import {
  DENO,
  denoJson,
  makeRegistry,
  publishDryRun,
  ROOT,
  serveRegistry,
} from "./dist_registry.ts";

const MODEL = `${ROOT}/models/tolstoy-6m-f16.gguf`;
const PROMPT = "The prince";
const N = 8;

const CONSUMER = `
import { Context, generateText, Model } from "jsr:${denoJson.name}@${denoJson.version}";
using model = await Model.load(Deno.args[0]);
using ctx = await Context.create(model, { nCtx: 64, threads: 1 });
const r = await generateText(ctx, ${JSON.stringify(PROMPT)}, { maxTokens: ${N}, temperature: 0 });
console.log(JSON.stringify({ text: r.text }));
`;

const dry = await publishDryRun();

Deno.test("deno publish --dry-run passes and uploads what users need, nothing else", () => {
  assert.ok(dry.ok, `deno publish --dry-run failed:\n${dry.output}`);
  assert.match(dry.output, /Checking for slow types/);
  const files = new Set(dry.files);
  for (const f of ["LICENSE", "README.md", "deno.json", "mod.ts", "kernels/Makefile"]) {
    assert.ok(files.has(f), `${f} is not published`);
  }
  for (const e of Deno.readDirSync(`${ROOT}/kernels/src`)) {
    assert.ok(files.has(`kernels/src/${e.name}`), `kernels/src/${e.name} is not published`);
  }
  assert.ok(files.has("models/tolstoy-6m-f16.gguf"), "the default model is not published");
  const stray = dry.files.filter((f) =>
    /^(tests|bench|scripts|build|\.cache|\.ci|node_modules)\//.test(f) || f.endsWith(".o")
  );
  assert.deepEqual(stray, [], "files users do not need are published");
});

// the expected text, from the checkout's own engine and library
const lib = await loadLibrary();
let expected: string;
{
  using model = await Model.load(MODEL);
  using ctx = await Context.create(model, { nCtx: 64, threads: 1 });
  expected = (await generateText(ctx, PROMPT, { maxTokens: N, temperature: 0 })).text;
}

const tmp = await Deno.makeTempDir({ prefix: "llm-edge-jsr-" });
const registry = await makeRegistry(
  `${tmp}/registry`,
  dry.files.filter((f) => !f.startsWith("dist/")),
);
// the dist/ that `deno task build:dist` makes, from the library already built
const manifest = await writeDist({
  outDir: `${registry.pkgDir}/dist`,
  libraries: { "linux-x64": lib.path },
});
// the WebAssembly kernels build:dist adds (where the wasm toolchain is installed)
if (!WASM_SKIP) {
  const built = await wasmModules();
  await Deno.copyFile(built.single, `${registry.pkgDir}/dist/${WASM_DIST_FILE}`);
  await Deno.copyFile(built.threaded, `${registry.pkgDir}/dist/${WASM_MT_DIST_FILE}`);
}
await registry.writeMeta();
const { server, url, hits } = serveRegistry(registry.dir);
const user = `${tmp}/user`;
await Deno.mkdir(user);
await Deno.writeTextFile(`${user}/main.ts`, CONSUMER);
await Deno.copyFile(MODEL, `${user}/model.gguf`);
const denoDir = `${tmp}/deno_dir`;
const libPath = `${registry.pkgDir}/dist/${manifest.libraries["linux-x64"].file}`;
const libUrlPath = new URL(libPath.slice(registry.dir.length + 1), "http://x/").pathname;

async function consume(
  cache: string,
  opts: { path?: string; perms?: string[]; script?: string } = {},
) {
  // the caller's environment (proxies, CA files for npm) less our own variables
  const env: Record<string, string> = Object.fromEntries(
    Object.entries(Deno.env.toObject()).filter(([k]) => !k.startsWith("LLM_EDGE_")),
  );
  Object.assign(env, {
    JSR_URL: url,
    DENO_DIR: denoDir,
    XDG_CACHE_HOME: cache,
    PATH: opts.path ?? Deno.env.get("PATH") ?? "/usr/bin:/bin",
    NO_COLOR: "1",
  });
  const out = await new Deno.Command(DENO, {
    args: ["run", ...(opts.perms ?? ["-A"]), opts.script ?? "main.ts", "model.gguf"],
    cwd: user,
    clearEnv: true,
    env,
    stdout: "piped",
    stderr: "piped",
  }).output();
  return {
    ok: out.success,
    stdout: new TextDecoder().decode(out.stdout),
    stderr: new TextDecoder().decode(out.stderr),
  };
}

function cachedRecord(cache: string) {
  const dir = `${cache}/llm-edge/${denoJson.version}/linux-x64`;
  const bytes = Deno.readFileSync(`${dir}/${LIB_NAME}`);
  const rec = JSON.parse(Deno.readTextFileSync(`${dir}/${LIB_NAME}.json`));
  return { sha256: sha256Hex(bytes), rec };
}

const x64 = Deno.build.os === "linux" && Deno.build.arch === "x86_64";

Deno.test("the served copy is unfurled: no bare specifier of the import map is left", async () => {
  const bare = Object.keys(denoJson.imports);
  let unfurled = 0;
  for (const f of dry.files.filter((f) => f.endsWith(".ts"))) {
    const text = await Deno.readTextFile(`${registry.pkgDir}/${f}`);
    for (const b of bare) {
      assert.ok(!new RegExp(`(from|import)\\s*\\(?\\s*["']${b}["'/]`).test(text), `${f}: ${b}`);
    }
    if (text !== await Deno.readTextFile(`${ROOT}/${f}`)) unfurled++;
  }
  assert.ok(unfurled >= 1, "no file needed unfurling: the check above proves nothing");
});

Deno.test("the package fits JSR's limits (20 MB a file and 20 MB in all, uncompressed)", async () => {
  // `deno publish --dry-run` does not check these; the registry refuses the upload
  let total = 0;
  const walk = async (d: string) => {
    for await (const e of Deno.readDir(d)) {
      if (e.isDirectory) await walk(`${d}/${e.name}`);
      else {
        const size = (await Deno.stat(`${d}/${e.name}`)).size;
        assert.ok(size < 20e6, `${d}/${e.name} is ${size} bytes`);
        total += size;
      }
    }
  };
  await walk(registry.pkgDir);
  // linux-arm64's library (about as large as linux-x64's) is published too
  total += manifest.libraries["linux-x64"].size;
  assert.ok(total < 20e6, `the package is ${total} bytes`);
});

Deno.test({
  name: "from the registry: the prebuilt is fetched, verified, cached and reused",
  ignore: !x64,
  async fn() {
    const cache = `${tmp}/cache-prebuilt`;
    // the README's permissions (--allow-import only because the loopback host is not jsr.io)
    const host = `127.0.0.1:${server.addr.port}`;
    const perms = ["--allow-read", "--allow-env", "--allow-ffi", `--allow-net=${host}`];
    const r = await consume(cache, {
      perms: [...perms, "--allow-write", `--allow-import=${host}`],
    });
    assert.ok(r.ok, r.stderr);
    assert.deepEqual(JSON.parse(r.stdout.trim().split("\n").at(-1)!), { text: expected });
    assert.match(r.stderr, /llm-edge: fetching the prebuilt libllm_edge\.so \(linux-x64\)/);
    assert.equal(hits.get(libUrlPath), 1);
    const c = cachedRecord(cache);
    assert.equal(c.sha256, manifest.libraries["linux-x64"].sha256);
    assert.equal(c.rec.origin, "prebuilt");
    // a second run opens the cached copy without asking the registry
    const again = await consume(cache);
    assert.ok(again.ok, again.stderr);
    assert.equal(JSON.parse(again.stdout.trim()).text, expected);
    assert.equal(hits.get(libUrlPath), 1);
    // the doctor entry point reports the same, from the consumer's side
    await Deno.writeTextFile(
      `${user}/doctor.ts`,
      `import { main } from "jsr:${denoJson.name}@${denoJson.version}/doctor";\n` +
        `Deno.exit(await main(["--json"]));\n`,
    );
    const doc = await consume(cache, { script: "doctor.ts" });
    assert.ok(doc.ok, doc.stderr);
    const rep = JSON.parse(doc.stdout);
    assert.equal(rep.foundBy, "the user cache (prebuilt)");
    assert.equal(rep.library, `${cache}/llm-edge/${denoJson.version}/linux-x64/${LIB_NAME}`);
  },
});

Deno.test({
  name: "from the registry, without --allow-net: the error names the flag",
  ignore: !x64,
  async fn() {
    const r = await consume(`${tmp}/cache-noperm`, {
      perms: [
        "--allow-read",
        "--allow-write",
        "--allow-env",
        "--allow-ffi",
        "--allow-run",
        `--allow-import=127.0.0.1:${server.addr.port}`,
      ],
    });
    assert.ok(!r.ok);
    assert.match(r.stderr, /NativeLibraryError/);
    assert.match(r.stderr, new RegExp(`--allow-net=127\\.0\\.0\\.1:${server.addr.port}`));
  },
});

Deno.test({
  name: "from the registry with the prebuilt removed: built from the fetched kernel sources",
  ignore: !x64,
  async fn() {
    await Deno.remove(libPath);
    const cache = `${tmp}/cache-source`;
    const r = await consume(cache);
    assert.ok(r.ok, r.stderr);
    assert.equal(JSON.parse(r.stdout.trim().split("\n").at(-1)!).text, expected);
    assert.match(r.stderr, /fetching \d+ kernel sources/);
    assert.match(r.stderr, /llm-edge: built .*libllm_edge\.so/);
    assert.ok((hits.get(`/${denoJson.name}/${denoJson.version}/kernels/src/core.c`) ?? 0) >= 1);
    const c = cachedRecord(cache);
    assert.equal(c.rec.origin, "source");
    assert.equal(c.sha256, c.rec.sha256);
  },
});

Deno.test({
  name: "from the registry with neither a prebuilt nor a compiler: one error naming every step",
  ignore: !x64,
  async fn() {
    await Deno.remove(libPath).catch(() => {});
    const r = await consume(`${tmp}/cache-none`, { path: `${tmp}/empty-path` });
    assert.ok(!r.ok);
    const line = r.stderr.split("\n").find((l) => l.includes("NativeLibraryError"));
    assert.ok(line, r.stderr);
    for (
      const part of [
        "1) env LLM_EDGE_LIB: not set",
        "executable",
        "cache",
        "prebuilt",
        "HTTP 404",
        "no C compiler",
        "install make and a C compiler",
        "LLM_EDGE_LIB",
      ]
    ) assert.ok(line.includes(part), `"${part}" missing from: ${line}`);
  },
});

Deno.test({
  name: wasmTestName(
    "from the registry without --allow-ffi: the package's dist/llm_edge_mt.wasm runs (Deno shares memory with workers)",
  ),
  ignore: WASM_SKIP !== undefined,
  async fn() {
    const host = `127.0.0.1:${server.addr.port}`;
    const r = await consume(`${tmp}/cache-wasm`, {
      perms: ["--allow-read", "--allow-env", `--allow-net=${host}`, `--allow-import=${host}`],
    });
    assert.ok(r.ok, r.stderr);
    assert.deepEqual(JSON.parse(r.stdout.trim().split("\n").at(-1)!), { text: expected });
    const dist = `/${denoJson.name}/${denoJson.version}/dist`;
    assert.equal(hits.get(`${dist}/${WASM_MT_DIST_FILE}`), 1);
    assert.equal(hits.get(`${dist}/${WASM_DIST_FILE}`), undefined);
  },
});

Deno.test("the loopback registry shuts down", async () => {
  await server.shutdown();
  await Deno.remove(tmp, { recursive: true });
});
