/**
 * `deno run -A bench/wllama.ts [--model FILE] [-p 64] [-n 32] [--reps 3] [--threads 1]`:
 * llm-edge's WebAssembly backend next to wllama (llama.cpp compiled to
 * WebAssembly, npm `@wllama/wllama`) in the same headless Chromium page, the
 * same thread count each (default one), the same GGUF, repetitions
 * interleaved, medians in tokens/s. With `--threads` above 1 the page is
 * cross-origin isolated (COOP/COEP headers), so both can share memory with
 * workers: ours loads llm_edge_mt.wasm, wllama its pthreads build.
 *
 * Ours: a browser bundle of mod.ts (`deno bundle --platform browser`),
 * `Model.fromBytes`, a prompt of `-p` tokens decoded in one call (pp), then
 * `-n` greedy one-token decodes (tg). wllama: `createCompletion` on the same
 * prompt text with `max_tokens: n`, temperature 0, eos ignored, no cached
 * prompt; its own timings (llama-server's prompt_per_second and
 * predicted_per_second). Needs /usr/bin/chromium, `npm` (to unpack wllama's
 * package) and `deno task build:wasm`. Prints the load average: figures from a
 * busy machine only compare with each other.
 *
 * @module
 */
import { resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { parseArgs } from "node:util";
import { launchChromium } from "../tests/browser_util.ts";

const ROOT = fileURLToPath(new URL("../", import.meta.url));
const WLLAMA = "@wllama/wllama@3.8.1";
const TEXT = "Natasha looked at her mother and the old count said that the prince ";

const { values: a } = parseArgs({
  options: {
    model: { type: "string", default: `${ROOT}models/tolstoy-6m-f16.gguf` },
    pp: { type: "string", short: "p", default: "64" },
    tg: { type: "string", short: "n", default: "32" },
    reps: { type: "string", default: "3" },
    threads: { type: "string", short: "t", default: "1" },
  },
});
// Absolute, so that "../" in the argument is not taken for a path escape
// by the file server below (which refuses ".." in what it serves).
const MODEL = resolve(a.model!);
const P = Number(a.pp), N = Number(a.tg), REPS = Number(a.reps), T = Number(a.threads);
for (const [k, v] of [["-p", P], ["-n", N], ["--reps", REPS], ["--threads", T]] as const) {
  if (!Number.isInteger(v) || v < 1) {
    throw new Error(`bench/wllama: ${k} ${v} is not a whole number >= 1`);
  }
}

function load(): string {
  return Deno.readTextFileSync("/proc/loadavg").split(" ").slice(0, 3).join(" ");
}

async function run(cmd: string, args: string[], cwd: string): Promise<void> {
  const out = await new Deno.Command(cmd, { args, cwd, stdout: "piped", stderr: "piped" }).output();
  if (!out.success) {
    throw new Error(`${cmd} ${args.join(" ")}: ${new TextDecoder().decode(out.stderr)}`);
  }
}

const PAGE = `<!doctype html><meta charset="utf-8"><title>bench</title>
<script type="module">
import { Context, Model } from "/pkg/mod.js";
import { Wllama } from "/wllama/esm/index.js";
const P = ${P}, N = ${N}, T = ${T}, TEXT = ${JSON.stringify(TEXT)};
const bytes = new Uint8Array(await (await fetch("/model.gguf")).arrayBuffer());
const model = await Model.fromBytes(bytes.slice());
let ids = model.tokenizer.encode(TEXT.repeat(64), { addSpecial: true }).slice(0, P);
const prompt = model.tokenizer.decode(ids.slice(1));
globalThis.ours = async () => {
  const ctx = await Context.create(model, { nCtx: 512, threads: T });
  try {
    let t0 = performance.now();
    let logits = (await ctx.decode(ids)).logits[0];
    const pp = P / ((performance.now() - t0) / 1000);
    t0 = performance.now();
    for (let i = 0; i < N; i++) {
      let best = 0;
      for (let j = 1; j < logits.length; j++) if (logits[j] > logits[best]) best = j;
      logits = (await ctx.decode([best])).logits[0];
    }
    return { pp, tg: N / ((performance.now() - t0) / 1000) };
  } finally {
    ctx[Symbol.dispose]();
  }
};
const w = new Wllama({ default: "/wllama/esm/wasm/wllama.wasm" }, { suppressNativeLog: true });
await w.loadModel([new Blob([bytes])], { n_ctx: 512, n_threads: T, n_gpu_layers: 0, flash_attn: false });
if (w.getNumThreads() !== T) throw new Error("wllama runs " + w.getNumThreads() + " threads, not " + T);
globalThis.wllama = async () => {
  const r = await w.createCompletion({ prompt, max_tokens: N, temperature: 0, ignore_eos: true, cache_prompt: false });
  return { pp: r.timings.prompt_per_second, tg: r.timings.predicted_per_second, promptN: r.timings.prompt_n };
};
globalThis.ready = true;
</script>`;

const dir = await Deno.makeTempDir({ prefix: "llm-edge-wllama-" });
try {
  await run(Deno.execPath(), [
    "bundle",
    "--platform",
    "browser",
    "--format",
    "esm",
    "-o",
    `${dir}/mod.js`,
    "mod.ts",
  ], ROOT);
  await run("npm", ["pack", WLLAMA, "--pack-destination", dir, "--silent"], dir);
  const tgz = [...Deno.readDirSync(dir)].find((e) => e.name.endsWith(".tgz"))!.name;
  await run("tar", ["xzf", tgz], dir);
  const wasm = `${ROOT}build/wasm/llm_edge.wasm`, wasmMt = `${ROOT}build/wasm/llm_edge_mt.wasm`;
  // More than one thread: every response makes the page cross-origin isolated.
  const headers = (type: string): HeadersInit =>
    T > 1
      ? {
        "content-type": type,
        "cross-origin-opener-policy": "same-origin",
        "cross-origin-embedder-policy": "require-corp",
      }
      : { "content-type": type };
  const server = Deno.serve({ hostname: "127.0.0.1", port: 0, onListen() {} }, async (req) => {
    const path = new URL(req.url).pathname;
    const type = path.endsWith(".wasm")
      ? "application/wasm"
      : path.endsWith(".js")
      ? "text/javascript"
      : "application/octet-stream";
    const file = path === "/"
      ? null
      : path === "/pkg/mod.js"
      ? `${dir}/mod.js`
      : path === "/dist/llm_edge.wasm"
      ? wasm
      : path === "/dist/llm_edge_mt.wasm"
      ? wasmMt
      : path === "/model.gguf"
      ? MODEL
      : path.startsWith("/wllama/")
      ? `${dir}/package/${path.slice(8)}`
      : undefined;
    if (file === null) return new Response(PAGE, { headers: headers("text/html") });
    if (!file || file.includes("..")) return new Response("not found", { status: 404 });
    try {
      return new Response(await Deno.readFile(file), { headers: headers(type) });
    } catch {
      return new Response("not found", { status: 404 });
    }
  });
  const browser = await launchChromium(`${dir}/profile`, 60_000);
  try {
    const tab = await browser.newPage();
    const log: string[] = [];
    tab.on("pageerror", (e) => log.push(e.message));
    await tab.goto(`http://127.0.0.1:${server.addr.port}/`);
    await tab.waitForFunction(() => (globalThis as { ready?: boolean }).ready, null, {
      timeout: 120_000,
    })
      .catch((e) => {
        throw new Error(`${(e as Error).message}\n${log.join("\n")}`);
      });
    const res: Record<string, { pp: number[]; tg: number[] }> = {
      "llm-edge wasm": { pp: [], tg: [] },
      wllama: { pp: [], tg: [] },
    };
    console.log(
      `# bench/wllama ${a.model}  pp ${P}  tg ${N}  reps ${REPS}  ${T} thread(s), headless ` +
        `Chromium; load ${load()}`,
    );
    for (let r = 0; r < REPS; r++) {
      for (const [name, fn] of [["llm-edge wasm", "ours"], ["wllama", "wllama"]] as const) {
        const o = await tab.evaluate(
          (f) =>
            (globalThis as unknown as Record<string, () => Promise<{ pp: number; tg: number }>>)
              [f](),
          fn,
        );
        res[name].pp.push(o.pp);
        res[name].tg.push(o.tg);
        console.log(`  rep ${r + 1} ${name}: ${JSON.stringify(o)}`);
      }
    }
    const med = (x: number[]) => [...x].sort((p, q) => p - q)[x.length >> 1];
    for (const [name, v] of Object.entries(res)) {
      console.log(
        `${name.padEnd(14)} pp ${med(v.pp).toFixed(1).padStart(8)} t/s   tg ${
          med(v.tg).toFixed(1).padStart(8)
        } t/s   (min–max pp ${Math.min(...v.pp).toFixed(1)}–${Math.max(...v.pp).toFixed(1)}, tg ${
          Math.min(...v.tg).toFixed(1)
        }–${Math.max(...v.tg).toFixed(1)})`,
      );
    }
    console.log(
      `ours / wllama: pp ${(med(res["llm-edge wasm"].pp) / med(res.wllama.pp)).toFixed(2)}  tg ${
        (med(res["llm-edge wasm"].tg) / med(res.wllama.tg)).toFixed(2)
      }; load ${load()}`,
    );
  } finally {
    await browser.close();
    await server.shutdown();
  }
} finally {
  await Deno.remove(dir, { recursive: true });
}
