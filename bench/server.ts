/**
 * `deno task bench:server`: `deno task serve` under load. The server runs
 * in its own process (so its RSS is its own); N streaming chat clients on
 * loopback each ask again as soon as their answer ends, for a fixed time.
 * For each N: the aggregate generated tokens/s, its ratio to one client,
 * the requests completed, cancelled and failed, and the server's RSS every
 * second, with the peak of the first and the second half after warm-up
 * (a flat curve: the second is not above the first).
 *
 *   deno task bench:server [--model FILE] [--clients 1,16] [--seconds 20] [--tokens 64]
 *     [--cancel 0.1] [--warmup 10] [--profile DIR] [--flash-attn [--fa-f32]] [--kv-unified]
 *     [--threads N]
 *
 * `--cancel` is the share of requests a client drops mid-stream (they must
 * end cleanly and free their slots); `--profile DIR` writes the server's
 * V8 CPU profile there.
 *
 * @module
 */
import { fileURLToPath } from "node:url";
import { flag, runCommand } from "../lib/cli/args.ts";
import { DEFAULT_MODEL } from "../lib/cli/generate.ts";

const SPEC = {
  name: "bench:server",
  summary: "Aggregate tokens/s of N concurrent streaming clients of deno task serve.",
  flags: {
    model: flag.string({ default: DEFAULT_MODEL, description: "GGUF model file" }),
    clients: flag.string({ default: "1,16", description: "client counts, comma-separated" }),
    seconds: flag.number({ above: 0, default: 20, description: "seconds per client count" }),
    tokens: flag.int({ min: 1, default: 64, description: "max_tokens per request" }),
    cancel: flag.number({ min: 0, max: 1, default: 0.1, description: "share of dropped streams" }),
    warmup: flag.number({ min: 0, default: 10, description: "seconds of RSS left out as warm-up" }),
    profile: flag.string({ value: "DIR", description: "write the server's CPU profile there" }),
    "flash-attn": flag.boolean({
      aliases: ["fa"],
      description: "serve with flash attention (llama-server's CPU default)",
    }),
    "fa-f32": flag.boolean({
      description: "with --flash-attn: the f32 kernels (serve --fa-precision f32)",
    }),
    threads: flag.int({ min: 1, description: "the server's CPU threads (default: its own)" }),
    "kv-unified": flag.boolean({
      aliases: ["kvu"],
      description: "serve with one KV pool for all slots (default: one stream per slot)",
    }),
  },
};

const PROMPTS = ["The prince", "Natasha", "Pierre said", "In the morning", "The old count"];

interface Tally {
  done: number;
  cancelled: number;
  failed: number;
  generated: number;
  errors: string[];
}

async function client(
  base: string,
  i: number,
  a: { tokens: number; cancel: number },
  until: number,
) {
  const t: Tally = { done: 0, cancelled: 0, failed: 0, generated: 0, errors: [] };
  let k = i;
  while (performance.now() < until) {
    k++;
    // A deterministic share of requests is dropped after a few chunks.
    const drop = a.cancel > 0 && (k * 0.6180339887) % 1 < a.cancel;
    const ac = new AbortController();
    try {
      const r = await fetch(`${base}/v1/chat/completions`, {
        method: "POST",
        signal: ac.signal,
        body: JSON.stringify({
          messages: [{ role: "user", content: PROMPTS[k % PROMPTS.length] }],
          max_tokens: a.tokens,
          stream: true,
          stream_options: { include_usage: true },
          seed: k,
        }),
      });
      if (!r.ok) throw new Error(`status ${r.status}: ${await r.text()}`);
      if (drop) {
        const reader = r.body!.getReader();
        for (let c = 0; c < 3; c++) await reader.read();
        ac.abort();
        await reader.cancel().catch(() => {});
        t.cancelled++;
        continue;
      }
      const text = await r.text();
      const usage = text.split("\n").filter((l) => l.startsWith("data: {"))
        .map((l) => JSON.parse(l.slice(6))).find((c) => c.usage)?.usage;
      if (!usage || !text.endsWith("data: [DONE]\n\n")) throw new Error("stream ended early");
      t.generated += usage.completion_tokens;
      t.done++;
    } catch (e) {
      t.failed++;
      if (t.errors.length < 3) t.errors.push((e as Error).message);
    }
  }
  return t;
}

// The server process's resident set in MiB (Linux), or NaN.
function rssMiB(pid: number): number {
  try {
    const m = Deno.readTextFileSync(`/proc/${pid}/status`).match(/^VmRSS:\s+(\d+) kB/m);
    return m ? Number(m[1]) / 1024 : NaN;
  } catch {
    return NaN;
  }
}

