// The CUDA kernels against the CPU backend, op by op (NMSE per case), and
// greedy generation on tolstoy-6m identical to the CPU backend for full and
// partial offload. Every test here needs a usable CUDA device and is
// ignored, with the reason in its name, where there is none: written for
// the first session that has a GPU (kernels/cuda/README.md).
import assert from "node:assert/strict";
import { f32Bits, Op, RopeMode } from "../lib/graph/ops.ts";
import { GGMLType, ggmlTypeInfo } from "../lib/ggml/types.ts";
import type { Backend, Dims, ExecNode, ResolvedTensor } from "../lib/backend/types.ts";
import { bufferGet, bufferSet } from "../lib/ggml/memory.ts";
import { CpuBackend } from "../lib/backend/cpu.ts";
import { CudaBackend, cudaOpSupported, probeCuda } from "../lib/backend/cuda.ts";
import { validateNode } from "../lib/backend/validate.ts";
import { bf16ToF32, f32ToBf16, f32ToFp16, fp16ToF32 } from "../lib/ggml/half.ts";
import { loadLibrary } from "../ffi/library.ts";
import { buildCuda } from "../ffi/cuda_build.ts";
import { openCudaLibrary, setCudaLibrary } from "../ffi/cuda_library.ts";
import { Model } from "../lib/model/model.ts";
import { Context } from "../lib/runtime/context.ts";
import { mulberry32 as rng } from "./rng.ts";

const { F32, F16, BF16, Q8_0, Q4_0, I32 } = GGMLType;
const { Q4_1, Q5_0, Q5_1, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K } = GGMLType;
const FLOAT: readonly number[] = [F32, F16, BF16];
const WEIGHTS = [F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K];
const cpuLib = await loadLibrary();
const probe = await probeCuda();
const ignore = !probe.ok;
const why = probe.ok
  ? ""
  : ` (ignored: no CUDA device: ${/\((cuda\w+)\)/.exec(probe.reason)?.[1] ?? probe.reason})`;
const MODEL = new URL("../models/tolstoy-6m-f16.gguf", import.meta.url).pathname;

interface Spec {
  type: number;
  ne: Dims;
  nb: Dims;
  bytes: Uint8Array;
}

function packedNb(type: number, ne: Dims): Dims {
  const info = ggmlTypeInfo(type)!;
  const nb1 = (ne[0] / info.blockSize) * info.typeSize;
  return [info.typeSize, nb1, nb1 * ne[1], nb1 * ne[1] * ne[2]];
}

function encode(type: number, vals: ArrayLike<number>): Uint8Array {
  const info = ggmlTypeInfo(type)!;
  const out = new Uint8Array((vals.length / info.blockSize) * info.typeSize);
  const v = new DataView(out.buffer);
  if (type === F32) new Float32Array(out.buffer).set(vals);
  else if (type === I32) new Int32Array(out.buffer).set(vals);
  else if (type === F16) {
    for (let i = 0; i < vals.length; i++) v.setUint16(2 * i, f32ToFp16(vals[i]), true);
  } else if (type === BF16) {
    for (let i = 0; i < vals.length; i++) v.setUint16(2 * i, f32ToBf16(vals[i]), true);
  } else {
    const rc = cpuLib.symbols.le_quantize_row(
      type,
      new Float32Array(vals),
      out,
      BigInt(vals.length),
    );
    assert.equal(rc, 0, `le_quantize_row(${type})`);
  }
  return out;
}

const r = rng(18);
const rand = (type: number, ne: Dims, scale = 1): Spec => {
  const n = ne[0] * ne[1] * ne[2] * ne[3];
  const vals = Array.from({ length: n }, () => (r() * 2 - 1) * scale);
  return { type, ne, nb: packedNb(type, ne), bytes: encode(type, vals) };
};
const vals = (type: number, ne: Dims, v: ArrayLike<number>): Spec => ({
  type,
  ne,
  nb: packedNb(type, ne),
  bytes: encode(type, v),
});
const empty = (type: number, ne: Dims): Spec => {
  const nb = packedNb(type, ne);
  return { type, ne, nb, bytes: new Uint8Array(nb[3] * ne[3]) };
};

