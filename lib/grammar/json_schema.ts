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
 * Keywords are read in the order and with the checks of llama.cpp's
 * common/json-schema.cpp (the schema document its converter walks): a keyword
 * of the wrong type, an unresolvable `$ref`, an integer bound outside int64 —
 * and any schema whose llama.cpp grammar would be wrong or would not build —
 * is a {@link JsonSchemaError} naming the JSON pointer, never a TypeError, a
 * stack overflow or a silently wrong grammar.
 *
 * @module
 */
import { JsonSchemaError, MAX_SCHEMA_DEPTH } from "./errors.ts";
import { buildMinMaxInt } from "./json_schema_int.ts";
import { GrammarSyntaxError, parseGrammar } from "./parser.ts";

export { JsonSchemaError };

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

// deno-lint-ignore no-explicit-any
type Obj = Record<string, any>;

/** How llama.cpp's schema builder classifies a schema (common/json-schema.cpp, build_node). */
type Kind =
  | "any"
  | "ref"
  | "anyOf"
  | "typeUnion"
  | "const"
  | "enum"
  | "allOf"
  | "object"
  | "array"
  | "string"
  | "integer"
  | "number"
  | "boolean"
  | "null";

const SIMPLE_TYPES = new Set(["array", "integer", "number", "boolean", "null"]);

/** A key present with a value (JSON has no `undefined`; a JS caller may pass one). */
function has(s: Obj, k: string): boolean {
  return Object.hasOwn(s, k) && s[k] !== undefined;
}

function isObj(v: unknown): v is Obj {
  return typeof v === "object" && v !== null && !Array.isArray(v);
}

