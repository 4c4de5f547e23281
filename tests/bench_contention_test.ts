// bench/contention.ts: other processes' CPU during a benchmark, less the
// benchmark's own reaped children (each engine runs in one).
import assert from "node:assert/strict";
import { contention, cpuSnapshot } from "../bench/contention.ts";

const spin = (s: number) =>
  new Deno.Command("sh", { args: ["-c", `timeout ${s} sh -c 'while :; do :; done'`] });

Deno.test("contention: a foreign busy process counts, the benchmark's own children do not", async () => {
  // A child that spins 1.5 s and is reaped: the benchmark's own work.
  const a = cpuSnapshot()!;
  await spin(1.5).output();
  const b = cpuSnapshot()!;
  assert.ok(contention(a, b).otherCores < 0.5, JSON.stringify(contention(a, b)));
  // The same work by a process nobody has reaped yet, as another program's would be.
  const p = spin(2).spawn();
  const c = cpuSnapshot()!;
  await new Promise((r) => setTimeout(r, 1500));
  const d = cpuSnapshot()!;
  await p.status;
  const x = contention(c, d);
  assert.ok(x.otherCores > 0.5, JSON.stringify(x));
  assert.ok(x.stealCores >= 0);
});
