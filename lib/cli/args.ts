/**
 * The flag machinery every `deno task` command shares: a command declares
 * its flags once (name, type, default, description, range) and gets parsing,
 * validation, `--help` text and the error convention from here.
 *
 * The convention: every failure is one line on stderr, `<command>: <message>`;
 * exit code 2 for a malformed command line (unknown flag, bad or
 * out-of-range value, wrong number of arguments), 1 for a failure while
 * working (missing or invalid file, load or generation error).
 *
 * @module
 */
import { parseArgs } from "node:util";

/** A malformed command line: unknown flag, bad value, missing argument (exit code 2). */
export class UsageError extends Error {
  /** Creates the error. */
  constructor(message: string) {
    super(message);
    this.name = "UsageError";
  }
}

/** One declared flag; `T` is the parsed value's type (undefined when absent without default). */
export interface Flag<T> {
  /** How the raw text is read. */
  readonly kind: "string" | "number" | "integer" | "boolean" | "choice";
  /** One-letter short form (`-n`). */
  readonly short?: string;
  /** Other long spellings accepted (llama.cpp's names). */
  readonly aliases?: readonly string[];
  /** What the flag does (one line). */
  readonly description: string;
  /** Placeholder in the help text (`FILE`, `N`). */
  readonly value?: string;
  /** Value when the flag is absent. */
  readonly default: T;
  /** How the default is shown in the help (when it differs from the value). */
  readonly defaultText?: string;
  /** Allowed range or set, as the help and errors show it. */
  readonly allowed?: string;
  /** Turns the raw text into the value; throws UsageError naming the flag. */
  readonly parse: (raw: string, flag: string) => T;
}

interface Common {
  short?: string;
  aliases?: readonly string[];
  description: string;
  value?: string;
  defaultText?: string;
}

interface NumberOpts extends Common {
  /** Smallest allowed value (inclusive). */
  min?: number;
  /** Largest allowed value (inclusive). */
  max?: number;
  /** Values must be greater than this (exclusive lower bound). */
  above?: number;
  /** Values outside [min, max] that are still allowed, with their meaning in the help. */
  special?: Readonly<Record<number, string>>;
}

function rangeText(o: NumberOpts): string | undefined {
  const r = o.above !== undefined
    ? `> ${o.above}`
    : o.min !== undefined || o.max !== undefined
    ? `${o.min ?? "-inf"}..${o.max ?? "inf"}`
    : undefined;
  const sp = Object.entries(o.special ?? {}).map(([k, v]) => `${k} = ${v}`);
  return [r, ...sp].filter(Boolean).join(", ") || undefined;
}

function numberParser(o: NumberOpts, integer: boolean) {
  return (raw: string, flag: string): number => {
    const t = raw.trim();
    // Number("") is 0 and Number("0x10") is 16: accept only decimal notation.
    const x = /^[+-]?(\d+\.?\d*|\.\d+)(e[+-]?\d+)?$/i.test(t) ? Number(t) : NaN;
    if (!Number.isFinite(x)) {
      throw new UsageError(
        `${flag}: expected ${integer ? "an integer" : "a number"}, got '${raw}'`,
      );
    }
    if (integer && !Number.isInteger(x)) {
      throw new UsageError(`${flag}: expected an integer, got '${raw}'`);
    }
    if (o.special && x in o.special) return x;
    if (
      (o.min !== undefined && x < o.min) || (o.max !== undefined && x > o.max) ||
      (o.above !== undefined && !(x > o.above))
    ) {
      throw new UsageError(`${flag}: ${raw} is out of range (allowed: ${rangeText(o)})`);
    }
    return x;
  };
}

function make<T>(kind: Flag<T>["kind"], o: Common & { default?: T }, extra: Partial<Flag<T>>) {
  return {
    kind,
    short: o.short,
    aliases: o.aliases,
    description: o.description,
    value: o.value,
    default: o.default as T,
    defaultText: o.defaultText,
    parse: (raw: string) => raw as T,
    ...extra,
  } as Flag<T>;
}

