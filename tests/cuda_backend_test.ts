// The CUDA backend above its kernels, without a GPU: the no-device error
// (a real test on a machine without a driver), nGpuLayers' validation and
// layer placement, TypeScript's checks before anything reaches C, and the
// whole data path (device buffers, weight upload, split copies, KV cache on
// the "device") over a host emulation of the C library that must reproduce
// the CPU backend's logits bit for bit.
import assert from "node:assert/strict";
import {
  CudaBackend,
  CudaBuffer,
  CudaError,
  CudaUnavailableError,
  probeCuda,
} from "../lib/backend/cuda.ts";
import { loadCudaLibrary, setCudaLibrary } from "../ffi/cuda_library.ts";
import { loadLibrary } from "../ffi/library.ts";
import { bufferCopy, bufferGet, bufferSet, HostBuffer } from "../lib/ggml/memory.ts";
import { NodeValidationError } from "../lib/backend/validate.ts";
import { GGMLType } from "../lib/ggml/types.ts";
import { Op } from "../lib/graph/ops.ts";
import type { Backend, ExecNode } from "../lib/backend/types.ts";
import { backendPlan, layerAssignment } from "../lib/runtime/backends.ts";
import { Model } from "../lib/model/model.ts";
import { Context } from "../lib/runtime/context.ts";
import { OptionError } from "../lib/options.ts";
import { hostDouble } from "./cuda_host_double.ts";

const MODEL = new URL("../models/tolstoy-6m-f16.gguf", import.meta.url).pathname;
const probe = await probeCuda();
const cpuLib = await loadLibrary();

Deno.test({
  name: "no usable device: one line naming the library, the driver call and the CUDA error",
  ignore: probe.ok, // only where no device is usable (this is the path under test)
  async fn() {
    const lib = await loadCudaLibrary();
    const err = await CudaBackend.create().then(() => null, (e) => e);
    assert.ok(err instanceof CudaUnavailableError, String(err));
    assert.equal(err.call, "cudaGetDeviceCount");
    assert.ok(err.message.includes(lib.path), err.message);
    assert.match(err.message, /cudaGetDeviceCount: .+ \((cudaError\w+)\) \[code \d+\]$/);
    assert.doesNotMatch(err.message, /\n/);
    // Through a context: nGpuLayers > 0 fails with that message; 0 is the CPU.
    using model = await Model.load(MODEL);
    await assert.rejects(
      () => Context.create(model, { nCtx: 64, nGpuLayers: 2 }),
      (e: unknown) => e instanceof CudaUnavailableError && e.message === err.message,
    );
    using ctx = await Context.create(model, { nCtx: 64, nGpuLayers: 0 });
    assert.equal((await ctx.decode([1, 2])).logits.length, 1);
  },
});

Deno.test("nGpuLayers: integers >= -1, not together with backend or backends", async () => {
  using model = await Model.load(MODEL);
  for (
    const [o, re] of [
      [{ nGpuLayers: -2 }, /nGpuLayers/],
      [{ nGpuLayers: 1.5 }, /nGpuLayers/],
      [{ nGpuLayers: "3" }, /nGpuLayers/],
      [{ nGpuLayers: 2, backend: "cpu" }, /nGpuLayers.*0 together with backend/],
      [{ nGpuLayers: -1, backends: ["cpu"] }, /nGpuLayers/],
    ] as const
  ) {
    await assert.rejects(
      () => Context.create(model, o as never),
      (e: unknown) => e instanceof OptionError && re.test(e.message),
      JSON.stringify(o),
    );
  }
});

Deno.test("nGpuLayers places layers as llama.cpp's n_gpu_layers does", () => {
  const stub = (name: string) => ({ name }) as Backend;
  const nLayer = 6;
  for (const k of [-1, 1, 2, 5, 6, 7, 100]) {
    const plan = backendPlan({ gpuLayers: k }, nLayer);
    assert.deepEqual(plan.backends, ["cpu", "cuda"]);
    const at = layerAssignment(plan, plan.backends.map(stub));
    // llama_model::load_tensors: i_gpu_start = max(n_layer - ngl, 0), and
    // layer il is on the GPU when il >= i_gpu_start (-1 meaning all).
    const ngl = k < 0 ? nLayer + 1 : k;
    const start = Math.max(nLayer - ngl, 0);
    for (let il = 0; il < nLayer; il++) {
      assert.equal(at(il).name, il >= start ? "cuda" : "cpu", `k ${k} layer ${il}`);
    }
    // Documented difference: the output head goes with the last backend.
    assert.equal(at(nLayer).name, "cuda");
  }
  assert.throws(() => backendPlan({ gpuLayers: 2 }), /layer count/);
});

