/**
 * How the project writes and opens files so that no call loses one:
 *
 * - {@link writeFileAtomic}: every file the project writes goes to a
 *   temporary file in the target's folder, is fsynced, then renamed over the
 *   target. A crash or error leaves the old file whole; readers (and memory
 *   maps of the old file) never see a half-written one.
 * - {@link assertDistinctFiles}: an output naming one of the inputs (the same
 *   path, `./x`, a symlink, a hard link) is refused before anything is
 *   opened. Writing over a file that is memory-mapped as the input truncates
 *   the mapping under the reader (SIGBUS) and leaves a stub.
 * - {@link assertRegularFile}: an input that is a FIFO, a directory or a
 *   device is refused before it is opened (opening a FIFO blocks forever).
 *
 * @module
 */

/** An input that is not a regular file (a FIFO, directory, socket or device). */
export class NotAFileError extends Error {
  /** The path given. */
  readonly path: string;
  /** Creates the error. */
  constructor(path: string, kind: string) {
    super(`${path}: not a regular file (${kind})`);
    this.name = "NotAFileError";
    this.path = path;
  }
}

/** An output path that names one of the inputs. */
export class SameFileError extends Error {
  /** The output path given. */
  readonly output: string;
  /** The input it is the same file as. */
  readonly input: string;
  /** Creates the error. */
  constructor(output: string, input: string, how: string) {
    super(
      `refusing to write ${output}: it is the input ${input} (${how}); choose another output path`,
    );
    this.name = "SameFileError";
    this.output = output;
    this.input = input;
  }
}

function kindOf(s: Deno.FileInfo): string {
  if (s.isDirectory) return "a directory";
  if (s.isFifo) return "a FIFO";
  if (s.isSocket) return "a socket";
  if (s.isCharDevice) return "a character device";
  if (s.isBlockDevice) return "a block device";
  return "not a file";
}

/**
 * Throws {@link NotAFileError} unless `path` (symlinks followed) is a
 * regular file; a missing file throws Deno's NotFound as opening would.
 */
export async function assertRegularFile(path: string): Promise<void> {
  const s = await Deno.stat(path);
  if (!s.isFile) throw new NotAFileError(path, kindOf(s));
}

/** {@link assertRegularFile}, synchronously. */
export function assertRegularFileSync(path: string): void {
  const s = Deno.statSync(path);
  if (!s.isFile) throw new NotAFileError(path, kindOf(s));
}

async function statOrNull(path: string): Promise<Deno.FileInfo | null> {
  try {
    return await Deno.stat(path);
  } catch (e) {
    if (e instanceof Deno.errors.NotFound) return null;
    throw e;
  }
}

async function realPathOrNull(path: string): Promise<string | null> {
  try {
    return await Deno.realPath(path);
  } catch (e) {
    if (e instanceof Deno.errors.NotFound) return null;
    throw e;
  }
}

/**
 * Throws {@link SameFileError} when `output` is the same file as one of
 * `inputs`: the same canonical path (covers `./x`, `dir/../x`, symlinks),
 * or the same device and inode (covers hard links). An output that does
 * not exist yet cannot be an existing input.
 */
export async function assertDistinctFiles(
  output: string,
  inputs: readonly string[],
): Promise<void> {
  const outStat = await statOrNull(output);
  if (!outStat) return;
  const outReal = await realPathOrNull(output);
  for (const input of inputs) {
    const inStat = await statOrNull(input);
    if (!inStat) continue;
    if (outReal !== null && outReal === await realPathOrNull(input)) {
      throw new SameFileError(output, input, `both resolve to ${outReal}`);
    }
    if (
      outStat.ino !== null && outStat.ino === inStat.ino && outStat.dev === inStat.dev
    ) {
      throw new SameFileError(
        output,
        input,
        `a hard link: device ${outStat.dev} inode ${outStat.ino}`,
      );
    }
  }
}

function dirAndBase(path: string): [string, string] {
  const i = path.lastIndexOf("/");
  return i < 0 ? [".", path] : [i === 0 ? "/" : path.slice(0, i), path.slice(i + 1)];
}

/** Writes all of `bytes` (a write may take fewer bytes than given). */
export async function writeAll(f: Deno.FsFile, bytes: Uint8Array): Promise<void> {
  for (let off = 0; off < bytes.length;) off += await f.write(bytes.subarray(off));
}

/** Options of {@link writeFileAtomic}. */
export interface AtomicWriteOptions {
  /** Files the content is made from: the output must not be one of them. */
  inputs?: readonly string[];
}

/**
 * Writes `path` atomically: `write` fills a new temporary file in the same
 * folder, which is fsynced and renamed over `path` (then the folder is
 * fsynced, so the rename survives a power cut). Until the rename, `path`
 * keeps its old content; on failure the temporary file is removed. An
 * existing `path` keeps its permissions; a symlink keeps pointing to the
 * (new) file, which is written where the link points. The output is first
 * checked against `inputs` ({@link assertDistinctFiles}).
 */
export async function writeFileAtomic(
  path: string,
  write: (file: Deno.FsFile) => Promise<void>,
  options: AtomicWriteOptions = {},
): Promise<void> {
  await assertDistinctFiles(path, options.inputs ?? []);
  const target = await realPathOrNull(path) ?? path;
  const old = await statOrNull(target);
  if (old && !old.isFile) throw new NotAFileError(path, kindOf(old));
  const [dir, base] = dirAndBase(target);
  const rand = crypto.getRandomValues(new Uint32Array(1))[0].toString(36);
  const tmp = `${dir}/.${base}.${Deno.pid}.${rand}.tmp`;
  const mode = (old?.mode ?? 0o644) & 0o777;
  const f = await Deno.open(tmp, { write: true, createNew: true, mode });
  let done = false;
  try {
    await write(f);
    await f.sync();
    f.close();
    done = true;
    if (old?.mode != null) await Deno.chmod(tmp, old.mode & 0o7777); // umask aside
    await Deno.rename(tmp, target);
  } catch (e) {
    if (!done) f.close();
    await Deno.remove(tmp).catch(() => {});
    throw e;
  }
  try {
    using d = await Deno.open(dir, { read: true });
    await d.sync();
  } catch {
    // not every platform can fsync a folder; the data itself is synced
  }
}

/** {@link writeFileAtomic} with the whole content given. */
export function writeBytesAtomic(
  path: string,
  bytes: Uint8Array,
  options: AtomicWriteOptions = {},
): Promise<void> {
  return writeFileAtomic(path, (f) => writeAll(f, bytes), options);
}