interface Case {
  name: string;
  op: number;
  dst: Spec;
  src: Spec[];
  params?: number[];
  /** Largest NMSE allowed against the CPU backend. */
  nmse: number;
}

const F32_NMSE = 1e-6;

function cases(): Case[] {
  const out: Case[] = [];
  const ne: Dims = [64, 5, 3, 2];
  for (const t of WEIGHTS) {
    out.push({
      name: `get_rows ${t}`,
      op: Op.GET_ROWS,
      dst: empty(F32, [256, 4, 1, 1]),
      src: [rand(t, [256, 7, 1, 1]), vals(I32, [4, 1, 1, 1], [3, 0, 6, 3])],
      nmse: F32_NMSE,
    });
  }
  for (const op of [Op.RMS_NORM, Op.NORM]) {
    out.push({
      name: `norm ${op}`,
      op,
      dst: empty(F32, ne),
      src: [rand(F32, ne)],
      params: [f32Bits(1e-5)],
      nmse: F32_NMSE,
    });
  }
  for (const op of [Op.ADD, Op.MUL]) {
    out.push({
      name: `binary ${op} broadcast`,
      op,
      dst: empty(F32, ne),
      src: [rand(F32, ne), rand(F32, [64, 1, 3, 1])],
      nmse: F32_NMSE,
    });
  }
  for (const op of [Op.SILU, Op.GELU]) {
    out.push({ name: `unary ${op}`, op, dst: empty(F32, ne), src: [rand(F32, ne, 4)], nmse: 1e-6 });
  }
  out.push({
    name: "scale",
    op: Op.SCALE,
    dst: empty(F32, ne),
    src: [rand(F32, ne)],
    params: [f32Bits(0.125), f32Bits(0.5)],
    nmse: F32_NMSE,
  });
  for (const op of [Op.SWIGLU, Op.GEGLU]) {
    out.push({
      name: `glu ${op}`,
      op,
      dst: empty(F32, ne),
      src: [rand(F32, ne, 3), rand(F32, ne)],
      nmse: 1e-6,
    });
  }
  const ropeNe: Dims = [32, 4, 6, 1];
  for (const t of [F32, F16]) {
    for (const mode of [RopeMode.NORMAL, RopeMode.NEOX]) {
      for (const yarn of [false, true]) {
        const params = [24, mode, 4096, f32Bits(10000), f32Bits(yarn ? 0.25 : 1)];
        params.push(f32Bits(yarn ? 1 : 0), f32Bits(1), f32Bits(32), f32Bits(1));
        const src = [rand(t, ropeNe), vals(I32, [6, 1, 1, 1], [0, 1, 7, 100, 2047, 5])];
        if (yarn) {
          src.push(vals(F32, [12, 1, 1, 1], Array.from({ length: 12 }, (_, i) => 1 + i / 4)));
        }
        out.push({
          name: `rope type ${t} mode ${mode}${yarn ? " yarn+ff" : ""}`,
          op: Op.ROPE,
          dst: empty(t, ropeNe),
          src,
          params,
          nmse: t === F32 ? F32_NMSE : 1e-5,
        });
      }
    }
  }
  const sm: Dims = [40, 7, 4, 1];
  for (const [maskType, maxBias] of [[F16, 0], [F32, 8]] as const) {
    const mask = Array.from(
      { length: 40 * 8 },
      (_, i) => (i % 40) > (i / 40 | 0) + 30 ? -Infinity : r(),
    );
    out.push({
      name: `soft_max mask ${maskType} max_bias ${maxBias}`,
      op: Op.SOFT_MAX,
      dst: empty(F32, sm),
      src: [rand(F32, sm, 3), vals(maskType, [40, 8, 1, 1], mask)],
      params: [f32Bits(0.3), f32Bits(maxBias)],
      nmse: F32_NMSE,
    });
  }
  // Flash attention: GQA (4 query heads over 2 KV heads), a causal-style F16 mask.
  const kvMask = Array.from(
    { length: 37 * 8 },
    (_, i) => (i % 37) > (i / 37 | 0) + 30 ? -Infinity : 0,
  );
  for (const [kt, maxBias] of [[F16, 0], [F32, 0], [Q8_0, 0], [F16, 8]] as const) {
    out.push({
      name: `flash_attn_ext K/V ${kt} max_bias ${maxBias}`,
      op: Op.FLASH_ATTN_EXT,
      dst: empty(F32, [64, 4, 5, 1]),
      src: [
        rand(F32, [64, 5, 4, 1]),
        rand(kt, [64, 37, 2, 1]),
        rand(kt, [64, 37, 2, 1]),
        vals(F16, [37, 8, 1, 1], kvMask),
      ],
      params: [f32Bits(0.125), f32Bits(maxBias), f32Bits(0)],
      nmse: kt === F32 ? F32_NMSE : 1e-5,
    });
  }
  // Mamba: the convolution, the scan (Mamba-2 with groups, K = 2 rollback
  // slots, states picked by ids, dt past softplus's threshold; Mamba-1 with
  // A per state element), and concat along each dim (one strided source).
  out.push({
    name: "ssm_conv",
    op: Op.SSM_CONV,
    dst: empty(F32, [24, 5, 2, 1]),
    src: [rand(F32, [8, 24, 2, 1]), rand(F32, [4, 24, 1, 1])],
    nmse: F32_NMSE,
  });
  const dt = (n: number) => vals(F32, [n, 1, 1, 1], Array.from({ length: n }, () => r() * 28 - 3));
  const neg = (ne: Dims) => vals(F32, ne, Array.from({ length: ne[0] * ne[1] }, () => -r()));
  out.push({
    name: "ssm_scan mamba-2 K=2",
    op: Op.SSM_SCAN,
    dst: empty(F32, [8 * 4 * 3 * 2 + 2 * 16 * 8 * 4 * 2, 1, 1, 1]),
    src: [
      rand(F32, [16, 8, 4, 3]),
      rand(F32, [8, 4, 3, 2]),
      { ...dt(24), ne: [4, 3, 2, 1], nb: [4, 16, 48, 96] },
      neg([1, 4, 1, 1]),
      rand(F32, [16, 2, 3, 2]),
      rand(F32, [16, 2, 3, 2]),
      vals(I32, [2, 1, 1, 1], [2, 0]),
    ],
    params: [2],
    nmse: 1e-5,
  });
  out.push({
    name: "ssm_scan mamba-1",
    op: Op.SSM_SCAN,
    dst: empty(F32, [12 * 3 + 16 * 12, 1, 1, 1]),
    src: [
      rand(F32, [16, 1, 12, 2]),
      rand(F32, [1, 12, 3, 1]),
      { ...dt(36), ne: [12, 3, 1, 1], nb: [4, 48, 144, 144] },
      neg([16, 12, 1, 1]),
      rand(F32, [16, 1, 3, 1]),
      rand(F32, [16, 1, 3, 1]),
      vals(I32, [1, 1, 1, 1], [1]),
    ],
    params: [1],
    nmse: 1e-5,
  });
  const wide = rand(F32, [32, 3, 2, 1]);
  const strided: Spec = { ...wide, ne: [16, 3, 2, 1], nb: [4, 128, 384, 768] };
  for (
    const [dim, b] of [[0, [8, 3, 2, 1]], [1, [16, 5, 2, 1]], [2, [16, 3, 3, 1]], [3, [
      16,
      3,
      2,
      2,
    ]]] as const
  ) {
    const d: Dims = [16, 3, 2, 1];
    d[dim] += b[dim];
    out.push({
      name: `concat dim ${dim}`,
      op: Op.CONCAT,
      dst: empty(F32, d),
      src: [strided, rand(F32, [...b])],
      params: [dim],
      nmse: 0,
    });
  }
  out.push({
    name: "hadamard",
    op: Op.HADAMARD,
    dst: empty(F32, [512, 3, 2, 1]),
    src: [rand(F32, [512, 3, 2, 1])],
    nmse: 0,
  });
  const c: Dims = [64, 6, 2, 1];
  for (
    const [s, d] of [[F32, F16], [F16, F32], [F32, BF16], [F32, Q8_0], [Q8_0, F32], [F32, Q4_0]]
  ) {
    out.push({
      name: `cpy ${s} -> ${d}`,
      op: Op.CPY,
      dst: empty(d, c),
      src: [rand(s, c)],
      nmse: d === Q4_0 ? 1e-2 : d === Q8_0 ? 1e-4 : 1e-5,
    });
  }
  // A transposed (strided) source, as the V cache copies do.
  const tsrc = rand(F32, [6, 64, 1, 1]);
  out.push({
    name: "cpy transposed view F32 -> F16",
    op: Op.CPY,
    dst: empty(F16, [64, 6, 1, 1]),
    src: [{ ...tsrc, ne: [64, 6, 1, 1], nb: [24, 4, 24 * 64, 24 * 64] }],
    nmse: 1e-5,
  });
  for (const t of WEIGHTS) {
    for (const n of [1, 4, 33]) {
      // Quantized weights meet activations rounded differently (CPU: Q8_0/Q8_K, CUDA: Q8_1 or f32).
      const tol = t === F32 ? F32_NMSE : FLOAT.includes(t) ? 1e-5 : 1e-4;
      out.push({
        name: `mul_mat ${t} N=${n}`,
        op: Op.MUL_MAT,
        dst: empty(F32, [48, n, 2, 1]),
        src: [rand(t, [256, 48, 1, 1]), rand(F32, [256, n, 2, 1])],
        nmse: tol,
      });
    }
  }
  // (Last, so the cases above keep their random inputs.)
  // KV streams as dim 3 (kvUnified false): per stream, queries against its
  // own keys and values, the mask one plane per stream broadcast over heads.
  const streamMask = Array.from(
    { length: 37 * 8 * 3 },
    (_, i) => (i % 37) > ((i / 37 | 0) % 8) + 28 + (i / 296 | 0) ? -Infinity : 0,
  );
  out.push({
    name: "flash_attn_ext K/V F16 over 3 streams",
    op: Op.FLASH_ATTN_EXT,
    dst: empty(F32, [64, 4, 5, 3]),
    src: [
      rand(F32, [64, 5, 4, 3]),
      rand(F16, [64, 37, 2, 3]),
      rand(F16, [64, 37, 2, 3]),
      vals(F16, [37, 8, 1, 3], streamMask),
    ],
    params: [f32Bits(0.125), f32Bits(0), f32Bits(0)],
    nmse: 1e-5,
  });
  out.push({
    name: "soft_max mask F32 over 3 streams",
    op: Op.SOFT_MAX,
    dst: empty(F32, [37, 5, 4, 3]),
    src: [rand(F32, [37, 5, 4, 3], 3), vals(F32, [37, 8, 1, 3], streamMask)],
    params: [f32Bits(0.3), f32Bits(0)],
    nmse: F32_NMSE,
  });
  out.push({
    name: "mul_mat F16 kq over 3 streams",
    op: Op.MUL_MAT,
    dst: empty(F32, [37, 5, 4, 3]),
    src: [rand(F16, [64, 37, 2, 3]), rand(F32, [64, 5, 4, 3])],
    nmse: 1e-5,
  });
  // set_rows (the KV stores): 5 rows scattered into 12, ids broadcast over
  // dim 2; and one element per row, as the transposed V store writes.
  for (const d of [F32, F16, Q8_0, Q4_0]) {
    out.push({
      name: `set_rows F32 -> ${d}`,
      op: Op.SET_ROWS,
      dst: empty(d, [64, 12, 2, 1]),
      src: [rand(F32, [64, 5, 2, 1]), vals(I32, [5, 1, 1, 1], [7, 0, 11, 3, 4])],
      nmse: d === Q4_0 ? 1e-2 : d === Q8_0 ? 1e-4 : 1e-5,
    });
  }
  out.push({
    name: "set_rows F32 -> F16, one element per row",
    op: Op.SET_ROWS,
    dst: empty(F16, [1, 40, 1, 1]),
    src: [rand(F32, [1, 6, 1, 1]), vals(I32, [6, 1, 1, 1], [39, 1, 20, 21, 0, 5])],
    nmse: 1e-5,
  });
  return out;
}

