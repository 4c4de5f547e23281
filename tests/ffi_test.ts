// FFI layer tests: library discovery and its error message, file mapping,
// and TypeScript validation that keeps malformed nodes away from C.
import assert from "node:assert/strict";
import {
  BUILD_HINT,
  LIB_NAME,
  loadLibrary,
  locateLibrary,
  NativeLibraryError,
} from "../ffi/library.ts";
import { ABI_VERSION, LE_CANCELLED, MAX_THREADS } from "../ffi/symbols.ts";
import { mapFile, MapFileError } from "../lib/gguf/mmap.ts";
import { CpuBackend, NativeComputeError } from "../lib/backend/cpu.ts";
import { NodeValidationError } from "../lib/backend/validate.ts";
import { MAX_PARAMS, MAX_SRC, Op } from "../lib/graph/ops.ts";
import { GGMLType } from "../lib/ggml/types.ts";
import type { ExecNode, ResolvedTensor } from "../lib/backend/types.ts";
import type { BackendBuffer } from "../lib/backend/types.ts";

const lib = await loadLibrary();
const MODEL = new URL("../models/tolstoy-6m-f16.gguf", import.meta.url).pathname;

Deno.test("library is found, opened and reports its ABI", () => {
  assert.ok(lib.path.endsWith(LIB_NAME));
  assert.equal(lib.symbols.le_abi_version(), ABI_VERSION);
  const f = lib.symbols.le_cpu_features();
  assert.ok(f >= 0 && f < 8);
  assert.equal(locateLibrary({ envPath: lib.path }), lib.path);
});

Deno.test("the header's constants and op codes are the ones TypeScript uses", async () => {
  // One value each, defined in C: TypeScript's copies are checked here.
  const h = await Deno.readTextFile(new URL("../kernels/include/llm_edge.h", import.meta.url));
  const define = (name: string) => {
    const m = new RegExp(`^#define ${name} \\(?(-?\\d+)\\)?`, "m").exec(h);
    assert.ok(m, `${name} not defined in llm_edge.h`);
    return Number(m[1]);
  };
  assert.equal(define("LE_ABI_VERSION"), ABI_VERSION);
  assert.equal(define("LE_MAX_THREADS"), MAX_THREADS);
  assert.equal(define("LE_CANCELLED"), LE_CANCELLED);
  assert.equal(define("LE_MAX_SRC"), MAX_SRC);
  assert.equal(define("LE_MAX_PARAMS"), MAX_PARAMS);
  const body = /enum le_op \{([^}]*)\}/.exec(h)![1];
  const ops = Object.fromEntries(
    [...body.matchAll(/LE_OP_(\w+) = (\d+)/g)].map((m) => [m[1], Number(m[2])]),
  );
  assert.deepEqual(ops, Op);
  // le_ctx_new refuses one thread more than the shared limit
  assert.equal(lib.symbols.le_ctx_new(MAX_THREADS + 1), null);
  assert.match(lib.lastError(), new RegExp(`outside 1\\.\\.${MAX_THREADS}`));
});

Deno.test("a missing library gives an Error that says what to run", () => {
  assert.throws(
    () => locateLibrary({ envPath: "/nonexistent/libllm_edge.so" }),
    (e: unknown) =>
      e instanceof NativeLibraryError && /deno task build/.test(e.message) &&
      e.message.includes("/nonexistent/libllm_edge.so"),
  );
  const empty = Deno.makeTempDirSync();
  try {
    assert.throws(
      () => locateLibrary({ envPath: null, searchDirs: [empty] }),
      (e: unknown) => e instanceof NativeLibraryError && e.message.includes(BUILD_HINT),
    );
  } finally {
    Deno.removeSync(empty);
  }
});

Deno.test("mapFile maps a real file read-only without copying", () => {
  using m = mapFile(MODEL, lib);
  assert.equal(m.size, Deno.statSync(MODEL).size);
  assert.equal(new TextDecoder().decode(m.bytes.subarray(0, 4)), "GGUF");
  const head = new Uint8Array(64);
  const f = Deno.openSync(MODEL);
  f.readSync(head);
  f.close();
  assert.deepEqual(m.bytes.subarray(0, 64), head);
  assert.equal(m.backend, "host");
});

