// `deno compile`: the single binary (`deno task compile`: lib/cli/compiled.ts
// with the library and the default model --include'd) generates from a
// temporary directory with no checkout, no LLM_EDGE_LIB and an empty cache.
//
// `deno compile` needs denort, the runtime it embeds, which it downloads
// unless DENORT_BIN names one or it is cached in DENO_DIR. Where it cannot be
// had, the compile step fails with a download error and the test is reported
// as ignored with that reason; any other compile failure fails the test.
import assert from "node:assert/strict";
import { fileURLToPath } from "node:url";
import { Context, generateText, Model } from "../mod.ts";
import { loadLibrary } from "../ffi/library.ts";

const ROOT = fileURLToPath(new URL("../", import.meta.url)).replace(/\/$/, "");
const lib = await loadLibrary();
const tmp = await Deno.makeTempDir({ prefix: "llm-edge-compile-" });
const bin = `${tmp}/bin/llm-edge`;

function compileArgs(out: string, entry: string, include: string[]): string[] {
  return [
    "compile",
    "-A",
    "--no-check",
    ...include.flatMap((f) => ["--include", f]),
    "-o",
    out,
    entry,
  ];
}

async function denoCompile(args: string[]) {
  const out = await new Deno.Command(Deno.execPath(), {
    args,
    cwd: ROOT,
    env: { NO_COLOR: "1" },
    stdout: "piped",
    stderr: "piped",
  }).output();
  return { ok: out.success, log: new TextDecoder().decode(out.stderr) };
}

// a one-line program first: where the runtime cannot be downloaded this fails in seconds
await Deno.writeTextFile(`${tmp}/probe.ts`, "console.log(1);\n");
const probe = await denoCompile(compileArgs(`${tmp}/probe`, `${tmp}/probe.ts`, []));
// a download that cannot happen (no network to the runtime's host): not this project's failure
const noRuntime = !probe.ok &&
  /denort|dl\.deno\.land|lookup address|error sending request/i.test(probe.log);
if (noRuntime) {
  const lines = probe.log.split("\n");
  const why = lines.find((l) => /error sending request/.test(l)) ??
    lines.find((l) => /denort/.test(l));
  console.error(`dist_compile_test: deno compile cannot get its runtime (denort) here: ${why}`);
}
const compile = noRuntime ? probe : await denoCompile(
  compileArgs(bin, "lib/cli/compiled.ts", [
    lib.path.slice(ROOT.length + 1),
    "models/tolstoy-6m-f16.gguf",
  ]),
);
const compileLog = compile.log;

Deno.test({
  name: "the compiled binary generates from a temporary directory with no repo present",
  ignore: noRuntime,
  async fn() {
    assert.ok(compile.ok, `deno compile failed:\n${compileLog}`);
    const work = `${tmp}/work`;
    await Deno.mkdir(work);
    const run = await new Deno.Command(bin, {
      args: ["-p", "The prince", "-n", "8", "--temp", "0"],
      cwd: work,
      clearEnv: true,
      env: { HOME: work, XDG_CACHE_HOME: `${work}/cache`, PATH: "/usr/bin:/bin" },
      stdout: "piped",
      stderr: "piped",
    }).output();
    const stderr = new TextDecoder().decode(run.stderr);
    assert.equal(run.code, 0, stderr);
    using model = await Model.load(`${ROOT}/models/tolstoy-6m-f16.gguf`);
    using ctx = await Context.create(model, { nCtx: 512 });
    const text = (await generateText(ctx, "The prince", { maxTokens: 8, temperature: 0 })).text;
    assert.equal(new TextDecoder().decode(run.stdout).trimEnd(), `The prince${text}`.trimEnd());
  },
});

Deno.test("the compile test's directory is removed", async () => {
  await Deno.remove(tmp, { recursive: true });
});