/** JSON text of a const/enum value; values JSON cannot hold are schema errors. */
function jsonText(v: unknown, ptr: string): string {
  let t: string | undefined;
  try {
    t = JSON.stringify(v);
  } catch (e) {
    throw new JsonSchemaError(`value is not JSON (${(e as Error).message})`, ptr);
  }
  if (t === undefined) throw new JsonSchemaError("value is not JSON", ptr);
  return t;
}

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

  /** The node kind llama.cpp builds for `s`, with its checks (JSON pointer `ptr`). */
  kind(s: JsonSchema, ptr: string): Kind {
    // `true` is our extension (llama.cpp takes objects only); it means any value.
    if (s === true) return "any";
    if (s === false) throw new JsonSchemaError("false schema matches nothing", ptr);
    if (!isObj(s)) throw new JsonSchemaError("schema must be an object", ptr);
    if (has(s, "$ref")) return "ref";
    if (has(s, "oneOf") || has(s, "anyOf")) return "anyOf";
    const type = s.type;
    if (Array.isArray(type)) return "typeUnion";
    if (has(s, "const")) return "const";
    if (has(s, "enum")) return "enum";
    if (type !== undefined && type !== null && typeof type !== "string") {
      throw new JsonSchemaError("type must be a string or an array of strings", ptr);
    }
    const t = typeof type === "string" ? type : "";
    const hasProps = has(s, "properties") ||
      (has(s, "additionalProperties") && s.additionalProperties !== true);
    if (t === "") {
      // Without a type the structural keywords decide, in llama.cpp's order.
      if (hasProps) return "object";
      if (has(s, "allOf")) return "allOf";
      if (has(s, "items") || has(s, "prefixItems")) return "array";
      if (
        has(s, "pattern") || has(s, "minLength") || has(s, "maxLength") ||
        this.format(s, ptr) !== ""
      ) return "string";
      return "any";
    }
    if (t === "object") return !hasProps && has(s, "allOf") ? "allOf" : "object";
    if (t === "string") return has(s, "allOf") ? "allOf" : "string";
    if (SIMPLE_TYPES.has(t)) return t as Kind;
    throw new JsonSchemaError(`unrecognized type ${JSON.stringify(t)}`, ptr);
  }

  format(s: Obj, ptr: string): string {
    if (!has(s, "format")) return "";
    const f = s.format;
    if (typeof f !== "string") throw new JsonSchemaError("format must be a string", ptr);
    if (f === "date" || f === "time" || f === "date-time") return f;
    return /^uuid[1-5]?$/.test(f) ? "uuid" : "";
  }

  /** minItems and friends: llama.cpp reads them as a non-negative C int. */
  count(s: Obj, key: string, ptr: string, def: number): number {
    if (!has(s, key)) return def;
    const v = s[key];
    if (!Number.isInteger(v) || v < 0 || v > 0x7fffffff) {
      throw new JsonSchemaError(`${key} must be a non-negative integer (a C int)`, ptr);
    }
    return v;
  }

  /**
   * An integer bound, rounded inwards, as llama.cpp's int64_t. Past ±2^63 its
   * double-to-int64 conversion is undefined (and printing a JS number past
   * 2^53 gives "1e+21"), so such bounds are errors, not wrong grammars.
   */
  bound(s: Obj, key: string, ptr: string, roundUp: boolean): bigint {
    const v = s[key];
    if (typeof v !== "number" || !Number.isFinite(v)) {
      throw new JsonSchemaError(`${key} must be a number`, ptr);
    }
    const r = roundUp ? Math.ceil(v) : Math.floor(v);
    if (Math.abs(r) >= 2 ** 63) {
      throw new JsonSchemaError(
        `${key} ${v} is outside the 64-bit integers llama.cpp supports`,
        ptr,
      );
    }
    return BigInt(r);
  }

  alternatives(v: unknown, ptr: string): JsonSchema[] {
    if (!Array.isArray(v)) throw new JsonSchemaError("must be an array of schemas", ptr);
    if (v.length === 0) throw new JsonSchemaError("must not be empty", ptr);
    return v;
  }

  properties(s: Obj, ptr: string): [string, JsonSchema, string][] {
    if (!has(s, "properties")) return [];
    if (!isObj(s.properties)) throw new JsonSchemaError("properties must be an object", ptr);
    return Object.entries(s.properties).map(([k, v]) => [k, v, `${ptr}/properties/${k}`]);
  }

  resolve(ref: string, ptr: string): JsonSchema {
    // JSON pointer tokens are taken as they are (no ~0/~1 or %-decoding), as llama.cpp does.
    let node: unknown = this.rootSchema;
    if (ref === "#") return node as JsonSchema;
    for (const sel of ref.slice(2).split("/")) {
      if (isObj(node) && Object.hasOwn(node, sel)) node = node[sel];
      else if (Array.isArray(node)) {
        const m = /^\s*\+?(\d+)/.exec(sel);
        const idx = m ? Number(m[1]) : node.length;
        if (idx >= node.length) {
          throw new JsonSchemaError(`cannot resolve $ref ${ref}, ${sel} is out of range`, ptr);
        }
        node = node[idx];
      } else throw new JsonSchemaError(`cannot resolve $ref ${ref}, ${sel} not found`, ptr);
    }
    return node as JsonSchema;
  }

  checkRef(ref: unknown, ptr: string): string {
    if (typeof ref !== "string") throw new JsonSchemaError("$ref must be a string", ptr);
    if (ref !== "#" && !ref.startsWith("#/")) {
      throw new JsonSchemaError(
        `unsupported $ref ${ref}, only references into the same document are supported`,
        ptr,
      );
    }
    return ref;
  }

  refRule(ref: string, ptr: string, depth: number): string {
    const name = "ref" + ref.slice(ref.indexOf("#") + 1).replace(/[^a-zA-Z0-9-]+/g, "-");
    if (!this.rules.has(name) && !this.resolving.has(ref)) {
      this.resolving.add(ref);
      const n = this.visit(this.resolve(ref, ptr), name, ref, depth + 1);
      this.resolving.delete(ref);
      return n;
    }
    return name;
  }

  notStrings(strings: string[]): string {
    // A trie of the excluded names: any string that is not one of them.
    type Node = { children: Map<number, Node>; end: boolean };
    const root: Node = { children: new Map(), end: false };
    for (const s of strings) {
      let n = root;
      for (const ch of s) {
        const cp = ch.codePointAt(0)!;
        let c = n.children.get(cp);
        if (!c) n.children.set(cp, c = { children: new Map(), end: false });
        n = c;
      }
      n.end = true;
    }
    const char = this.primitive("char");
    const esc = (cp: number) => String.fromCodePoint(cp).replace(/[\\\]\-^"]/g, (x) => "\\" + x);
    // Depth-first with an explicit stack (a property name may be very long);
    // children in code point order, as llama.cpp's trie (a std::map) gives them.
    const kids = (n: Node) => [...n.children].sort((a, b) => a[0] - b[0]);
    const out: string[] = [];
    const stack = [{ kids: kids(root), i: 0, rejects: "" }];
    while (stack.length) {
      const f = stack[stack.length - 1];
      if (f.i < f.kids.length) {
        const [cp, child] = f.kids[f.i++];
        if (f.i > 1) out.push(" | ");
        f.rejects += esc(cp);
        out.push(`[${esc(cp)}]`);
        if (child.children.size) {
          out.push(" (");
          stack.push({ kids: kids(child), i: 0, rejects: "" });
        } else out.push(` ${char}+`);
        continue;
      }
      if (f.kids.length) out.push(` | [^"${f.rejects}] ${char}*`);
      stack.pop();
      if (stack.length) out.push(")");
    }
    return `["] ( ${out.join("")} )${root.end ? "" : "?"} ["]`;
  }

  objectRule(
    props: [string, JsonSchema, string][],
    required: Set<string>,
    name: string,
    additional: JsonSchema | undefined,
    ptr: string,
    depth: number,
  ): string {
    const pre = name ? name + "-" : "";
    const kv = new Map<string, string>();
    const req: string[] = [], opt: string[] = [];
    for (const [p, s, pptr] of props) {
      const r = this.visit(s, pre + p, pptr, depth + 1);
      kv.set(
        p,
        this.addRule(`${pre}${p}-kv`, `${formatLiteral(JSON.stringify(p))} space ":" space ${r}`),
      );
      (required.has(p) ? req : opt).push(p);
    }
    if (additional !== undefined) {
      const sub = pre + "additional", aptr = `${ptr}/additionalProperties`;
      const value = this.kind(additional, aptr) === "any"
        ? this.primitive("value")
        : this.visit(additional, sub + "-value", aptr, depth + 1);
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
      // Each optional key may be followed by any later ones, through one
      // "<key>-rest" rule per key. Built from the last key back (llama.cpp
      // recurses from the first and so creates them in this same order), in
      // linear time and without recursion however many keys there are.
      const n = opt.length, restRef = new Array<string>(n);
      let next = "";
      for (let i = n - 1; i >= 0; i--) {
        const k = opt[i];
        restRef[i] = i + 1 < n ? " " + this.addRule(`${pre}${k}-rest`, next) : "";
        next = `( "," space ${kv.get(k)} )${k === "*" ? "*" : "?"}${restRef[i]}`;
      }
      rule += opt.map((k, i) => {
        const r = kv.get(k)!;
        return r + (k === "*" ? ` ( "," space ${r} )*` : "") + restRef[i];
      }).join(" | ");
      if (req.length) rule += " )";
      rule += " )?";
    }
    return rule + ' space "}"';
  }

  visit(schema: JsonSchema, name: string, ptr: string, depth: number): string {
    if (depth > MAX_SCHEMA_DEPTH) {
      throw new JsonSchemaError(`nested deeper than ${MAX_SCHEMA_DEPTH} levels`, ptr);
    }
    const ruleName = RESERVED.has(name) ? name + "-" : name || "root";
    const kind = this.kind(schema, ptr);
    const s = schema as Obj;
    const pre = name ? name + "-" : "";
    switch (kind) {
      case "any":
        return this.addRule(ruleName, this.primitive("value"));
      case "ref":
        return this.addRule(ruleName, this.refRule(this.checkRef(s.$ref, ptr), ptr, depth));
      case "anyOf": {
        const key = has(s, "oneOf") ? "oneOf" : "anyOf";
        const alts = this.alternatives(s[key], `${ptr}/${key}`);
        return this.addRule(ruleName, this.union(name, alts, `${ptr}/${key}`, depth));
      }
      case "typeUnion": {
        const types = this.alternatives(s.type, `${ptr}/type`);
        const alts = types.map((t) => ({ ...s, type: t }));
        return this.addRule(ruleName, this.union(name, alts, `${ptr}/type`, depth));
      }
      case "const":
        return this.addRule(ruleName, formatLiteral(jsonText(s.const, `${ptr}/const`)));
      case "enum": {
        const vals = this.enumValues(s, ptr).map((v, i) =>
          formatLiteral(jsonText(v, `${ptr}/enum/${i}`))
        );
        return this.addRule(ruleName, `(${vals.join(" | ")})`);
      }
      case "allOf":
        return this.allOf(s.allOf, name, ruleName, `${ptr}/allOf`, depth);
      case "object": {
        const props = this.properties(s, ptr);
        const required = new Set<string>(
          Array.isArray(s.required) ? s.required.filter((r) => typeof r === "string") : [],
        );
        let additional: JsonSchema | undefined;
        if (has(s, "additionalProperties")) {
          const a = s.additionalProperties;
          if (a === true || isObj(a)) additional = a;
          else if (a !== false) {
            throw new JsonSchemaError("additionalProperties must be a boolean or a schema", ptr);
          }
        } else if (!has(s, "properties")) additional = true;
        if (
          !props.length && additional !== undefined &&
          this.kind(additional, `${ptr}/additionalProperties`) === "any"
        ) return this.addRule(ruleName, this.primitive("object"));
        return this.addRule(
          ruleName,
          this.objectRule(props, required, name, additional, ptr, depth),
        );
      }
      case "array": {
        const key = has(s, "items") ? "items" : has(s, "prefixItems") ? "prefixItems" : "";
        if (key && Array.isArray(s[key])) {
          const parts = (s[key] as JsonSchema[]).map((it, i) =>
            this.visit(it, `${pre}tuple-${i}`, `${ptr}/${key}/${i}`, depth + 1)
          );
          return this.addRule(ruleName, `"[" space ${parts.join(' "," space ')} space "]"`);
        }
        const items: JsonSchema = key ? s[key] : true;
        const iptr = key ? `${ptr}/${key}` : ptr;
        const itemKind = this.kind(items, iptr);
        const min = this.count(s, "minItems", ptr, 0), max = this.count(s, "maxItems", ptr, -1);
        if (itemKind === "any" && min === 0 && max < 0) {
          return this.primitive(ruleName === "root" ? "root" : "array", "array");
        }
        const item = this.visit(items, pre + "item", iptr, depth + 1);
        const rep = repetition(item, min, max < 0 ? Infinity : max, '"," space');
        return this.addRule(ruleName, `"[" space ${rep} space "]"`);
      }
      case "string": {
        if (has(s, "pattern") && typeof s.pattern !== "string") {
          throw new JsonSchemaError("pattern must be a string", ptr);
        }
        const fmt = this.format(s, ptr);
        const minLen = this.count(s, "minLength", ptr, 0);
        const maxLen = this.count(s, "maxLength", ptr, -1);
        if (has(s, "pattern") && s.pattern !== "") {
          this.warnings.push(`pattern ${s.pattern} is not supported, accepting any string`);
          return this.addRule(ruleName, this.primitive("string"));
        }
        if (fmt === "uuid") return this.primitive(ruleName === "root" ? "root" : "uuid", "uuid");
        if (fmt) return this.addRule(ruleName, this.primitive(`${fmt}-string`));
        if (minLen > 0 || maxLen >= 0) {
          const r = repetition(this.primitive("char"), minLen, maxLen < 0 ? Infinity : maxLen);
          return this.addRule(ruleName, `"\\"" ${r} "\\""`);
        }
        return this.primitive(ruleName === "root" ? "root" : "string", "string");
      }
      case "integer": {
        // llama.cpp: minimum wins over exclusiveMinimum (and maximum likewise).
        let min: bigint | null = null, max: bigint | null = null;
        if (has(s, "minimum")) min = this.bound(s, "minimum", ptr, true);
        else if (has(s, "exclusiveMinimum")) {
          min = this.bound(s, "exclusiveMinimum", ptr, false) + 1n;
        }
        if (has(s, "maximum")) max = this.bound(s, "maximum", ptr, false);
        else if (has(s, "exclusiveMaximum")) {
          max = this.bound(s, "exclusiveMaximum", ptr, true) - 1n;
        }
        if (min === null && max === null) {
          return this.primitive(ruleName === "root" ? "root" : "integer", "integer");
        }
        if (min !== null && max !== null && min > max) {
          // llama.cpp's digit ranges come out wrong (not empty) when min > max.
          throw new JsonSchemaError(`no integer lies in [${min}, ${max}]`, ptr);
        }
        return this.addRule(ruleName, `(${buildMinMaxInt(min, max)})`);
      }
      default:
        return this.primitive(ruleName === "root" ? "root" : kind, kind);
    }
  }

  enumValues(s: Obj, ptr: string): unknown[] {
    if (!Array.isArray(s.enum) || s.enum.length === 0) {
      throw new JsonSchemaError("enum must be a non-empty array", ptr);
    }
    return s.enum;
  }

  union(name: string, alts: JsonSchema[], ptr: string, depth: number): string {
    const pre = name ? name + "-" : "alternative-";
    return alts.map((a, i) => this.visit(a, pre + i, `${ptr}/${i}`, depth + 1)).join(" | ");
  }

  /**
   * llama.cpp's allOf: the properties of its object components merged (those
   * under an anyOf optional), or the intersection of its enums when there is
   * one. `$ref` chains are followed iteratively; a chain that loops, on which
   * llama.cpp recurses forever, is an error.
   */
  allOf(parts: unknown, name: string, ruleName: string, ptr: string, depth: number): string {
    const children = this.alternatives(parts, ptr);
    const required = new Set<string>();
    const props: [string, JsonSchema, string][] = [];
    const enumCounts = new Map<string, number>();
    const add = (c: JsonSchema, cptr: string, isRequired: boolean) => {
      const seen = new Set<string>();
      let kind = this.kind(c, cptr);
      while (kind === "ref") {
        const ref = this.checkRef((c as Obj).$ref, cptr);
        if (seen.has(ref)) {
          throw new JsonSchemaError(`$ref cycle through ${ref} inside allOf`, cptr);
        }
        seen.add(ref);
        c = this.resolve(ref, cptr);
        cptr = ref;
        kind = this.kind(c, cptr);
      }
      if (kind === "object") {
        for (const p of this.properties(c as Obj, cptr)) {
          props.push(p);
          if (isRequired) required.add(p[0]);
        }
      } else if (kind === "enum") {
        this.enumValues(c as Obj, cptr).forEach((v, i) => {
          const lit = formatLiteral(jsonText(v, `${cptr}/enum/${i}`));
          enumCounts.set(lit, (enumCounts.get(lit) ?? 0) + 1);
        });
      }
    };
    children.forEach((child, i) => {
      const cptr = `${ptr}/${i}`;
      if (this.kind(child, cptr) === "anyOf") {
        const key = has(child as Obj, "oneOf") ? "oneOf" : "anyOf";
        const alts = this.alternatives((child as Obj)[key], `${cptr}/${key}`);
        alts.forEach((a, j) => add(a, `${cptr}/${key}/${j}`, false));
      } else add(child, cptr, true);
    });
    const common = [...enumCounts].filter(([, n]) => n === children.length).map(([l]) => l);
    if (common.length) return this.addRule(ruleName, `(${common.sort().join(" | ")})`);
    return this.addRule(
      ruleName,
      this.objectRule(props, required, name, undefined, ptr, depth),
    );
  }

  formatGrammar(): string {
    return [...this.rules.keys()].sort().map((k) => `${k} ::= ${this.rules.get(k)}\n`).join("");
  }
}

/**
 * Converts a JSON Schema to a GBNF grammar whose root matches conforming JSON
 * text. Throws {@link JsonSchemaError} for a schema llama.cpp rejects or would
 * turn into a wrong or unbuildable grammar.
 */
export function jsonSchemaToGrammar(schema: JsonSchema): string {
  const c = new Converter(schema);
  c.visit(schema, "", "#", 0);
  const gbnf = c.formatGrammar();
  // What llama.cpp's converter writes for some schemas does not build (a
  // $ref that only refers to itself, a minItems past the 2000 repetitions
  // of the GBNF parser, a one-sided bound past 16 digits): say so here.
  try {
    parseGrammar(gbnf);
  } catch (e) {
    if (!(e instanceof GrammarSyntaxError)) throw e;
    throw new JsonSchemaError(`the grammar for this schema does not build: ${e.message}`);
  }
  return gbnf;
}
