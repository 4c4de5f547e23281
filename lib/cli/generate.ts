/**
 * `deno task generate`: streams a continuation of a prompt.
 *
 *   deno task generate [--model FILE] [--prompt TEXT] [-n N] [--temp T] ...
 *
 * (`--help` lists every flag with its default and range.) Text mode streams
 * the prompt and the generated text on stdout and load/prompt/generation
 * speeds on stderr; json mode prints one object
 * `{"tokens":[...],"text":"...","timings":{"prompt_tps":…,"gen_tps":…}}`.
 *
 * Every flag, the grammar and the JSON schema are checked before the model
 * loads; the prompt is echoed only once the first token is sampled, so an
 * error is never glued onto it.
 *
 * @module
 */
import { flag, runCommand, UsageError } from "./args.ts";
import {
  cacheTypeFlag,
  flashAttnFlag,
  flashAttnPrecisionFlag,
  matmulOrderFlag,
  modelFlag,
  threadsFlag,
} from "./common_flags.ts";

export { DEFAULT_MODEL } from "./common_flags.ts";

/** The flags of `deno task generate` (llama.cpp's names where it has them). */
export const GENERATE_FLAGS = {
  model: modelFlag(),
  prompt: flag.string({ short: "p", default: "The prince", description: "prompt text" }),
  "n-predict": flag.int({
    short: "n",
    aliases: ["n"],
    min: -1,
    default: 64,
    description: "tokens to generate; -1 = until end of generation or a full context",
  }),
  temp: flag.number({
    default: 0.8,
    description: "temperature; <= 0 picks the most likely token (llama.cpp's greedy)",
  }),
  "top-k": flag.int({ default: 40, description: "top-k sampling; <= 0 = off" }),
  "top-p": flag.number({ min: 0, max: 1, default: 0.95, description: "top-p; 1 = off" }),
  "min-p": flag.number({ min: 0, max: 1, default: 0.05, description: "min-p; 0 = off" }),
  typical: flag.number({ min: 0, max: 1, default: 1, description: "locally typical p; 1 = off" }),
  seed: flag.int({
    short: "s",
    min: -1,
    max: 0xffffffff,
    default: -1,
    description: "random seed; -1 = a random seed",
  }),
  threads: threadsFlag(),
  ctx: flag.int({
    short: "c",
    aliases: ["ctx-size"],
    min: 1,
    special: { 0: "the model's training context" },
    defaultText: "training context, at most 4096",
    description: "context size in tokens",
  }),
  "batch-size": flag.int({
    short: "b",
    min: 1,
    default: 512,
    description: "most prompt tokens per graph evaluation",
  }),
  format: flag.choice(["text", "json"], {
    default: "text",
    description: "text streams tokens; json prints one object at the end",
  }),
  "repeat-penalty": flag.number({
    above: 0,
    default: 1,
    description: "repetition penalty; 1 = off",
  }),
  "repeat-last-n": flag.int({
    min: -1,
    default: 64,
    description: "tokens the penalties look back; 0 = off, -1 = context size",
  }),
  "frequency-penalty": flag.number({ default: 0, description: "frequency penalty; 0 = off" }),
  "presence-penalty": flag.number({ default: 0, description: "presence penalty; 0 = off" }),
  mirostat: flag.int({ min: 0, max: 2, default: 0, description: "mirostat version; 0 = off" }),
  "mirostat-tau": flag.number({
    aliases: ["mirostat-ent"],
    min: 0,
    default: 5,
    description: "mirostat target entropy",
  }),
  "mirostat-eta": flag.number({
    aliases: ["mirostat-lr"],
    min: 0,
    default: 0.1,
    description: "mirostat learning rate",
  }),
  "ignore-eos": flag.boolean({ description: "never stop at end-of-generation tokens" }),
  "grammar-file": flag.string({ value: "FILE", description: "GBNF grammar the output follows" }),
  "json-schema": flag.string({ value: "FILE", description: "JSON schema file the output follows" }),
  "cfg-negative-prompt": flag.string({ description: "classifier-free guidance negative prompt" }),
  "cfg-scale": flag.number({
    default: 1,
    description: "guidance scale (needs --cfg-negative-prompt); 1 = off",
  }),
  backend: flag.choice(["cpu", "ref", "wasm"], {
    defaultText: "cpu, or wasm without --allow-ffi",
    description: "cpu (native kernels), wasm (the kernels in WebAssembly) or ref (pure TypeScript)",
  }),
  "flash-attn": flashAttnFlag(),
  "fa-precision": flashAttnPrecisionFlag(),
  "matmul-order": matmulOrderFlag(),
  "cache-type": cacheTypeFlag(),
  "gpu-layers": flag.int({
    aliases: ["n-gpu-layers"],
    min: -1,
    default: 0,
    description: "layers offloaded to the CUDA backend; 0 = CPU only, -1 = all",
  }),
};

const SPEC = {
  name: "generate",
  summary: "Streams a continuation of --prompt from a GGUF model (llama.cpp's llama-cli flags).",
  flags: GENERATE_FLAGS,
  notes: [
    "Exit codes: 0 done, 1 a file, load or generation failure, 2 a bad command line.",
  ],
};

async function readInput(path: string, what: string): Promise<string> {
  try {
    return await Deno.readTextFile(path);
  } catch (e) {
    throw new Error(`${what} ${path}: ${(e as Error).message}`);
  }
}