Deno.test("mapFile of a missing file throws a MapFileError naming it", () => {
  assert.throws(
    () => mapFile("/nonexistent/model.gguf", lib),
    (e: unknown) => e instanceof MapFileError && e.message.includes("/nonexistent/model.gguf"),
  );
});

function tensor(
  buffer: BackendBuffer,
  ne: number[],
  offset = 0,
  type: number = GGMLType.F32,
): ResolvedTensor {
  const ts = type === GGMLType.I32 || type === GGMLType.F32 ? 4 : 2;
  return {
    type,
    ne: ne as ResolvedTensor["ne"],
    nb: [ts, ts * ne[0], ts * ne[0] * ne[1], ts * ne[0] * ne[1] * ne[2]],
    data: { buffer, offset },
  };
}

Deno.test("validation rejects out-of-bounds and malformed nodes with Errors", async () => {
  using cpu = new CpuBackend({ threads: 2, library: lib });
  const buf = cpu.alloc(4 * 64);
  const params = new Int32Array(16);
  const node = (dst: ResolvedTensor, src: ResolvedTensor[], op: ExecNode["op"] = Op.SILU) => ({
    op,
    dst,
    src,
    params,
    name: "t",
  });
  // extent past the end: 65 floats in a 64-float buffer
  await assert.rejects(
    cpu.compute([node(tensor(buf, [65, 1, 1, 1]), [tensor(buf, [65, 1, 1, 1])])]),
    (e: unknown) =>
      e instanceof NodeValidationError && /outside/.test(e.message) && /dst/.test(e.message),
  );
  // offset pushes a fitting shape out
  await assert.rejects(
    cpu.compute([node(tensor(buf, [64, 1, 1, 1]), [tensor(buf, [64, 1, 1, 1], 4)])]),
    (e: unknown) => e instanceof NodeValidationError && /src0/.test(e.message),
  );
  // negative offsets, fractional shapes, wrong shapes
  assert.throws(
    () => cpu.computeSync([node(tensor(buf, [8, 1, 1, 1], -4), [tensor(buf, [8, 1, 1, 1])])]),
    NodeValidationError,
  );
  assert.throws(
    () => cpu.computeSync([node(tensor(buf, [8.5, 1, 1, 1]), [tensor(buf, [8, 1, 1, 1])])]),
    NodeValidationError,
  );
  assert.throws(
    () => cpu.computeSync([node(tensor(buf, [8, 2, 1, 1]), [tensor(buf, [8, 1, 1, 1])])]),
    NodeValidationError,
  );
  // unsupported op and types
  assert.throws(
    () => cpu.computeSync([node(tensor(buf, [8, 1, 1, 1]), [], 99 as ExecNode["op"])]),
    NodeValidationError,
  );
  // a JS-heap buffer has no native address
  const heap: BackendBuffer = { backend: "ref", size: 256, bytes: new Uint8Array(256), ptr: null };
  assert.throws(
    () => cpu.computeSync([node(tensor(heap, [8, 1, 1, 1]), [tensor(buf, [8, 1, 1, 1])])]),
    RangeError,
  );
  // writing into a read-only mapping is refused before C sees it
  using m = mapFile(MODEL, lib);
  assert.throws(
    () => cpu.computeSync([node(tensor(m, [8, 1, 1, 1]), [tensor(buf, [8, 1, 1, 1])])]),
    (e: unknown) => e instanceof NodeValidationError && /read-only/.test(e.message),
  );
  // a data-dependent failure (row id out of range) comes back as an Error from C
  const ids = cpu.alloc(4);
  new Int32Array(ids.bytes.buffer, ids.bytes.byteOffset, 1)[0] = 7;
  const rows = tensor(buf, [8, 4, 1, 1]);
  await assert.rejects(
    cpu.compute([
      node(
        tensor(buf, [8, 1, 1, 1], 128),
        [rows, tensor(ids, [1, 1, 1, 1], 0, GGMLType.I32)],
        Op.GET_ROWS,
      ),
    ]),
    (e: unknown) => e instanceof NativeComputeError && /row id 7/.test(e.message),
  );
  // the backend still works afterwards
  const f = new Float32Array(buf.bytes.buffer, buf.bytes.byteOffset, 64);
  f.fill(0);
  f[0] = 1;
  await cpu.compute([node(tensor(buf, [8, 1, 1, 1], 32), [tensor(buf, [8, 1, 1, 1])])]);
  assert.ok(Math.abs(f[8] - 1 / (1 + Math.exp(-1))) < 1e-7);
});

