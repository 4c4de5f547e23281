// mod.ts in headless Chromium: a page imports a browser bundle of mod.ts
// (`deno bundle --platform browser`, made into a temporary directory),
// loads tolstoy-6m with Model.fromBytes(fetch(...)) and generates 16 greedy
// tokens on the wasm backend; they must equal the CPU backend's in this
// process (up to the CPU's first near tie, as tests/wasm_generate_test.ts).
// Twice: a plain page (no shared memory: llm_edge.wasm, one thread), and a
// cross-origin isolated one (COOP/COEP headers) asking for 2 threads, which
// loads llm_edge_mt.wasm and runs the second thread on a Web Worker.
// (A second test, run wherever the wasm toolchain is: Model.fromBytes's errors
// and its model's own choice of the wasm backend even where FFI is granted.)
// Installs nothing: skipped, naming what is missing, without
// /usr/bin/chromium (.ci/run apt-installs it), playwright-core or the wasm
// toolchain.
import assert from "node:assert/strict";
import { fileURLToPath } from "node:url";
import { Model } from "../lib/model/model.ts";
import { ModelError } from "../lib/model/hparams.ts";
import { OptionError } from "../lib/options.ts";
import { GGUFError } from "../lib/gguf/error.ts";
import { Context } from "../lib/runtime/context.ts";
import { NEAR_TIE } from "./oracle/oracle.ts";
import { ourGreedy } from "./quant_util.ts";
import { WASM_SKIP, wasmModulePath, wasmModules } from "./wasm_util.ts";
import type { WasmModules } from "../ffi/wasm_build.ts";
import { CHROMIUM, launchChromium } from "./browser_util.ts";

const ROOT = fileURLToPath(new URL("../", import.meta.url));
const MODEL = `${ROOT}models/tolstoy-6m-f16.gguf`;
const PROMPT = "Natasha looked at her mother and";
const N_GEN = 16;
/** Bounds: the bundle, the page's whole load + generation, the browser launch. */
const BUNDLE_MS = 120_000, PAGE_MS = 120_000, LAUNCH_MS = 60_000;

let skip = WASM_SKIP;
try {
  Deno.statSync(CHROMIUM);
} catch {
  skip ??= `${CHROMIUM} missing (apt-get install -y chromium)`;
}
if (!skip) {
  try {
    await import("playwright-core");
  } catch (e) {
    skip = `npm:playwright-core unavailable (${(e as Error).message.split("\n")[0]})`;
  }
}

const PAGE = `<!doctype html><meta charset="utf-8"><title>llm-edge</title>
<script type="module">
import { Context, generateText, Model } from "/pkg/mod.js";
try {
  const threads = Number(new URLSearchParams(location.search).get("threads") ?? 1);
  const model = await Model.fromBytes(await fetch("/model.gguf"));
  const ctx = await Context.create(model, { nCtx: 256, threads });
  const r = await generateText(ctx, ${JSON.stringify(PROMPT)}, {
    maxTokens: ${N_GEN}, temperature: 0, ignoreEos: true,
  });
  window.result = {
    backend: ctx.backendChoice, tokens: r.tokens, text: r.text,
    isolated: crossOriginIsolated, threads: ctx.threads,
    wasm: performance.getEntriesByType("resource").map((e) => e.name).filter((n) => n.endsWith(".wasm")),
  };
  ctx[Symbol.dispose](); model[Symbol.dispose]();
} catch (e) {
  window.result = { error: String(e && e.stack || e) };
}
</script>`;