function str(o: Common & { default: string }): Flag<string>;
function str(o: Common): Flag<string | undefined>;
function str(o: Common & { default?: string }): Flag<string | undefined> {
  return make("string", { value: "TEXT", ...o }, {});
}
function num(o: NumberOpts & { default: number }): Flag<number>;
function num(o: NumberOpts): Flag<number | undefined>;
function num(o: NumberOpts & { default?: number }): Flag<number | undefined> {
  return make("number", { value: "X", ...o }, {
    allowed: rangeText(o),
    parse: numberParser(o, false),
  });
}
function int(o: NumberOpts & { default: number }): Flag<number>;
function int(o: NumberOpts): Flag<number | undefined>;
function int(o: NumberOpts & { default?: number }): Flag<number | undefined> {
  return make("integer", { value: "N", ...o }, {
    allowed: rangeText(o),
    parse: numberParser(o, true),
  });
}
function bool(o: Common): Flag<boolean> {
  return make("boolean", { ...o, default: false }, {});
}
function choice<const C extends string>(
  values: readonly C[],
  o: Common & { default: C },
): Flag<C>;
function choice<const C extends string>(values: readonly C[], o: Common): Flag<C | undefined>;
function choice<const C extends string>(
  values: readonly C[],
  o: Common & { default?: C },
): Flag<C | undefined> {
  return make("choice", { value: values.join("|"), ...o }, {
    allowed: values.join(", "),
    parse: (raw, flag) => {
      if (!(values as readonly string[]).includes(raw)) {
        throw new UsageError(`${flag}: '${raw}' is not one of ${values.join(", ")}`);
      }
      return raw as C;
    },
  });
}

/**
 * Flag constructors.
 *
 * @example
 * ```ts
 * const flags = { n: flag.int({ short: "n", min: 1, default: 8, description: "count" }) };
 * ```
 */
export const flag = { string: str, number: num, int, boolean: bool, choice };

/** Declared flags by long name. */
// deno-lint-ignore no-explicit-any
export type Flags = Record<string, Flag<any>>;

/** The parsed values of `F`. */
export type Values<F extends Flags> = { -readonly [K in keyof F]: F[K]["default"] };

/** A command's declaration. */
export interface CommandSpec<F extends Flags> {
  /** Command name as errors start (`generate`). */
  name: string;
  /** One-line summary. */
  summary: string;
  /** Positional arguments, in order. */
  positionals?: readonly { name: string; description: string; optional?: boolean }[];
  /** Flags (`--help` is added). */
  flags: F;
  /** Extra help paragraphs. */
  notes?: readonly string[];
}

/** The result of {@link parseCommand}. */
export interface Parsed<F extends Flags> {
  /** Typed flag values (defaults filled in). */
  values: Values<F>;
  /** Positional arguments. */
  positionals: string[];
  /** Whether --help was given. */
  help: boolean;
  /** Flags given on the command line (long names). */
  given: Set<string>;
}

const HELP: Flag<boolean> = bool({ short: "h", description: "show this help and exit" });

function allFlags<F extends Flags>(spec: CommandSpec<F>): Flags {
  return { ...spec.flags, help: HELP };
}

/**
 * Puts each value-taking flag and its value into one `--flag=value` token,
 * so `--temp -1` and `-n -5` reach the value parser (getopt takes the next
 * word whatever it looks like; node's parseArgs would call it ambiguous),
 * and maps aliases to their long names.
 */
function normalize(args: readonly string[], flags: Flags): string[] {
  const byName = new Map<string, string>();
  for (const [name, f] of Object.entries(flags)) {
    byName.set(`--${name}`, name);
    if (f.short) byName.set(`-${f.short}`, name);
    for (const a of f.aliases ?? []) byName.set(`--${a}`, name);
  }
  const out: string[] = [];
  for (let i = 0; i < args.length; i++) {
    const a = args[i];
    if (a === "--") {
      out.push(...args.slice(i));
      break;
    }
    const eq = a.indexOf("=");
    const head = a.startsWith("--") && eq > 0 ? a.slice(0, eq) : a;
    const name = byName.get(head);
    if (name === undefined) {
      out.push(a);
      continue;
    }
    const rest = head === a ? undefined : a.slice(eq + 1);
    if (flags[name].kind === "boolean") out.push(rest === undefined ? `--${name}` : a);
    else if (rest !== undefined) out.push(`--${name}=${rest}`);
    else if (i + 1 < args.length) out.push(`--${name}=${args[++i]}`);
    else throw new UsageError(`${a}: missing value`);
  }
  return out;
}

