/**
 * llama2.c import: a random-weight GQA checkpoint and tokenizer written here
 * convert to a GGUF whose tensors equal the source arrays, which llama.cpp
 * loads, and whose llama.cpp logits equal a direct llama2.c forward pass
 * (run.c's `forward`, written below in float64).
 */
import assert from "node:assert/strict";
import { join } from "node:path";
import { GGUFValueType, openGGUF } from "../lib/gguf/mod.ts";
import { type Llama2cConfig, Llama2cError, parseLlama2cConfig } from "../lib/gguf/llama2c.ts";
import { main as convertMain } from "../lib/cli/convert.ts";
import { loadOracle, top2 } from "./oracle/oracle.ts";
import { mulberry32 as rng } from "./rng.ts";

/** run.c's TransformerWeights, as plain arrays. */
interface Weights {
  emb: Float32Array;
  rmsAtt: Float32Array;
  wq: Float32Array;
  wk: Float32Array;
  wv: Float32Array;
  wo: Float32Array;
  rmsFfn: Float32Array;
  w1: Float32Array;
  w2: Float32Array;
  w3: Float32Array;
  rmsFinal: Float32Array;
  wcls: Float32Array;
}

const CFG = {
  dim: 64,
  hiddenDim: 160,
  nLayers: 2,
  nHeads: 4,
  nKvHeads: 2,
  vocabSize: 512,
  seqLen: 64,
};

function randomCheckpoint(
  shared: boolean,
  seed: number,
): { bin: Uint8Array; w: Weights; c: Llama2cConfig } {
  const r = rng(seed);
  const c: Llama2cConfig = { ...CFG, sharedClassifier: shared };
  const hs = c.dim / c.nHeads, kvDim = c.nKvHeads * hs, L = c.nLayers;
  const arr = (n: number, scale: number, bias = 0) =>
    Float32Array.from({ length: n }, () => bias + (r() - 0.5) * 2 * scale);
  const emb = arr(c.vocabSize * c.dim, 0.5);
  const w: Weights = {
    emb,
    rmsAtt: arr(L * c.dim, 0.2, 1),
    wq: arr(L * c.dim * c.dim, 0.25),
    wk: arr(L * c.dim * kvDim, 0.25),
    wv: arr(L * c.dim * kvDim, 0.25),
    wo: arr(L * c.dim * c.dim, 0.15),
    rmsFfn: arr(L * c.dim, 0.2, 1),
    w1: arr(L * c.dim * c.hiddenDim, 0.2),
    w2: arr(L * c.hiddenDim * c.dim, 0.12),
    w3: arr(L * c.dim * c.hiddenDim, 0.2),
    rmsFinal: arr(c.dim, 0.2, 1),
    wcls: shared ? emb : arr(c.vocabSize * c.dim, 0.5),
  };
  const freq = arr(c.seqLen * hs, 100); // legacy RoPE tables: junk that must be skipped
  const header = Int32Array.of(
    c.dim,
    c.hiddenDim,
    c.nLayers,
    c.nHeads,
    c.nKvHeads,
    shared ? c.vocabSize : -c.vocabSize,
    c.seqLen,
  );
  const parts: ArrayBufferView[] = [
    header,
    w.emb,
    w.rmsAtt,
    w.wq,
    w.wk,
    w.wv,
    w.wo,
    w.rmsFfn,
    w.w1,
    w.w2,
    w.w3,
    w.rmsFinal,
    freq,
  ];
  if (!shared) parts.push(w.wcls);
  const bin = new Uint8Array(parts.reduce((s, p) => s + p.byteLength, 0));
  let p = 0;
  for (const a of parts) {
    bin.set(new Uint8Array(a.buffer, a.byteOffset, a.byteLength), p);
    p += a.byteLength;
  }
  return { bin, w, c };
}

