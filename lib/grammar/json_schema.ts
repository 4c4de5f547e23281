/**
 * JSON Schema → GBNF with the semantics of llama.cpp's
 * common/json-schema-to-grammar.cpp: the same primitive rules and `space`
 * rule, required properties first in declaration order then optional ones
 * in any suffix order, additionalProperties, enum/const as literals, arrays
 * with minItems/maxItems, tuples (prefixItems), string formats
 * (date, time, date-time, uuid), minLength/maxLength, integer ranges,
 * $ref/$defs (local refs), anyOf/oneOf as unions, allOf as merged objects.
 * Patterns are not translated: like llama.cpp for unsupported patterns, they
 * fall back to any string.
 *
 * @module
 */
import { buildMinMaxInt } from "./json_schema_int.ts";

const SPACE_RULE = '| " " | "\\n"{1,2} [ \\t]{0,20}';

const PRIMITIVES: Record<string, [string, string[]]> = {
  boolean: ['("true" | "false")', []],
  "decimal-part": ["[0-9]{1,16}", []],
  "integral-part": ["[0] | [1-9] [0-9]{0,15}", []],
  number: [
    '("-"? integral-part) ("." decimal-part)? ([eE] [-+]? integral-part)?',
    ["integral-part", "decimal-part"],
  ],
  integer: ['("-"? integral-part)', ["integral-part"]],
  value: ["object | array | string | number | boolean | null", [
    "object",
    "array",
    "string",
    "number",
    "boolean",
    "null",
  ]],
  object: [
    '"{" space ( string ":" space value ("," space string ":" space value)* )? space "}"',
    ["string", "value"],
  ],
  array: ['"[" space ( value ("," space value)* )? space "]"', ["value"]],
  uuid: [
    '"\\"" [0-9a-fA-F]{8} "-" [0-9a-fA-F]{4} "-" [0-9a-fA-F]{4} "-" [0-9a-fA-F]{4} "-" [0-9a-fA-F]{12} "\\""',
    [],
  ],
  char: ['[^"\\\\\\x7F\\x00-\\x1F] | [\\\\] (["\\\\bfnrt] | "u" [0-9a-fA-F]{4})', []],
  string: ['"\\"" char* "\\""', ["char"]],
  null: ['"null"', []],
  date: [
    '[0-9]{4} "-" ( "0" [1-9] | "1" [0-2] ) "-" ( "0" [1-9] | [1-2] [0-9] | "3" [0-1] )',
    [],
  ],
  time: [
    '([01] [0-9] | "2" [0-3]) ":" [0-5] [0-9] ":" [0-5] [0-9] ( "." [0-9]{3} )? ( "Z" | ( "+" | "-" ) ( [01] [0-9] | "2" [0-3] ) ":" [0-5] [0-9] )',
    [],
  ],
  "date-time": ['date "T" time', ["date", "time"]],
  "date-string": ['"\\"" date "\\""', ["date"]],
  "time-string": ['"\\"" time "\\""', ["time"]],
  "date-time-string": ['"\\"" date-time "\\""', ["date-time"]],
};

/** A JSON Schema (the subset the converter understands; other keys are ignored). */
// deno-lint-ignore no-explicit-any
export type JsonSchema = boolean | Record<string, any>;

/** A schema that cannot be converted (unresolved $ref, bad type). */
export class JsonSchemaError extends Error {
  /** Creates the instance. */
  constructor(message: string) {
    super(`json schema: ${message}`);
    this.name = "JsonSchemaError";
  }
}

