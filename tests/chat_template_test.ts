/**
 * Chat templates: every template in ../shared/fixtures/templates/ rendered
 * by `ChatTemplate` (`@huggingface/jinja`) equals what Python's jinja2
 * renders with the transformers conventions (sandboxed environment,
 * trim_blocks, lstrip_blocks, loopcontrols, {% generation %}, its tojson, raise_exception,
 * strftime_now), for a fixed set of conversations (system, multi-turn, a tool call and its
 * result with tool definitions). The expectations are
 * generated here, by python3, in the test's setup.
 */
import assert from "node:assert/strict";
import { fileURLToPath } from "node:url";
import { type ChatMessage, ChatTemplate } from "../lib/server/chat.ts";

const DIR = fileURLToPath(new URL("../../shared/fixtures/templates/", import.meta.url));

/** A conversation and, for the tool case, the tool definitions. */
interface Case {
  messages: ChatMessage[];
  tools?: unknown[];
}

const TOOLS = [{
  type: "function",
  function: {
    name: "get_weather",
    description: "The weather of a city",
    parameters: { type: "object", properties: { city: { type: "string" } }, required: ["city"] },
  },
}];

const CASES: Case[] = [
  { messages: [{ role: "user", content: "Hello" }] },
  {
    messages: [{ role: "system", content: "You are Tolstoy." }, {
      role: "user",
      content: "Hi there",
    }],
  },
  {
    messages: [
      { role: "system", content: "Be brief." },
      { role: "user", content: "Who is Natasha?" },
      { role: "assistant", content: "A Rostov." },
      { role: "user", content: "And Pierre?" },
    ],
  },
  {
    tools: TOOLS,
    messages: [
      { role: "system", content: "You can look up the weather." },
      { role: "user", content: "Weather in Moscow?" },
      {
        role: "assistant",
        content: "",
        tool_calls: [{
          id: "call_1",
          type: "function",
          function: { name: "get_weather", arguments: { city: "Moscow" } },
        }],
      },
      { role: "tool", tool_call_id: "call_1", content: "snow" },
    ],
  },
];

const PY = String.raw`
import json, sys, os, datetime
import jinja2
from jinja2.sandbox import ImmutableSandboxedEnvironment
from jinja2 import nodes
from jinja2.ext import Extension, loopcontrols
class AssistantTracker(Extension):
    # transformers' {% generation %} … {% endgeneration %}: renders its body
    tags = {"generation"}
    def parse(self, parser):
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(["name:endgeneration"], drop_needle=True)
        return nodes.CallBlock(self.call_method("_render"), [], [], body).set_lineno(lineno)
    def _render(self, caller):
        return caller()
class Raised(Exception): pass
def raise_exception(m): raise Raised(m)
def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)
env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[AssistantTracker, loopcontrols])
env.filters["tojson"] = tojson
env.globals["raise_exception"] = raise_exception
env.globals["strftime_now"] = lambda f: datetime.datetime.now().strftime(f)
convs = json.loads(sys.stdin.read())
out = {}
for f in sorted(os.listdir(sys.argv[1])):
    src = open(os.path.join(sys.argv[1], f)).read()
    res = []
    for c in convs:
        try:
            res.append({"ok": env.from_string(src).render(messages=c["messages"], add_generation_prompt=True, bos_token="<BOS>", eos_token="<EOS>", **({"tools": c["tools"]} if "tools" in c else {}))})
        except Exception as e:
            res.append({"raised" if isinstance(e, Raised) else "err": str(e)})
    out[f] = res
print(json.dumps(out))
`;

async function pythonRenders(): Promise<
  Record<string, ({ ok: string } | { err: string } | { raised: string })[]> | null
> {
  try {
    const p = new Deno.Command("python3", {
      args: ["-c", PY, DIR],
      stdin: "piped",
      stdout: "piped",
      stderr: "piped",
    }).spawn();
    const w = p.stdin.getWriter();
    await w.write(new TextEncoder().encode(JSON.stringify(CASES)));
    await w.close();
    const r = await p.output();
    if (!r.success) {
      console.error(new TextDecoder().decode(r.stderr));
      return null;
    }
    return JSON.parse(new TextDecoder().decode(r.stdout));
  } catch {
    return null;
  }
}

const expected = await pythonRenders();

Deno.test({
  name: "chat templates: every fixture renders as Python's jinja2 does",
  ignore: expected === null, // no python3 with jinja2 here
  fn() {
    const files = Object.keys(expected!);
    assert.ok(files.length >= 50, `only ${files.length} templates in ${DIR}`);
    let equal = 0;
    const wrong: string[] = [];
    for (const f of files) {
      const src = Deno.readTextFileSync(DIR + f);
      const t = new ChatTemplate(src, "<BOS>", "<EOS>");
      CASES.forEach((c, i) => {
        const want = expected![f][i];
        let got: string | Error;
        try {
          got = t.render(c.messages, c.tools);
        } catch (e) {
          got = e as Error;
        }
        if ("raised" in want) {
          // The template refuses this conversation (raise_exception): so must we.
          if (!(got instanceof Error)) wrong.push(`${f} #${i}: Python raised (${want.raised})`);
          return;
        }
        // A Python type error in the template (str + dict, ...): nothing to compare.
        if ("err" in want) return;
        if (got instanceof Error) wrong.push(`${f} #${i}: ${got.message}`);
        else if (got !== want.ok) wrong.push(`${f} #${i}: differs`);
        else equal++;
      });
    }
    console.log(`${equal} renders equal Python's`);
    assert.deepEqual(wrong, []);
    // Python renders 214 of the 228 (files × conversations); the rest are
    // its own errors (str + dict, …), or raise_exception, which we match above.
    assert.ok(equal >= 214, `${equal} renders equal`);
  },
});
