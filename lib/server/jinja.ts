/**
 * Chat templates are written for Python's jinja2 (transformers renders them),
 * and `@huggingface/jinja` departs from it in a few places real templates
 * reach. This module renders with `@huggingface/jinja`'s parser and
 * interpreter, overriding exactly those places with jinja2's behaviour:
 *
 * - An undefined variable iterates as empty, has length 0 and is `""` to
 *   string filters (`tools | length`, `for t in tools`, `x | trim`), where
 *   the library throws.
 * - `select`/`selectattr`/`reject`/`rejectattr`/`map` on `none` give an empty
 *   sequence (jinja2 tests `if seq:` before iterating).
 * - Dict literals may have integer keys (`{16384: …}[16384]`).
 * - `dict | string` and `list | string` are Python's `repr` (`{'a': 1}`),
 *   where the library has no `string` filter for objects.
 * - `x | safe` is markupsafe's `Markup`: `Markup + str` HTML-escapes the
 *   plain string (functionary writes `"…"|safe + t | tojson()`, and Python
 *   renders its JSON with `&#34;`).
 *
 * Everything else is the library's.
 *
 * @module
 */
import { Environment, Interpreter, parse, tokenize } from "@huggingface/jinja";

// The library's runtime values and AST nodes are not exported as types; they
// are plain classes with `type` and `value`.
interface Value {
  type: string;
  value: unknown;
}
type Node = { type: string } & Record<string, unknown>;
type Program = ReturnType<typeof parse>;

/** A node that evaluates to an already evaluated value (no second evaluation). */
const VALUE = "__PyValue";
const valueNode = (value: Value): Node => ({ type: VALUE, value });

const STRING_FILTERS = new Set([
  "trim",
  "string",
  "upper",
  "lower",
  "capitalize",
  "title",
  "replace",
  "indent",
  "safe",
]);
const SEQUENCE_FILTERS = new Set([
  "list",
  "join",
  "select",
  "reject",
  "selectattr",
  "rejectattr",
  "map",
  "sort",
  "unique",
]);
const LAZY_FILTERS = new Set(["select", "reject", "selectattr", "rejectattr", "map"]);

function filterName(filter: Node): string {
  const f = filter.type === "CallExpression" ? filter.callee as Node : filter;
  return typeof f.value === "string" ? f.value : "";
}

/** Python's `repr` of a runtime value (what `str(dict)` shows). */
export function pyRepr(v: Value): string {
  switch (v.type) {
    case "StringValue":
      return pyStr(v.value as string);
    case "IntegerValue":
      return String(v.value);
    case "FloatValue": {
      const n = v.value as number;
      return Number.isInteger(n) && Math.abs(n) < 1e16 ? n.toFixed(1) : String(n);
    }
    case "BooleanValue":
      return v.value ? "True" : "False";
    case "NullValue":
      return "None";
    case "ArrayValue":
      return `[${(v.value as Value[]).map(pyRepr).join(", ")}]`;
    case "TupleValue":
      return `(${(v.value as Value[]).map(pyRepr).join(", ")})`;
    case "ObjectValue": {
      const parts = [...(v.value as Map<string, Value>)].map(([k, x]) =>
        `${pyStr(k)}: ${pyRepr(x)}`
      );
      return `{${parts.join(", ")}}`;
    }
    default:
      return "";
  }
}