Deno.test("device buffers: ranges are checked in TypeScript before any native call", async () => {
  using dbl = hostDouble(cpuLib);
  using cuda = await CudaBackend.create({ library: dbl.lib });
  assert.equal(cuda.device.name, "host emulation");
  const a = cuda.alloc(64), b = cuda.alloc(64);
  assert.throws(() => a.bytes, /device memory/);
  const before = new Map(dbl.calls);
  assert.throws(() => bufferSet(a, 60, new Uint8Array(8)), RangeError);
  assert.throws(() => a.set(-1, new Uint8Array(1)), RangeError);
  assert.throws(() => a.get(0, new Uint8Array(65)), RangeError);
  assert.throws(() => a.copy(b, 32, 40, 32), RangeError);
  assert.throws(() => a.clear(256), RangeError);
  assert.deepEqual(dbl.calls, before, "a refused transfer reached the library");
  // What passes the checks moves the bytes: set, copy (device to device), get.
  bufferSet(a, 8, new Uint8Array([1, 2, 3, 4]));
  bufferCopy(b, 0, a, 8, 4);
  assert.deepEqual([...bufferGet(b, 0, 4)], [1, 2, 3, 4]);
  assert.equal(dbl.calls.get("lec_memcpy_d2d"), 1);
  // From host memory: the source's own get, then up.
  const host = new HostBuffer("cpu", new Uint8Array([9, 8, 7, 6]));
  bufferCopy(b, 4, host, 0, 4);
  assert.deepEqual([...bufferGet(b, 0, 8)], [1, 2, 3, 4, 9, 8, 7, 6]);
  cuda.free(a);
  assert.ok(a instanceof CudaBuffer && a.freed);
  assert.throws(() => a.get(0, new Uint8Array(1)), /freed/);
});

Deno.test("compute: malformed or unsupported nodes never reach lec_graph_compute", async () => {
  using dbl = hostDouble(cpuLib);
  using cuda = await CudaBackend.create({ library: dbl.lib });
  const buf = cuda.alloc(2048);
  const t = (ne0: number, offset = 0) => ({
    type: GGMLType.F32,
    ne: [ne0, 1, 1, 1] as [number, number, number, number],
    nb: [4, 4 * ne0, 4 * ne0, 4 * ne0] as [number, number, number, number],
    data: { buffer: buf, offset },
  });
  const node = (op: number, dst: ExecNode["dst"], src: ExecNode["src"]): ExecNode => ({
    op: op as ExecNode["op"],
    dst,
    src,
    params: new Int32Array(16),
  });
  // src extends past the buffer's end
  await assert.rejects(
    () => cuda.compute([node(Op.SILU, t(16), [t(16, 2040)])]),
    NodeValidationError,
  );
  // a type combination with no CUDA kernel: a copy into Q5_0 (22 bytes per 32 elements)
  const q50 = {
    ...t(32, 512),
    type: GGMLType.Q5_0,
    nb: [22, 22, 22, 22] as [number, number, number, number],
  };
  await assert.rejects(
    () => cuda.compute([node(Op.CPY, q50, [t(32, 256)])]),
    (e: unknown) => e instanceof CudaError && /no CUDA kernel/.test(e.message),
  );
  assert.equal(dbl.calls.get("lec_graph_compute"), undefined);
  // a good node runs (on the host double)
  bufferSet(buf, 64, new Uint8Array(new Float32Array(16).fill(1).buffer));
  await cuda.compute([node(Op.SILU, t(16), [t(16, 64)])]);
  const y = new Float32Array(bufferGet(buf, 0, 64).buffer);
  assert.ok(Math.abs(y[0] - 1 / (1 + Math.exp(-1))) < 1e-6);
  assert.equal(dbl.calls.get("lec_graph_compute"), 1);
});

