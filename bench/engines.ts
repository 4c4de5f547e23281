/**
 * The two engines' sides of `deno task bench`: one engine's runs in one
 * process (each child of the bench is one of these), timed by the same
 * loop for both, with the process's peak RSS.
 *
 * @module
 */

/** One benchmark configuration: the same for both engines. */
export interface Spec {
  model: string;
  threads: number;
  /** Prompt tokens timed in one batch. */
  pp: number;
  /** Tokens generated one at a time. */
  tg: number;
  /** Tokens in the context before each timed run (llama-bench's -d). */
  depth: number;
  /** Flash attention in both engines (llama.cpp's CPU default); off: both unfused. */
  flashAttn: boolean;
  /** Ours with flashAttnPrecision "f32" (llama.cpp keeps its arithmetic). */
  faF32?: boolean;
  /** Ours with matmulOrder "fast" (llama.cpp keeps its arithmetic). */
  fast?: boolean;
  /** KV cache type of both engines (default f16; q8_0 needs flashAttn). */
  cacheType?: "f16" | "f32" | "q8_0";
  /** Timed runs in each child after its warm-up (default 1); the child's figure is their median. */
  runs?: number;
}

/** ggml type ids of the cache types, for llama.cpp's type_k and type_v. */
const GGML_CACHE_TYPE = { f32: 0, f16: 1, q8_0: 8 } as const;

/** Result of one engine's child run. */
export interface ChildResult {
  engine: "llm-edge" | "llama.cpp";
  pp: number[];
  tg: number[];
  loadMs: number;
  peakRssMiB: number;
  /** llama.cpp's CPU variant (libggml-cpu-<variant>.so). */
  variant?: string;
}

/** What the timing loop needs of an engine. */
export interface Driver {
  readonly nVocab: number;
  clear(): void;
  /** Evaluates tokens after what the context holds (at most nBatch). */
  decode(tokens: number[]): Promise<unknown> | unknown;
}

function peakRssMiB(): number {
  const status = Deno.readTextFileSync("/proc/self/status");
  const m = /VmHWM:\s+(\d+) kB/.exec(status);
  return m ? Number(m[1]) / 1024 : NaN;
}

/** Deterministic token ids (3 and up: past the usual control tokens). */
export function randomTokens(n: number, nVocab: number, seed: number): number[] {
  let a = seed >>> 0;
  return Array.from({ length: n }, () => {
    a = (Math.imul(a, 1664525) + 1013904223) >>> 0;
    return 3 + (a % (nVocab - 3));
  });
}

// Context size and batch of both engines: the depth, then the timed tokens.
export function contextSize(s: Spec): number {
  return s.depth + s.pp + s.tg + 16;
}

/** Times pp and tg `reps` times, each after filling the context with `depth` tokens. */
async function timeRuns(
  e: Driver,
  s: Spec,
  reps: number,
): Promise<{ pp: number[]; tg: number[] }> {
  const fill = randomTokens(s.depth, e.nVocab, 3);
  const prompt = randomTokens(s.pp, e.nVocab, 1);
  const gen = randomTokens(s.tg, e.nVocab, 2);
  const refill = async () => {
    e.clear();
    for (let i = 0; i < fill.length; i += s.pp) await e.decode(fill.slice(i, i + s.pp));
  };
  // Warm-up, untimed, the same for both engines: the timed sequence once
  // (prompt batch and whole generation run, each after the same refill), so
  // neither engine's timed runs pay for first-use work (graph shapes,
  // repacking, and for ours the JIT: a fresh process's first tolstoy-6m
  // tg128 took ~100 ms against ~55 warm, at 2 threads on Zen 4). The
  // generation runs from the timed runs' depth: warmed after the prompt
  // instead, it built the graphs of a deeper window, and the timed run
  // built its own (5-15 ms of a 45-90 ms tolstoy-6m tg128). llama-bench
  // warms with one generation step but then times its repetitions in the
  // same process; here each repetition is a fresh child, so a cold first
  // generation is not in these figures.
  await refill();
  await e.decode(prompt);
  await refill();
  for (const id of gen) await e.decode([id]);
  const pp: number[] = [], tg: number[] = [];
  for (let r = 0; r < reps; r++) {
    await refill();
    let t = performance.now();
    await e.decode(prompt);
    pp.push(s.pp / ((performance.now() - t) / 1000));
    await refill();
    t = performance.now();
    for (const id of gen) await e.decode([id]);
    tg.push(s.tg / ((performance.now() - t) / 1000));
  }
  return { pp, tg };
}

