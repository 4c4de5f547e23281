// Model.fromBytes's progress and cancellation: `onBytes(done, total)` while
// the weights go into WebAssembly memory (bytes copied in 16 MiB chunks; a
// Response with Content-Length streamed chunk by chunk; one without, read and
// then copied), never decreasing and ending at the file's size; an
// AbortSignal stops the load between chunks (the stream is cancelled) and an
// already aborted one before anything is read. The model loaded with
// progress generates what one loaded without it does. Model.load without FFI
// reads the file with readFileIntoWasm, which reports and stops the same way.
import assert from "node:assert/strict";
import { Model } from "../lib/model/model.ts";
import { Context } from "../lib/runtime/context.ts";
import { OptionError } from "../lib/options.ts";
import { readFileIntoWasm } from "../lib/gguf/wasm_file.ts";
import { WASM_SKIP, wasmModulePath, wasmTestName } from "./wasm_util.ts";

const ignore = WASM_SKIP !== undefined;
const F32 = new URL("../../shared/models/tolstoy-6m-f32.gguf", import.meta.url).pathname;

// A Response streaming `bytes` in `chunk`-byte pieces (onPull before each); `cancelled` is
// set when the reader cancels.
function chunked(
  bytes: Uint8Array,
  chunk: number,
  length: boolean,
  onPull = (_sent: number) => {},
) {
  const state = { cancelled: false, sent: 0 };
  const body = new ReadableStream<Uint8Array>({
    pull(c) {
      onPull(state.sent);
      if (state.sent >= bytes.byteLength) return c.close();
      c.enqueue(bytes.slice(state.sent, state.sent + chunk));
      state.sent += chunk;
    },
    cancel() {
      state.cancelled = true;
    },
  }, { highWaterMark: 0 });
  const headers = length ? { "content-length": String(bytes.byteLength) } : undefined;
  return { response: new Response(body, { headers }), state };
}

function checkProgress(calls: [number, number][], size: number, what: string): void {
  assert.ok(calls.length > 0, `${what}: no onBytes call`);
  for (let i = 0; i < calls.length; i++) {
    assert.equal(calls[i][1], size, `${what}: total of call ${i}`);
    if (i > 0) assert.ok(calls[i][0] >= calls[i - 1][0], `${what}: call ${i} went back`);
  }
  assert.equal(calls.at(-1)![0], size, `${what}: did not end at the total`);
}

async function greedy(model: Model): Promise<number[]> {
  using ctx = await Context.create(model, { nCtx: 32 });
  assert.equal(ctx.backendChoice, "wasm");
  const out: number[] = [];
  let r = await ctx.decode([1, 450, 2987]);
  for (let i = 0; i < 4; i++) {
    const logits = r.logits.at(-1)!;
    let t = 0;
    for (let j = 1; j < logits.length; j++) if (logits[j] > logits[t]) t = j;
    out.push(t);
    r = await ctx.decode([t]);
  }
  return out;
}

Deno.test({
  name: wasmTestName("Model.fromBytes reports onBytes up to the file size for bytes and Responses"),
  ignore,
  async fn() {
    await wasmModulePath();
    const bytes = await Deno.readFile(F32), size = bytes.byteLength;
    assert.ok(size > 16 << 20, "the f32 model must span two 16 MiB copy chunks");
    let want: number[];
    {
      using plain = await Model.fromBytes(bytes);
      want = await greedy(plain);
    }
    const calls: [number, number][] = [];
    {
      using m = await Model.fromBytes(bytes, { onBytes: (d, t) => calls.push([d, t]) });
      checkProgress(calls, size, "Uint8Array");
      assert.equal(calls.length, 2);
      assert.deepEqual(await greedy(m), want);
    }
    for (const length of [true, false]) {
      calls.length = 0;
      const { response } = chunked(bytes, 1 << 20, length);
      using m = await Model.fromBytes(response, { onBytes: (d, t) => calls.push([d, t]) });
      checkProgress(calls, size, `Response, Content-Length ${length}`);
      // with a length, one call per 1 MiB received; without, the copy's two chunks
      assert.equal(calls.length, length ? Math.ceil(size / (1 << 20)) : 2);
      assert.deepEqual(await greedy(m), want);
    }
  },
});

Deno.test({
  name: wasmTestName("Model.fromBytes honours an AbortSignal between chunks, and checks it"),
  ignore,
  async fn() {
    await wasmModulePath();
    const bytes = await Deno.readFile(F32);
    const isAbort = (e: Error) => e.name === "AbortError";
    // aborted before: nothing read
    const { response: r0, state: s0 } = chunked(bytes, 1 << 20, true);
    await assert.rejects(() => Model.fromBytes(r0, { signal: AbortSignal.abort() }), isAbort);
    assert.equal(s0.sent, 0);
    // aborted during a streamed Response: rejected, the stream cancelled early
    for (const length of [true, false]) {
      const ac = new AbortController();
      // the producer aborts once 3 MiB have gone out
      const { response, state } = chunked(bytes, 1 << 20, length, (sent) => {
        if (sent >= 3 << 20) ac.abort();
      });
      await assert.rejects(() => Model.fromBytes(response, { signal: ac.signal }), isAbort);
      assert.ok(state.cancelled, `Content-Length ${length}: the stream was not cancelled`);
      assert.ok(state.sent < bytes.byteLength, `Content-Length ${length}: the whole body was read`);
    }
    // aborted during the copy of bytes (after its first chunk)
    const ac = new AbortController();
    await assert.rejects(
      () => Model.fromBytes(bytes, { onBytes: () => ac.abort(), signal: ac.signal }),
      isAbort,
    );
    for (const bad of [{ signal: 1 }, { onBytes: "x" }]) {
      await assert.rejects(() => Model.fromBytes(bytes, bad as never), OptionError);
    }
  },
});

Deno.test({
  name: wasmTestName(
    "readFileIntoWasm (Model.load without FFI) reports onBytes and stops on abort",
  ),
  ignore,
  async fn() {
    await wasmModulePath();
    const size = (await Deno.stat(F32)).size, calls: [number, number][] = [];
    const quiet = { line() {}, bytes() {} };
    {
      using f = await readFileIntoWasm(F32, {
        progress: quiet,
        onBytes: (d, t) => calls.push([d, t]),
      });
      checkProgress(calls, size, "readFileIntoWasm");
      assert.equal(f.bytes.byteLength, size);
    }
    const ac = new AbortController();
    await assert.rejects(
      () =>
        readFileIntoWasm(F32, { progress: quiet, onBytes: () => ac.abort(), signal: ac.signal }),
      (e: Error) => e.name === "AbortError",
    );
  },
});