async function logitsOf(opts: Record<string, unknown>, steps: number): Promise<Float32Array[]> {
  using model = await Model.load(MODEL);
  using ctx = await Context.create(model, { nCtx: 128, threads: 1, ...opts });
  const out: Float32Array[] = [];
  const prompt = model.tokenizer.encode("Happy families are all alike;");
  let last = (await ctx.decode(prompt)).logits.at(-1)!;
  out.push(last);
  for (let i = 0; i < steps; i++) {
    let best = 0;
    for (let j = 1; j < last.length; j++) if (last[j] > last[best]) best = j;
    last = (await ctx.decode([best])).logits.at(-1)!;
    out.push(last);
  }
  return out;
}

Deno.test("nGpuLayers over the host emulation: logits identical to the cpu, weights uploaded once", async () => {
  using dbl = hostDouble(cpuLib);
  setCudaLibrary(dbl.lib);
  try {
    for (const flashAttn of [false, true]) {
      const want = await logitsOf({ flashAttn }, 4); // cpu only: the double is not opened
      for (const nGpuLayers of [-1, 3]) {
        const got = await logitsOf({ flashAttn, nGpuLayers }, 4);
        got.forEach((l, i) =>
          assert.deepEqual(l, want[i], `nGpuLayers ${nGpuLayers} flashAttn ${flashAttn} step ${i}`)
        );
      }
    }
    assert.ok((dbl.calls.get("lec_graph_compute") ?? 0) > 0, "no split ran on the device");
    // Steady state: a further decode step allocates nothing on the device
    // (weights were mirrored on first use, no per-step uploads of foreign buffers).
    using model = await Model.load(MODEL);
    using ctx = await Context.create(model, { nCtx: 64, threads: 1, nGpuLayers: 3 });
    await ctx.decode([1, 45]);
    await ctx.decode([99]);
    const mallocs = dbl.calls.get("lec_malloc");
    await ctx.decode([300]);
    await ctx.decode([17]);
    assert.equal(dbl.calls.get("lec_malloc"), mallocs);
    // Partial offload moved activations across the split: host to device and back.
    assert.ok(
      (dbl.calls.get("lec_memcpy_h2d") ?? 0) > 0 && (dbl.calls.get("lec_memcpy_d2h") ?? 0) > 0,
    );
  } finally {
    setCudaLibrary(null);
  }
});

Deno.test("deno task bench:gpu: times the CUDA backend (host emulation), one-line error without a device", async () => {
  const { buildCuda } = await import("../ffi/cuda_build.ts");
  const emu = await buildCuda({ verbose: false, target: "cuda-emu" });
  const script = new URL("../bench/gpu.ts", import.meta.url).pathname;
  const bench = async (env: Record<string, string>, ...extra: string[]) => {
    const out = await new Deno.Command(Deno.execPath(), {
      args: ["run", "-A", script, "-m", MODEL, "-p", "8", "-n", "2", "--reps", "2", ...extra],
      env,
      stdout: "piped",
      stderr: "piped",
    }).output();
    const text = (b: Uint8Array) => new TextDecoder().decode(b).trim();
    return { code: out.code, stdout: text(out.stdout), stderr: text(out.stderr) };
  };
  const ok = await bench({ LLM_EDGE_CUDA_LIB: emu }, "--gpu-layers", "3");
  assert.equal(ok.code, 0, ok.stderr);
  const lines = ok.stdout.split("\n");
  assert.match(lines[0], /^tolstoy-6m-f16\.gguf on host emulation \(sm_\d+\), gpu-layers 3, /);
  assert.match(lines[1], /^ {2}pp8: \d+\.\d tok\/s ±\d+% \(\d+\.\d, \d+\.\d\)$/);
  assert.match(lines[2], /^ {2}tg2: \d+\.\d tok\/s ±\d+% \(\d+\.\d, \d+\.\d\)$/);
  assert.equal(
    (await bench({}, "--gpu-layers", "0")).stderr,
    "bench:gpu: --gpu-layers 0 is the CPU: use deno task bench (see --help)",
  );
  if (!probe.ok) {
    const none = await bench({});
    assert.equal(none.code, 1);
    assert.equal(none.stderr, `bench:gpu: ${probe.reason}`);
  }
});