/** An engine opened on a spec's file and context: the timing loop's driver. */
export interface OpenEngine extends Driver, Disposable {
  /** Milliseconds from load to a ready context. */
  readonly loadMs: number;
  /** llama.cpp's CPU variant (libggml-cpu-<variant>.so). */
  readonly variant?: string;
}

/** Our engine on `s` (model and context); `nGpuLayers` for bench:gpu. */
export async function openOurs(s: Spec, nGpuLayers = 0): Promise<OpenEngine> {
  const { Model } = await import("../lib/model/model.ts");
  const { Context } = await import("../lib/runtime/context.ts");
  const t0 = performance.now();
  const stack = new DisposableStack();
  try {
    const m = stack.use(await Model.load(s.model));
    const ctx = stack.use(
      await Context.create(m, {
        nCtx: contextSize(s),
        nBatch: s.pp,
        threads: s.threads,
        flashAttn: s.flashAttn,
        ...(s.faF32 ? { flashAttnPrecision: "f32" as const } : {}),
        ...(s.fast ? { matmulOrder: "fast" as const } : {}),
        ...(s.cacheType ? { kvType: s.cacheType } : {}),
        ...(nGpuLayers ? { nGpuLayers } : {}),
      }),
    );
    // The last token's logits into one array, as llama.cpp's driver does.
    const into = new Float32Array(m.hparams.nVocab);
    const loadMs = performance.now() - t0;
    const owned = stack.move();
    return {
      loadMs,
      nVocab: m.hparams.nVocab,
      clear: () => ctx.clear(),
      decode: (t) => ctx.decode(t, { into }),
      [Symbol.dispose]: () => owned.dispose(),
    };
  } finally {
    stack.dispose();
  }
}

/** llama.cpp (the oracle's libllama) on `s`. */
export async function openLlama(s: Spec): Promise<OpenEngine> {
  const { loadOracle, ORACLE_CPU_ENV } = await import("../tests/oracle/oracle.ts");
  // The variant llama.cpp itself would load (the tests may pick another whose
  // bits our kernels follow), unless the caller named one.
  if (!Deno.env.get(ORACLE_CPU_ENV)) Deno.env.set(ORACLE_CPU_ENV, "best");
  const oracle = await loadOracle();
  const t0 = performance.now();
  const stack = new DisposableStack();
  try {
    const m = stack.use(oracle.load(s.model));
    const opts = { nCtx: contextSize(s), nBatch: s.pp, threads: s.threads };
    // The one-sequence context is llama.cpp's unfused path with an F16
    // cache; flash attention and other cache types need the batch oracle's
    // (one sequence there too).
    const type = GGML_CACHE_TYPE[s.cacheType ?? "f16"];
    const ctx = stack.use(
      s.flashAttn || type !== GGML_CACHE_TYPE.f16
        ? await (await import("../tests/oracle/oracle_batch.ts")).OracleBatchContext.create(m, {
          ...opts,
          flashAttn: s.flashAttn,
          typeK: type,
          typeV: type,
        })
        : m.context(opts),
    );
    // The last token's logits into one array, as ours reuses its output rows:
    // a new array per step is the harness's memory, not llama.cpp's.
    const logits = new Float32Array(m.nVocab);
    const loadMs = performance.now() - t0;
    const owned = stack.move();
    return {
      loadMs,
      variant: oracle.cpu.name,
      nVocab: m.nVocab,
      clear: () => ctx.clear(),
      decode: (t) =>
        "seqRm" in ctx ? ctx.decode({ tokens: t }, logits) : ctx.decode(t, false, logits),
      [Symbol.dispose]: () => owned.dispose(),
    };
  } finally {
    stack.dispose();
  }
}

/** Our engine's runs in this process; `nGpuLayers` for bench:gpu. */
export async function childOurs(s: Spec, reps: number, nGpuLayers = 0): Promise<ChildResult> {
  using e = await openOurs(s, nGpuLayers);
  const r = await timeRuns(e, s, reps);
  return { engine: "llm-edge", ...r, loadMs: e.loadMs, peakRssMiB: peakRssMiB() };
}

/** llama.cpp's runs in this process. */
export async function childLlama(s: Spec, reps: number): Promise<ChildResult> {
  using e = await openLlama(s);
  const r = await timeRuns(e, s, reps);
  return {
    engine: "llama.cpp",
    ...r,
    loadMs: e.loadMs,
    peakRssMiB: peakRssMiB(),
    variant: e.variant,
  };
}