/** markupsafe's `escape`. */
function htmlEscape(s: string): string {
  return s.replace(/[&<>'"]/g, (c) => ESCAPES[c]);
}
const ESCAPES: Record<string, string> = {
  "&": "&amp;",
  "<": "&lt;",
  ">": "&gt;",
  "'": "&#39;",
  '"': "&#34;",
};

/** Python's `repr` of a string: single quotes unless it holds `'` and no `"`. */
function pyStr(s: string): string {
  const q = s.includes("'") && !s.includes('"') ? '"' : "'";
  let out = q;
  for (const ch of s) {
    const c = ch.codePointAt(0)!;
    if (ch === "\\") out += "\\\\";
    else if (ch === q) out += "\\" + q;
    else if (ch === "\n") out += "\\n";
    else if (ch === "\r") out += "\\r";
    else if (ch === "\t") out += "\\t";
    else if (c < 0x20 || c === 0x7f) out += "\\x" + c.toString(16).padStart(2, "0");
    else out += ch;
  }
  return out + q;
}

/** `@huggingface/jinja`'s interpreter with jinja2's behaviour where they differ. */
class PyInterpreter extends Interpreter {
  /** Dicts built with integer keys: each stored key's integer. */
  readonly #intKeys = new WeakMap<Value, Map<string, number>>();
  /** Strings that are `Markup` (the result of `safe`, or of adding to one). */
  readonly #markup = new WeakSet<Value>();
  /** A runtime value for a JS value (the library converts on `set`). */
  #value(x: unknown): Value {
    return new Environment().set("_", x) as unknown as Value;
  }

  /** Evaluates a child node (through this class's overrides). */
  #child(node: unknown, env: Environment): Value {
    return this.evaluate(node as never, env) as unknown as Value;
  }

  /** Hands `node` itself to the library (its children come back through `evaluate`). */
  #eval(node: unknown, env: Environment): Value {
    return super.evaluate(node as never, env) as unknown as Value;
  }

  override evaluate(statement: never, environment: Environment): never {
    const node = statement as Node | undefined;
    switch (node?.type) {
      case VALUE:
        return node.value as never;
      case "For":
        return this.#for(node, environment) as never;
      case "FilterExpression":
        return this.#filter(node, environment) as never;
      case "ObjectLiteral":
        return this.#object(node, environment) as never;
      case "MemberExpression":
        return this.#member(node, environment) as never;
      case "BinaryExpression":
        if ((node.operator as Node).value === "+") return this.#add(node, environment) as never;
    }
    return super.evaluate(statement, environment) as never;
  }

  /** `for x in undefined` runs zero times (jinja2's Undefined iterates as empty). */
  #for(node: Node, env: Environment): Value {
    const iter = node.iterable as Node;
    const lhs = iter.type === "SelectExpression" ? iter.lhs as Node : iter;
    let v = this.#child(lhs, env);
    if (v.type === "UndefinedValue") v = this.#value([]);
    const ints = this.#intKeys.get(v);
    if (ints) {
      v = this.#list(
        [...(v.value as Map<string, Value>).keys()].map((k) => this.#key(k, ints)),
        env,
      );
    }
    const evaluated = iter.type === "SelectExpression"
      ? { ...iter, lhs: valueNode(v) }
      : valueNode(v);
    return this.#eval({ ...node, iterable: evaluated }, env);
  }

  /** `+`, with markupsafe's escaping when one side is `Markup` and the other a str. */
  #add(node: Node, env: Environment): Value {
    const left = this.#child(node.left, env), right = this.#child(node.right, env);
    const strings = left.type === "StringValue" && right.type === "StringValue";
    if (strings && (this.#markup.has(left) || this.#markup.has(right))) {
      const esc = (v: Value) =>
        this.#markup.has(v) ? v.value as string : htmlEscape(v.value as string);
      const out = this.#value(esc(left) + esc(right));
      this.#markup.add(out);
      return out;
    }
    return this.#eval({ ...node, left: valueNode(left), right: valueNode(right) }, env);
  }

  #filter(node: Node, env: Environment): Value {
    let operand = this.#child(node.operand, env);
    const name = filterName(node.filter as Node);
    if (name === "safe" && operand.type === "StringValue") {
      const out = this.#value(operand.value);
      this.#markup.add(out);
      return out;
    }
    if (operand.type === "UndefinedValue") {
      if (name === "length" || name === "count") return this.#value(0);
      if (STRING_FILTERS.has(name)) operand = this.#value("");
      else if (SEQUENCE_FILTERS.has(name)) operand = this.#value([]);
    } else if (operand.type === "NullValue" && LAZY_FILTERS.has(name)) {
      operand = this.#value([]);
    } else if (
      name === "string" && ["ObjectValue", "ArrayValue", "TupleValue"].includes(operand.type)
    ) {
      return this.#value(pyRepr(operand));
    } else if (name === "dictsort" && (node.filter as Node).type === "Identifier") {
      const ints = this.#intKeys.get(operand);
      if (ints) return this.#dictsort(operand, ints, env);
    }
    return this.#eval({ ...node, operand: valueNode(operand) }, env);
  }

  /**
   * Dict literals with integer keys: stored under the key's decimal string,
   * remembered as integers for iteration, `dictsort` and comparisons.
   */
  #object(node: Node, env: Environment): Value {
    const entries = node.value as Map<Node, Node>;
    const keyed = new Map<Node, Node>();
    const ints = new Map<string, number>();
    for (const [k, v] of entries) {
      const key = this.#child(k, env);
      if (key.type === "IntegerValue") ints.set(String(key.value), key.value as number);
      keyed.set(valueNode(key.type === "IntegerValue" ? this.#value(String(key.value)) : key), v);
    }
    const dict = this.#eval({ ...node, value: keyed }, env);
    if (ints.size) this.#intKeys.set(dict, ints);
    return dict;
  }

  #key(k: string, ints: Map<string, number>): Value {
    return this.#value(ints.has(k) ? ints.get(k)! : k);
  }

  /** A list value of already evaluated items. */
  #list(items: Value[], env: Environment): Value {
    return this.#eval({ type: "ArrayLiteral", value: items.map(valueNode) }, env);
  }

  /** jinja2's `dictsort` (by key, case-insensitive) of an integer-keyed dict. */
  #dictsort(dict: Value, ints: Map<string, number>, env: Environment): Value {
    const rank = (k: Value) =>
      typeof k.value === "string" ? (k.value as string).toLowerCase() : k.value as number;
    const pairs = [...(dict.value as Map<string, Value>)].map(([k, v]) => [this.#key(k, ints), v]);
    pairs.sort(([a], [b]) => {
      const x = rank(a), y = rank(b);
      if (typeof x !== typeof y) throw new Error("dictsort: keys of different types");
      return x < y ? -1 : x > y ? 1 : 0;
    });
    const tuples = pairs.map(([k, v]) => this.#list([k, v], env));
    return this.#list(tuples, env);
  }

  /** `d[16384]` on a dict reads the integer key stored by `#object`. */
  #member(node: Node, env: Environment): Value {
    if (!node.computed || (node.property as Node).type === "SliceExpression") {
      return this.#eval(node, env);
    }
    const object = this.#child(node.object, env);
    let property = this.#child(node.property, env);
    if (object.type === "ObjectValue" && property.type === "IntegerValue") {
      property = this.#value(String(property.value));
    }
    return this.#eval({ ...node, object: valueNode(object), property: valueNode(property) }, env);
  }
}