Deno.test("nonblocking compute leaves the event loop free and runs on mapped weights", async () => {
  using cpu = new CpuBackend({ threads: 2, library: lib });
  using m = mapFile(MODEL, lib);
  // get_rows reads the mapped file's first 64 bytes as 32 halves
  const ids = cpu.alloc(4);
  const out = cpu.alloc(4 * 32);
  const src: ResolvedTensor = {
    type: GGMLType.F16,
    ne: [32, 2, 1, 1],
    nb: [2, 64, 128, 128],
    data: { buffer: m, offset: 0 },
  };
  let ticked = false;
  const timer = new Promise<void>((r) => setTimeout(() => (ticked = true, r()), 0));
  await cpu.compute([{
    op: Op.GET_ROWS,
    dst: tensor(out, [32, 1, 1, 1]),
    src: [src, tensor(ids, [1, 1, 1, 1], 0, GGMLType.I32)],
    params: new Int32Array(16),
  }]);
  await timer;
  assert.ok(ticked);
  // row 0 of the file read as halves: "GG" = 0x4747
  const got = new Float32Array(out.bytes.buffer, out.bytes.byteOffset, 32);
  const dv = new DataView(m.bytes.buffer, m.bytes.byteOffset, 64);
  const h = dv.getUint16(0, true);
  assert.equal(h, 0x4747);
  assert.equal(got[0], 7.27734375); // 0x4747 as IEEE half
});

Deno.test("le_alloc: a large block is zero and resident only where written; le_free refuses an address inside a block", () => {
  const anonKiB = () =>
    Number(/RssAnon:\s+(\d+) kB/.exec(Deno.readTextFileSync("/proc/self/status"))![1]);
  const size = 256 << 20;
  const before = anonKiB();
  const p = lib.symbols.le_alloc(BigInt(size), 64n);
  assert.ok(p !== null, lib.lastError());
  assert.equal(Number(Deno.UnsafePointer.value(p)) % (2 << 20), 0, "on a 2 MiB boundary");
  // A compute arena's untouched tail must cost nothing (a memset made all of it resident).
  assert.ok(anonKiB() - before < 16 << 10, `${anonKiB() - before} KiB resident after le_alloc`);
  const view = new Uint8Array(Deno.UnsafePointerView.getArrayBuffer(p, size));
  for (let i = 0; i < size; i += 1 << 20) assert.equal(view[i] | view[i + (1 << 20) - 1], 0);
  view.fill(1, 0, 8 << 20);
  assert.ok(anonKiB() - before >= 8 << 10, "written pages are resident");
  lib.symbols.le_free(p);
  // An address inside a block, not its start, leaves memory alone.
  const small = lib.symbols.le_alloc(100n, 64n);
  assert.ok(small !== null);
  assert.equal(
    new Uint8Array(Deno.UnsafePointerView.getArrayBuffer(small, 100)).every((b) => b === 0),
    true,
  );
  lib.symbols.le_free(Deno.UnsafePointer.offset(small, 64)!);
  assert.match(lib.lastError(), /^le_free: 0x[0-9a-f]+ is not a block of le_alloc$/);
  lib.symbols.le_free(small);
});
