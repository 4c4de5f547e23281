/**
 * Seeded fuzzing of the grammar front ends: random and mutated GBNF text,
 * and random JSON schemas (deep nesting, $ref cycles, odd types, huge
 * numbers). The only errors allowed out are the typed ones (GrammarError and
 * its subclasses); a grammar that parses must compile and match without
 * throwing anything else, and a schema that converts must give a grammar
 * that parses. Bounded: a few thousand cases, seconds of run time.
 */
import assert from "node:assert/strict";
import { GrammarError } from "../lib/grammar/errors.ts";
import { type JsonSchema, jsonSchemaToGrammar } from "../lib/grammar/json_schema.ts";
import { CompiledGrammar, GrammarState } from "../lib/grammar/matcher.ts";
import { parseGrammar } from "../lib/grammar/parser.ts";
import { mulberry32 } from "./rng.ts";

const DIR = new URL("../../shared/fixtures/grammars/", import.meta.url);
const FIXTURES = [...Deno.readDirSync(DIR)].filter((e) => e.name.endsWith(".gbnf"))
  .map((e) => Deno.readTextFileSync(new URL(e.name, DIR))).sort();

type Rng = () => number;
const int = (r: Rng, n: number) => Math.floor(r() * n);
const pick = <T>(r: Rng, a: readonly T[]): T => a[int(r, a.length)];

/** Runs `f`; anything thrown must be a GrammarError. */
function typedOnly(label: string, f: () => void): boolean {
  try {
    f();
    return true;
  } catch (e) {
    assert.ok(
      e instanceof GrammarError,
      `${label}: ${e instanceof Error ? `${e.name}: ${e.message}` : String(e)}`,
    );
    return false;
  }
}

const GBNF_BITS = [
  "root",
  "r",
  "item-1",
  "x",
  " ::= ",
  "::=",
  " ",
  "\n",
  "\r\n",
  "\t",
  "|",
  " | ",
  "(",
  ")",
  "[",
  "]",
  "[^",
  "-",
  '"',
  '"a"',
  '"\\n"',
  '"\\x4',
  "\\u00e9",
  "\\U0001F600",
  "\\q",
  "*",
  "+",
  "?",
  "{",
  "}",
  "{2}",
  "{0,3}",
  "{1,}",
  "{3000}",
  "{5,2}",
  ",",
  ".",
  "<[12]>",
  "!<[3]>",
  "<[99999999999]>",
  "<foo>",
  "# c\n",
  "é",
  "😀",
  "\0",
  "0",
];

function randomGbnf(r: Rng): string {
  if (r() < 0.1) {
    // Deep nesting or long chains, sometimes broken.
    const n = 1 + int(r, 3000);
    if (r() < 0.5) {
      return `root ::= ${"(".repeat(n)}"a"${r() < 0.8 ? ")".repeat(n) : ""}`;
    }
    let s = "root ::= r0\n";
    for (let i = 0; i < n; i++) s += `r${i} ::= ${r() < 0.3 ? '"x" ' : ""}r${i + 1}\n`;
    return s + `r${n} ::= ${r() < 0.3 ? "r0" : '"a"'}\n`;
  }
  let s = r() < 0.7 ? "root ::= " : "";
  const n = int(r, 40);
  for (let i = 0; i < n; i++) s += pick(r, GBNF_BITS);
  return s;
}

function mutateText(r: Rng, s: string): string {
  const edits = 1 + int(r, 4);
  for (let i = 0; i < edits; i++) {
    const at = int(r, s.length + 1), len = int(r, 8);
    const k = r();
    if (k < 0.4) s = s.slice(0, at) + s.slice(at + len);
    else if (k < 0.8) s = s.slice(0, at) + pick(r, GBNF_BITS) + s.slice(at);
    else s = s.slice(0, at) + s.slice(at, at + len).repeat(2) + s.slice(at + len);
  }
  return s;
}

Deno.test("fuzz: random and mutated GBNF throws only GrammarError", () => {
  const r = mulberry32(0x9b7f);
  let parsed = 0;
  for (let i = 0; i < 2000; i++) {
    const src = i % 2 ? randomGbnf(r) : mutateText(r, pick(r, FIXTURES));
    const label = `case ${i} ${JSON.stringify(src.slice(0, 200))}`;
    let g: ReturnType<typeof parseGrammar> | undefined;
    if (!typedOnly(label, () => g = parseGrammar(src))) continue;
    parsed++;
    typedOnly(label, () => {
      const st = new GrammarState(new CompiledGrammar(g!));
      for (let k = 0; k < 8; k++) {
        if (!st.acceptCodePoint(pick(r, [0x61, 0x78, 0x22, 0x20, 0x7b, 0x30, 0xe9]))) break;
      }
    });
  }
  // Both outcomes must be common, or the fuzzing says little.
  assert.ok(parsed > 300 && parsed < 1800, `${parsed}/2000 parsed`);
});

