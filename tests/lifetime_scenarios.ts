/**
 * Scenarios that used to crash the process (segfaults on use after free),
 * run one per subprocess by lifetime_test.ts: `deno run -A
 * tests/lifetime_scenarios.ts NAME`. Each prints one JSON line with what it
 * observed and exits 0; a crash shows as a signal exit code.
 */
import { Model, ModelInUseError } from "../lib/model/model.ts";
import { Context } from "../lib/runtime/context.ts";
import { TOLSTOY_F32 } from "./oracle/models.ts";

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
const PROMPT = Array.from({ length: 400 }, (_, i) => 1 + (i * 37) % 4000);

function errName(e: unknown): string {
  return e instanceof Error ? e.name : String(e);
}

/**
 * The native pools' worker threads of this process: kernels/src/threads.c
 * names them "le-worker" (the runtime's own threads, started at any time,
 * have other names).
 */
function threads(): number {
  // A thread may end between the listing and the read: it no longer counts.
  const comm = (tid: string) => {
    try {
      return Deno.readTextFileSync(`/proc/self/task/${tid}/comm`).trim();
    } catch {
      return "";
    }
  };
  return [...Deno.readDirSync("/proc/self/task")].filter((d) => comm(d.name) === "le-worker")
    .length;
}

const scenarios: Record<string, () => Promise<Record<string, unknown>>> = {
  // Promise.race(decode, timeout) inside `using`: the context is disposed
  // (then the model) while its decode is still in the kernels.
  async "dispose-context-while-decoding"() {
    let pending: Promise<unknown>;
    let winner: string;
    {
      using model = await Model.load(TOLSTOY_F32);
      using ctx = await Context.create(model, { nCtx: 512, threads: 2 });
      pending = ctx.decode(PROMPT);
      winner = await Promise.race([pending.then(() => "decode"), sleep(30).then(() => "timeout")]);
    }
    const rejected = await pending.then(() => "resolved", errName);
    return { winner, rejected };
  },

  // The same with `await using`: disposal waits until the kernels returned.
  async "async-dispose-while-decoding"() {
    using model = await Model.load(TOLSTOY_F32);
    let pending: Promise<unknown>;
    {
      await using ctx = await Context.create(model, { nCtx: 512, threads: 2 });
      pending = ctx.decode(PROMPT);
      await sleep(20);
    }
    // Already settled: the asyncDispose above waited for the compute.
    const state = await Promise.race([pending.then(() => "resolved", errName), sleep(0)]);
    return { rejected: state ?? "pending" };
  },

  // The model is disposed while one of its (open) contexts computes: refused,
  // and the decode finishes with the weights still mapped.
  async "dispose-model-while-decoding"() {
    const model = await Model.load(TOLSTOY_F32);
    const ctx = await Context.create(model, { nCtx: 512, threads: 2 });
    const pending = ctx.decode(PROMPT);
    await sleep(20);
    let refused = "";
    let names: readonly string[] = [];
    try {
      model[Symbol.dispose]();
    } catch (e) {
      refused = errName(e);
      if (e instanceof ModelInUseError) names = e.contexts;
    }
    const r = await pending as { logits: Float32Array[] };
    const finite = r.logits[0].every(Number.isFinite);
    ctx[Symbol.dispose]();
    model[Symbol.dispose](); // now allowed
    return { refused, names, label: ctx.label, finite, modelDisposed: model.disposed };
  },

  // Context disposed mid-decode, then the model at once: the unmap waits for
  // the kernels; asyncDispose resolves when it has happened.
  async "dispose-model-after-closing-context"() {
    const model = await Model.load(TOLSTOY_F32);
    const ctx = await Context.create(model, { nCtx: 512, threads: 2 });
    const pending = ctx.decode(PROMPT).then(() => "resolved", errName);
    await sleep(20);
    ctx[Symbol.dispose]();
    await model[Symbol.asyncDispose]();
    return { rejected: await pending, modelDisposed: model.disposed };
  },

  // Use after dispose, double dispose, decode queued behind a disposed one.
  async "use-after-dispose"() {
    using model = await Model.load(TOLSTOY_F32);
    const ctx = await Context.create(model, { nCtx: 512, threads: 2 });
    const first = ctx.decode(PROMPT).then(() => "resolved", errName);
    const queued = ctx.decode([1, 2, 3]).then(() => "resolved", errName);
    await sleep(10);
    ctx[Symbol.dispose]();
    ctx[Symbol.dispose]();
    const after = await ctx.decode([1]).then(() => "resolved", errName);
    let clear = "";
    try {
      ctx.clear();
    } catch (e) {
      clear = errName(e);
    }
    let create = "";
    const m2 = await Model.load(TOLSTOY_F32);
    m2[Symbol.dispose]();
    try {
      await Context.create(m2);
    } catch (e) {
      create = errName(e);
    }
    return { first: await first, queued: await queued, after, clear, create };
  },

  // An open idle context: the model refuses to go, naming it.
  async "dispose-model-with-open-context"() {
    const model = await Model.load(TOLSTOY_F32);
    const ctx = await Context.create(model, { nCtx: 256, threads: 1 });
    let message = "";
    try {
      model[Symbol.dispose]();
    } catch (e) {
      if (!(e instanceof ModelInUseError)) throw e;
      message = e.message;
    }
    const still = (await ctx.decode([1, 2])).logits[0].length;
    ctx[Symbol.dispose]();
    model[Symbol.dispose]();
    return { message, still };
  },

  // Contexts dropped without dispose are freed by their finalizer.
  async "forgotten-contexts"() {
    const model = await Model.load(TOLSTOY_F32);
    {
      // Warm up: the first nonblocking FFI call starts a runtime worker thread.
      await using ctx = await Context.create(model, { nCtx: 256, threads: 1 });
      await ctx.decode([1]);
    }
    const before = threads();
    let peak = 0;
    // In a function of its own so that no frame of ours still holds a context.
    const make = async () => {
      for (let i = 0; i < 8; i++) {
        const ctx = await Context.create(model, { nCtx: 256, threads: 4 });
        await ctx.decode([1, 2, 3]);
        peak = Math.max(peak, threads());
      }
    };
    await make();
    for (let i = 0; i < 40 && (threads() > before || model.openContexts.length); i++) {
      (globalThis as { gc?: () => void }).gc?.();
      await sleep(25);
    }
    const after = threads();
    const open = model.openContexts.length;
    model[Symbol.dispose]();
    return { before, peak, after, open };
  },

  // Context.create that fails (a cache too big for the machine) keeps
  // nothing: not the thread pool, not memory, not a registration. 2e6
  // cells of tolstoy-6m need ~43 GB (KV cache 6.1, a 512-token step's
  // scores 36.9): more than any machine this suite runs on has free.
  async "failed-creates"() {
    const model = await Model.load(TOLSTOY_F32);
    const attempt = async () => {
      try {
        await Context.create(model, { nCtx: 2e6, threads: 4 });
        return "created";
      } catch (e) {
        return errName(e);
      }
    };
    // Collect until RSS stops falling: V8 frees array buffers' memory on a
    // background thread, which lags on a loaded machine.
    const settle = async () => {
      let last = Infinity;
      for (let i = 0; i < 30; i++) {
        (globalThis as { gc?: () => void }).gc?.();
        await sleep(20);
        const now = vmRss();
        if (i >= 2 && now > last - 1024) break;
        last = now;
      }
    };
    // Warm up: library, first graph, JIT, and the allocator's steady state
    // (each attempt makes and drops ~80 MB of cell arrays; malloc keeps some
    // of what V8 frees). The runtime also starts a thread of its own around
    // the first collections.
    const first = await attempt();
    for (let i = 0; i < 10; i++) await attempt();
    await settle();
    // Three rounds of 50: a leak grows RSS in each; a one-time plateau (seen
    // on a loaded machine: malloc keeping ~200 MB of freed pages, then
    // reusing them) grows one.
    const threads0 = threads();
    const errors = new Set<string>();
    const rss = [vmRss()];
    for (let round = 0; round < 3; round++) {
      for (let i = 0; i < 50; i++) errors.add(await attempt());
      await settle();
      rss.push(vmRss());
    }
    const threads1 = threads();
    const open = model.openContexts.length;
    model[Symbol.dispose]();
    return { first, errors: [...errors], rss, threads0, threads1, open };
  },
};

/** VmRSS of this process in kB. */
function vmRss(): number {
  return Number(/^VmRSS:\s+(\d+) kB/m.exec(Deno.readTextFileSync("/proc/self/status"))![1]);
}

const name = Deno.args[0];
const run = scenarios[name];
if (!run) {
  console.error(`unknown scenario ${name}; one of ${Object.keys(scenarios).join(", ")}`);
  Deno.exit(2);
}
const out = await run();
console.log(JSON.stringify(out));
