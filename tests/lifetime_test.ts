/**
 * Native lifetimes (issue 11, findings 2 and 4): disposing a context or a
 * model while the kernels run, forgotten contexts, failed creates. Each
 * scenario runs in its own process (tests/lifetime_scenarios.ts) so that a
 * segfault shows as that process's exit code instead of ending the test run.
 */
import assert from "node:assert/strict";
import { fileURLToPath } from "node:url";

const SCRIPT = fileURLToPath(new URL("./lifetime_scenarios.ts", import.meta.url));

async function scenario(name: string): Promise<Record<string, unknown>> {
  const out = await new Deno.Command(Deno.execPath(), {
    args: ["run", "-A", "--v8-flags=--expose-gc", SCRIPT, name],
    stdout: "piped",
    stderr: "piped",
  }).output();
  const text = new TextDecoder().decode(out.stdout).trim();
  const err = new TextDecoder().decode(out.stderr);
  assert.equal(
    out.code,
    0,
    `${name}: exit code ${out.code} (signal ${out.signal})\n${text}\n${err.slice(-2000)}`,
  );
  const last = text.split("\n").pop()!;
  return JSON.parse(last);
}

Deno.test("lifetimes: a context disposed while its decode runs (Promise.race in `using`)", async () => {
  const r = await scenario("dispose-context-while-decoding");
  assert.equal(r.winner, "timeout");
  assert.equal(r.rejected, "ContextDisposedError");
});

Deno.test("lifetimes: `await using` waits for the cancelled decode before freeing", async () => {
  const r = await scenario("async-dispose-while-decoding");
  assert.equal(r.rejected, "ContextDisposedError");
});

Deno.test("lifetimes: a model disposed while its open context computes refuses, naming it", async () => {
  const r = await scenario("dispose-model-while-decoding");
  assert.equal(r.refused, "ModelInUseError");
  assert.deepEqual(r.names, [r.label]);
  assert.equal(r.finite, true, "the decode finished with the weights mapped");
  assert.equal(r.modelDisposed, true);
});

Deno.test("lifetimes: a model disposed right after its context unmaps when the kernels return", async () => {
  const r = await scenario("dispose-model-after-closing-context");
  assert.equal(r.rejected, "ContextDisposedError");
  assert.equal(r.modelDisposed, true);
});

Deno.test("lifetimes: use after dispose throws typed errors", async () => {
  const r = await scenario("use-after-dispose");
  assert.deepEqual(r, {
    first: "ContextDisposedError",
    queued: "ContextDisposedError",
    after: "ContextDisposedError",
    clear: "ContextDisposedError",
    create: "ModelDisposedError",
  });
});

Deno.test("lifetimes: disposing a model with an open context is refused in one line", async () => {
  const r = await scenario("dispose-model-with-open-context");
  const msg = r.message as string;
  assert.match(
    msg,
    /cannot dispose the model, 1 context\(s\) still open \(Context #\d+ \(nCtx 256, cpu\)\)/,
  );
  assert.ok(!msg.includes("\n"));
  assert.equal(r.still, 4096, "the context still decodes afterwards");
});

Deno.test("lifetimes: forgotten contexts are freed by their finalizer", async () => {
  const r = await scenario("forgotten-contexts") as Record<string, number>;
  // Eight pools of three workers were started; collecting the contexts joins
  // them all (only the pools' "le-worker" threads are counted).
  assert.ok(r.peak >= r.before + 3, `peak ${r.peak}, before ${r.before}`);
  assert.equal(r.after, r.before, `pool threads: before ${r.before}, after ${r.after}`);
  assert.equal(r.open, 0);
});

Deno.test("lifetimes: 150 failed Context.create calls leave RSS and threads flat", async () => {
  const r = await scenario("failed-creates") as Record<string, number | string[] | number[]>;
  assert.equal(r.first, "ContextError");
  assert.deepEqual(r.errors, ["ContextError"]);
  const rss = r.rss as number[];
  console.log(
    `3 x 50 failed creates: VmRSS ${rss.join(" -> ")} kB, ` +
      `pool threads ${r.threads0} -> ${r.threads1}`,
  );
  // Before the fix each attempt kept ~3 GB of cache and a thread pool; a
  // leak of even 1.3 MB per attempt grows every round by more than this.
  const growth = rss.slice(1).map((v, i) => v - rss[i]);
  assert.ok(Math.min(...growth) < 64 * 1024, `RSS grew by ${growth.join(", ")} kB per round`);
  // No pool outlives its failed create (a leak would add 3 workers each).
  assert.equal(r.threads1, r.threads0, "pool threads");
  assert.equal(r.open, 0);
});