function place(b: Backend, s: Spec): ResolvedTensor {
  const buf = b.alloc(s.bytes.length);
  bufferSet(buf, 0, s.bytes);
  return { type: s.type, ne: s.ne, nb: s.nb, data: { buffer: buf, offset: 0 } };
}

async function run(b: Backend, c: Case): Promise<Uint8Array> {
  const dst = place(b, c.dst), src = c.src.map((s) => place(b, s));
  const params = new Int32Array(16);
  (c.params ?? []).forEach((p, i) => (params[i] = p));
  const node: ExecNode = { op: c.op as ExecNode["op"], dst, src, params, name: c.name };
  await b.compute([node]);
  const out = bufferGet(dst.data.buffer, 0, c.dst.bytes.length);
  for (const t of [dst, ...src]) b.free(t.data.buffer);
  return out;
}

function decode(s: Spec, bytes: Uint8Array): Float64Array {
  const n = s.ne[0] * s.ne[1] * s.ne[2] * s.ne[3];
  const v = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  const out = new Float64Array(n);
  if (!FLOAT.includes(s.type)) {
    const f = new Float32Array(n);
    assert.equal(cpuLib.symbols.le_dequantize_row(s.type, bytes, f, BigInt(n)), 0);
    out.set(f);
  } else {
    for (let i = 0; i < n; i++) {
      out[i] = s.type === F32
        ? v.getFloat32(4 * i, true)
        : s.type === F16
        ? fp16ToF32(v.getUint16(2 * i, true))
        : bf16ToF32(v.getUint16(2 * i, true));
    }
  }
  return out;
}

