/**
 * The layering of lib/: every import of lib/**\/*.ts (and of ffi/, which
 * lib/ stands on) is parsed and mapped to its top-level folder, and the
 * folder graph must be a stack. Fails, naming file and import, on
 *   (a) an import from lib/ of tests/, bench/ or anything else outside lib/
 *       and ffi/;
 *   (b) a cycle between top-level folders;
 *   (c) an edge against RANK: a folder imports only lower ranks, or a
 *       folder of its own rank when SAME_RANK lists that edge with a reason.
 * Plus the issue's acceptance greps: no "backend/" in lib/gguf, lib/graph,
 * lib/model, and no "tests/" anywhere in lib/.
 */
import assert from "node:assert/strict";
import { dirname, join, normalize, relative } from "node:path";
import { fileURLToPath } from "node:url";

const ROOT = fileURLToPath(new URL("../", import.meta.url));

/**
 * Rank of each top-level folder of lib/ (and of ffi/). 0 is the bottom:
 * ggml (types, layouts, half floats, reference quantizers, memory), fs
 * (atomic files), lib/options.ts (option checking) and ffi (the native
 * library) import nothing of ours.
 */
const RANK: Record<string, number> = {
  ggml: 0,
  fs: 0,
  "options.ts": 0,
  ffi: 0,
  gguf: 1, // files: ffi (mmap), fs, ggml
  graph: 2, // the op DAG and the op-rule table: ggml
  tokenizer: 2, // gguf metadata
  grammar: 2, // GBNF, JSON schema: nothing of ours
  backend: 3, // runs graph nodes: ffi, ggml, graph
  quant: 3, // the quantize tool: ffi, fs, ggml, gguf
  sample: 3, // samplers, incl. the grammar sampler: grammar, options
  kv: 3, // the KV cache: ggml, graph
  sched: 4, // places graph nodes on backends
  model: 4, // architectures build graphs over gguf weights, kv, tokenizer
  runtime: 5, // Context, generate
  cli: 6,
  server: 6, // the OpenAI-compatible fetch handler: runtime, model, grammar
};

/** Edges between folders of equal rank, "from -> to": reason. */
const SAME_RANK: Record<string, string> = {
  "cli -> server": "`deno task serve` runs the handler",
};

/** Blanks comments and regex literals, keeping strings (import specifiers) and lines. */
export function stripComments(src: string): string {
  let out = "";
  let i = 0;
  let last = ""; // last significant character emitted, to tell a regex from a division
  while (i < src.length) {
    const c = src[i], n = src[i + 1];
    if (c === "/" && n === "/") {
      while (i < src.length && src[i] !== "\n") i++;
    } else if (c === "/" && n === "*") {
      const e = src.indexOf("*/", i + 2);
      const end = e < 0 ? src.length : e + 2;
      out += src.slice(i, end).replace(/[^\n]/g, " ");
      i = end;
    } else if (c === '"' || c === "'" || c === "`") {
      let j = i + 1;
      while (j < src.length && src[j] !== c && (c === "`" || src[j] !== "\n")) {
        j += src[j] === "\\" ? 2 : 1;
      }
      out += src.slice(i, j + 1);
      i = j + 1;
      last = c;
    } else if (c === "/" && (last === "" || "(,=:[!&|?{};+-*%<>~^".includes(last))) {
      // a regex literal: skip to its unescaped closing slash outside a class
      let j = i + 1, inClass = false;
      while (j < src.length && src[j] !== "\n") {
        if (src[j] === "\\") j++;
        else if (src[j] === "[") inClass = true;
        else if (src[j] === "]") inClass = false;
        else if (src[j] === "/" && !inClass) break;
        j++;
      }
      out += "/" + " ".repeat(Math.max(0, j - i - 1)) + "/"; // its text is no import
      i = j + 1;
      last = "/";
    } else {
      out += c;
      if (!/\s/.test(c)) last = c;
      i++;
    }
  }
  return out;
}

