/**
 * The engine side of `deno task bench:batched` (bench/batched.ts): what one
 * child process runs for one engine on one model — llama-batched-bench's
 * loop for each parallel level (all sequences' prompts in batches of up to
 * nBatch tokens, then one batch of N tokens per generation step, greedy
 * tokens fed back) and a follow-up chat turn's time to first token with and
 * without the cache of the first turn.
 *
 * @module
 */
// Types only: each child loads just its own engine (its peak RSS is its own).
import type { Model } from "../lib/model/model.ts";
import type { OracleModel } from "../tests/oracle/oracle.ts";
import type { OracleBatchContext } from "../tests/oracle/oracle_batch.ts";

/** What a child is asked to run. */
export interface ChildArgs {
  /** GGUF file. */
  model: string;
  /** CPU threads. */
  threads: number;
  /** Parallel sequence counts, ascending. */
  parallel: number[];
  /** Prompt tokens per sequence. */
  pp: number;
  /** Generation steps per sequence. */
  tg: number;
  /** Most tokens per decode call (n_batch). */
  nBatch: number;
  /** Tokens per graph (n_ubatch). */
  nUbatch: number;
  /** Tokens of the chat's first-turn prompt (0: no chat measurement). */
  chat: number;
  /** One KV pool over all sequences (kv_unified), or one stream per sequence; both engines. */
  kvUnified: boolean;
  /** Flash attention, both engines. */
  flashAttn: boolean;
  /** Ours with flashAttnPrecision "f32" (with flashAttn). */
  faF32: boolean;
}

/** Where our decode time went (llm-edge only). */
export interface Profile {
  /** Wall time inside the decode calls. */
  decodeMs: number;
  /** Of which inside Scheduler.compute (split copies + backend compute). */
  schedComputeMs: number;
  /** Of which inside CpuBackend.compute (command encoding + the native kernels). */
  backendComputeMs: number;
  /** Of which in the nonblocking le_graph_compute call (kernels + thread hand-off). */
  nativeMs: number;
  /** Inside Scheduler.alloc (planning a new graph). */
  allocMs: number;
  /** Graphs computed. */
  graphs: number;
  /** Decode calls. */
  calls: number;
}

/** One parallel level's figures. */
export interface LevelResult {
  /** Sequences. */
  n: number;
  /** Wall time of the prompt batches. */
  ppMs: number;
  /** Wall time of the tg generation steps. */
  tgMs: number;
  /** Greedy tokens per sequence: the one after the prompt, then one per step. */
  tokens: number[][];
  /** llama.cpp only: the top-2 logit gap behind each of those tokens. */
  gaps?: number[][];
  /** VmHWM after this level (levels run in ascending size). */
  rssMiB: number;
  /** llm-edge only: where the prompt and generation time went. */
  profile?: { pp: Profile; tg: Profile };
}

/** The follow-up chat turn. */
export interface ChatResult {
  /** Tokens cached after turn 1 (its prompt and answer). */
  history: number;
  /** Tokens of the turn-2 prompt. */
  prompt: number;
  /** Of which reused from the cache. */
  reused: number;
  /** Time to first token reusing the cache. */
  reuseMs: number;
  /** Time to first token with an empty cache. */
  scratchMs: number;
  /** First token of turn 2 (reuse, scratch). */
  first: [number, number];
}

/** What a child prints (the last stdout line, as JSON). */
export interface ChildResult {
  /** Engine name. */
  engine: string;
  /** Model load time. */
  loadMs: number;
  /** One per parallel level. */
  levels: LevelResult[];
  /** The chat measurement, when asked for. */
  chat: ChatResult | null;
  /** VmHWM at the end. */
  peakRssMiB: number;
}

/** Peak resident set of this process (VmHWM), MiB. */
export function peakRssMiB(): number {
  const m = /VmHWM:\s+(\d+) kB/.exec(Deno.readTextFileSync("/proc/self/status"));
  return m ? Number(m[1]) / 1024 : NaN;
}

/** Deterministic prompt tokens (ids >= 3: past the usual BOS/EOS/UNK). */
export function randomTokens(n: number, nVocab: number, seed: number): number[] {
  let a = seed >>> 0;
  return Array.from({ length: n }, () => {
    a = (Math.imul(a, 1664525) + 1013904223) >>> 0;
    return 3 + (a % (nVocab - 3));
  });
}