function nmse(got: Float64Array, want: Float64Array): number {
  let num = 0, den = 0;
  for (let i = 0; i < want.length; i++) {
    if (!Number.isFinite(want[i]) && got[i] === want[i]) continue;
    num += (got[i] - want[i]) ** 2;
    den += want[i] ** 2;
  }
  return den === 0 ? num : num / den;
}

Deno.test("every CUDA op case is a valid node the CUDA op table accepts (runs on the cpu)", async () => {
  // Without a GPU this keeps the cases below ready: valid, supported, computable.
  using cpu = await CpuBackend.create({ threads: 1 });
  const list = cases();
  assert.equal(list.length, 98);
  for (const c of list) {
    const dst = place(cpu, c.dst), src = c.src.map((s) => place(cpu, s));
    const params = new Int32Array(16);
    (c.params ?? []).forEach((p, i) => (params[i] = p));
    const node: ExecNode = { op: c.op as ExecNode["op"], dst, src, params, name: c.name };
    validateNode(node, 0);
    const q = { op: node.op, dstType: dst.type, srcTypes: src.map((t) => t.type) };
    assert.ok(cudaOpSupported(q), c.name);
    await cpu.compute([node]);
    const got = decode(c.dst, bufferGet(dst.data.buffer, 0, c.dst.bytes.length));
    assert.ok(got.some((x) => x !== 0), `${c.name}: the cpu wrote nothing`);
    for (const t of [dst, ...src]) cpu.free(t.data.buffer);
  }
});

