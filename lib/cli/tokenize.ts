/**
 * `deno task tokenize --model FILE (--text TEXT | --file PATH) [--no-special] [--parse-special]`:
 * prints the token ids as a JSON array on one line (like llama-tokenize --ids).
 *
 * @module
 */
import { flag, runCommand, UsageError } from "./args.ts";

import { DEFAULT_MODEL } from "./common_flags.ts";

const SPEC = {
  name: "tokenize",
  summary: "Prints the token ids of a text as a JSON array (llama-tokenize --ids).",
  flags: {
    model: flag.string({
      short: "m",
      value: "FILE",
      default: DEFAULT_MODEL,
      defaultText: "models/tolstoy-6m-f16.gguf",
      description: "GGUF file whose vocabulary is used (weights are not read)",
    }),
    text: flag.string({ short: "p", aliases: ["prompt"], description: "text to tokenize" }),
    file: flag.string({ short: "f", value: "FILE", description: "read the text from a file" }),
    "no-special": flag.boolean({ description: "do not add BOS/EOS as the model asks" }),
    "parse-special": flag.boolean({ description: "turn special-token text into special tokens" }),
  },
  notes: ["Exactly one of --text and --file is needed. Exit codes: 0, 1 file error, 2 usage."],
};

/** Runs the CLI with `args`; returns the exit code (the ids go to stdout). */
export function main(args: string[]): Promise<number> {
  return runCommand(SPEC, args, async ({ values }) => {
    if ((values.text === undefined) === (values.file === undefined)) {
      throw new UsageError("give exactly one of --text and --file");
    }
    let text = values.text;
    if (text === undefined) {
      try {
        text = await Deno.readTextFile(values.file!);
      } catch (e) {
        throw new Error(`${values.file}: ${(e as Error).message}`);
      }
    }
    const { readGGUF } = await import("../gguf/mod.ts");
    const { Tokenizer } = await import("../tokenizer/mod.ts");
    const tok = Tokenizer.fromGGUF(await readGGUF(values.model));
    const ids = tok.encode(text, {
      addSpecial: !values["no-special"],
      parseSpecial: values["parse-special"],
    });
    console.log(JSON.stringify(ids));
    return 0;
  });
}

if (import.meta.main) Deno.exit(await main(Deno.args));