// `import … from "x"`, `export … from "x"`, `import "x"`, `import("x")`.
const IMPORT_RE =
  /\b(?:import|export)\b\s*(?:[^"'`;()]*?\bfrom\s*)?(["'])([^"'\n]+)\1|\bimport\s*\(\s*(["'])([^"'\n]+)\3\s*\)/g;

/** Every module specifier a TypeScript source imports, statically or dynamically. */
export function importSpecifiers(src: string): string[] {
  return [...stripComments(src).matchAll(IMPORT_RE)].map((m) => m[2] ?? m[4]);
}

function* tsFiles(dir: string): Generator<string> {
  for (const e of [...Deno.readDirSync(dir)].sort((a, b) => a.name < b.name ? -1 : 1)) {
    const p = join(dir, e.name);
    if (e.isDirectory) yield* tsFiles(p);
    else if (e.name.endsWith(".ts")) yield p;
  }
}

/** Top-level folder of a repository-relative path: lib/<x>/… → x, ffi/… → ffi, else null. */
function folderOf(rel: string): string | null {
  const parts = rel.split("/");
  if (parts[0] === "ffi") return "ffi";
  if (parts[0] === "lib" && parts.length >= 2) return parts[1];
  return null;
}

interface Edge {
  from: string;
  to: string;
  file: string;
  spec: string;
}

function folderEdges(): { edges: Edge[]; outside: Edge[] } {
  const edges: Edge[] = [], outside: Edge[] = [];
  for (const top of ["lib", "ffi"]) {
    for (const abs of tsFiles(join(ROOT, top))) {
      const file = relative(ROOT, abs);
      const from = folderOf(file)!;
      for (const spec of importSpecifiers(Deno.readTextFileSync(abs))) {
        if (!spec.startsWith(".")) continue; // npm:, node:, jsr:, import-map names
        const target = normalize(join(dirname(file), spec));
        const to = folderOf(target);
        const e = { from, to: to ?? target, file, spec };
        if (to === null) outside.push(e);
        else if (to !== from) edges.push(e);
      }
    }
  }
  return { edges, outside };
}

const show = (e: Edge) => `${e.file} imports "${e.spec}" (${e.from} -> ${e.to})`;

Deno.test("layering: the import parser sees static, re-export, type and dynamic imports only", () => {
  const src = `
    import { a } from "./a.ts";
    import type {
      B,
      C,
    } from '../b/c.ts';
    export { d } from "./d.ts";
    export * from "./e.ts";
    import "./side.ts";
    const m = await import("../f/g.ts");
    // import { no } from "./comment.ts";
    /* import("./block.ts") */
    const re = /"import x from '.\\/regex.ts'"/;
    const s = "not an import";
    export const h = "./string.ts";
    const u = new URL("./url.ts", import.meta.url);
  `;
  assert.deepEqual(importSpecifiers(src), [
    "./a.ts",
    "../b/c.ts",
    "./d.ts",
    "./e.ts",
    "./side.ts",
    "../f/g.ts",
  ]);
});

Deno.test("layering: lib/ imports nothing outside lib/ and ffi/ (no tests/, no bench/)", () => {
  const { outside } = folderEdges();
  assert.deepEqual(outside.map(show), []);
});

Deno.test("layering: every top-level folder has a rank", () => {
  const { edges } = folderEdges();
  const folders = new Set(edges.flatMap((e) => [e.from, e.to]));
  for (const top of Deno.readDirSync(join(ROOT, "lib"))) folders.add(top.name);
  const unranked = [...folders].filter((f) => !(f in RANK));
  assert.deepEqual(unranked, [], "give each new folder a rank in RANK");
});

Deno.test("layering: no cycle between top-level folders", () => {
  const { edges } = folderEdges();
  const out = new Map<string, Map<string, Edge>>();
  for (const e of edges) {
    if (!out.has(e.from)) out.set(e.from, new Map());
    if (!out.get(e.from)!.has(e.to)) out.get(e.from)!.set(e.to, e);
  }
  // depth-first search; a grey node reached again closes a cycle
  const state = new Map<string, "grey" | "black">();
  const path: Edge[] = [];
  const cycles: string[] = [];
  const visit = (f: string) => {
    state.set(f, "grey");
    for (const [to, e] of out.get(f) ?? []) {
      if (state.get(to) === "grey") {
        const start = path.findIndex((p) => p.from === to);
        cycles.push([...path.slice(start < 0 ? path.length : start), e].map(show).join("\n  "));
      } else if (!state.has(to)) {
        path.push(e);
        visit(to);
        path.pop();
      }
    }
    state.set(f, "black");
  };
  for (const f of [...out.keys()].sort()) if (!state.has(f)) visit(f);
  assert.deepEqual(cycles, [], `folder cycles:\n  ${cycles.join("\n\n  ")}`);
});

Deno.test("layering: folders import only lower ranks (or listed same-rank edges)", () => {
  const { edges } = folderEdges();
  const bad = edges.filter((e) => {
    const rf = RANK[e.from], rt = RANK[e.to];
    if (rf === undefined || rt === undefined) return false; // reported by the rank test
    return rt > rf || (rt === rf && !(`${e.from} -> ${e.to}` in SAME_RANK));
  }).map((e) => `${show(e)}: rank ${RANK[e.from]} -> ${RANK[e.to]}`);
  assert.deepEqual(bad, []);
});

Deno.test("layering: the issue's acceptance greps find nothing", () => {
  const hits: string[] = [];
  const grep = (dirs: string[], needle: string) => {
    for (const d of dirs) {
      for (const abs of tsFiles(join(ROOT, d))) {
        Deno.readTextFileSync(abs).split("\n").forEach((line, i) => {
          if (line.includes(needle)) hits.push(`${relative(ROOT, abs)}:${i + 1}: ${line.trim()}`);
        });
      }
    }
  };
  grep(["lib/gguf", "lib/graph", "lib/model"], "backend/");
  grep(["lib"], "tests/");
  assert.deepEqual(hits, []);
});
