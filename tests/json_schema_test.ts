/**
 * Grammar-constrained generation with random logits over a real vocabulary:
 * json.gbnf and 20 JSON schemas, 100 seeded runs each; every text must parse
 * and validate (ajv). The converter's grammars must also build in llama.cpp.
 */
import assert from "node:assert/strict";
// deno-lint-ignore no-import-prefix -- deno.json (lead-owned) has no import map entry for ajv
import { Ajv } from "npm:ajv@8.17.1";
import { type JsonSchema, jsonSchemaToGrammar } from "../lib/grammar/json_schema.ts";
import { GrammarSampler, GrammarVocabIndex } from "../lib/sample/grammar.ts";
import { SamplerChain } from "../lib/sample/chain.ts";
import { DistSampler, TopKSampler } from "../lib/sample/samplers.ts";
import { loadOracle } from "./oracle/oracle.ts";
import { loadSamplingOracle } from "./oracle/oracle_sample.ts";
import { rand } from "./grammar_walk.ts";

const SCHEMAS: JsonSchema[] = [
  { type: "integer" },
  { type: "boolean" },
  { type: "string", maxLength: 6 },
  { type: "string", minLength: 2, maxLength: 4 },
  { enum: ["red", "green", 3, null] },
  { const: { a: [1, "x"] } },
  { type: "integer", minimum: -15, maximum: 230 },
  { type: "integer", exclusiveMinimum: 7 },
  { type: "integer", maximum: 300 },
  { type: "string", format: "date" },
  { type: "string", format: "time" },
  { type: "string", format: "date-time" },
  { type: "string", format: "uuid" },
  { type: "array", items: { type: "integer" }, minItems: 1, maxItems: 3 },
  { type: "array", prefixItems: [{ type: "boolean" }, { enum: ["a", "b"] }] },
  {
    type: "object",
    properties: { name: { type: "string", maxLength: 5 }, age: { type: "integer" } },
    required: ["name"],
    additionalProperties: false,
  },
  {
    type: "object",
    properties: { id: { type: "integer" } },
    required: ["id"],
    additionalProperties: { type: "boolean" },
  },
  {
    $defs: { pt: { type: "object", properties: { x: { type: "number" } }, required: ["x"] } },
    type: "array",
    items: { $ref: "#/$defs/pt" },
    maxItems: 2,
  },
  { anyOf: [{ type: "null" }, { type: "integer", minimum: 0, maximum: 9 }], oneOf: undefined },
  {
    allOf: [
      { type: "object", properties: { a: { type: "integer" } } },
      { type: "object", properties: { b: { enum: [true] } } },
    ],
  },
];

const DIR = new URL("../../shared/fixtures/grammars/", import.meta.url);
const sampling = await loadSamplingOracle();
const oracle = await loadOracle();

function compile(schema: JsonSchema) {
  const ajv = new Ajv({ strict: false });
  ajv.addFormat("date", /^\d{4}-(0[1-9]|1[0-2])-(0[1-9]|[12]\d|3[01])$/);
  ajv.addFormat(
    "time",
    /^([01]\d|2[0-3]):[0-5]\d:[0-5]\d(\.\d{3})?(Z|[+-]([01]\d|2[0-3]):[0-5]\d)$/,
  );
  ajv.addFormat("date-time", /^\d{4}-(0[1-9]|1[0-2])-(0[1-9]|[12]\d|3[01])T.+$/);
  ajv.addFormat(
    "uuid",
    /^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$/,
  );
  return ajv.compile(schema as object);
}

Deno.test("schema grammars build in llama.cpp", () => {
  for (const s of SCHEMAS) {
    const g = jsonSchemaToGrammar(s);
    assert.ok(sampling.grammarBuilds(g), `${JSON.stringify(s)}\n${g}`);
  }
});

Deno.test("constrained generation always yields valid JSON (json.gbnf + 20 schemas, 100 seeds)", () => {
  using model = oracle.load("../shared/models/tolstoy-6m-f32.gguf", { vocabOnly: true });
  const eog = sampling.eogTokens(model);
  const pieces = Array.from(
    { length: model.nVocab },
    (_, i) => model.pieceBytes(i, { special: true }),
  );
  const vocab = { nVocab: model.nVocab, pieces: (i: number) => pieces[i], eogTokens: eog };
  const index = new GrammarVocabIndex(vocab);
  const eos = model.eos;
  // Tokens that close structures get a random boost so random walks end in reasonable time.
  const closers = new Float32Array(model.nVocab);
  for (let i = 0; i < model.nVocab; i++) {
    const t = new TextDecoder().decode(pieces[i]);
    if (/["\]},0-9]/.test(t)) closers[i] = 1;
  }
  const dec = new TextDecoder("utf-8", { fatal: true });
  const cases: [string, string, ((v: unknown) => boolean) | null][] = [
    ["json.gbnf", Deno.readTextFileSync(new URL("json.gbnf", DIR)), null],
    ...SCHEMAS.map((s): [string, string, (v: unknown) => boolean] => {
      const v = compile(s);
      return [JSON.stringify(s), jsonSchemaToGrammar(s), (x) => v(x) as boolean];
    }),
  ];
  for (const [label, gbnf, validate] of cases) {
    const grammar = new GrammarSampler(gbnf, vocab, { index });
    for (let seed = 0; seed < 100; seed++) {
      grammar.reset();
      const chain = new SamplerChain([new TopKSampler(20), new DistSampler(seed)], { grammar });
      const r = rand(seed * 31 + label.length);
      const bytes: number[] = [];
      const boost = 2 + 6 * r();
      for (let step = 0; step < 400; step++) {
        const logits = new Float32Array(model.nVocab);
        for (let i = 0; i < logits.length; i++) logits[i] = 4 * r() + boost * closers[i] * r();
        // The end token competes like any other once the grammar may end.
        logits[eos] = grammar.canEnd ? 6 + 4 * r() : logits[eos];
        const tok = chain.sample(logits);
        chain.accept(tok);
        if (eog.has(tok)) break;
        bytes.push(...pieces[tok]);
      }
      assert.ok(grammar.canEnd, `${label} seed ${seed}: generation did not complete`);
      const text = dec.decode(Uint8Array.from(bytes));
      let value: unknown;
      assert.doesNotThrow(() => value = JSON.parse(text), `${label} seed ${seed}: ${text}`);
      if (validate) assert.ok(validate(value), `${label} seed ${seed}: ${text}`);
    }
  }
});
