/**
 * Stop strings over streamed text: a stop string may span tokens, so the
 * text that could still become one is held back until it cannot; the stop
 * string itself is never emitted.
 *
 * @module
 */

/** Scans generated text for stop strings. */
export class StopScanner {
  readonly #stops: string[];
  #all = "";
  #sent = 0;
  #done = false;

  /** A scanner for `stops` (none: everything passes at once). */
  constructor(stops: readonly string[]) {
    this.#stops = stops.filter((s) => s.length > 0);
  }

  /** Adds `piece`; returns the text now safe to emit and whether a stop string ended it. */
  push(piece: string): { text: string; stopped: boolean } {
    if (this.#done) return { text: "", stopped: true };
    this.#all += piece;
    let cut = -1;
    for (const s of this.#stops) {
      // Only a match ending past what was sent can be new.
      const i = this.#all.indexOf(s, Math.max(0, this.#sent - s.length + 1));
      if (i >= 0 && (cut < 0 || i < cut)) cut = i;
    }
    if (cut >= 0) {
      this.#done = true;
      const text = this.#all.slice(this.#sent, Math.max(cut, this.#sent));
      this.#sent = Math.max(cut, this.#sent);
      return { text, stopped: true };
    }
    let hold = 0;
    for (const s of this.#stops) {
      for (let k = Math.min(s.length - 1, this.#all.length); k > hold; k--) {
        if (this.#all.endsWith(s.slice(0, k))) {
          hold = k;
          break;
        }
      }
    }
    const end = Math.max(this.#sent, this.#all.length - hold);
    const text = this.#all.slice(this.#sent, end);
    this.#sent = end;
    return { text, stopped: false };
  }

  /** The held-back text, at the end of generation. */
  flush(): string {
    if (this.#done) return "";
    const text = this.#all.slice(this.#sent);
    this.#sent = this.#all.length;
    return text;
  }
}
