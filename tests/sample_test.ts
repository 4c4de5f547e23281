/**
 * Every sampler against llama.cpp's llama_sampler_init_* on the same random
 * logits: same surviving candidates, logits and probabilities, same order
 * when sorted, same selected token for greedy, dist and mirostat chains.
 */
import assert from "node:assert/strict";
import { TokenCandidates } from "../lib/sample/candidates.ts";
import { Mt19937 } from "../lib/sample/rng.ts";
import {
  DistSampler,
  GreedySampler,
  LogitBiasSampler,
  MinPSampler,
  MirostatSampler,
  MirostatV2Sampler,
  PenaltiesSampler,
  type Sampler,
  TempExtSampler,
  TempSampler,
  TopKSampler,
  TopPSampler,
  TypicalSampler,
} from "../lib/sample/samplers.ts";
import { SamplerChain, samplerChainFromOptions } from "../lib/sample/chain.ts";
import { loadSamplingOracle, type OracleSamplerSpec } from "./oracle/oracle_sample.ts";
import { mulberry32 as rand } from "./rng.ts";

function randomLogits(n: number, r: () => number, scale = 3): Float32Array {
  const out = new Float32Array(n);
  for (let i = 0; i < n; i++) {
    const u = Math.max(r(), 1e-12), v = r();
    out[i] = scale * Math.sqrt(-2 * Math.log(u)) * Math.cos(2 * Math.PI * v);
  }
  return out;
}

function toOurs(s: OracleSamplerSpec, nVocab: number): Sampler {
  switch (s.kind) {
    case "logit_bias":
      return new LogitBiasSampler(s.bias);
    case "penalties":
      return new PenaltiesSampler({
        lastN: s.lastN,
        repeat: s.repeat,
        frequency: s.freq,
        presence: s.present,
      });
    case "top_k":
      return new TopKSampler(s.k);
    case "typical":
      return new TypicalSampler(s.p, s.minKeep);
    case "top_p":
      return new TopPSampler(s.p, s.minKeep);
    case "min_p":
      return new MinPSampler(s.p, s.minKeep);
    case "temp":
      return new TempSampler(s.t);
    case "temp_ext":
      return new TempExtSampler(s.t, s.delta, s.exponent);
    case "mirostat":
      return new MirostatSampler(nVocab, s, s.m);
    case "mirostat_v2":
      return new MirostatV2Sampler(s);
    case "greedy":
      return new GreedySampler();
    case "dist":
      return new DistSampler(s.seed);
  }
}

const sampling = await loadSamplingOracle();

function compare(specs: OracleSamplerSpec[], nVocab: number, steps: number, r: () => number) {
  using ref = sampling.chain(specs, nVocab);
  const ours = new SamplerChain(specs.map((s) => toOurs(s, nVocab)));
  const c = new TokenCandidates(nVocab);
  const label = JSON.stringify(specs).slice(0, 200);
  for (let step = 0; step < steps; step++) {
    const logits = randomLogits(nVocab, r, 1 + 3 * r());
    const want = ref.apply(logits);
    c.load(logits);
    ours.applyTo(c);
    assert.equal(c.size, want.ids.length, `${label} step ${step}: size`);
    assert.equal(c.sorted, want.sorted, `${label}: sorted flag`);
    assert.equal(c.selected, want.selected, `${label} step ${step}: selected`);
    const at = new Map<number, number>();
    for (let i = 0; i < want.ids.length; i++) at.set(want.ids[i], i);
    for (let i = 0; i < c.size; i++) {
      const j = at.get(c.ids[i]);
      assert.ok(j !== undefined, `${label}: token ${c.ids[i]} kept by us only`);
      // Equal logits may sit in either order (std::sort is not stable).
      if (want.sorted && j !== i) {
        assert.equal(want.logits[i], c.logits[i], `${label}: order at ${i}`);
      }
      const wl = want.logits[j], ol = c.logits[i];
      assert.ok(
        wl === ol || Math.abs(wl - ol) <= 1e-6 * Math.max(1, Math.abs(wl)),
        `${label}: logit of ${c.ids[i]} ${ol} vs ${wl}`,
      );
      assert.ok(Math.abs(want.probs[j] - c.probs[i]) <= 1e-6, `${label}: p of ${c.ids[i]}`);
    }
    const tok = want.selected >= 0 ? want.ids[want.selected] : Math.floor(r() * nVocab);
    ref.accept(tok);
    ours.accept(tok);
  }
}

const NV = [32000, 4096];

