/**
 * `deno task convert --llama2c MODEL.bin TOKENIZER.bin OUT.gguf`: imports a
 * llama2.c checkpoint into GGUF.
 *
 * @module
 */
import { parseArgs } from "node:util";
import { convertLlama2c } from "../gguf/llama2c.ts";

const USAGE = "usage: deno task convert --llama2c MODEL.bin TOKENIZER.bin OUT.gguf [--name NAME]";

/** Runs the CLI with `args`; returns the exit code. */
export async function main(args: string[]): Promise<number> {
  const { values, positionals } = parseArgs({
    args,
    options: {
      llama2c: { type: "boolean" },
      name: { type: "string" },
      help: { type: "boolean", short: "h" },
    },
    allowPositionals: true,
  });
  if (values.help) {
    console.log(USAGE);
    return 0;
  }
  if (!values.llama2c || positionals.length !== 3) {
    console.error(USAGE);
    return 2;
  }
  const [model, tokenizer, out] = positionals;
  try {
    const c = await convertLlama2c({ model, tokenizer, out, name: values.name });
    console.log(
      `${out}: llama, ${c.nLayers} layers, dim ${c.dim}, ${c.nHeads} heads (${c.nKvHeads} kv), ` +
        `vocab ${c.vocabSize}, ${c.sharedClassifier ? "shared" : "separate"} classifier`,
    );
    return 0;
  } catch (e) {
    console.error(`convert: ${e instanceof Error ? e.message : e}`);
    return 1;
  }
}

if (import.meta.main) Deno.exit(await main(Deno.args));