/** A made-up 512-token vocabulary: unk, bos, eos, 256 byte tokens, then pieces. */
function tokenizerBin(): { bin: Uint8Array; texts: string[] } {
  const texts = ["<unk>", "\n<s>\n", "\n</s>\n"];
  for (let b = 0; b < 256; b++) texts.push(`<0x${b.toString(16).toUpperCase().padStart(2, "0")}>`);
  const letters = "abcdefghijklmnopqrstuvwxyz";
  for (let i = 0; texts.length < 512; i++) {
    texts.push((i % 2 ? " " : "") + letters[i % 26] + letters[Math.floor(i / 26) % 26]);
  }
  const enc = new TextEncoder();
  const chunks: number[] = [];
  const dv = new DataView(new ArrayBuffer(8));
  const push = (f: (d: DataView) => void, n: number) => {
    f(dv);
    chunks.push(...new Uint8Array(dv.buffer, 0, n));
  };
  push((d) => d.setInt32(0, 8, true), 4);
  texts.forEach((t, i) => {
    const b = enc.encode(t);
    push((d) => {
      d.setFloat32(0, -i * 0.5, true);
      d.setInt32(4, b.length, true);
    }, 8);
    chunks.push(...b);
  });
  return { bin: Uint8Array.from(chunks), texts };
}

/** run.c's forward() in float64: logits for `token` at `pos`, updating the caches. */
function makeForward(w: Weights, c: Llama2cConfig) {
  const hs = c.dim / c.nHeads, kvDim = c.nKvHeads * hs, kvMul = c.nHeads / c.nKvHeads;
  const kc = new Float64Array(c.nLayers * c.seqLen * kvDim);
  const vc = new Float64Array(c.nLayers * c.seqLen * kvDim);
  const rmsnorm = (x: Float64Array, wt: Float32Array, off: number) => {
    let ss = 0;
    for (const v of x) ss += v * v;
    ss = 1 / Math.sqrt(ss / x.length + 1e-5);
    return x.map((v, j) => wt[off + j] * v * ss);
  };
  const matmul = (x: Float64Array, wt: Float32Array, off: number, n: number, d: number) => {
    const out = new Float64Array(d);
    for (let i = 0; i < d; i++) {
      let s = 0;
      for (let j = 0; j < n; j++) s += wt[off + i * n + j] * x[j];
      out[i] = s;
    }
    return out;
  };
  return (token: number, pos: number): Float64Array => {
    let x = Float64Array.from(w.emb.subarray(token * c.dim, (token + 1) * c.dim));
    for (let l = 0; l < c.nLayers; l++) {
      const xb = rmsnorm(x, w.rmsAtt, l * c.dim);
      const q = matmul(xb, w.wq, l * c.dim * c.dim, c.dim, c.dim);
      const k = matmul(xb, w.wk, l * c.dim * kvDim, c.dim, kvDim);
      const v = matmul(xb, w.wv, l * c.dim * kvDim, c.dim, kvDim);
      for (let i = 0; i < c.dim; i += 2) {
        const hd = i % hs;
        const theta = pos * Math.pow(10000, -hd / hs);
        const cr = Math.cos(theta), ci = Math.sin(theta);
        for (const vec of i < kvDim ? [q, k] : [q]) {
          const a = vec[i], b = vec[i + 1];
          vec[i] = a * cr - b * ci;
          vec[i + 1] = a * ci + b * cr;
        }
      }
      const lo = l * c.seqLen * kvDim;
      kc.set(k, lo + pos * kvDim);
      vc.set(v, lo + pos * kvDim);
      const att = new Float64Array(c.dim);
      for (let h = 0; h < c.nHeads; h++) {
        const kvh = Math.floor(h / kvMul) * hs;
        const sc = new Float64Array(pos + 1);
        for (let t = 0; t <= pos; t++) {
          let s = 0;
          for (let i = 0; i < hs; i++) s += q[h * hs + i] * kc[lo + t * kvDim + kvh + i];
          sc[t] = s / Math.sqrt(hs);
        }
        const mx = Math.max(...sc);
        let sum = 0;
        for (let t = 0; t <= pos; t++) sum += sc[t] = Math.exp(sc[t] - mx);
        for (let t = 0; t <= pos; t++) {
          for (let i = 0; i < hs; i++) {
            att[h * hs + i] += (sc[t] / sum) * vc[lo + t * kvDim + kvh + i];
          }
        }
      }
      const o = matmul(att, w.wo, l * c.dim * c.dim, c.dim, c.dim);
      x = x.map((v, i) => v + o[i]);
      const xb2 = rmsnorm(x, w.rmsFfn, l * c.dim);
      const h1 = matmul(xb2, w.w1, l * c.dim * c.hiddenDim, c.dim, c.hiddenDim);
      const h3 = matmul(xb2, w.w3, l * c.dim * c.hiddenDim, c.dim, c.hiddenDim);
      const g = h1.map((v, i) => (v / (1 + Math.exp(-v))) * h3[i]);
      const f = matmul(g, w.w2, l * c.dim * c.hiddenDim, c.hiddenDim, c.dim);
      x = x.map((v, i) => v + f[i]);
    }
    return matmul(rmsnorm(x, w.rmsFinal, 0), w.wcls, 0, c.dim, c.vocabSize);
  };
}