const ODD = [
  null,
  0,
  -1,
  1.5,
  1e21,
  -1e21,
  1e300,
  2 ** 63,
  -(2 ** 63),
  2 ** 53 + 1,
  "",
  "x",
  true,
  false,
  [],
  {},
];
/** A fresh odd value (the objects in ODD must not be shared between schemas). */
const odd = (r: Rng): unknown => structuredClone(pick(r, ODD));
const TYPES = ["object", "array", "string", "integer", "number", "boolean", "null", "any", "", 7];
const KEYS = [
  "type",
  "properties",
  "required",
  "items",
  "prefixItems",
  "anyOf",
  "oneOf",
  "allOf",
  "$ref",
  "enum",
  "const",
  "minimum",
  "maximum",
  "exclusiveMinimum",
  "exclusiveMaximum",
  "minItems",
  "maxItems",
  "minLength",
  "maxLength",
  "format",
  "pattern",
  "additionalProperties",
];
const NUMBERS = [
  0,
  1,
  7,
  9,
  10,
  99,
  100,
  105,
  2000,
  2001,
  -5,
  -123,
  0.5,
  -0.5,
  1e15,
  1e17,
  1e21,
  -1e21,
  2 ** 62,
  2 ** 63,
  -(2 ** 63),
  1e300,
];
const REFS = [
  "#/$defs/a",
  "#/$defs/b",
  "#/$defs/c",
  "#",
  "#/",
  "#/$defs",
  "#/nope",
  "x.json#/a",
  "#/$defs/a/items",
];

function randomSchema(r: Rng, depth: number): unknown {
  if (depth > 5 || r() < 0.08) return odd(r);
  if (r() < 0.03) {
    // A long nesting chain of one keyword.
    let s: unknown = { type: "integer" };
    const n = int(r, 1200);
    const key = pick(r, ["items", "properties", "anyOf", "allOf", "$defs-ref"]);
    for (let i = 0; i < n; i++) {
      if (key === "items") s = { items: s };
      else if (key === "properties") s = { properties: { p: s } };
      else if (key === "anyOf") s = { anyOf: [s] };
      else if (key === "allOf") s = { allOf: [s] };
      else s = { $ref: "#/$defs/a", $defs: { a: s } };
    }
    return s;
  }
  const s: Record<string, unknown> = {};
  const n = 1 + int(r, 4);
  for (let i = 0; i < n; i++) {
    const k = pick(r, KEYS);
    switch (k) {
      case "type":
        s.type = r() < 0.2 ? [pick(r, TYPES), pick(r, TYPES)] : pick(r, TYPES);
        break;
      case "properties": {
        const p: Record<string, unknown> = {};
        for (let j = int(r, 4); j > 0; j--) {
          p[pick(r, ["a", "b", "a b", "]", '"', "é"])] = randomSchema(r, depth + 1);
        }
        s.properties = r() < 0.1 ? odd(r) : p;
        break;
      }
      case "required":
        s.required = r() < 0.8 ? ["a", "b", 3].slice(0, int(r, 4)) : odd(r);
        break;
      case "items":
      case "prefixItems":
      case "additionalProperties":
        s[k] = r() < 0.3
          ? [randomSchema(r, depth + 1), randomSchema(r, depth + 1)]
          : randomSchema(r, depth + 1);
        break;
      case "anyOf":
      case "oneOf":
      case "allOf":
        s[k] = r() < 0.1
          ? odd(r)
          : Array.from({ length: int(r, 4) }, () => randomSchema(r, depth + 1));
        break;
      case "$ref":
        s.$ref = r() < 0.9 ? pick(r, REFS) : odd(r);
        break;
      case "enum":
        s.enum = r() < 0.8 ? [odd(r), "x", 1].slice(0, int(r, 4)) : odd(r);
        break;
      case "const":
        s.const = odd(r);
        break;
      case "format":
        s.format = pick(r, ["date", "time", "date-time", "uuid", "uuid4", "email", 5]);
        break;
      case "pattern":
        s.pattern = pick(r, ["^a$", "", 3]);
        break;
      default:
        s[k] = r() < 0.85 ? pick(r, NUMBERS) : odd(r);
    }
  }
  return s;
}

Deno.test("fuzz: random JSON schemas throw only JsonSchemaError; converted grammars parse", () => {
  const r = mulberry32(0x5c4e);
  let converted = 0;
  for (let i = 0; i < 2500; i++) {
    const schema = randomSchema(r, 0);
    // $defs on the root (sometimes cyclic) so that refs have something to hit.
    if (typeof schema === "object" && schema !== null && !Array.isArray(schema) && r() < 0.6) {
      const defs: Record<string, unknown> = {
        a: randomSchema(r, 3),
        b: r() < 0.5 ? { $ref: "#/$defs/a" } : randomSchema(r, 3),
        c: { allOf: [{ $ref: pick(r, REFS) }] },
      };
      (schema as Record<string, unknown>).$defs = defs;
    }
    const label = `case ${i} ${JSON.stringify(schema)?.slice(0, 300)}`;
    let gbnf = "";
    if (!typedOnly(label, () => gbnf = jsonSchemaToGrammar(schema as JsonSchema))) continue;
    converted++;
    // jsonSchemaToGrammar checks this itself; the fuzz asserts it independently.
    assert.doesNotThrow(() => new CompiledGrammar(parseGrammar(gbnf)), label);
  }
  assert.ok(converted > 400 && converted < 2300, `${converted}/2500 converted`);
});