function argmax(l: Float32Array): number {
  let b = 0;
  for (let i = 1; i < l.length; i++) if (l[i] > l[b]) b = i;
  return b;
}

/** One decode call of a general batch (the engine's own API behind it). */
interface Batch {
  tokens: number[];
  pos: number[];
  seqIds: number[];
  logits: number[];
}

/**
 * llama-batched-bench's prompt phase: sequence j's pp tokens at positions
 * 0..pp-1, the sequences one after the other, cut into batches of nBatch
 * tokens; an output at the last token of each sequence.
 */
export function promptBatches(prompts: number[][], nBatch: number): Batch[] {
  const all: Batch = { tokens: [], pos: [], seqIds: [], logits: [] };
  prompts.forEach((p, j) => {
    p.forEach((t, i) => {
      all.tokens.push(t);
      all.pos.push(i);
      all.seqIds.push(j);
      all.logits.push(i === p.length - 1 ? 1 : 0);
    });
  });
  const out: Batch[] = [];
  for (let i = 0; i < all.tokens.length; i += nBatch) {
    const cut = <T>(xs: T[]) => xs.slice(i, i + nBatch);
    out.push({
      tokens: cut(all.tokens),
      pos: cut(all.pos),
      seqIds: cut(all.seqIds),
      logits: cut(all.logits),
    });
  }
  return out;
}

/** The engine-specific part of a parallel level. */
interface LevelEngine extends AsyncDisposable {
  /** Decodes `b`, returning the output rows in batch order. */
  decode(b: Batch, phase: "warm" | "pp" | "tg"): Promise<Float32Array[]>;
  /** Forgets every sequence. */
  clear(): Promise<void>;
}

/** The shared loop of one level: warm-up, prompt batches, tg steps. */
async function runLevel(
  e: LevelEngine,
  a: ChildArgs,
  n: number,
  nVocab: number,
  wantGaps: boolean,
): Promise<Omit<LevelResult, "rssMiB" | "n">> {
  const prompts = Array.from({ length: n }, (_, j) => randomTokens(a.pp, nVocab, 1000 + j));
  // Warm-up (llama-batched-bench decodes a short batch first as well).
  const w = Math.min(16, a.pp);
  await e.decode({
    tokens: prompts[0].slice(0, w),
    pos: [...Array(w).keys()],
    seqIds: new Array(w).fill(0),
    logits: Array.from({ length: w }, (_, i) => (i === w - 1 ? 1 : 0)),
  }, "warm");
  // And a generation-shaped step (one token per sequence, each with an output).
  await e.decode({
    tokens: prompts.map((p) => p[w % a.pp]), // any of its tokens (w = pp when pp <= 16)
    pos: prompts.map((_, j) => (j === 0 ? w : 0)),
    seqIds: [...Array(n).keys()],
    logits: new Array(n).fill(1),
  }, "warm");
  await e.clear();
  const rows: Float32Array[] = [];
  let t = performance.now();
  for (const b of promptBatches(prompts, a.nBatch)) rows.push(...await e.decode(b, "pp"));
  const ppMs = performance.now() - t;
  const tokens = rows.map((r) => [argmax(r)]);
  const gaps = wantGaps ? rows.map((r) => [gap(r)]) : undefined;
  let tgMs = 0;
  const seqIds = [...Array(n).keys()];
  const logits = new Array(n).fill(1);
  for (let s = 0; s < a.tg; s++) {
    const b: Batch = {
      tokens: tokens.map((x) => x[x.length - 1]),
      pos: new Array(n).fill(a.pp + s),
      seqIds,
      logits,
    };
    t = performance.now();
    const out = await e.decode(b, "tg");
    tgMs += performance.now() - t;
    out.forEach((r, j) => {
      tokens[j].push(argmax(r));
      gaps?.[j].push(gap(r));
    });
  }
  return { ppMs, tgMs, tokens, gaps };
}

function gap(l: Float32Array): number {
  const b = argmax(l);
  let second = -Infinity;
  for (let i = 0; i < l.length; i++) if (i !== b && l[i] > second) second = l[i];
  return l[b] - second;
}