if (import.meta.main) {
  Deno.exit(
    await runCommand(SPEC, Deno.args, async ({ values: a }) => {
      const counts = a.clients.split(",").map(Number);
      const serve = fileURLToPath(new URL("../lib/cli/serve.ts", import.meta.url));
      const prof = a.profile ? ["--cpu-prof", `--cpu-prof-dir=${a.profile}`] : [];
      const proc = new Deno.Command(Deno.execPath(), {
        args: ["run", "-A", ...prof, serve, "--model", a.model, "--port", "0", "--parallel"]
          .concat([String(Math.max(...counts))], a["flash-attn"] ? ["--flash-attn"] : [])
          .concat(a["fa-f32"] ? ["--fa-precision", "f32"] : [])
          .concat(a["kv-unified"] ? ["--kv-unified"] : [])
          .concat(a.threads ? ["--threads", String(a.threads)] : []),
        stdout: "piped",
        stderr: "inherit",
      }).spawn();
      const reader = proc.stdout.pipeThrough(new TextDecoderStream()).getReader();
      let out = "";
      while (!out.includes("\n")) {
        const r = await reader.read();
        if (r.done) break;
        out += r.value;
      }
      const base = out.match(/listening on (http:\/\/\S+)/)?.[1];
      if (!base) throw new Error(`serve did not start: ${out}`);
      console.log(
        `# bench:server ${a.model}, ${a.tokens} tokens per request, ` +
          `${a.cancel * 100}% dropped; load ${Deno.loadavg().map((x) => x.toFixed(2)).join(" ")}`,
      );
      let single = 0;
      const seen = { decodes: 0, per: 0 };
      try {
        for (const n of counts) {
          const rss: number[] = [];
          const timer = setInterval(() => rss.push(rssMiB(proc.pid)), 1000);
          const t0 = performance.now();
          const until = t0 + a.seconds * 1000;
          const res = await Promise.all(
            Array.from({ length: n }, (_, i) => client(base, i, a, until)),
          );
          const secs = (performance.now() - t0) / 1000;
          clearInterval(timer);
          const sum = (f: (t: Tally) => number) => res.reduce((s, r) => s + f(r), 0);
          const tps = sum((r) => r.generated) / secs;
          if (n === 1) single = tps;
          const warm = rss.slice(Math.min(rss.length - 1, Math.round(a.warmup)));
          const half = Math.ceil(warm.length / 2);
          const peak = (xs: number[]) => Math.max(...xs).toFixed(0);
          console.log(
            `clients ${n}: ${tps.toFixed(1)} tok/s aggregate` +
              (single && n !== 1 ? ` (${(tps / single).toFixed(2)}x one client)` : "") +
              `; requests ${sum((r) => r.done)} done, ${sum((r) => r.cancelled)} cancelled, ` +
              `${sum((r) => r.failed)} failed; load ` +
              Deno.loadavg().map((x) => x.toFixed(2)).join(" "),
          );
          for (const r of res) for (const e of r.errors) console.log(`  error: ${e}`);
          console.log(`  server RSS MiB each second: ${rss.map((x) => x.toFixed(0)).join(" ")}`);
          console.log(
            `  after ${a.warmup} s warm-up: peak ${peak(warm.slice(0, half))} MiB in the first ` +
              `half, ${peak(warm.slice(half))} MiB in the second`,
          );
          await new Promise((r) => setTimeout(r, 200)); // dropped streams settle
          const m = await (await fetch(`${base}/metrics`)).text();
          const busy = m.match(/^llmedge:requests_processing (\d+)/m)?.[1];
          const decodes = Number(m.match(/^llmedge:n_decode_total (\S+)/m)?.[1]);
          const per = Number(m.match(/^llmedge:n_busy_slots_per_decode (\S+)/m)?.[1]);
          // The server's counters span every run so far: this run's share.
          const slots = decodes * per - seen.decodes * seen.per;
          console.log(
            `  requests still processing after the run: ${busy}; slots per decode ` +
              `${(slots / (decodes - seen.decodes)).toFixed(2)} (${
                decodes - seen.decodes
              } decodes)`,
          );
          Object.assign(seen, { decodes, per });
        }
      } finally {
        reader.releaseLock();
        proc.kill("SIGINT");
        await proc.status;
        await proc.stdout.cancel().catch(() => {});
      }
      return 0;
    }),
  );
}
