/**
 * Encoding speed of our tokenizer, and of llama.cpp's when the caller passes an
 * equivalent function (the oracle lives in tests/, outside the library).
 *
 * @module
 */
import type { Tokenizer } from "../lib/tokenizer/tokenizer.ts";

/** One measurement. */
export interface EncodeSpeed {
  /** UTF-8 bytes encoded per run. */
  bytes: number;
  /** Tokens produced per run. */
  tokens: number;
  /** Best-of-runs throughput in MB/s (10^6 bytes). */
  mbPerSec: number;
}

/** Options of {@linkcode measureEncode}. */
export interface MeasureOptions {
  /** Timed runs (best is kept). Default 5. */
  runs?: number;
  /** Add special tokens. Default false. */
  addSpecial?: boolean;
  /** Parse special tokens. Default false. */
  parseSpecial?: boolean;
}

/** Times `encode(text)` and reports MB/s (best of `runs`, after one warm-up). */
export function measure(
  encode: (text: string) => ArrayLike<number>,
  text: string,
  runs = 5,
): EncodeSpeed {
  const bytes = new TextEncoder().encode(text).length;
  let tokens = encode(text).length;
  let best = Infinity;
  for (let i = 0; i < runs; i++) {
    const t0 = performance.now();
    tokens = encode(text).length;
    best = Math.min(best, performance.now() - t0);
  }
  return { bytes, tokens, mbPerSec: bytes / 1e6 / (Math.max(best, 1e-3) / 1e3) };
}

/** Encoding speed of `tok` on `text`. */
export function measureEncode(
  tok: Tokenizer,
  text: string,
  opts: MeasureOptions = {},
): EncodeSpeed {
  const o = { addSpecial: opts.addSpecial ?? false, parseSpecial: opts.parseSpecial ?? false };
  return measure((t) => tok.encode(t, o), text, opts.runs ?? 5);
}

/**
 * A deterministic mixed-script benchmark text of about `bytes` UTF-8 bytes
 * (prose, code, numbers, CJK, emoji, whitespace runs).
 */
export function benchText(bytes = 1 << 20): string {
  const parts = [
    "The quick brown fox jumps over the lazy dog. ",
    "It's 2024-06-01, and we've got 1234567 tokens to process!\n",
    "    def f(x):\n        return x ** 2  # square\n",
    "Привет, мир! Ελληνικά κείμενα. ",
    "中文文本和日本語のテキスト。한국어 텍스트. ",
    "Emoji 🦙🚀👍🏽 and symbols: ±×÷≠ €£¥.\n\n",
  ];
  const block = parts.join("").repeat(64);
  const per = new TextEncoder().encode(block).length;
  const s = block.repeat(Math.max(1, Math.ceil(bytes / per)));
  return s;
}