function emptyProfile(): Profile {
  return {
    decodeMs: 0,
    schedComputeMs: 0,
    backendComputeMs: 0,
    nativeMs: 0,
    allocMs: 0,
    graphs: 0,
    calls: 0,
  };
}

/**
 * Times Scheduler.compute/alloc and CpuBackend.compute from outside (the
 * prototypes are wrapped in this child process only); `current` is the
 * profile the time goes to.
 */
async function instrument(): Promise<{ current: Profile }> {
  const { Scheduler } = await import("../lib/sched/scheduler.ts");
  const { CpuBackend } = await import("../lib/backend/cpu.ts");
  const state = { current: emptyProfile() };
  const wrap = <T extends object>(
    proto: T,
    name: keyof T & string,
    add: (p: Profile, ms: number) => void,
  ) => {
    const f = proto[name] as (...args: unknown[]) => unknown;
    (proto as Record<string, unknown>)[name] = function (this: unknown, ...args: unknown[]) {
      const t = performance.now();
      const r = f.apply(this, args);
      const done = () => add(state.current, performance.now() - t);
      if (r instanceof Promise) return r.finally(done);
      done();
      return r;
    };
  };
  wrap(Scheduler.prototype, "compute", (p, ms) => {
    p.schedComputeMs += ms;
    p.graphs++;
  });
  wrap(Scheduler.prototype, "alloc", (p, ms) => (p.allocMs += ms));
  wrap(CpuBackend.prototype, "compute", (p, ms) => (p.backendComputeMs += ms));
  // The native call itself: the library object's symbol table is swapped for
  // a copy whose le_graph_compute (both bindings) is timed (backends read it at each call).
  const { loadLibrary } = await import("../ffi/library.ts");
  const lib = await loadLibrary() as { symbols: Record<string, unknown> };
  const symbols = { ...lib.symbols };
  wrap(symbols, "le_graph_compute", (p, ms) => (p.nativeMs += ms));
  // Short graphs run on the calling thread through the synchronous binding.
  wrap(symbols, "le_graph_compute_sync", (p, ms) => (p.nativeMs += ms));
  lib.symbols = symbols;
  return state;
}

/** llm-edge: Context.decodeBatch, or (`viaSequences`) Sequence.evaluate of every sequence at once. */
export async function childOurs(a: ChildArgs, viaSequences: boolean): Promise<ChildResult> {
  const prof = await instrument();
  const { Model } = await import("../lib/model/model.ts");
  const { Context } = await import("../lib/runtime/context.ts");
  const t0 = performance.now();
  using m = await Model.load(a.model);
  const loadMs = performance.now() - t0;
  const nVocab = m.hparams.nVocab;
  const levels: LevelResult[] = [];
  for (const n of a.parallel) {
    const ctx = await Context.create(m, {
      nCtx: n * (a.pp + a.tg),
      nBatch: a.nBatch,
      nUbatch: a.nUbatch,
      nSeqMax: n,
      threads: a.threads,
      kvType: "f16",
      kvUnified: a.kvUnified,
      flashAttn: a.flashAttn,
      ...(a.faF32 ? { flashAttnPrecision: "f32" as const } : {}),
    });
    const seqs = viaSequences ? Array.from({ length: n }, () => ctx.sequence()) : [];
    const profiles = { pp: emptyProfile(), tg: emptyProfile() };
    const engine: LevelEngine = {
      async decode(b, phase) {
        const p = phase === "warm" ? emptyProfile() : profiles[phase];
        prof.current = p;
        const t = performance.now();
        let rows: Float32Array[];
        if (!viaSequences) {
          rows = (await ctx.decodeBatch(b)).logits;
        } else {
          // Each sequence's tokens of this batch, evaluated together: the
          // sequences' queue merges them into shared batches.
          const per = seqs.map(() => [] as number[]);
          b.tokens.forEach((tok, i) => per[b.seqIds[i]].push(tok));
          const want = seqs.map((_, j) => b.logits.some((f, i) => f && b.seqIds[i] === j));
          const res = await Promise.all(
            seqs.map((s, j) => (per[j].length ? s.evaluate(per[j]) : null)),
          );
          rows = res.flatMap((r, j) => (r && want[j] ? [r.logits[r.logits.length - 1]] : []));
        }
        p.decodeMs += performance.now() - t;
        p.calls++;
        return rows;
      },
      clear: async () => {
        if (viaSequences) await Promise.all(seqs.map((s) => s.clear()));
        else ctx.clear();
      },
      async [Symbol.asyncDispose]() {
        for (const s of seqs) s[Symbol.dispose]();
        await ctx[Symbol.asyncDispose]();
      },
    };
    try {
      const r = await runLevel(engine, a, n, nVocab, false);
      prof.current = emptyProfile();
      levels.push({ n, ...r, rssMiB: peakRssMiB(), profile: profiles });
    } finally {
      await engine[Symbol.asyncDispose]();
    }
  }
  const chat = a.chat > 0 ? await chatOurs(m, a) : null;
  return {
    engine: viaSequences ? "llm-edge-seq" : "llm-edge",
    loadMs,
    levels,
    chat,
    peakRssMiB: peakRssMiB(),
  };
}

