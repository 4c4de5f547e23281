/**
 * `deno task generate`: streams a continuation of a prompt.
 *
 *   deno task generate [--model FILE] [--prompt TEXT] [-n N] [--temp T]
 *     [--top-k K] [--top-p P] [--min-p P] [--typical P] [--seed S]
 *     [--threads T] [--ctx N] [--format text|json] [--repeat-penalty R]
 *     [--repeat-last-n N] [--frequency-penalty F] [--presence-penalty P]
 *     [--mirostat 1|2] [--mirostat-tau T] [--mirostat-eta E]
 *     [--grammar-file F] [--json-schema F] [--cfg-negative-prompt TEXT]
 *     [--cfg-scale S] [--backend cpu|ref]
 *
 * Text mode streams the generated text on stdout and load/prompt/generation
 * speeds on stderr; json mode prints one object
 * `{"tokens":[...],"text":"...","timings":{"prompt_tps":…,"gen_tps":…}}`.
 *
 * @module
 */
import { parseArgs } from "node:util";
import { fileURLToPath } from "node:url";
import { Model } from "../model/model.ts";
import { Context } from "../runtime/context.ts";
import { generate, type GenerateOptions, type GenerateResult } from "../runtime/generate.ts";

/** The embedded default model, used when --model is not given. */
export const DEFAULT_MODEL: string = fileURLToPath(
  new URL("../../models/tolstoy-6m-f16.gguf", import.meta.url),
);

const USAGE =
  `usage: deno task generate [--model FILE] [--prompt TEXT] [-n N] [--temp T] [--top-k K]
  [--top-p P] [--min-p P] [--typical P] [--seed S] [--threads T] [--ctx N] [--format text|json]
  [--repeat-penalty R] [--repeat-last-n N] [--frequency-penalty F] [--presence-penalty P]
  [--mirostat 1|2] [--mirostat-tau T] [--mirostat-eta E] [--grammar-file F] [--json-schema F]
  [--cfg-negative-prompt TEXT] [--cfg-scale S] [--backend cpu|ref]`;

function num(name: string, v: string | undefined): number | undefined {
  if (v === undefined) return undefined;
  const x = Number(v);
  if (!Number.isFinite(x)) throw new TypeError(`--${name}: not a number: ${v}`);
  return x;
}

/** Runs the CLI with `args`; returns the exit code. */
export async function main(args: string[]): Promise<number> {
  let a;
  try {
    a = parseArgs({
      args,
      options: {
        model: { type: "string", short: "m" },
        prompt: { type: "string", short: "p" },
        n: { type: "string", short: "n" },
        temp: { type: "string" },
        "top-k": { type: "string" },
        "top-p": { type: "string" },
        "min-p": { type: "string" },
        typical: { type: "string" },
        seed: { type: "string" },
        threads: { type: "string", short: "t" },
        ctx: { type: "string", short: "c" },
        format: { type: "string" },
        "repeat-penalty": { type: "string" },
        "repeat-last-n": { type: "string" },
        "frequency-penalty": { type: "string" },
        "presence-penalty": { type: "string" },
        mirostat: { type: "string" },
        "mirostat-tau": { type: "string" },
        "mirostat-eta": { type: "string" },
        "grammar-file": { type: "string" },
        "json-schema": { type: "string" },
        "cfg-negative-prompt": { type: "string" },
        "cfg-scale": { type: "string" },
        backend: { type: "string" },
        help: { type: "boolean", short: "h" },
      },
      strict: true,
    }).values;
  } catch (e) {
    console.error(`${(e as Error).message}\n${USAGE}`);
    return 2;
  }
  if (a.help) {
    console.log(USAGE);
    return 0;
  }
  const format = a.format ?? "text";
  if (format !== "text" && format !== "json") {
    console.error(`--format must be text or json\n${USAGE}`);
    return 2;
  }
  const backend = a.backend ?? "cpu";
  if (backend !== "cpu" && backend !== "ref") {
    console.error(`--backend must be cpu or ref\n${USAGE}`);
    return 2;
  }
  const mirostat = num("mirostat", a.mirostat) ?? 0;
  if (mirostat !== 0 && mirostat !== 1 && mirostat !== 2) {
    console.error("--mirostat must be 1 or 2");
    return 2;
  }
  const path = a.model ?? DEFAULT_MODEL;
  const text = format === "text";
  const tLoad = performance.now();
  using model = await Model.load(path, {
    onProgress: text ? (s) => console.error(`load: ${s}`) : undefined,
  });
  using ctx = await Context.create(model, {
    nCtx: num("ctx", a.ctx),
    threads: num("threads", a.threads),
    backend,
  });
  const loadMs = performance.now() - tLoad;
  const opts: GenerateOptions = {
    maxTokens: num("n", a.n) ?? 64,
    temperature: num("temp", a.temp),
    topK: num("top-k", a["top-k"]),
    topP: num("top-p", a["top-p"]),
    minP: num("min-p", a["min-p"]),
    typicalP: num("typical", a.typical),
    seed: num("seed", a.seed),
    repeatPenalty: num("repeat-penalty", a["repeat-penalty"]),
    repeatLastN: num("repeat-last-n", a["repeat-last-n"]),
    frequencyPenalty: num("frequency-penalty", a["frequency-penalty"]),
    presencePenalty: num("presence-penalty", a["presence-penalty"]),
    mirostat,
    mirostatTau: num("mirostat-tau", a["mirostat-tau"]),
    mirostatEta: num("mirostat-eta", a["mirostat-eta"]),
    grammar: a["grammar-file"] ? await Deno.readTextFile(a["grammar-file"]) : undefined,
    jsonSchema: a["json-schema"]
      ? JSON.parse(await Deno.readTextFile(a["json-schema"]))
      : undefined,
    cfg: a["cfg-negative-prompt"] !== undefined
      ? { negativePrompt: a["cfg-negative-prompt"], scale: num("cfg-scale", a["cfg-scale"]) ?? 1 }
      : undefined,
  };
  const ac = new AbortController();
  const onSigint = () => ac.abort(new Error("interrupted"));
  Deno.addSignalListener("SIGINT", onSigint);
  try {
    const prompt = a.prompt ?? "The prince";
    const it = generate(ctx, prompt, { ...opts, signal: ac.signal });
    const out = new TextEncoder();
    if (text) await Deno.stdout.write(out.encode(prompt));
    let r: IteratorResult<unknown, GenerateResult>;
    while (!(r = await it.next()).done) {
      if (text) await Deno.stdout.write(out.encode((r.value as { text: string }).text));
    }
    const res = r.value;
    if (text) {
      await Deno.stdout.write(out.encode("\n"));
      const t = res.timings;
      console.error(
        `load: ${loadMs.toFixed(0)} ms | prompt: ${t.promptTokens} tokens, ${
          t.promptTps.toFixed(1)
        } tok/s | ` +
          `generation: ${t.genTokens} tokens, ${
            t.genTps.toFixed(1)
          } tok/s | stop: ${res.stopReason}`,
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
}

if (import.meta.main) {
  try {
    Deno.exit(await main(Deno.args));
  } catch (e) {
    console.error(`generate: ${e instanceof Error ? e.message : e}`);
    Deno.exit(1);
  }
}
