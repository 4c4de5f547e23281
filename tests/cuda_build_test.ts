// The CUDA library builds on every run (CI has nvcc), its exported symbols
// are exactly the functions kernels/cuda/le_cuda.h declares, and
// ffi/cuda_symbols.ts mirrors each declaration (name and parameter count)
// and each shared constant. None of this needs a GPU.
import assert from "node:assert/strict";
import { buildCuda, CUDA_LIB_NAME, findNvcc } from "../ffi/cuda_build.ts";
import { openCudaLibrary } from "../ffi/cuda_library.ts";
import { loadLibrary } from "../ffi/library.ts";
import { GGMLType, ggmlTypeInfo } from "../lib/ggml/types.ts";
import { CUDA_WEIGHT_TYPES } from "../lib/backend/cuda.ts";
import { mulberry32 } from "./rng.ts";
import {
  CUDA_ABI_VERSION,
  CUDA_SYMBOLS,
  DEVICE_INFO_BYTES,
  LecError,
} from "../ffi/cuda_symbols.ts";

const HEADER = new URL("../kernels/cuda/le_cuda.h", import.meta.url);

/** `name -> parameter count` of every function the header declares. */
function declarations(h: string): Map<string, number> {
  const body = h.replace(/\/\*[\s\S]*?\*\//g, "");
  const out = new Map<string, number>();
  for (const m of body.matchAll(/^[A-Za-z_][\w\s\*]*?\b(lec_\w+)\(([^)]*)\);/gm)) {
    const params = m[2].trim();
    out.set(m[1], params === "void" || params === "" ? 0 : params.split(",").length);
  }
  return out;
}

function define(h: string, name: string): number {
  const m = new RegExp(`^#define ${name} \\(?(-?\\d+)\\)?`, "m").exec(h);
  assert.ok(m, `${name} not defined in le_cuda.h`);
  return Number(m[1]);
}

// Built once for the file; make skips it when nothing changed.
const built = findNvcc() === null
  ? new Error("nvcc not found: CI machines have it; install the CUDA toolkit or set NVCC")
  : await buildCuda({ verbose: false }).catch((e: Error) => e);

Deno.test("deno task build:cuda compiles libllm_edge_cuda.so for sm_80 and sm_90", () => {
  if (built instanceof Error) throw built;
  assert.ok(built.endsWith(CUDA_LIB_NAME));
  const lib = openCudaLibrary(built);
  assert.equal(lib.symbols.lec_abi_version(), CUDA_ABI_VERSION);
  // LEC_ARCHS bit (XY/10 - 5) per sm_XY the Makefile compiled.
  assert.equal(lib.symbols.lec_built_archs(), (1 << 3) | (1 << 4));
  const runtime = new Int32Array(1), driver = new Int32Array(1);
  lib.symbols.lec_versions(runtime, driver);
  assert.ok(runtime[0] >= 12000, `runtime version ${runtime[0]}`);
});

Deno.test("exported symbols, header declarations and cuda_symbols.ts agree", async () => {
  if (built instanceof Error) throw built;
  const h = await Deno.readTextFile(HEADER);
  const decl = declarations(h);
  assert.ok(decl.size >= 19, `only ${decl.size} declarations parsed`);
  const nm = await new Deno.Command("nm", { args: ["-D", "--defined-only", built] }).output();
  assert.ok(nm.success, "nm failed");
  const exported = new TextDecoder().decode(nm.stdout).split("\n")
    .map((l) => l.trim().split(/\s+/))
    .filter((f) => f.length === 3 && f[1] === "T")
    .map((f) => f[2]);
  assert.deepEqual(exported.toSorted(), [...decl.keys()].toSorted());
  const ts = new Map<string, number>();
  for (const [key, def] of Object.entries(CUDA_SYMBOLS)) {
    const name = "name" in def ? (def as { name: string }).name : key;
    ts.set(name, def.parameters.length);
  }
  assert.deepEqual([...ts].toSorted(), [...decl].toSorted());
  assert.equal(define(h, "LEC_ABI_VERSION"), CUDA_ABI_VERSION);
  assert.equal(define(h, "LEC_E_INVALID"), LecError.INVALID);
  assert.equal(define(h, "LEC_E_UNSUPPORTED"), LecError.UNSUPPORTED);
  assert.equal(define(h, "LEC_DEVICE_INFO_BYTES"), DEVICE_INFO_BYTES);
});

Deno.test("the kernels' element loaders decode every weight type as the CPU library does (host build)", async () => {
  if (built instanceof Error) throw built;
  const check = await buildCuda({ verbose: false, target: "cuda-host-check" });
  const cpu = await loadLibrary();
  const r = mulberry32(7);
  const dir = await Deno.makeTempDir();
  try {
    for (const type of CUDA_WEIGHT_TYPES) {
      const info = ggmlTypeInfo(type)!, n = 512;
      const x = Float32Array.from({ length: n }, () => (r() * 2 - 1) * 3);
      const row = new Uint8Array((n / info.blockSize) * info.typeSize);
      if (type === GGMLType.F32) row.set(new Uint8Array(x.buffer));
      else assert.equal(cpu.symbols.le_quantize_row(type, x, row, BigInt(n)), 0);
      const want = new Float32Array(n);
      assert.equal(cpu.symbols.le_dequantize_row(type, row, want, BigInt(n)), 0);
      await Deno.writeFile(`${dir}/in`, row);
      const out = await new Deno.Command(check, {
        args: [String(type), String(n), `${dir}/in`, `${dir}/out`],
      }).output();
      assert.ok(out.success, `dequant_check ${info.name}: exit ${out.code}`);
      const got = new Float32Array((await Deno.readFile(`${dir}/out`)).buffer);
      assert.deepEqual(got, want, info.name);
    }
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});