/** llama.cpp through the oracle's multi-sequence shim (kv_unified as asked, flash attention off, F16 cache). */
export async function childLlama(a: ChildArgs): Promise<ChildResult> {
  const { loadOracle } = await import("../tests/oracle/oracle.ts");
  const { OracleBatchContext } = await import("../tests/oracle/oracle_batch.ts");
  const oracle = await loadOracle();
  const t0 = performance.now();
  using m = oracle.load(a.model);
  const loadMs = performance.now() - t0;
  const levels: LevelResult[] = [];
  for (const n of a.parallel) {
    const ctx = await OracleBatchContext.create(m, {
      nCtx: n * (a.pp + a.tg),
      nBatch: a.nBatch,
      nUbatch: a.nUbatch,
      nSeqMax: n,
      threads: a.threads,
      kvUnified: a.kvUnified,
      flashAttn: a.flashAttn,
    });
    const engine: LevelEngine = {
      decode(b) {
        const r = ctx.decode(b);
        if (r.rc !== 0) {
          throw new Error(`llama_decode returned ${r.rc} (${b.tokens.length} tokens)`);
        }
        return Promise.resolve(r.logits);
      },
      clear: () => Promise.resolve(ctx.clear()),
      [Symbol.asyncDispose]() {
        ctx[Symbol.dispose]();
        return Promise.resolve();
      },
    };
    try {
      const r = await runLevel(engine, a, n, m.nVocab, true);
      levels.push({ n, ...r, rssMiB: peakRssMiB() });
    } finally {
      await engine[Symbol.asyncDispose]();
    }
  }
  const chat = a.chat > 0 ? await chatLlama(m, a, OracleBatchContext) : null;
  return { engine: "llama.cpp", loadMs, levels, chat, peakRssMiB: peakRssMiB() };
}

// ---------------------------------------------------------------- chat turn

const STORY = "Well, Prince, so Genoa and Lucca are now just family estates of the family. " +
  "If you tell me that this means war, I will have nothing more to do with you. " +
  "Anna Pavlovna had had a cough for some days and was receiving her guests that evening. " +
  "Prince Vasili came in, in his embroidered court uniform, stockings and shoes, " +
  "and spoke in that refined French in which our grandfathers not only spoke but thought. ";
const FOLLOW_UP = "\nUser: And what did Prince Vasili answer her then?\nAssistant:";

/** The first-turn prompt: a chat whose history has about `n` tokens under `count`. */
export function chatPrompt(n: number, count: (text: string) => number): string {
  const words = Array.from({ length: Math.ceil(n / 40) + 2 }, () => STORY).join("").split(" ");
  const text = (k: number) => `User: ${words.slice(0, k).join(" ")}\nAssistant:`;
  let lo = 1, hi = words.length;
  while (lo < hi) {
    const mid = (lo + hi + 1) >> 1;
    if (count(text(mid)) <= n) lo = mid;
    else hi = mid - 1;
  }
  return text(lo);
}

const GREEDY = { temperature: 0, topK: 1, stopAtEog: false } as const;

