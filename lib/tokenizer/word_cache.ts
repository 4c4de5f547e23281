/**
 * A bounded cache from a word's text to its token ids. Every tokenizer here
 * encodes words independently (BPE after pre-tokenization, WPM between
 * whitespace, SPM between safe boundaries), so a word always yields the same
 * ids and re-encoding the common ones is wasted work. llama.cpp keeps no such
 * cache; the ids are the same either way.
 *
 * @module
 */

/** Options of {@link WordCache}. */
export interface WordCacheOptions {
  /** Most entries kept; the cache empties itself when full. 0 disables it. Default 65536. */
  maxEntries?: number;
  /** Longest word (UTF-16 units) worth caching. Default 64. */
  maxWordLength?: number;
}

/** Word text → token ids, bounded by entry count. */
export class WordCache {
  readonly #map = new Map<string, readonly number[]>();
  /** The `maxEntries` setting. */
  readonly maxEntries: number;
  /** The `maxWordLength` setting. */
  readonly maxWordLength: number;

  /** Creates an empty cache. */
  constructor(opts: WordCacheOptions = {}) {
    this.maxEntries = Math.max(0, opts.maxEntries ?? 65536);
    this.maxWordLength = Math.max(0, opts.maxWordLength ?? 64);
  }

  /** Number of cached words. */
  get size(): number {
    return this.#map.size;
  }

  /** Whether a word of this length may be cached at all. */
  accepts(length: number): boolean {
    return this.maxEntries > 0 && length <= this.maxWordLength;
  }

  /** Appends the cached ids of `word` to `out`; false when it is not cached. */
  appendTo(word: string, out: number[]): boolean {
    const ids = this.#map.get(word);
    if (ids === undefined) return false;
    for (let i = 0; i < ids.length; i++) out.push(ids[i]);
    return true;
  }

  /** Remembers `ids` (copied from out[from..]) as the encoding of `word`. */
  store(word: string, out: readonly number[], from: number): void {
    if (!this.accepts(word.length)) return;
    // Dropping everything at once keeps the bound without per-entry bookkeeping;
    // frequent words come back on their next occurrence.
    if (this.#map.size >= this.maxEntries) this.#map.clear();
    this.#map.set(word, out.slice(from));
  }

  /** Forgets every word. */
  clear(): void {
    this.#map.clear();
  }
}