async function bundle(dir: string): Promise<void> {
  const out = await new Deno.Command(Deno.execPath(), {
    args: ["bundle", "--platform", "browser", "--format", "esm", "-o", `${dir}/mod.js`, "mod.ts"],
    cwd: ROOT,
    stdout: "piped",
    stderr: "piped",
    env: { NO_COLOR: "1" },
    signal: AbortSignal.timeout(BUNDLE_MS),
  }).output();
  assert.ok(out.success, `deno bundle failed: ${new TextDecoder().decode(out.stderr)}`);
  // A browser cannot load node: built-ins: the library must not import any.
  const code = await Deno.readTextFile(`${dir}/mod.js`);
  const node = [...code.matchAll(/(?:from|import)\s*\(?\s*["'](node:[^"']+)["']/g)].map((m) =>
    m[1]
  );
  assert.deepEqual(node, [], `the bundle imports ${node.join(", ")}`);
}

// The page, the bundle, the modules and the model. The bundle's REPO_ROOT is
// "../" of its own URL, so the wasm is looked for in /dist/. Under /coi/ every
// response carries the headers that make the page cross-origin isolated.
function serve(dir: string, wasm: WasmModules): Deno.HttpServer<Deno.NetAddr> {
  const files: Record<string, [string, string]> = {
    "/pkg/mod.js": [`${dir}/mod.js`, "text/javascript"],
    "/dist/llm_edge.wasm": [wasm.single, "application/wasm"],
    "/dist/llm_edge_mt.wasm": [wasm.threaded, "application/wasm"],
    "/model.gguf": [MODEL, "application/octet-stream"],
  };
  return Deno.serve({ hostname: "127.0.0.1", port: 0, onListen() {} }, async (req) => {
    const url = new URL(req.url), referer = req.headers.get("referer") ?? "";
    const isolated = url.pathname === "/coi/" || new URL(referer || url).pathname === "/coi/";
    const headers = new Headers(
      isolated
        ? {
          "cross-origin-opener-policy": "same-origin",
          "cross-origin-embedder-policy": "require-corp",
        }
        : {},
    );
    if (url.pathname === "/" || url.pathname === "/coi/") {
      headers.set("content-type", "text/html");
      return new Response(PAGE, { headers });
    }
    const f = files[url.pathname];
    if (!f) return new Response("not found", { status: 404 });
    headers.set("content-type", f[1]);
    return new Response(await Deno.readFile(f[0]), { headers });
  });
}

type PageResult = {
  backend?: unknown;
  tokens?: number[];
  text?: string;
  isolated?: boolean;
  threads?: number;
  wasm?: string[];
  error?: string;
};

async function runPage(
  browser: Awaited<ReturnType<typeof launchChromium>>,
  url: string,
): Promise<PageResult> {
  const tab = await browser.newPage();
  const log: string[] = [];
  tab.on("console", (m) => log.push(`${m.type()}: ${m.text()}`));
  tab.on("pageerror", (e) => log.push(`pageerror: ${e.message}`));
  await tab.goto(url, { timeout: PAGE_MS });
  await tab.waitForFunction(() => (globalThis as { result?: unknown }).result, null, {
    timeout: PAGE_MS,
  }).catch((e) => {
    throw new Error(`${(e as Error).message}\npage log:\n${log.join("\n")}`);
  });
  const r = await tab.evaluate(() => (globalThis as { result?: never }).result!);
  await tab.close();
  return r;
}

Deno.test({
  name: `headless Chromium generates the cpu backend's greedy tokens (tolstoy-6m f16), ` +
    `at 1 thread and, cross-origin isolated, at 2 on a Web Worker${
      skip ? ` (skipped: ${skip})` : ""
    }`,
  ignore: skip !== undefined,
  sanitizeResources: false, // the native library (cpu backend) stays loaded for the process
  async fn() {
    const wasm = await wasmModules();
    const dir = await Deno.makeTempDir({ prefix: "llm-edge-browser-" });
    const server = serve(dir, wasm);
    try {
      await bundle(dir);
      let prompt: number[];
      {
        using model = await Model.load(MODEL);
        prompt = [...model.tokenizer.encode(PROMPT, { addSpecial: true })];
      }
      const cpu = await ourGreedy(MODEL, prompt, N_GEN, { backend: "cpu", threads: 1 });
      const browser = await launchChromium(`${dir}/profile`, LAUNCH_MS);
      const base = `http://127.0.0.1:${server.addr.port}`;
      let page: PageResult, page2: PageResult;
      try {
        page = await runPage(browser, `${base}/`);
        page2 = await runPage(browser, `${base}/coi/?threads=2`);
      } finally {
        await browser.close();
      }
      assert.equal(page.error, undefined, `the page failed: ${page.error}`);
      assert.equal(page2.error, undefined, `the isolated page failed: ${page2.error}`);
      assert.equal(page.backend, "wasm");
      // 2 threads are refused on the single-threaded build: the isolated page's
      // context ran them on llm_edge_mt.wasm
      assert.deepEqual([page.isolated, page.wasm], [false, [`${base}/dist/llm_edge.wasm`]]);
      assert.deepEqual(
        [page2.isolated, page2.threads, page2.wasm],
        [true, 2, [`${base}/dist/llm_edge_mt.wasm`]],
      );
      let k = cpu.gaps.findIndex((g) => g < NEAR_TIE);
      if (k < 0) k = N_GEN;
      assert.ok(k >= 8, `the cpu backend has a near tie at step ${k}: too few steps compared`);
      assert.deepEqual(page.tokens!.slice(0, k), cpu.tokens.slice(0, k), `first ${k} tokens`);
      assert.deepEqual(page2.tokens, page.tokens, "2 threads on a Web Worker differ from 1");
      console.log(
        `browser: ${k} of ${N_GEN} greedy tokens equal the cpu's: ${JSON.stringify(page.text)}`,
      );
    } finally {
      await server.shutdown();
      await Deno.remove(dir, { recursive: true });
    }
  },
});

Deno.test({
  name: `Model.fromBytes: one-line errors; its model picks the wasm backend itself${
    WASM_SKIP ? ` (skipped: ${WASM_SKIP})` : ""
  }`,
  ignore: WASM_SKIP !== undefined,
  async fn() {
    await wasmModulePath();
    for (const bad of [42, "model.gguf", null]) {
      await assert.rejects(() => Model.fromBytes(bad as never), OptionError);
    }
    await assert.rejects(
      () => Model.fromBytes(new Uint8Array(16), { name: "junk" }),
      (e: Error) => e instanceof GGUFError && /^junk: .*magic/.test(e.message),
    );
    await assert.rejects(
      () => Model.fromBytes(new Response("no", { status: 404 }), { name: "gone" }),
      (e: Error) => e instanceof ModelError && e.message === "gone: HTTP 404",
    );
    // This process has FFI, so a model from a path gets "cpu"; one from bytes
    // lies in WebAssembly memory, which the CPU kernels cannot reach.
    using model = await Model.fromBytes(await Deno.readFile(MODEL));
    assert.equal(model.file.native, false);
    using ctx = await Context.create(model, { nCtx: 64 });
    assert.equal(ctx.backendChoice, "wasm");
  },
});