// Turn 1 on a Sequence, then turn 2 (history + the answer + a follow-up)
// reusing the cache, then turn 2 again on the cleared sequence.
async function chatOurs(m: Model, a: ChildArgs): Promise<ChatResult> {
  const { Context } = await import("../lib/runtime/context.ts");
  const { generate, generateText } = await import("../lib/runtime/generate.ts");
  const tok = m.tokenizer;
  const t1 = chatPrompt(a.chat, (s) => tok.encode(s, { addSpecial: true }).length);
  await using ctx = await Context.create(m, {
    nCtx: a.chat + a.tg + 64,
    nBatch: a.nBatch,
    nUbatch: a.nUbatch,
    threads: a.threads,
  });
  using seq = ctx.sequence();
  const r1 = await generateText(seq, t1, { ...GREEDY, maxTokens: a.tg });
  const history = [...seq.tokens];
  const t2 = t1 + r1.text + FOLLOW_UP;
  const firstToken = async () => {
    const t = performance.now();
    const it = generate(seq, t2, { ...GREEDY, maxTokens: 1 });
    const first = await it.next();
    const ms = performance.now() - t;
    const end = await it.next();
    if (first.done || !end.done) throw new Error("chat: expected exactly one token");
    return { ms, id: first.value.id, timings: end.value.timings };
  };
  const reuse = await firstToken();
  await seq.clear();
  const scratch = await firstToken();
  // Back to the turn-1 state (for symmetry with llama.cpp; unused after).
  await seq.clear();
  await seq.evaluate(history);
  return {
    history: history.length,
    prompt: reuse.timings.promptTokens + reuse.timings.reusedTokens,
    reused: reuse.timings.reusedTokens,
    reuseMs: reuse.ms,
    scratchMs: scratch.ms,
    first: [reuse.id, scratch.id],
  };
}

// The same turns with llama.cpp, reusing the cache as llama-server does:
// keep the common prefix of the cached tokens and the new prompt, seq_rm
// the tail, decode the rest.
async function chatLlama(
  m: OracleModel,
  a: ChildArgs,
  Ctx: typeof OracleBatchContext,
): Promise<ChatResult> {
  const count = (s: string) => m.tokenize(s, { addSpecial: true }).length;
  const t1 = chatPrompt(a.chat, count);
  using ctx = await Ctx.create(m, {
    nCtx: a.chat + a.tg + 64,
    nBatch: a.nBatch,
    nUbatch: a.nUbatch,
    threads: a.threads,
  });
  // Decodes ids at positions from..., in nBatch chunks; logits of the last.
  const feed = (ids: number[], from: number): Float32Array => {
    let last: Float32Array | null = null;
    for (let i = 0; i < ids.length; i += a.nBatch) {
      const tokens = ids.slice(i, i + a.nBatch);
      const r = ctx.decode({
        tokens,
        pos: tokens.map((_, k) => from + i + k),
        logits: tokens.map((_, k) => i + k === ids.length - 1),
      });
      if (r.rc !== 0) throw new Error(`llama_decode returned ${r.rc}`);
      last = r.logits[0] ?? last;
    }
    return last!;
  };
  const p1 = m.tokenize(t1, { addSpecial: true });
  let logits = feed(p1, 0);
  const gen: number[] = [];
  for (;;) {
    gen.push(argmax(logits));
    if (gen.length >= a.tg) break;
    logits = feed([gen[gen.length - 1]], p1.length + gen.length - 1);
  }
  // As generate() leaves it: the last sampled token is not evaluated.
  const history = [...p1, ...gen.slice(0, -1)];
  const bytes = gen.map((id) => m.pieceBytes(id, { special: false }));
  const answer = new TextDecoder().decode(
    Uint8Array.from(bytes.flatMap((b) => [...b])),
  );
  const t2 = t1 + answer + FOLLOW_UP;
  let reused = 0, prompt = 0;
  let t = performance.now();
  {
    const ids = m.tokenize(t2, { addSpecial: true });
    let same = 0;
    while (same < history.length && same < ids.length && history[same] === ids[same]) same++;
    if (same === ids.length) same--;
    ctx.seqRm(0, same, -1);
    logits = feed(ids.slice(same), same);
    reused = same;
    prompt = ids.length;
  }
  const firstReuse = argmax(logits);
  const reuseMs = performance.now() - t;
  ctx.clear();
  t = performance.now();
  logits = feed(m.tokenize(t2, { addSpecial: true }), 0);
  const firstScratch = argmax(logits);
  const scratchMs = performance.now() - t;
  return {
    history: history.length,
    prompt,
    reused,
    reuseMs,
    scratchMs,
    first: [firstReuse, firstScratch],
  };
}