const MONTHS = [
  "January",
  "February",
  "March",
  "April",
  "May",
  "June",
  "July",
  "August",
  "September",
  "October",
  "November",
  "December",
];
const DAYS = ["Sunday", "Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday"];

/** Python's `datetime.now().strftime(format)` in the C locale, local time. */
export function strftime(d: Date, format: string): string {
  const p2 = (n: number) => String(n).padStart(2, "0");
  return format.replace(/%[YmdbBaAHMSyIpj%]/g, (t) => {
    switch (t) {
      case "%Y":
        return String(d.getFullYear());
      case "%y":
        return p2(d.getFullYear() % 100);
      case "%m":
        return p2(d.getMonth() + 1);
      case "%d":
        return p2(d.getDate());
      case "%b":
        return MONTHS[d.getMonth()].slice(0, 3);
      case "%B":
        return MONTHS[d.getMonth()];
      case "%a":
        return DAYS[d.getDay()].slice(0, 3);
      case "%A":
        return DAYS[d.getDay()];
      case "%H":
        return p2(d.getHours());
      case "%I":
        return p2(d.getHours() % 12 || 12);
      case "%p":
        return d.getHours() < 12 ? "AM" : "PM";
      case "%M":
        return p2(d.getMinutes());
      case "%S":
        return p2(d.getSeconds());
      case "%j": {
        const start = new Date(d.getFullYear(), 0, 1);
        return String(Math.floor((d.getTime() - start.getTime()) / 864e5) + 1).padStart(3, "0");
      }
      default:
        return "%";
    }
  });
}

/** Python's `range`. */
function range(start: number, stop?: number, step = 1): number[] {
  if (stop === undefined) [start, stop] = [0, start];
  if (step === 0) throw new Error("range() arg 3 must not be zero");
  const out: number[] = [];
  for (let i = start; step > 0 ? i < stop : i > stop; i += step) out.push(i);
  return out;
}

/**
 * A template parsed as transformers does (trim_blocks, lstrip_blocks),
 * rendered with jinja2's semantics where `@huggingface/jinja` differs.
 *
 * @example
 * ```ts
 * const t = new PyTemplate("{% for t in tools %}{{ t }}{% endfor %}{{ tools | length }}");
 * t.render({}); // "0": an undefined `tools` iterates as empty, as in Python
 * ```
 */
export class PyTemplate {
  readonly #program: Program;

  /** Parses `source` (throws on a syntax error). */
  constructor(source: string) {
    this.#program = parse(tokenize(source, { lstrip_blocks: true, trim_blocks: true }));
  }

  /** Renders with `items` as the template's variables. */
  render(items: Record<string, unknown>): string {
    const env = new Environment();
    // The globals the library's own Template sets, with Python's
    // `range` and `strftime_now` (transformers defines the latter).
    for (const [k, v] of [["false", false], ["true", true], ["none", null]] as const) env.set(k, v);
    for (const [k, v] of [["False", false], ["True", true], ["None", null]] as const) env.set(k, v);
    env.set("raise_exception", (m: string) => {
      throw new Error(m);
    });
    env.set("range", range);
    env.set("strftime_now", (f: string) => strftime(new Date(), f));
    for (const [k, v] of Object.entries(items)) env.set(k, v);
    const out = new PyInterpreter(env).run(this.#program) as unknown as Value;
    return out.value as string;
  }
}