// Every case on `cuda` against the CPU backend; the failures, one line each.
// LLM_EDGE_CUDA_NMSE_LOG=1 prints every case's NMSE (for a GPU session's record).
async function compareOps(cuda: CudaBackend): Promise<string[]> {
  using cpu = await CpuBackend.create({ threads: 2 });
  const log = Deno.env.get("LLM_EDGE_CUDA_NMSE_LOG") === "1";
  const failures: string[] = [];
  for (const c of cases()) {
    const want = decode(c.dst, await run(cpu, c));
    const got = decode(c.dst, await run(cuda, c));
    const e = nmse(got, want);
    if (log) {
      console.log(`nmse ${cuda.device.name}: ${c.name} ${e.toExponential(2)} (bound ${c.nmse})`);
    }
    if (!(e <= c.nmse)) failures.push(`${c.name}: NMSE ${e.toExponential(2)} > ${c.nmse}`);
  }
  return failures;
}

Deno.test("the CUDA kernels, built for the host emulation, match the cpu backend", async () => {
  // kernels/cuda/emu runs the same kernel sources on the CPU (fibers for
  // threads): indexing, strides, broadcasting, block decoding and control
  // flow are checked here; device rounding and real concurrency are not.
  const path = await buildCuda({ verbose: false, target: "cuda-emu" });
  using cuda = await CudaBackend.create({ library: openCudaLibrary(path) });
  assert.equal(cuda.device.name, "host emulation");
  assert.deepEqual(await compareOps(cuda), []);
});

