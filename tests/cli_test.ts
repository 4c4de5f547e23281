/**
 * Every `deno task` command run as a subprocess with bad invocations: each
 * must fail with exactly one stderr line `<command>: ...` naming the flag,
 * value or file, no stack frames, nothing on stdout, and exit code 2 for a
 * malformed command line or 1 for a failure while working. Most cases fail
 * before any model loads, so the table is fast. `--help` works for each.
 */
import assert from "node:assert/strict";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { loadLibrary } from "../ffi/library.ts";

const ROOT = fileURLToPath(new URL("../", import.meta.url));
const TMP = Deno.makeTempDirSync({ prefix: "llm-edge-cli-" });
const BAD_GRAMMAR = join(TMP, "bad.gbnf");
const EMPTY_GRAMMAR = join(TMP, "empty.gbnf");
const BAD_SCHEMA = join(TMP, "bad.json");
Deno.writeTextFileSync(BAD_GRAMMAR, 'root ::= "a" (\n');
Deno.writeTextFileSync(EMPTY_GRAMMAR, 'root ::= ""\n');
Deno.writeTextFileSync(BAD_SCHEMA, "{ not json");
const README = join(ROOT, "README.md");
const COMMANDS = ["generate", "tokenize", "inspect", "convert", "quantize", "bench"] as const;
type Command = typeof COMMANDS[number];

interface Run {
  code: number;
  stdout: string;
  stderr: string;
}

/** The script behind `deno task <cmd>` (the benchmark lives outside lib/). */
function commandPath(cmd: Command): string {
  return cmd === "bench" ? join(ROOT, "bench", "bench.ts") : join(ROOT, "lib", "cli", `${cmd}.ts`);
}

async function run(cmd: Command, args: string[]): Promise<Run> {
  const out = await new Deno.Command(Deno.execPath(), {
    args: ["run", "-A", commandPath(cmd), ...args],
    cwd: ROOT,
    stdout: "piped",
    stderr: "piped",
    env: { NO_COLOR: "1" },
  }).output();
  const dec = new TextDecoder();
  return { code: out.code, stdout: dec.decode(out.stdout), stderr: dec.decode(out.stderr) };
}

/** [command, args, exit code, text the one stderr line must contain]. */
const BAD: [Command, string[], 1 | 2, string][] = [
  ["generate", ["--bogus"], 2, "unknown flag --bogus"],
  ["generate", ["--temp", "abc"], 2, "--temp: expected a number, got 'abc'"],
  ["generate", ["--threads", "0"], 2, "--threads: 0 is out of range"],
  ["generate", ["--top-k", "1.5"], 2, "--top-k: expected an integer, got '1.5'"],
  ["generate", ["-n", "-5"], 2, "--n-predict: -5 is out of range (allowed: -1..inf)"],
  ["generate", ["--top-p", "2"], 2, "--top-p: 2 is out of range"],
  ["generate", ["--seed", "4294967296"], 2, "--seed: 4294967296 is out of range"],
  ["generate", ["--seed", "-2"], 2, "--seed: -2 is out of range"],
  ["generate", ["--ctx", "-3"], 2, "--ctx: -3 is out of range"],
  ["generate", ["--repeat-penalty", "0"], 2, "--repeat-penalty: 0 is out of range"],
  ["generate", ["--mirostat", "3"], 2, "--mirostat: 3 is out of range"],
  ["generate", ["--format", "xml"], 2, "--format: 'xml' is not one of text, json"],
  ["generate", ["--backend", "gpu"], 2, "--backend: 'gpu' is not one of cpu, ref, wasm"],
  ["generate", ["--temp", "0x10"], 2, "--temp: expected a number, got '0x10'"],
  ["generate", ["--prompt"], 2, "--prompt: missing value"],
  ["generate", ["stray"], 2, "unexpected argument 'stray'"],
  ["generate", ["--cfg-scale", "2"], 2, "--cfg-scale needs --cfg-negative-prompt"],
  ["generate", ["--grammar-file", BAD_GRAMMAR, "--json-schema", BAD_SCHEMA], 2, "exclude"],
  ["generate", ["--grammar-file", join(TMP, "nope.gbnf")], 1, "nope.gbnf"],
  ["generate", ["--grammar-file", BAD_GRAMMAR], 1, "bad.gbnf"],
  ["generate", ["--json-schema", BAD_SCHEMA], 1, "bad.json"],
  ["generate", ["--model", join(TMP, "nope.gguf")], 1, "nope.gguf: no such file"],
  ["generate", ["--model", README], 1, "README.md: byte 0: magic"],
  // Loads the model: the grammar is complete at once and --ignore-eos bans
  // its only way out; the error must not be glued onto an echoed prompt.
  ["generate", ["--grammar-file", EMPTY_GRAMMAR, "--ignore-eos"], 1, "the grammar admits no token"],
  ["tokenize", ["--text", "hi", "--bogus"], 2, "unknown flag --bogus"],
  ["tokenize", [], 2, "give exactly one of --text and --file"],
  ["tokenize", ["--text", "a", "--file", README], 2, "give exactly one of --text and --file"],
  ["tokenize", ["--model", join(TMP, "nope.gguf"), "--text", "hi"], 1, "nope.gguf"],
  ["tokenize", ["--model", README, "--text", "hi"], 1, "README.md: byte 0: magic"],
  ["tokenize", ["--file", join(TMP, "nope.txt")], 1, "nope.txt"],
  ["inspect", [], 2, "missing argument FILE.gguf"],
  ["inspect", ["--bogus", "x"], 2, "unknown flag --bogus"],
  ["inspect", ["a.gguf", "b.gguf"], 2, "unexpected argument 'b.gguf'"],
  ["inspect", ["--json=1", "a.gguf"], 2, "--json"],
  ["inspect", [join(TMP, "nope.gguf")], 1, "nope.gguf: no such file"],
  ["inspect", [README], 1, "README.md: byte 0: magic"],
  ["quantize", ["--bogus"], 2, "unknown flag --bogus"],
  ["quantize", ["in.gguf"], 2, "missing argument OUT.gguf"],
  ["quantize", ["in.gguf", "out.gguf", "q9_9"], 2, "TYPE 'q9_9' is not one of"],
  ["quantize", ["same.gguf", "./same.gguf", "q8_0"], 2, "OUT.gguf is IN.gguf"],
  ["quantize", [join(TMP, "nope.gguf"), join(TMP, "o.gguf"), "q8_0"], 1, "nope.gguf"],
  ["quantize", [README, join(TMP, "o.gguf"), "q8_0"], 1, "README.md: byte 0: magic"],
  ["convert", ["--bogus"], 2, "unknown flag --bogus"],
  ["convert", ["a.bin", "t.bin", "o.gguf"], 2, "--llama2c is required"],
  ["convert", ["--llama2c", "a.bin"], 2, "missing argument TOKENIZER.bin"],
  ["convert", ["--llama2c", join(TMP, "m.bin"), README, join(TMP, "o.gguf")], 1, "m.bin"],
  ["bench", ["--bogus"], 2, "unknown flag --bogus"],
  ["bench", ["--types", "q8_0,q9"], 2, "--types: unknown type 'q9'"],
  ["bench", ["--reps", "0"], 2, "--reps: 0 is out of range"],
  ["bench", ["--pp", "abc"], 2, "--pp: expected an integer, got 'abc'"],
  ["bench", ["--child", "xyz"], 2, "--child: 'xyz' is not one of llm-edge, llama.cpp"],
];