function formatLiteral(s: string): string {
  const esc = s.replace(
    /[\r\n"\\]/g,
    (c) => ({ "\r": "\\r", "\n": "\\n", '"': '\\"', "\\": "\\\\" })[c]!,
  );
  return `"${esc}"`;
}

function repetition(item: string, min: number, max: number, sep = ""): string {
  const hasMax = max !== Infinity;
  if (max === 0) return "";
  if (min === 0 && max === 1) return `${item}?`;
  if (!sep) {
    if (min === 1 && !hasMax) return `${item}+`;
    if (min === 0 && !hasMax) return `${item}*`;
    return `${item}{${min},${hasMax ? max : ""}}`;
  }
  const rest = repetition(`(${sep} ${item})`, min === 0 ? 0 : min - 1, hasMax ? max - 1 : max);
  const r = `${item} ${rest}`;
  return min === 0 ? `(${r})?` : r;
}

const RESERVED = new Set(["root", ...Object.keys(PRIMITIVES)]);

class Converter {
  rules = new Map<string, string>([["space", SPACE_RULE]]);
  resolving = new Set<string>();
  warnings: string[] = [];

  constructor(readonly rootSchema: JsonSchema) {}

  addRule(name: string, rule: string): string {
    const esc = name.replace(/[^a-zA-Z0-9-]+/g, "-");
    if (!this.rules.has(esc) || this.rules.get(esc) === rule) {
      this.rules.set(esc, rule);
      return esc;
    }
    let i = 0;
    while (this.rules.has(esc + i) && this.rules.get(esc + i) !== rule) i++;
    this.rules.set(esc + i, rule);
    return esc + i;
  }

  primitive(name: string, prim = name): string {
    const [content, deps] = PRIMITIVES[prim];
    const n = this.addRule(name, content);
    for (const d of deps) if (!this.rules.has(d)) this.primitive(d);
    return n;
  }

  resolve(ref: string): JsonSchema {
    if (!ref.startsWith("#")) throw new JsonSchemaError(`unsupported remote $ref ${ref}`);
    // deno-lint-ignore no-explicit-any
    let node: any = this.rootSchema;
    for (const raw of ref.slice(1).split("/").filter((p) => p !== "")) {
      const key = decodeURIComponent(raw).replace(/~1/g, "/").replace(/~0/g, "~");
      node = node?.[key];
    }
    if (node === undefined) throw new JsonSchemaError(`unresolved $ref ${ref}`);
    return node;
  }

  refRule(ref: string): string {
    const frag = ref.includes("#") ? ref.slice(ref.indexOf("#") + 1) : ref;
    const name = "ref" + frag.replace(/[^a-zA-Z0-9-]+/g, "-");
    if (!this.rules.has(name) && !this.resolving.has(ref)) {
      this.resolving.add(ref);
      const n = this.visit(this.resolve(ref), name);
      this.resolving.delete(ref);
      return n;
    }
    return name;
  }

  notStrings(strings: string[]): string {
    // A trie of the excluded names: any string that is not one of them.
    type Node = { children: Map<string, Node>; end: boolean };
    const root: Node = { children: new Map(), end: false };
    for (const s of strings) {
      let n = root;
      for (const ch of s) {
        let c = n.children.get(ch);
        if (!c) n.children.set(ch, c = { children: new Map(), end: false });
        n = c;
      }
      n.end = true;
    }
    const char = this.primitive("char");
    const esc = (c: string) => c.replace(/[\\\]\-^"]/g, (x) => "\\" + x);
    const walk = (n: Node): string => {
      const alts: string[] = [];
      let rejects = "";
      for (const [ch, child] of n.children) {
        rejects += esc(ch);
        alts.push(
          `[${esc(ch)}]` + (child.children.size ? ` (${walk(child)})` : ` ${char}+`),
        );
      }
      if (n.children.size) alts.push(`[^"${rejects}] ${char}*`);
      return alts.join(" | ");
    };
    return `["] ( ${walk(root)} )${root.end ? "" : "?"} ["]`;
  }

  objectRule(
    props: [string, JsonSchema][],
    required: Set<string>,
    name: string,
    additional: JsonSchema | undefined,
  ): string {
    const pre = name ? name + "-" : "";
    const kv = new Map<string, string>();
    const req: string[] = [], opt: string[] = [];
    for (const [p, s] of props) {
      const r = this.visit(s, pre + p);
      kv.set(
        p,
        this.addRule(`${pre}${p}-kv`, `${formatLiteral(JSON.stringify(p))} space ":" space ${r}`),
      );
      (required.has(p) ? req : opt).push(p);
    }
    if (additional !== undefined && additional !== false) {
      const sub = pre + "additional";
      const isAny = additional === true || Object.keys(additional).length === 0;
      const value = isAny ? this.primitive("value") : this.visit(additional, sub + "-value");
      const key = props.length
        ? this.addRule(sub + "-k", this.notStrings(props.map(([p]) => p)))
        : this.primitive("string");
      kv.set("*", this.addRule(sub + "-kv", `${key} ":" space ${value}`));
      opt.push("*");
    }
    if (!req.length && !opt.length) return '"{" space "}"';
    let rule = '"{" space ' + req.map((p) => kv.get(p)).join(' "," space ');
    if (opt.length) {
      rule += " (";
      if (req.length) rule += ' "," space ( ';
      const rest = (ks: string[], firstOptional: boolean): string => {
        if (!ks.length) return "";
        const k = ks[0], r = kv.get(k)!;
        const comma = `( "," space ${r} )`;
        let res = firstOptional
          ? comma + (k === "*" ? "*" : "?")
          : r + (k === "*" ? ` ${comma}*` : "");
        if (ks.length > 1) res += " " + this.addRule(`${pre}${k}-rest`, rest(ks.slice(1), true));
        return res;
      };
      rule += opt.map((_, i) => rest(opt.slice(i), false)).join(" | ");
      if (req.length) rule += " )";
      rule += " )?";
    }
    return rule + ' space "}"';
  }

  visit(schema: JsonSchema, name: string): string {
    const ruleName = RESERVED.has(name) ? name + "-" : name || "root";
    if (schema === true || (typeof schema === "object" && Object.keys(schema).length === 0)) {
      return this.addRule(ruleName, this.primitive("value"));
    }
    if (schema === false) throw new JsonSchemaError("false schema matches nothing");
    const s = schema;
    const type = s.type;
    if (s.$ref !== undefined) return this.addRule(ruleName, this.refRule(s.$ref));
    if (s.oneOf || s.anyOf) {
      const alts: JsonSchema[] = s.oneOf ?? s.anyOf;
      return this.addRule(ruleName, this.union(name, alts));
    }
    if (Array.isArray(type)) {
      return this.addRule(ruleName, this.union(name, type.map((t: string) => ({ ...s, type: t }))));
    }
    if ("const" in s) return this.addRule(ruleName, formatLiteral(JSON.stringify(s.const)));
    if (Array.isArray(s.enum)) {
      const vals = s.enum.map((v: unknown) => formatLiteral(JSON.stringify(v)));
      return this.addRule(ruleName, `(${vals.join(" | ")})`);
    }
    if (s.allOf) return this.allOf(s.allOf, name, ruleName);
    if (
      (type === undefined || type === "object") &&
      (s.properties || (s.additionalProperties !== undefined && s.additionalProperties !== true))
    ) {
      const req = new Set<string>(s.required ?? []);
      const props = Object.entries(s.properties ?? {}) as [string, JsonSchema][];
      return this.addRule(ruleName, this.objectRule(props, req, name, s.additionalProperties));
    }
    if (type === "object") return this.addRule(ruleName, this.primitive("object"));
    if ((type === undefined || type === "array") && Array.isArray(s.prefixItems ?? s.items)) {
      const items: JsonSchema[] = s.prefixItems ?? s.items;
      const pre = name ? name + "-" : "";
      const parts = items.map((it, i) => this.visit(it, `${pre}tuple-${i}`));
      return this.addRule(ruleName, `"[" space ${parts.join(' "," space ')} space "]"`);
    }
    if (type === "array" || (type === undefined && s.items)) {
      const min = s.minItems ?? 0, max = s.maxItems ?? Infinity;
      if ((s.items === undefined || s.items === true) && min === 0 && max === Infinity) {
        return this.primitive(ruleName === "root" ? "root" : "array", "array");
      }
      const item = this.visit(s.items ?? true, (name ? name + "-" : "") + "item");
      return this.addRule(
        ruleName,
        `"[" space ${repetition(item, min, max, '"," space')} space "]"`,
      );
    }
    if (type === "string") {
      if (s.pattern) {
        this.warnings.push(`pattern ${s.pattern} is not supported, accepting any string`);
        return this.addRule(ruleName, this.primitive("string"));
      }
      if (s.format === "uuid") return this.primitive(ruleName === "root" ? "root" : "uuid", "uuid");
      if (s.format === "date" || s.format === "time" || s.format === "date-time") {
        return this.addRule(ruleName, this.primitive(`${s.format}-string`));
      }
      if ((s.minLength ?? 0) > 0 || s.maxLength !== undefined) {
        const char = this.primitive("char");
        const r = repetition(char, s.minLength ?? 0, s.maxLength ?? Infinity);
        return this.addRule(ruleName, `"\\"" ${r} "\\""`);
      }
      return this.primitive(ruleName === "root" ? "root" : "string", "string");
    }
    if (type === "integer") {
      let min = -Infinity, max = Infinity;
      if (typeof s.minimum === "number") min = Math.ceil(s.minimum);
      if (typeof s.exclusiveMinimum === "number") {
        min = Math.max(min, Math.floor(s.exclusiveMinimum) + 1);
      }
      if (typeof s.maximum === "number") max = Math.floor(s.maximum);
      if (typeof s.exclusiveMaximum === "number") {
        max = Math.min(max, Math.ceil(s.exclusiveMaximum) - 1);
      }
      if (min === -Infinity && max === Infinity) {
        return this.primitive(ruleName === "root" ? "root" : "integer", "integer");
      }
      return this.addRule(ruleName, `(${buildMinMaxInt(min, max)})`);
    }
    if (type === "number" || type === "boolean" || type === "null") {
      return this.primitive(ruleName === "root" ? "root" : type, type);
    }
    if (type === undefined) return this.addRule(ruleName, this.primitive("value"));
    throw new JsonSchemaError(`unrecognized type ${JSON.stringify(type)} at '${name || "root"}'`);
  }

  union(name: string, alts: JsonSchema[]): string {
    const pre = name ? name + "-" : "alternative-";
    return alts.map((a, i) => this.visit(a, pre + i)).join(" | ");
  }

  allOf(parts: JsonSchema[], name: string, ruleName: string): string {
    const required = new Set<string>();
    const props: [string, JsonSchema][] = [];
    const add = (c: JsonSchema, isRequired: boolean) => {
      if (typeof c !== "object") return;
      if (c.$ref) return add(this.resolve(c.$ref), isRequired);
      for (const [p, ps] of Object.entries(c.properties ?? {})) {
        props.push([p, ps as JsonSchema]);
        if (isRequired) required.add(p);
      }
    };
    for (const p of parts) {
      if (typeof p === "object" && p.anyOf) { for (const a of p.anyOf) add(a, false); }
      else add(p, true);
    }
    return this.addRule(ruleName, this.objectRule(props, required, name, undefined));
  }

  format(): string {
    return [...this.rules.keys()].sort().map((k) => `${k} ::= ${this.rules.get(k)}\n`).join("");
  }
}

/** Converts a JSON Schema to a GBNF grammar whose root matches conforming JSON text. */
export function jsonSchemaToGrammar(schema: JsonSchema): string {
  const c = new Converter(schema);
  c.visit(schema, "");
  return c.format();
}