Deno.test({
  name: `cuda ops match the cpu backend (NMSE per case)${why}`,
  ignore,
  async fn() {
    using cuda = await CudaBackend.create();
    assert.deepEqual(await compareOps(cuda), []);
  },
});

async function greedy(opts: Record<string, unknown>, n: number): Promise<number[]> {
  using model = await Model.load(MODEL);
  using ctx = await Context.create(model, { nCtx: 256, ...opts });
  const prompt = model.tokenizer.encode("Happy families are all alike;", { addSpecial: true });
  const out: number[] = [];
  let logits = (await ctx.decode(prompt)).logits.at(-1)!;
  for (let i = 0; i < n; i++) {
    let best = 0;
    for (let j = 1; j < logits.length; j++) if (logits[j] > logits[best]) best = j;
    out.push(best);
    logits = (await ctx.decode([best])).logits.at(-1)!;
  }
  return out;
}

Deno.test("greedy tolstoy-6m on the host emulation of the kernels equals the cpu backend", async () => {
  // The whole model through kernels/cuda's sources (emulated), full and
  // partial offload; a few tokens, as the emulation is slow.
  const path = await buildCuda({ verbose: false, target: "cuda-emu" });
  setCudaLibrary(openCudaLibrary(path));
  try {
    for (
      const [opts, n] of [[{ nGpuLayers: -1 }, 6], [{ nGpuLayers: 3, flashAttn: true }, 4]] as const
    ) {
      const want = await greedy({ flashAttn: "flashAttn" in opts }, n);
      assert.deepEqual(await greedy(opts, n), want, JSON.stringify(opts));
    }
  } finally {
    setCudaLibrary(null);
  }
});

Deno.test({
  name: `greedy tolstoy-6m: full and partial offload equal the cpu backend${why}`,
  ignore,
  async fn() {
    for (const flashAttn of [false, true]) {
      const want = await greedy({ flashAttn }, 32);
      for (const nGpuLayers of [-1, 3, 1]) {
        const got = await greedy({ flashAttn, nGpuLayers }, 32);
        assert.deepEqual(got, want, `nGpuLayers ${nGpuLayers} flashAttn ${flashAttn}`);
      }
    }
  },
});