/** Parses and validates `args` against `spec`; throws {@link UsageError}. */
export function parseCommand<F extends Flags>(
  spec: CommandSpec<F>,
  args: readonly string[],
): Parsed<F> {
  const flags = allFlags(spec);
  const options: Record<string, { type: "string" | "boolean"; short?: string }> = {};
  for (const [name, f] of Object.entries(flags)) {
    options[name] = { type: f.kind === "boolean" ? "boolean" : "string" };
    if (f.short) options[name].short = f.short;
  }
  let raw;
  try {
    raw = parseArgs({
      args: normalize(args, flags),
      options,
      strict: true,
      allowPositionals: true,
    });
  } catch (e) {
    if (e instanceof UsageError) throw e;
    const err = e as Error & { code?: string };
    if (!err.code?.startsWith("ERR_PARSE_ARGS")) throw e;
    const m = /'([^']+)'/.exec(err.message);
    if (err.code === "ERR_PARSE_ARGS_UNKNOWN_OPTION" && m) {
      throw new UsageError(`unknown flag ${m[1]}`);
    }
    throw new UsageError(err.message.split(/\.\s/)[0].replace(/\.$/, ""));
  }
  const values: Record<string, unknown> = {};
  const given = new Set<string>();
  for (const [name, f] of Object.entries(flags)) {
    const v = (raw.values as Record<string, string | boolean | undefined>)[name];
    if (v === undefined) {
      values[name] = f.default;
      continue;
    }
    given.add(name);
    values[name] = typeof v === "boolean" ? v : f.parse(v, `--${name}`);
  }
  const help = values.help === true;
  delete values.help;
  const positionals = raw.positionals;
  if (!help) {
    const decl = spec.positionals ?? [];
    const need = decl.filter((p) => !p.optional).length;
    if (positionals.length > decl.length) {
      throw new UsageError(`unexpected argument '${positionals[decl.length]}'`);
    }
    if (positionals.length < need) {
      throw new UsageError(`missing argument ${decl[positionals.length].name}`);
    }
  }
  return { values: values as Values<F>, positionals, help, given };
}

/** The `--help` text of `spec`. */
export function helpText<F extends Flags>(spec: CommandSpec<F>): string {
  const pos = (spec.positionals ?? []).map((p) => (p.optional ? `[${p.name}]` : p.name));
  const lines = [
    `usage: deno task ${spec.name} [flags]${pos.length ? " " + pos.join(" ") : ""}`,
    "",
    spec.summary,
  ];
  if (spec.positionals?.length) {
    lines.push("", "arguments:");
    for (const p of spec.positionals) lines.push(`  ${p.name.padEnd(24)} ${p.description}`);
  }
  lines.push("", "flags:");
  for (const [name, f] of Object.entries(allFlags(spec))) {
    const lhs = `${f.short ? `-${f.short}, ` : "    "}--${name}${
      f.kind === "boolean" ? "" : ` ${f.value}`
    }`;
    const facts: string[] = [];
    const d = f.defaultText ??
      (f.default === undefined || f.kind === "boolean" ? undefined : String(f.default));
    if (d !== undefined) facts.push(`default: ${d}`);
    if (f.allowed && f.kind !== "choice") facts.push(`allowed: ${f.allowed}`);
    if (f.aliases?.length) facts.push(`also --${f.aliases.join(", --")}`);
    const desc = f.description + (facts.length ? ` (${facts.join("; ")})` : "");
    lines.push(
      lhs.length > 26 ? `  ${lhs}\n${" ".repeat(29)}${desc}` : `  ${lhs.padEnd(27)}${desc}`,
    );
  }
  for (const n of spec.notes ?? []) lines.push("", n);
  return lines.join("\n");
}

/** An error as one line (multi-line messages joined with "; "). */
export function oneLine(e: unknown): string {
  let msg = e instanceof Error ? e.message : String(e);
  // Deno's "No such file or directory (os error 2): open 'x.gguf'" leads with the path instead.
  const nf = /^(.*) \(os error \d+\): \w+ '(.*)'$/.exec(msg);
  if (nf) msg = `${nf[2]}: ${nf[1].toLowerCase()}`;
  return msg.split("\n").map((s) => s.trim()).filter(Boolean).join("; ");
}

/**
 * Parses `args` for `spec` and runs `body` with the values; prints --help,
 * and turns every failure into one stderr line and an exit code (2 usage, 1
 * runtime). Returns the exit code.
 *
 * @example
 * ```ts
 * const spec = { name: "hello", summary: "says hello", flags: {} };
 * const code = await runCommand(spec, ["--help"], () => 0);
 * ```
 */
export async function runCommand<F extends Flags>(
  spec: CommandSpec<F>,
  args: readonly string[],
  body: (p: Parsed<F>) => number | Promise<number>,
): Promise<number> {
  try {
    const p = parseCommand(spec, args);
    if (p.help) {
      console.log(helpText(spec));
      return 0;
    }
    return await body(p);
  } catch (e) {
    const usage = e instanceof UsageError;
    console.error(`${spec.name}: ${oneLine(e)}${usage ? " (see --help)" : ""}`);
    return usage ? 2 : 1;
  }
}