Deno.test("single samplers keep llama.cpp's candidates and probabilities", () => {
  const r = rand(1);
  for (const n of NV) {
    for (let trial = 0; trial < 6; trial++) {
      const mk = Math.floor(r() * 4);
      const bias: [number, number][] = Array.from(
        { length: 8 },
        () => [Math.floor(r() * n), (r() - 0.5) * 20],
      );
      bias.push([Math.floor(r() * n), -Infinity]);
      const cases: OracleSamplerSpec[][] = [
        [{ kind: "logit_bias", bias }],
        [{
          kind: "penalties",
          lastN: 1 + Math.floor(r() * 64),
          repeat: 1 + r(),
          freq: r(),
          present: r(),
        }],
        [{ kind: "top_k", k: [1, 40, 100, 500, 5000][trial % 5] }],
        [{ kind: "typical", p: 0.2 + 0.7 * r(), minKeep: mk }],
        [{ kind: "top_p", p: [0.1, 0.5, 0.9, 0.95, 0.99, 0.999][trial], minKeep: mk }],
        [{ kind: "min_p", p: [0.001, 0.05, 0.2, 0.5, 0.9, 0.01][trial], minKeep: mk }],
        [{ kind: "temp", t: [0.2, 0.8, 1.5, 0, -1, 1][trial] }],
        [{ kind: "temp_ext", t: 0.5 + r(), delta: r(), exponent: 0.5 + r() }],
        [{ kind: "greedy" }],
        [{ kind: "dist", seed: Math.floor(r() * 1e6) }],
      ];
      for (const specs of cases) compare(specs, n, 3, r);
    }
  }
});

Deno.test("sorted inputs: samplers after top-k match llama.cpp", () => {
  const r = rand(2);
  for (const n of NV) {
    for (let trial = 0; trial < 4; trial++) {
      const k: OracleSamplerSpec = { kind: "top_k", k: 200 + trial * 300 };
      for (
        const s of [
          { kind: "top_p", p: 0.9, minKeep: 1 },
          { kind: "min_p", p: 0.05, minKeep: 1 },
          { kind: "typical", p: 0.9, minKeep: 1 },
          { kind: "temp_ext", t: 0.8, delta: 0.5, exponent: 1 },
        ] as OracleSamplerSpec[]
      ) compare([k, s], n, 2, r);
    }
  }
});

Deno.test("seeded chains pick llama.cpp's tokens step by step (penalties, dist, mirostat)", () => {
  const r = rand(3);
  for (const n of NV) {
    for (let trial = 0; trial < 3; trial++) {
      const seed = Math.floor(r() * 1e6);
      compare(
        [
          { kind: "penalties", lastN: 16, repeat: 1.3, freq: 0.2, present: 0.1 },
          { kind: "top_k", k: 40 },
          { kind: "typical", p: 1, minKeep: 0 },
          { kind: "top_p", p: 0.95, minKeep: 0 },
          { kind: "min_p", p: 0.05, minKeep: 0 },
          { kind: "temp_ext", t: 0.8, delta: 0, exponent: 1 },
          { kind: "dist", seed },
        ],
        n,
        30,
        r,
      );
      compare(
        [{ kind: "temp", t: 0.8 }, { kind: "mirostat", seed, tau: 5, eta: 0.1, m: 100 }],
        n,
        30,
        r,
      );
      compare(
        [{ kind: "temp", t: 1.0 }, { kind: "mirostat_v2", seed, tau: 3, eta: 0.2 }],
        n,
        30,
        r,
      );
      compare([{ kind: "top_k", k: 10 }, { kind: "greedy" }], n, 5, r);
      compare([{ kind: "dist", seed }], n, 20, r);
    }
  }
});

Deno.test("samplerChainFromOptions reproduces the default chain and reset re-seeds", () => {
  const r = rand(4);
  const n = 4096;
  const opts = { nVocab: n, seed: 1234, repeatPenalty: 1.1, temperature: 0.9 };
  const ours = samplerChainFromOptions(opts);
  using ref = sampling.chain([
    { kind: "penalties", lastN: 64, repeat: 1.1, freq: 0, present: 0 },
    { kind: "top_k", k: 40 },
    { kind: "typical", p: 1, minKeep: 0 },
    { kind: "top_p", p: 0.95, minKeep: 0 },
    { kind: "min_p", p: 0.05, minKeep: 0 },
    { kind: "temp_ext", t: 0.9, delta: 0, exponent: 1 },
    { kind: "dist", seed: 1234 },
  ], n);
  const rows = Array.from({ length: 20 }, () => randomLogits(n, r));
  const first: number[] = [];
  for (const row of rows) {
    const want = ref.apply(row);
    const got = ours.sample(row);
    assert.equal(got, want.ids[want.selected]);
    ours.accept(got);
    ref.accept(got);
    first.push(got);
  }
  ours.reset();
  assert.deepEqual(
    rows.map((row) => {
      const t = ours.sample(row);
      ours.accept(t);
      return t;
    }),
    first,
  );
  // temperature 0: the chain still ends in dist but always takes the best logit.
  const greedy = samplerChainFromOptions({ nVocab: n, temperature: 0, seed: 7 });
  for (const row of rows) {
    let best = 0;
    for (let i = 1; i < n; i++) if (row[i] > row[best]) best = i;
    assert.equal(greedy.sample(row), best);
  }
});

Deno.test("mt19937 matches the C++ standard's check value", () => {
  // [rand.predef]: the 10000th output of a default-constructed mt19937 is 4123659995.
  const g = new Mt19937();
  let v = 0;
  for (let i = 0; i < 10000; i++) v = g.next();
  assert.equal(v, 4123659995);
});
