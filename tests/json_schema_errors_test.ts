/**
 * JSON schema → grammar against llama.cpp: its own converter expectations
 * (tests/test-json-schema-to-grammar.cpp of the oracle's source, read at test
 * time), and the schemas that used to crash or silently go wrong — each now a
 * JsonSchemaError naming the JSON pointer, where llama.cpp rejects the schema
 * or would emit a wrong or unbuildable grammar.
 */
import assert from "node:assert/strict";
import { GrammarError, JsonSchemaError, MAX_SCHEMA_DEPTH } from "../lib/grammar/errors.ts";
import { type JsonSchema, jsonSchemaToGrammar } from "../lib/grammar/json_schema.ts";
import { ORACLE_DIR } from "./oracle/setup.ts";
import { loadSamplingOracle } from "./oracle/oracle_sample.ts";

const sampling = await loadSamplingOracle();

function throwsAt(schema: unknown, pointer: string, pattern: RegExp): void {
  assert.throws(() => jsonSchemaToGrammar(schema as JsonSchema), (e: unknown) => {
    assert.ok(e instanceof JsonSchemaError, `${JSON.stringify(schema)}: ${e}`);
    assert.ok(e instanceof GrammarError);
    assert.equal(e.pointer, pointer, e.message);
    assert.match(e.message, pattern);
    return true;
  });
}

Deno.test("converter output equals llama.cpp's test-json-schema-to-grammar expectations", () => {
  const src = Deno.readTextFileSync(`${ORACLE_DIR}/src/tests/test-json-schema-to-grammar.cpp`);
  const re =
    /test\(\{\s*(SUCCESS|FAILURE),\s*"([^"]*)",\s*R"""\(([\s\S]*?)\)""",\s*R"""\(([\s\S]*?)\)"""/g;
  const norm = (g: string) => g.split("\n").map((l) => l.trim()).filter((l) => l).sort().join("\n");
  let checked = 0;
  for (const [, status, name, schemaText, want] of src.matchAll(re)) {
    let schema: JsonSchema;
    try {
      schema = JSON.parse(schemaText);
    } catch {
      continue; // a few cases feed deliberately malformed JSON text
    }
    // Regex patterns are not translated (we accept any string there).
    if (schemaText.includes('"pattern"')) continue;
    if (status === "FAILURE") {
      assert.throws(() => jsonSchemaToGrammar(schema), JsonSchemaError, name);
    } else assert.equal(norm(jsonSchemaToGrammar(schema)), norm(want), name);
    checked++;
  }
  assert.ok(checked >= 60, `only ${checked} cases`);
});

Deno.test("non-object schemas are JsonSchemaError at their pointer (were TypeError)", () => {
  throwsAt({ properties: { a: null } }, "#/properties/a", /schema must be an object/);
  throwsAt(42, "#", /schema must be an object/);
  throwsAt(null, "#", /schema must be an object/);
  throwsAt({ items: [1] }, "#/items/0", /schema must be an object/);
  throwsAt({ properties: [] }, "#", /properties must be an object/);
  throwsAt({ anyOf: {} }, "#/anyOf", /array of schemas/);
  throwsAt({ type: 7 }, "#", /type must be a string/);
  throwsAt({ type: "object", required: 5, additionalProperties: 3 }, "#", /additionalProperties/);
  throwsAt({ type: "string", maxLength: -1 }, "#", /maxLength must be a non-negative/);
  throwsAt({ enum: [] }, "#", /enum must be a non-empty array/);
  throwsAt({ $ref: 5 }, "#", /\$ref must be a string/);
  throwsAt({ $ref: "#/nope" }, "#", /cannot resolve \$ref/);
  throwsAt({ $ref: "http://x/y" }, "#", /unsupported \$ref/);
  throwsAt({ type: "integer", minimum: "3" }, "#", /minimum must be a number/);
});

Deno.test("integer bounds: int64 as BigInt, beyond it an error (1e21 gave a wrong grammar)", () => {
  // The old converter built "1e+2" [2-3]-style ranges from String(1e21).
  throwsAt({ type: "integer", maximum: 1e21 }, "#", /outside the 64-bit integers/);
  throwsAt({ type: "integer", minimum: 0, maximum: 1e21 }, "#", /outside the 64-bit/);
  throwsAt({ type: "integer", minimum: 1e21 }, "#", /outside the 64-bit/);
  throwsAt({ type: "integer", exclusiveMaximum: -1e300 }, "#", /outside the 64-bit/);
  throwsAt(
    { properties: { n: { type: "integer", minimum: 5, maximum: 3 } } },
    "#/properties/n",
    /no integer/,
  );
  // A one-sided bound past 16 digits: llama.cpp writes [0-9]{17,15}, which does not build.
  throwsAt({ type: "integer", minimum: 1e17 }, "#", /does not build/);
  // Inside int64 but past 2^53: exact digits, and llama.cpp's matcher agrees on the edges.
  const lo = -(2n ** 62n), hi = 2n ** 62n;
  const g = jsonSchemaToGrammar({ type: "integer", minimum: Number(lo), maximum: Number(hi) });
  assert.ok(sampling.grammarBuilds(g));
  for (const [v, ok] of [[hi, true], [hi + 1n, false], [lo, true], [lo - 1n, false], [0n, true]]) {
    assert.equal(sampling.grammarMatches(g, String(v)), ok, String(v));
  }
});

Deno.test("$ref cycles and deep nesting: JsonSchemaError, not a stack overflow", () => {
  // A $ref chain that loops inside allOf: llama.cpp recurses forever on it.
  const allOfCycle = {
    $defs: { a: { $ref: "#/$defs/b" }, b: { $ref: "#/$defs/a" } },
    allOf: [{ $ref: "#/$defs/a" }],
  };
  throwsAt(allOfCycle, "#/$defs/b", /\$ref cycle/);
  // A $ref to itself: llama.cpp emits "ref-defs-a ::= ref-defs-a", which does not build.
  throwsAt({ $ref: "#/$defs/a", $defs: { a: { $ref: "#/$defs/a" } } }, "#", /left recursion/);
  // Recursion through properties is fine (a real recursive grammar).
  const tree = {
    $defs: {
      t: { type: "object", properties: { kids: { type: "array", items: { $ref: "#/$defs/t" } } } },
    },
    $ref: "#/$defs/t",
  };
  assert.ok(sampling.grammarBuilds(jsonSchemaToGrammar(tree)));
  let deep: JsonSchema = { type: "integer" };
  for (let i = 0; i < 20_000; i++) deep = { items: deep };
  assert.throws(
    () => jsonSchemaToGrammar(deep),
    (e) => e instanceof JsonSchemaError && /nested deeper/.test(e.message),
  );
  // A JS object cycle (not JSON, but a caller can pass one) hits the same limit.
  const self: Record<string, unknown> = { type: "object" };
  self.properties = { me: self };
  assert.throws(() => jsonSchemaToGrammar(self), JsonSchemaError);
  let ok: JsonSchema = { type: "integer" };
  for (let i = 0; i < MAX_SCHEMA_DEPTH - 1; i++) ok = { type: "array", items: ok };
  assert.ok(jsonSchemaToGrammar(ok).length > 0);
});
