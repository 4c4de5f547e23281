/**
 * Progress of long native-library work (download, build) on stderr: a line
 * redrawn in place when stderr is a terminal, plain lines otherwise, nothing
 * when quiet (`quiet: true` or `LLM_EDGE_QUIET=1`).
 *
 * @module
 */
import { readEnv } from "./platform.ts";

/** Where progress goes. */
export interface Progress {
  /** One finished line ("built ..."). */
  line(message: string): void;
  /** A running count: redrawn in place on a TTY, printed only at the end otherwise. */
  bytes(label: string, done: number, total: number | null): void;
}

/** Options of {@linkcode stderrProgress}. */
export interface ProgressOptions {
  /** Print nothing (default: `LLM_EDGE_QUIET=1`). */
  quiet?: boolean;
  /** Treat stderr as a terminal (default: ask Deno). */
  tty?: boolean;
  /** Sink (default: stderr). */
  write?: (text: string) => void;
}

const enc = new TextEncoder();

/** Progress on stderr, prefixed `llm-edge:`. */
export function stderrProgress(options: ProgressOptions = {}): Progress {
  const quiet = options.quiet ?? readEnv("LLM_EDGE_QUIET") === "1";
  const deno = (globalThis as { Deno?: typeof Deno }).Deno;
  // Without Deno (a browser) lines go to the console, redraws flattened.
  const write = options.write ??
    (deno ? (t: string) => deno.stderr.writeSync(enc.encode(t)) : (t: string) => {
      const s = t.replace(/\r/g, "").trim();
      if (s) console.error(s);
    });
  let tty = options.tty;
  if (tty === undefined) {
    try {
      tty = Deno.stderr.isTerminal();
    } catch {
      tty = false;
    }
  }
  let open = false; // a redrawn line is on screen
  let last = 0;
  return {
    line(message) {
      if (quiet) return;
      write(`${open ? "\r\x1b[K" : ""}llm-edge: ${message}\n`);
      open = false;
    },
    bytes(label, done, total) {
      if (quiet || !tty) return;
      const now = Date.now();
      if (done !== total && now - last < 100) return; // at most ten redraws a second
      last = now;
      const kib = (n: number) => `${(n / 1024).toFixed(0)} KiB`;
      const of = total ? ` / ${kib(total)} (${Math.floor((100 * done) / total)}%)` : "";
      write(`\r\x1b[Kllm-edge: ${label} ${kib(done)}${of}`);
      open = true;
    },
  };
}
