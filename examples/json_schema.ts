/**
 * JSON output from a JSON Schema: the schema becomes a grammar that every
 * sampled token must follow, so the text always parses and validates.
 *
 *   deno run --allow-read --allow-env --allow-ffi examples/json_schema.ts [model.gguf]
 */
import { Context, generateText, type JsonSchema, Model } from "@llm-edge/llm-edge";

const path = Deno.args[0] ?? new URL("../models/tolstoy-6m-f16.gguf", import.meta.url).pathname;

const schema: JsonSchema = {
  type: "object",
  properties: {
    name: { type: "string", maxLength: 12 },
    age: { type: "integer", minimum: 0, maximum: 99 },
    side: { enum: ["russian", "french"] },
  },
  required: ["name", "age", "side"],
  additionalProperties: false,
};

using model = await Model.load(path);
using ctx = await Context.create(model, { nCtx: 256 });
const r = await generateText(ctx, "A soldier of the army, as JSON:", {
  jsonSchema: schema,
  maxTokens: 96,
  temperature: 0.7,
  seed: 7,
});
const person = JSON.parse(r.text) as { name: string; age: number; side: string };
console.log(JSON.stringify(person));