for (const shared of [true, false]) {
  Deno.test(`convert --llama2c: ${shared ? "shared" : "separate"} classifier, GQA`, async () => {
    const dir = Deno.makeTempDirSync({ prefix: "llm-edge-l2c-" });
    const { bin, w, c } = randomCheckpoint(shared, shared ? 11 : 12);
    const tok = tokenizerBin();
    const model = join(dir, "model.bin"),
      tokenizer = join(dir, "tokenizer.bin"),
      out = join(dir, "out.gguf");
    Deno.writeFileSync(model, bin);
    Deno.writeFileSync(tokenizer, tok.bin);
    assert.equal(await convertMain(["--llama2c", model, tokenizer, out]), 0);

    // Tensors equal the source arrays, bit for bit.
    {
      using m = await openGGUF(out);
      const h = m.header;
      const hs = c.dim / c.nHeads, kvDim = c.nKvHeads * hs;
      const expect: [string, Float32Array][] = [
        ["token_embd.weight", w.emb],
        ["output_norm.weight", w.rmsFinal],
      ];
      if (!shared) expect.push(["output.weight", w.wcls]);
      else assert.equal(h.tensor("output.weight"), undefined, "tied output stays shared");
      const sl = (a: Float32Array, l: number, n: number) => a.subarray(l * n, (l + 1) * n);
      for (let l = 0; l < c.nLayers; l++) {
        expect.push(
          [`blk.${l}.attn_q.weight`, sl(w.wq, l, c.dim * c.dim)],
          [`blk.${l}.attn_k.weight`, sl(w.wk, l, c.dim * kvDim)],
          [`blk.${l}.attn_v.weight`, sl(w.wv, l, c.dim * kvDim)],
          [`blk.${l}.attn_output.weight`, sl(w.wo, l, c.dim * c.dim)],
          [`blk.${l}.attn_norm.weight`, sl(w.rmsAtt, l, c.dim)],
          [`blk.${l}.ffn_gate.weight`, sl(w.w1, l, c.dim * c.hiddenDim)],
          [`blk.${l}.ffn_down.weight`, sl(w.w2, l, c.dim * c.hiddenDim)],
          [`blk.${l}.ffn_up.weight`, sl(w.w3, l, c.dim * c.hiddenDim)],
          [`blk.${l}.ffn_norm.weight`, sl(w.rmsFfn, l, c.dim)],
        );
      }
      assert.equal(h.tensors.length, expect.length);
      for (const [name, src] of expect) {
        const t = h.tensor(name)!;
        assert.ok(t, name);
        assert.equal(t.type, 0);
        assert.equal(t.ne.reduce((a, b) => a * b, 1), src.length, name);
        assert.deepEqual(
          m.tensorBytes(name),
          new Uint8Array(src.buffer, src.byteOffset, src.byteLength),
          name,
        );
      }
      assert.deepEqual(h.tensor("blk.0.attn_k.weight")!.ne, [c.dim, kvDim]);
      assert.deepEqual(h.tensor("blk.1.ffn_down.weight")!.ne, [c.hiddenDim, c.dim]);
      const tokens = h.strings("tokenizer.ggml.tokens")!;
      assert.deepEqual(tokens.slice(0, 4), ["<unk>", "<s>", "</s>", "<0x00>"]);
      assert.equal(tok.texts[260], " ba");
      assert.equal(tokens[260], "\u2581ba", "spaces escaped as SentencePiece does");
      const types = h.numbers("tokenizer.ggml.token_type")!;
      assert.deepEqual([...types.slice(0, 4)], [2, 3, 3, 6]);
      assert.equal(types[258], 6);
      assert.equal(types[300], 1);
      assert.equal(h.get("tokenizer.ggml.scores")!.type, GGUFValueType.ARRAY);
      assert.equal(h.numbers("tokenizer.ggml.scores")![300], -150);
      assert.equal(h.number("llama.attention.head_count_kv"), 2);
      assert.equal(h.number("llama.rope.dimension_count"), hs);
    }

    // llama.cpp loads it and its logits equal run.c's forward pass.
    const oracle = await loadOracle();
    using om = oracle.load(out);
    assert.equal(om.nVocab, c.vocabSize);
    assert.equal(om.bos, 1);
    assert.equal(om.eos, 2);
    using ctx = om.context({ nCtx: c.seqLen, kvType: 0 });
    const prompt = [1, 300, 301, 302, 65];
    const g = ctx.greedy(prompt, 12);
    const forward = makeForward(w, c);
    const seq = [...prompt, ...g.tokens.slice(0, -1)];
    let maxErr = 0;
    const ours: number[] = [];
    let last: Float64Array = new Float64Array(0);
    seq.forEach((t, pos) => {
      last = forward(t, pos);
      if (pos >= prompt.length - 1) {
        const ll = g.logits[pos - (prompt.length - 1)];
        for (let i = 0; i < ll.length; i++) {
          assert.ok(Number.isFinite(ll[i]), "llama.cpp logit is finite");
          maxErr = Math.max(maxErr, Math.abs(ll[i] - last[i]));
        }
        ours.push(top2(Float32Array.from(last))[0]);
      }
    });
    assert.ok(maxErr < 1e-3, `max |llama.cpp − run.c| logit difference ${maxErr}`);
    assert.deepEqual(ours, g.tokens, "greedy continuations agree");
    Deno.removeSync(dir, { recursive: true });
  });
}

Deno.test("convert --llama2c: bad inputs give a named error", async () => {
  assert.throws(() => parseLlama2cConfig(new Uint8Array(10), "m.bin"), Llama2cError);
  const bad = new Uint8Array(Int32Array.of(64, 160, 2, 5, 2, 512, 64).buffer);
  assert.throws(() => parseLlama2cConfig(bad, "m.bin"), /n_heads/);
  const dir = Deno.makeTempDirSync();
  const { bin } = randomCheckpoint(true, 3);
  Deno.writeFileSync(join(dir, "m.bin"), bin.subarray(0, bin.length - 100));
  Deno.writeFileSync(join(dir, "t.bin"), tokenizerBin().bin);
  const errs: string[] = [];
  const orig = console.error;
  console.error = (s: string) => errs.push(s);
  try {
    assert.equal(
      await convertMain(["--llama2c", join(dir, "m.bin"), join(dir, "t.bin"), join(dir, "o.gguf")]),
      1,
    );
    assert.equal(await convertMain(["--llama2c", join(dir, "m.bin")]), 2);
  } finally {
    console.error = orig;
  }
  assert.match(errs[0], /m\.bin: byte \d+: weights/);
  Deno.removeSync(dir, { recursive: true });
});
