/**
 * Encoding speed, ours vs llama.cpp (through the oracle), for `deno task bench`.
 *
 * @module
 */
import { readGGUF } from "../lib/gguf/mod.ts";
import { Tokenizer } from "../lib/tokenizer/mod.ts";
import { loadOracle } from "./oracle/oracle.ts";
import { benchText, type EncodeSpeed, measure } from "../bench/tokenizer.ts";
import { loadTokenizer, TOLSTOY, VOCAB_DIR } from "./tokenizer_util.ts";

/** One model's result. */
export interface EncodeComparison {
  /** GGUF file name. */
  model: string;
  /** Our tokenizer (word cache warm, as after the first pass over a text). */
  ours: EncodeSpeed;
  /** Our tokenizer with the word cache turned off. */
  oursNoCache: EncodeSpeed;
  /** llama.cpp's llama_tokenize (FFI call included). */
  llama: EncodeSpeed;
  /** Whether both produced the same ids on the text. */
  identical: boolean;
}

/** The models benchmarked by default: one per tokenizer family. */
export const BENCH_MODELS: string[] = [
  TOLSTOY,
  VOCAB_DIR + "ggml-vocab-llama-spm.gguf",
  VOCAB_DIR + "ggml-vocab-gpt-2.gguf",
  VOCAB_DIR + "ggml-vocab-deepseek-llm.gguf",
  VOCAB_DIR + "ggml-vocab-bert-bge.gguf",
];

/** Encodes a ~`bytes` mixed text with ours and llama.cpp for each model. */
export async function compareEncodeSpeed(
  models: string[] = BENCH_MODELS,
  bytes = 1 << 20,
  runs = 3,
): Promise<EncodeComparison[]> {
  const oracle = await loadOracle();
  const text = benchText(bytes);
  const out: EncodeComparison[] = [];
  for (const path of models) {
    const tok = await loadTokenizer(path);
    const header = await readGGUF(path);
    const cold = Tokenizer.fromGGUF(header, { wordCache: { maxEntries: 0 } });
    using ref = oracle.load(path, { vocabOnly: true });
    const opts = { addSpecial: false, parseSpecial: false };
    const ours = measure((t) => tok.encode(t, opts), text, runs);
    const oursNoCache = measure((t) => cold.encode(t, opts), text, runs);
    const llama = measure((t) => ref.tokenize(t, opts), text, runs);
    const identical =
      JSON.stringify(tok.encode(text, opts)) === JSON.stringify(ref.tokenize(text, opts));
    out.push({ model: path.split("/").pop()!, ours, oursNoCache, llama, identical });
  }
  return out;
}

if (import.meta.main) {
  for (const r of await compareEncodeSpeed()) {
    console.log(
      `${r.model.padEnd(34)} ours ${r.ours.mbPerSec.toFixed(2).padStart(6)} MB/s  ` +
        `(no cache ${r.oursNoCache.mbPerSec.toFixed(2).padStart(6)})  ` +
        `llama.cpp ${r.llama.mbPerSec.toFixed(2).padStart(6)} MB/s  ${r.ours.tokens} tokens  ` +
        `identical=${r.identical}`,
    );
  }
}