/** Runs `jobs` with at most `n` at a time (the machine's cores are shared). */
async function pool<T, R>(items: T[], n: number, f: (t: T) => Promise<R>): Promise<R[]> {
  const out: R[] = new Array(items.length);
  let next = 0;
  const worker = async () => {
    while (next < items.length) {
      const i = next++;
      out[i] = await f(items[i]);
    }
  };
  await Promise.all(Array.from({ length: n }, worker));
  return out;
}

Deno.test("cli: bad invocations fail with one stderr line, the right exit code and no stack", async () => {
  await loadLibrary(); // a first-run build line must not count against the one-line rule
  const runs = await pool(BAD, 4, ([cmd, args]) => run(cmd, args));
  const problems: string[] = [];
  BAD.forEach(([cmd, args, code, needle], i) => {
    const r = runs[i];
    const lines = r.stderr.split("\n").filter((l) => l.trim() !== "");
    const what = `${cmd} ${args.join(" ")}`;
    if (r.code !== code) problems.push(`${what}: exit ${r.code}, want ${code}: ${r.stderr}`);
    if (lines.length !== 1) problems.push(`${what}: ${lines.length} stderr lines: ${r.stderr}`);
    if (!lines[0]?.startsWith(`${cmd}: `)) problems.push(`${what}: no '${cmd}: ' prefix`);
    if (!r.stderr.includes(needle)) problems.push(`${what}: stderr lacks '${needle}': ${r.stderr}`);
    if (/^\s+at /m.test(r.stderr)) problems.push(`${what}: stack frames in stderr`);
    if (r.stdout !== "") problems.push(`${what}: stdout not empty: ${r.stdout.slice(0, 80)}`);
  });
  assert.deepEqual(problems, []);
});

Deno.test("cli: --help works for every command, with defaults and ranges", async () => {
  const runs = await pool([...COMMANDS], 4, (cmd) => run(cmd, ["--help"]));
  COMMANDS.forEach((cmd, i) => {
    const r = runs[i];
    assert.equal(r.code, 0, `${cmd} --help: ${r.stderr}`);
    assert.equal(r.stderr, "", cmd);
    assert.match(r.stdout, new RegExp(`^usage: deno task ${cmd} `), cmd);
    assert.match(r.stdout, /-h, --help/, cmd);
  });
  const gen = runs[0].stdout;
  assert.match(gen, /--top-k N .*\(default: 40\)/);
  assert.match(gen, /--top-p X .*\(default: 0\.95; allowed: 0\.\.1\)/);
  assert.match(gen, /--seed N .*-1 = a random seed/);
  assert.match(runs[4].stdout, /q4_k_m/); // quantize lists its types
});

Deno.test("cli generate: --temp -1, --seed -1 and -n -1 parse the llama.cpp way", async () => {
  const greedy = await run("generate", [
    "--temp",
    "-1",
    "--seed",
    "-1",
    "-n",
    "6",
    "--format",
    "json",
    "--prompt",
    "The prince said that",
  ]);
  assert.equal(greedy.code, 0, greedy.stderr);
  const zero = await run("generate", [
    "--temp=0",
    "-n",
    "6",
    "--format",
    "json",
    "--prompt",
    "The prince said that",
  ]);
  // temp < 0 is greedy, as temp 0 is.
  assert.deepEqual(JSON.parse(greedy.stdout).tokens, JSON.parse(zero.stdout).tokens);
  // -n -1 runs until the context is full; --ctx 300 is past training (256): a warning.
  const all = await run("generate", ["-n", "-1", "--ctx", "300", "--ignore-eos", "--temp", "0"]);
  assert.equal(all.code, 0, all.stderr);
  assert.match(all.stderr, /warning: --ctx 300 exceeds the model's training context 256/);
  assert.match(all.stderr, /stop: context/);
  assert.ok(all.stdout.startsWith("The prince"));
});