/** Runs the CLI with `args`; returns the exit code. */
export function main(args: string[]): Promise<number> {
  return runCommand(SPEC, args, async ({ values: a, given }) => {
    if (given.has("cfg-scale") && a["cfg-negative-prompt"] === undefined) {
      throw new UsageError("--cfg-scale needs --cfg-negative-prompt");
    }
    if (a["grammar-file"] !== undefined && a["json-schema"] !== undefined) {
      throw new UsageError("--grammar-file and --json-schema exclude each other");
    }
    // The grammar and schema are checked here, before the model loads.
    const { parseGrammar } = await import("../grammar/parser.ts");
    const { jsonSchemaToGrammar } = await import("../grammar/json_schema.ts");
    let grammar: string | undefined;
    if (a["grammar-file"] !== undefined) {
      grammar = await readInput(a["grammar-file"], "grammar file");
      try {
        parseGrammar(grammar);
      } catch (e) {
        throw new Error(`${a["grammar-file"]}: ${(e as Error).message}`);
      }
    }
    let jsonSchema;
    if (a["json-schema"] !== undefined) {
      const file = a["json-schema"];
      try {
        jsonSchema = JSON.parse(await readInput(file, "JSON schema file"));
        parseGrammar(jsonSchemaToGrammar(jsonSchema));
      } catch (e) {
        throw new Error(`${file}: ${(e as Error).message}`);
      }
    }
    const text = a.format === "text";
    const say = (s: string) => text && console.error(s);

    // The first run builds the native library: its own progress and time,
    // not counted as model load time. Without FFI the WebAssembly backend runs.
    const { ffiAvailable } = await import("../../ffi/wasm.ts");
    if (ffiAvailable()) {
      const { loadLibrary } = await import("../../ffi/library.ts");
      const tLib = performance.now();
      await loadLibrary();
      const libMs = performance.now() - tLib;
      if (libMs > 1000) say(`build: native library ready in ${(libMs / 1000).toFixed(1)} s`);
    } else say("backend: wasm (no FFI permission)");

    const { Model } = await import("../model/model.ts");
    const { Context } = await import("../runtime/context.ts");
    const { generate } = await import("../runtime/generate.ts");
    const tLoad = performance.now();
    // Stage-by-stage progress is for a person watching; a failure stays one line in logs.
    const progress = Deno.stderr.isTerminal() ? (s: string) => say(`load: ${s}`) : undefined;
    using model = await Model.load(a.model, { onProgress: progress });
    const nTrain = model.hparams.nCtxTrain;
    const nCtx = a.ctx === 0 ? nTrain : a.ctx;
    if (nCtx !== undefined && nCtx > nTrain) {
      // llama.cpp's warning: RoPE positions past training are extrapolated.
      console.error(
        `generate: warning: --ctx ${nCtx} exceeds the model's training context ${nTrain}; ` +
          `output past ${nTrain} tokens may degrade`,
      );
    }
    using ctx = await Context.create(model, {
      nCtx,
      nBatch: a["batch-size"],
      threads: a.threads,
      ...(a["gpu-layers"] ? { nGpuLayers: a["gpu-layers"] } : { backend: a.backend }),
      flashAttn: a["flash-attn"],
      flashAttnPrecision: a["fa-precision"] as "default" | "f32",
      matmulOrder: a["matmul-order"] as "default" | "fast",
      kvType: a["cache-type"],
    });
    const loadMs = performance.now() - tLoad;

    const cfgPrompt = a["cfg-negative-prompt"];
    const ac = new AbortController();
    const onSigint = () => ac.abort(new Error("interrupted"));
    Deno.addSignalListener("SIGINT", onSigint);
    try {
      const it = generate(ctx, a.prompt, {
        maxTokens: a["n-predict"],
        temperature: a.temp,
        topK: a["top-k"],
        topP: a["top-p"],
        minP: a["min-p"],
        typicalP: a.typical,
        seed: a.seed,
        repeatPenalty: a["repeat-penalty"],
        repeatLastN: a["repeat-last-n"],
        frequencyPenalty: a["frequency-penalty"],
        presencePenalty: a["presence-penalty"],
        mirostat: a.mirostat as 0 | 1 | 2,
        mirostatTau: a["mirostat-tau"],
        mirostatEta: a["mirostat-eta"],
        ignoreEos: a["ignore-eos"],
        grammar,
        jsonSchema,
        cfg: cfgPrompt !== undefined
          ? { negativePrompt: cfgPrompt, scale: a["cfg-scale"] }
          : undefined,
        signal: ac.signal,
      });
      const out = new TextEncoder();
      // The first step validates and samples; only then is the prompt echoed.
      let r = await it.next();
      if (text) await Deno.stdout.write(out.encode(a.prompt));
      while (!r.done) {
        if (text) await Deno.stdout.write(out.encode(r.value.text));
        r = await it.next();
      }
      const res = r.value;
      if (text) {
        await Deno.stdout.write(out.encode("\n"));
        const t = res.timings;
        console.error(
          `load: ${loadMs.toFixed(0)} ms | prompt: ${t.promptTokens} tokens, ${
            t.promptTps.toFixed(1)
          } tok/s | generation: ${t.genTokens} tokens, ${t.genTps.toFixed(1)} tok/s | ` +
            `stop: ${res.stopReason}`,
        );
      } else {
        console.log(JSON.stringify({
          tokens: res.tokens,
          text: res.text,
          timings: { prompt_tps: res.timings.promptTps, gen_tps: res.timings.genTps },
        }));
      }
      return 0;
    } finally {
      Deno.removeSignalListener("SIGINT", onSigint);
    }
  });
}

if (import.meta.main) Deno.exit(await main(Deno.args));
