/**
 * `deno task convert --llama2c MODEL.bin TOKENIZER.bin OUT.gguf`: imports a
 * llama2.c checkpoint into GGUF.
 *
 * @module
 */
import { flag, runCommand, UsageError } from "./args.ts";

const SPEC = {
  name: "convert",
  summary: "Imports a llama2.c checkpoint and its tokenizer into one GGUF file.",
  positionals: [
    { name: "MODEL.bin", description: "llama2.c checkpoint" },
    { name: "TOKENIZER.bin", description: "llama2.c tokenizer" },
    { name: "OUT.gguf", description: "file to write" },
  ],
  flags: {
    llama2c: flag.boolean({ description: "the input is a llama2.c checkpoint (required)" }),
    name: flag.string({ description: "general.name to write" }),
  },
  notes: ["Exit codes: 0, 1 unreadable or invalid input, 2 usage."],
};

/** Runs the CLI with `args`; returns the exit code. */
export function main(args: string[]): Promise<number> {
  return runCommand(SPEC, args, async ({ values, positionals }) => {
    if (!values.llama2c) throw new UsageError("--llama2c is required (the only input format)");
    const [model, tokenizer, out] = positionals;
    const { convertLlama2c } = await import("../gguf/llama2c.ts");
    const c = await convertLlama2c({ model, tokenizer, out, name: values.name });
    console.log(
      `${out}: llama, ${c.nLayers} layers, dim ${c.dim}, ${c.nHeads} heads (${c.nKvHeads} kv), ` +
        `vocab ${c.vocabSize}, ${c.sharedClassifier ? "shared" : "separate"} classifier`,
    );
    return 0;
  });
}

if (import.meta.main) Deno.exit(await main(Deno.args));
