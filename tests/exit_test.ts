/**
 * A program that ends without disposing its contexts must exit cleanly.
 * Deno unloads the native library at exit while the thread pool's workers
 * are parked inside it; without `-z nodelete` (kernels/Makefile) a worker
 * woke into unmapped code and the process died with SIGSEGV in about one
 * exit in three.
 */
import assert from "node:assert/strict";
import { fileURLToPath } from "node:url";

const ROOT = fileURLToPath(new URL("..", import.meta.url));
const LIB = `${ROOT}build/libllm_edge.so`;

Deno.test("exit: the native library is marked NODELETE (never unmapped by dlclose)", async () => {
  let out: Deno.CommandOutput;
  try {
    out = await new Deno.Command("readelf", { args: ["-d", LIB], stdout: "piped" }).output();
  } catch (e) {
    if (e instanceof Deno.errors.NotFound) return console.log("no readelf here: checked below");
    throw e;
  }
  assert.ok(out.success, "readelf failed");
  assert.match(new TextDecoder().decode(out.stdout), /FLAGS_1\)\s+Flags:.*NODELETE/);
});

Deno.test("exit: a program that never disposes its context exits with status 0", async () => {
  const dir = await Deno.makeTempDir({ prefix: "llm-edge-exit-" });
  try {
    const script = `${dir}/main.ts`;
    await Deno.writeTextFile(
      script,
      `import { Context, Model } from ${JSON.stringify(new URL("../mod.ts", import.meta.url).href)};
const model = await Model.load(${JSON.stringify(`${ROOT}models/tolstoy-6m-f16.gguf`)});
const ctx = await Context.create(model, { threads: 2 });
await ctx.decode([1, 450, 10]);
console.log("decoded");
`,
    );
    // Each exit races the parked workers; several runs make a regression show.
    for (let i = 0; i < 6; i++) {
      const r = await new Deno.Command(Deno.execPath(), {
        args: ["run", "-A", "--config", `${ROOT}deno.json`, script],
        stdout: "piped",
        stderr: "piped",
      }).output();
      const err = new TextDecoder().decode(r.stderr);
      assert.equal(r.signal, null, `run ${i}: killed by ${r.signal}\n${err}`);
      assert.equal(r.code, 0, `run ${i}: exit ${r.code}\n${err}`);
      assert.equal(new TextDecoder().decode(r.stdout).trim(), "decoded");
    }
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});
