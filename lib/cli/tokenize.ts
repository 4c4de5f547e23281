/**
 * `deno task tokenize --model FILE --text TEXT [--no-special] [--parse-special]`:
 * prints the token ids as a JSON array on one line (like llama-tokenize --ids).
 *
 * @module
 */
import { parseArgs } from "node:util";
import { readGGUF } from "../gguf/mod.ts";
import { Tokenizer } from "../tokenizer/mod.ts";

const DEFAULT_MODEL = new URL("../../models/tolstoy-6m-f16.gguf", import.meta.url).pathname;

/** Runs the CLI with `args`; returns the ids printed. */
export async function main(args: string[]): Promise<number[]> {
  const { values } = parseArgs({
    args,
    options: {
      model: { type: "string", short: "m", default: DEFAULT_MODEL },
      text: { type: "string", short: "p" },
      file: { type: "string", short: "f" },
      "no-special": { type: "boolean", default: false },
      "parse-special": { type: "boolean", default: false },
      help: { type: "boolean", short: "h", default: false },
    },
    strict: true,
  });
  if (values.help || (values.text === undefined && values.file === undefined)) {
    console.error(
      "usage: deno task tokenize --model FILE (--text TEXT | --file PATH) [--no-special] [--parse-special]",
    );
    if (!values.help) Deno.exit(2);
    return [];
  }
  const text = values.text ?? Deno.readTextFileSync(values.file!);
  const tok = Tokenizer.fromGGUF(await readGGUF(values.model));
  const ids = tok.encode(text, {
    addSpecial: !values["no-special"],
    parseSpecial: values["parse-special"],
  });
  console.log(JSON.stringify(ids));
  return ids;
}

if (import.meta.main) await main(Deno.args);
