/**
 * No call loses a file (issue 11, findings 3 and 7): outputs that alias an
 * input are refused before anything is opened, every write goes through a
 * temporary file renamed into place, and a FIFO given as a model is refused
 * instead of blocking forever.
 */
import assert from "node:assert/strict";
import { quantizeModel } from "../lib/quant/quantize.ts";
import { convertLlama2c } from "../lib/gguf/llama2c.ts";
import { writeGGUFFile } from "../lib/gguf/writer.ts";
import { readGGUF } from "../lib/gguf/reader.ts";
import { GGMLType } from "../lib/ggml/types.ts";
import { NotAFileError, SameFileError, writeBytesAtomic } from "../lib/fs/atomic.ts";
import { Model } from "../lib/model/model.ts";
import { TOLSTOY_F32 } from "./oracle/models.ts";

async function sha(path: string): Promise<string> {
  const d = await crypto.subtle.digest("SHA-256", await Deno.readFile(path));
  return [...new Uint8Array(d)].map((b) => b.toString(16).padStart(2, "0")).join("");
}

async function withDir(fn: (dir: string) => Promise<void>): Promise<void> {
  const dir = await Deno.makeTempDir({ prefix: "llm-edge-atomic-" });
  try {
    await fn(dir);
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
}

/** Files in `dir` other than `keep` (temporaries left behind). */
function strays(dir: string, keep: string[]): string[] {
  return [...Deno.readDirSync(dir)].map((e) => e.name).filter((n) => !keep.includes(n));
}

Deno.test("atomic: quantize refuses every alias of its input and leaves it whole", async () => {
  await withDir(async (dir) => {
    const m = `${dir}/m.gguf`;
    await Deno.copyFile(TOLSTOY_F32, m);
    await Deno.symlink(m, `${dir}/link.gguf`);
    await Deno.link(m, `${dir}/hard.gguf`);
    const before = await sha(m);
    const size = (await Deno.stat(m)).size;
    const cwd = Deno.cwd();
    Deno.chdir(dir);
    try {
      for (
        const out of [
          "m.gguf",
          "./m.gguf",
          `${dir}/m.gguf`,
          "link.gguf",
          "hard.gguf",
          "../" + dir.split("/").pop() + "/m.gguf",
        ]
      ) {
        await assert.rejects(
          quantizeModel("m.gguf", out, "q8_0"),
          (e: Error) => {
            assert.ok(e instanceof SameFileError, `${out}: ${e}`);
            assert.ok(!e.message.includes("\n"));
            assert.match(e.message, /^refusing to write .*: it is the input m\.gguf/);
            return true;
          },
          out,
        );
      }
      // The input given through the link, the output the real path.
      await assert.rejects(quantizeModel("link.gguf", "m.gguf", "q8_0"), SameFileError);
    } finally {
      Deno.chdir(cwd);
    }
    assert.equal((await Deno.stat(m)).size, size);
    assert.equal(await sha(m), before);
    assert.deepEqual(strays(dir, ["m.gguf", "link.gguf", "hard.gguf"]), []);
    // A distinct output is written (and replaces an old file atomically).
    await Deno.writeTextFile(`${dir}/q.gguf`, "old");
    await quantizeModel(m, `${dir}/q.gguf`, "q8_0");
    assert.equal((await readGGUF(`${dir}/q.gguf`)).tensors.length, 57);
    assert.deepEqual(strays(dir, ["m.gguf", "link.gguf", "hard.gguf", "q.gguf"]), []);
  });
});

Deno.test("atomic: a write that fails midway leaves the old file and no temporary", async () => {
  await withDir(async (dir) => {
    const out = `${dir}/out.gguf`;
    await Deno.writeTextFile(out, "previous content");
    await assert.rejects(
      writeGGUFFile(out, {
        kv: [],
        tensors: [
          { name: "a", type: GGMLType.F32, ne: [4], data: new Uint8Array(16) },
          {
            name: "b",
            type: GGMLType.F32,
            ne: [4],
            data: () => {
              throw new Error("source went away");
            },
          },
        ],
      }),
      /source went away/,
    );
    assert.equal(await Deno.readTextFile(out), "previous content");
    assert.deepEqual(strays(dir, ["out.gguf"]), []);
    // Through a symlink: the link stays, the file it points to is replaced.
    await Deno.symlink(out, `${dir}/via.gguf`);
    await writeBytesAtomic(`${dir}/via.gguf`, new TextEncoder().encode("new"));
    assert.ok((await Deno.lstat(`${dir}/via.gguf`)).isSymlink);
    assert.equal(await Deno.readTextFile(out), "new");
    assert.deepEqual(strays(dir, ["out.gguf", "via.gguf"]), []);
  });
});

Deno.test("atomic: convert refuses an output that is its checkpoint or tokenizer", async () => {
  await withDir(async (dir) => {
    const model = `${dir}/model.bin`, tok = `${dir}/tok.bin`;
    await Deno.writeFile(model, new Uint8Array(64).fill(7));
    await Deno.writeFile(tok, new Uint8Array(32).fill(9));
    await Deno.link(tok, `${dir}/tok-link.bin`);
    for (const out of [model, `${dir}/./model.bin`, `${dir}/tok-link.bin`]) {
      await assert.rejects(convertLlama2c({ model, tokenizer: tok, out }), SameFileError);
    }
    assert.deepEqual(await Deno.readFile(model), new Uint8Array(64).fill(7));
    assert.deepEqual(await Deno.readFile(tok), new Uint8Array(32).fill(9));
  });
});

Deno.test("atomic: a FIFO or a directory given as a model fails at once, naming the path", async () => {
  await withDir(async (dir) => {
    const fifo = `${dir}/model.gguf`;
    const mk = await new Deno.Command("mkfifo", { args: [fifo] }).output();
    assert.ok(mk.success, "mkfifo");
    const t0 = performance.now();
    await assert.rejects(Model.load(fifo), (e: Error) => {
      assert.ok(e instanceof NotAFileError);
      assert.equal(e.message, `${fifo}: not a regular file (a FIFO)`);
      return true;
    });
    await assert.rejects(quantizeModel(fifo, `${dir}/q.gguf`, "q8_0"), NotAFileError);
    await assert.rejects(Model.load(dir), /not a regular file \(a directory\)/);
    assert.ok(performance.now() - t0 < 5000);
  });
});
