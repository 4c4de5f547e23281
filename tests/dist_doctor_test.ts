// `deno task doctor`: the SIMD level it reports follows the CPU's flags as
// /proc/cpuinfo lists them (independently of the library's CPUID code), the
// library path and step are the ones used, and a missing library is one
// stderr line naming LLM_EDGE_LIB with exit code 1.
import assert from "node:assert/strict";
import { fileURLToPath } from "node:url";
import { loadLibrary } from "../ffi/library.ts";

const ROOT = fileURLToPath(new URL("../", import.meta.url)).replace(/\/$/, "");
const lib = await loadLibrary();

async function doctor(args: string[], env: Record<string, string>) {
  const out = await new Deno.Command(Deno.execPath(), {
    args: ["run", "-A", "lib/cli/doctor.ts", ...args],
    cwd: ROOT,
    env: { NO_COLOR: "1", ...env },
    stdout: "piped",
    stderr: "piped",
  }).output();
  const dec = new TextDecoder();
  return { code: out.code, stdout: dec.decode(out.stdout), stderr: dec.decode(out.stderr) };
}

function cpuinfoLevel(): string | null {
  let info: string;
  try {
    info = Deno.readTextFileSync("/proc/cpuinfo");
  } catch {
    return null;
  }
  const flags = new Set((/^flags\s*:(.*)$/m.exec(info)?.[1] ?? "").trim().split(/\s+/));
  if (Deno.build.arch === "aarch64") return "neon";
  if (["avx512f", "avx512bw", "avx512vl", "avx2", "fma", "f16c"].every((f) => flags.has(f))) {
    return "avx512";
  }
  if (["avx2", "fma", "f16c"].every((f) => flags.has(f))) return "avx2";
  return "scalar";
}

Deno.test("doctor --json reports the library, how it was found and the CPU's SIMD level", async () => {
  const r = await doctor(["--json"], { LLM_EDGE_LIB: lib.path });
  assert.equal(r.code, 0, r.stderr);
  const rep = JSON.parse(r.stdout);
  assert.equal(rep.library, lib.path);
  assert.equal(rep.foundBy, "LLM_EDGE_LIB");
  const expected = cpuinfoLevel();
  if (expected) assert.equal(rep.simdLevel, expected);
  assert.ok(Number.isInteger(rep.threads) && rep.threads >= 1);
  assert.match(rep.gpu, /CUDA/);
  assert.match(rep.libraryCache, /llm-edge\/\d+\.\d+\.\d+\/linux-/);
  // the plain form has the same facts, one per line
  const plain = await doctor([], { LLM_EDGE_LIB: lib.path });
  assert.match(plain.stdout, new RegExp(`^library\\s+${lib.path.replace(/[.]/g, "\\.")}$`, "m"));
});

Deno.test("doctor without a library: one line naming what to fix, exit code 1", async () => {
  const r = await doctor([], { LLM_EDGE_LIB: "/nonexistent/libllm_edge.so" });
  assert.equal(r.code, 1);
  assert.equal(r.stdout, "");
  const lines = r.stderr.trim().split("\n");
  assert.equal(lines.length, 1, r.stderr);
  assert.match(lines[0], /^doctor: LLM_EDGE_LIB=\/nonexistent\/libllm_edge\.so does not exist/);
});
