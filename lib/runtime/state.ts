/**
 * State files: a whole context (every cell of its KV cache with its keys
 * and values) or one sequence of it, with the tokens behind it, the logits
 * of the last decode and the random state of a sampler chain, so a
 * generation stops and later resumes token for token, in another process
 * or another context of the same model.
 *
 * ```ts ignore
 * import { Context, loadState, Model, samplerChainFromOptions, saveState } from "@llm-edge/llm-edge";
 *
 * using model = await Model.load("model.gguf");
 * const opts = { nVocab: model.hparams.nVocab, temperature: 0.8, seed: 42 };
 * using ctx = await Context.create(model, { nCtx: 512 });
 * const prompt = model.tokenizer.encode("The prince");
 * const { logits } = await ctx.decode(prompt);
 * const sampler = samplerChainFromOptions(opts);
 * await saveState(ctx, "prince.state", { tokens: prompt, logits, sampler });
 *
 * // later, elsewhere: the same tokens follow as if nothing had happened
 * using other = await Context.create(model, { nCtx: 512 });
 * const again = samplerChainFromOptions(opts);
 * const st = await loadState(other, "prince.state", { sampler: again });
 * const next = again.sample(st.logits[0]); // what `sampler` would pick in `ctx`
 * ```
 *
 * The file layout and its checksums are in ./state_format.ts.
 *
 * A load checks everything (lengths, checksums, model identity, context
 * shape, token ids, the sampler chain, room for the cells) before changing
 * anything: a file that does not fit throws {@link StateError} with one line
 * naming the problem, and the context is left as it was.
 *
 * @module
 */
import { assertRegularFile, writeBytesAtomic } from "../fs/atomic.ts";
import { GGUFValueType } from "../gguf/header.ts";
import {
  applyKvRestore,
  type KvRestorePlan,
  kvStateInfo,
  planKvRestore,
  saveKvState,
} from "../kv/state.ts";
import { KvError } from "../kv/cells.ts";
import type { KvCache } from "../kv/cache.ts";
import type { Model } from "../model/model.ts";
import type { SamplerChain, SamplerChainState } from "../sample/chain.ts";
import type { Context } from "./context.ts";
import { Sequence } from "./sequence.ts";
import {
  assemble,
  concat,
  decodeLogits,
  decodeSampler,
  decodeTokens,
  encodeLogits,
  encodeSampler,
  encodeTokens,
  type Fail,
  ID_FIELDS,
  readState,
  type SectionName,
  sha256,
  StateError,
  type StateHeader,
  type StateModelIdentity,
} from "./state_format.ts";

export {
  STATE_VERSION,
  StateError,
  type StateErrorKind,
  type StateHeader,
  type StateModelIdentity,
} from "./state_format.ts";

/** Options of {@link saveState} and {@link stateToBytes}. */
export interface StateSaveOptions {
  /**
   * Save only this sequence's cells (llama_state_seq_get_data): an id, or a
   * {@link Sequence}, whose tokens are then carried too; default: the whole
   * context.
   */
  seq?: number | Sequence;
  /**
   * Tokens to carry: by sequence id, or one list for `seq` (sequence 0 when
   * saving the whole context). Returned by the load as they were given.
   */
  tokens?: ArrayLike<number> | ReadonlyMap<number, ArrayLike<number>>;
  /** A sampler chain whose random state is saved (see {@link SamplerChain.getState}). */
  sampler?: SamplerChain;
  /**
   * Output rows to carry, typically the logits of the last decode, so the
   * loader samples the next token without decoding again (llama.cpp's
   * state carries its output buffer the same way).
   */
  logits?: Float32Array | readonly Float32Array[];
  /** Cancels the wait for the context. */
  signal?: AbortSignal;
}

/** Options of {@link loadState} and {@link stateFromBytes}. */
export interface StateLoadOptions {
  /** For a sequence state: the sequence to restore it into (default: the one it was saved from). */
  dstSeq?: number;
  /**
   * For a sequence state: the {@link Sequence} to restore it into (instead
   * of dstSeq); its tokens become the carried ones.
   */
  into?: Sequence;
  /** A chain (built with the same options as the saved one) whose random state is restored. */
  sampler?: SamplerChain;
  /** Cancels the wait for the context. */
  signal?: AbortSignal;
  /** How error messages name the state (default "state"; {@link loadState} gives the path). */
  name?: string;
}

/** What a load restored. */
export interface StateLoadResult {
  /** The header read. */
  readonly header: StateHeader;
  /** Sequence restored into (-1: the whole context). */
  readonly seq: number;
  /** Cells restored. */
  readonly nCells: number;
  /** Tokens carried, by (destination) sequence id. */
  readonly tokens: Map<number, number[]>;
  /** The saved sampler state (restored into `sampler` when one was given), if any. */
  readonly samplerState?: SamplerChainState;
  /** The output rows carried ({@link StateSaveOptions.logits}), else empty. */
  readonly logits: Float32Array[];
}

/**
 * Saves `ctx` (or one sequence, `opts.seq`) to `path`, written atomically
 * (temporary file, fsync, rename); the model file itself is refused as
 * output. Waits for decodes in progress.
 */
export async function saveState(
  ctx: Context,
  path: string,
  opts: StateSaveOptions = {},
): Promise<void> {
  const bytes = await stateToBytes(ctx, opts);
  await writeBytesAtomic(path, bytes, { inputs: ctx.model.file.paths });
}

/** Restores a file from {@link saveState} into `ctx`; see {@link stateFromBytes}. */
export async function loadState(
  ctx: Context,
  path: string,
  opts: StateLoadOptions = {},
): Promise<StateLoadResult> {
  await assertRegularFile(path);
  const bytes = await Deno.readFile(path);
  return await stateFromBytes(ctx, bytes, { ...opts, name: path });
}

/** The state of `ctx` (or of sequence `opts.seq`) as the bytes of a state file. */
export async function stateToBytes(ctx: Context, opts: StateSaveOptions = {}): Promise<Uint8Array> {
  if (opts.seq instanceof Sequence) {
    if (opts.seq.context !== ctx || opts.seq.disposed) {
      throw new StateError(
        "usage",
        `save: sequence ${opts.seq.id} is not a live sequence of this context`,
      );
    }
    opts = { ...opts, seq: opts.seq.id, tokens: opts.tokens ?? opts.seq.tokens };
  }
  const seq = (opts.seq as number | undefined) ?? -1;
  const nSeqMax = ctx.nSeqMax;
  if (seq !== -1 && (!Number.isInteger(seq) || seq < 0 || seq >= nSeqMax)) {
    throw new StateError("usage", `save: sequence ${seq} outside [0, ${nSeqMax})`);
  }
  const tokens = tokenEntries(ctx, opts.tokens, seq === -1 ? 0 : seq);
  const model = await modelIdentity(ctx.model);
  let kvBytes: Uint8Array;
  {
    // Held only while the cache is copied out: hashing runs after.
    using _lease = await ctx.acquire(opts.signal);
    kvBytes = saveKvState(cacheOf(ctx, "save"), seq);
  }
  const sections: Array<[SectionName, Uint8Array]> = [["kv", kvBytes]];
  if (tokens.size) sections.push(["tokens", encodeTokens(tokens)]);
  if (opts.sampler) sections.push(["sampler", encodeSampler(opts.sampler.getState())]);
  const rows = opts.logits instanceof Float32Array ? [opts.logits] : opts.logits ?? [];
  if (rows.length) sections.push(["logits", encodeLogits(rows)]);
  return await assemble({
    writer: "llm-edge",
    model,
    context: { nCtx: ctx.nCtx, nSeqMax, kvType: ctx.kvType },
    content: { kind: seq === -1 ? "context" : "sequence", seq },
    sections: [],
  }, sections);
}

/**
 * Restores bytes from {@link stateToBytes} into `ctx`: a whole-context
 * state replaces everything cached (every cell at its saved index); a
 * sequence state replaces sequence `opts.dstSeq` (default: the saved one),
 * placed as llama.cpp's llama_state_seq_set_data places it. With
 * `opts.sampler`, the chain continues the saved draws. Throws
 * {@link StateError} naming the first problem, changing nothing.
 */
export async function stateFromBytes(
  ctx: Context,
  bytes: Uint8Array,
  opts: StateLoadOptions = {},
): Promise<StateLoadResult> {
  const fail: Fail = (kind, msg, cause) => {
    throw new StateError(kind, `${opts.name ?? "state"}: ${msg}`, cause ? { cause } : undefined);
  };
  const { header, sections } = await readState(bytes, fail);
  const model = await modelIdentity(ctx.model);
  checkModel(header.model, model, fail);
  const nSeqMax = ctx.nSeqMax;
  if (header.context.kvType !== ctx.kvType) {
    fail("context", `KV type: file ${header.context.kvType} vs context ${ctx.kvType}`);
  }
  const isSeq = header.content.kind === "sequence";
  const into = opts.into;
  if (into !== undefined) {
    if (!(into instanceof Sequence) || into.context !== ctx || into.disposed) {
      fail("usage", "into: not a live Sequence of this context");
    }
    if (!isSeq) fail("usage", "into: the file holds a whole context, not a sequence");
    if (opts.dstSeq !== undefined) fail("usage", "into and dstSeq together");
  }
  const dst = isSeq ? into?.id ?? opts.dstSeq ?? header.content.seq : -1;
  if (opts.dstSeq !== undefined && !isSeq) {
    fail("usage", `dstSeq ${opts.dstSeq}: the file holds a whole context, not a sequence`);
  }
  if (isSeq && (!Number.isInteger(dst) || dst < 0 || dst >= nSeqMax)) {
    fail("context", `sequence ${dst} out of range: context has nSeqMax ${nSeqMax}`);
  }
  const tokens = decodeTokens(sections.get("tokens"), header, ctx.model.hparams.nVocab, fail);
  if (isSeq) {
    const t = tokens.get(header.content.seq);
    tokens.clear();
    if (t) tokens.set(dst, t);
  }
  const { nVocab, nEmbd } = ctx.model.hparams;
  const logits = decodeLogits(sections.get("logits"), [nVocab, nEmbd], fail);
  const samplerBytes = sections.get("sampler");
  const samplerState = samplerBytes ? decodeSampler(samplerBytes, fail) : undefined;
  if (opts.sampler) {
    if (!samplerState) fail("sampler", "the file holds no sampler state");
    const why = opts.sampler.checkState(samplerState!);
    if (why) fail("sampler", `sampler state does not fit the chain: ${why}`);
  }
  using _lease = await ctx.acquire(opts.signal);
  const kv = cacheOf(ctx, "load");
  // A Sequence object keeps its own token list, which a load would leave stale.
  const held = isSeq ? (ctx.seqHeld(dst) && !into ? dst : -1) : heldSeq(ctx);
  if (held >= 0) {
    fail(
      "usage",
      `sequence ${held} is held by a Sequence object, whose tokens the load would not ` +
        `update; dispose it first${isSeq ? " or load into a free sequence (dstSeq)" : ""}`,
    );
  }
  let plan: KvRestorePlan;
  try {
    plan = planKvRestore(kv, sections.get("kv")!, isSeq ? dst : -1);
  } catch (e) {
    if (!(e instanceof KvError)) throw e;
    const info = kvStateInfo(sections.get("kv")!);
    if (!isSeq && info.usedMaxP1 > kv.size) {
      fail(
        "context",
        `context too small: the state uses ${info.usedMaxP1} cells (nCtx ` +
          `${header.context.nCtx}), this context has ${kv.size}`,
      );
    }
    if (!isSeq && info.seqMaxP1 > nSeqMax) {
      fail(
        "context",
        `the state uses sequence ${
          info.seqMaxP1 - 1
        }, out of range: context has nSeqMax ${nSeqMax}`,
      );
    }
    fail(/no room/.test(e.message) ? "context" : "format", `section kv: ${e.message}`, e);
  }
  // Nothing below can fail: every check is done.
  applyKvRestore(kv, plan!);
  into?.replaceTokens(tokens.get(dst) ?? []);
  if (opts.sampler && samplerState) opts.sampler.setState(samplerState);
  return { header, seq: dst, nCells: plan!.nCells, tokens, samplerState, logits };
}

/** Reads and checks the preamble, header and section checksums of a state (no model checks). */
export async function readStateHeader(bytes: Uint8Array): Promise<StateHeader> {
  const fail: Fail = (kind, msg, cause) => {
    throw new StateError(kind, msg, cause ? { cause } : undefined);
  };
  return (await readState(bytes, fail)).header;
}

// ---- context access ----------------------------------------------------------

function heldSeq(ctx: Context): number {
  for (let s = 0; s < ctx.nSeqMax; s++) if (ctx.seqHeld(s)) return s;
  return -1;
}

function cacheOf(ctx: Context, what: string): KvCache {
  const kv = ctx.kvCache;
  if (!kv) {
    throw new StateError("usage", `${what}: ${ctx.label} has no KV cache (an encoder model)`);
  }
  return kv;
}

// ---- model identity ------------------------------------------------------------

const identities = new WeakMap<Model, Promise<StateModelIdentity>>();

/** The identity a state records for `model` (computed once per model). */
export function modelIdentity(model: Model): Promise<StateModelIdentity> {
  let p = identities.get(model);
  if (!p) identities.set(model, p = computeIdentity(model));
  return p;
}

async function computeIdentity(model: Model): Promise<StateModelIdentity> {
  const hp = model.hparams;
  const h = model.file.header;
  const enc = new TextEncoder();
  const parts: Uint8Array[] = [];
  const text = (s: string) => parts.push(enc.encode(s + "\0"));
  for (const kv of h.kv) {
    text(`${kv.key}:${kv.type}`);
    const v = kv.value;
    if (typeof v !== "object") text(String(v));
    else if (v.itemType === GGUFValueType.STRING) text((v.values as string[]).join("\0"));
    else if (ArrayBuffer.isView(v.values)) {
      const a = v.values;
      parts.push(new Uint8Array(a.buffer, a.byteOffset, a.byteLength).slice());
    } else text(JSON.stringify(v.values));
  }
  for (const t of h.tensors) {
    text(`${t.name}:${t.type}:${t.ne.join("x")}:${t.offset}`);
    // The first bytes of each weight tell apart models of one shape (two
    // fine-tunes, two random seeds) without reading gigabytes.
    parts.push(model.file.tensorBytes(t.name).slice(0, 64));
  }
  const file = model.file.paths[0]?.split("/").pop() ?? "";
  return {
    arch: hp.arch,
    nVocab: hp.nVocab,
    nEmbd: hp.nEmbd,
    nLayer: hp.nLayer,
    nHead: hp.nHead,
    nHeadKv: hp.nHeadKv,
    headDimK: hp.headDimK,
    headDimV: hp.headDimV,
    fingerprint: await sha256(concat(parts)),
    file,
  };
}

function checkModel(
  file: StateModelIdentity,
  ctx: StateModelIdentity,
  fail: Fail,
): void {
  for (const k of ID_FIELDS) {
    if (file[k] !== ctx[k]) {
      fail("model", `model mismatch: ${k}: file ${file[k]} vs context ${ctx[k]}`);
    }
  }
  if (file.fingerprint !== ctx.fingerprint) {
    fail(
      "model",
      `model mismatch: fingerprint (GGUF metadata, tensors, weights): file ` +
        `${file.fingerprint.slice(0, 12)}… (${file.file}) vs context ${
          ctx.fingerprint.slice(0, 12)
        }… ` +
        `(${ctx.file})`,
    );
  }
}

// ---- tokens to carry -------------------------------------------------------------

function tokenEntries(
  ctx: Context,
  t: StateSaveOptions["tokens"],
  seq: number,
): Map<number, ArrayLike<number>> {
  const m = t === undefined
    ? new Map<number, ArrayLike<number>>()
    : t instanceof Map
    ? new Map(t)
    : new Map([[seq, t as ArrayLike<number>]]);
  const nVocab = ctx.model.hparams.nVocab, nSeqMax = ctx.nSeqMax;
  for (const [s, list] of m) {
    if (!Number.isInteger(s) || s < 0 || s >= nSeqMax) {
      throw new StateError("usage", `save: tokens for sequence ${s} outside [0, ${nSeqMax})`);
    }
    for (let i = 0; i < list.length; i++) {
      if (!Number.isInteger(list[i]) || list[i] < 0 || list[i] >= nVocab) {
        throw new StateError("usage", `save: tokens[${s}][${i}] = ${list[i]} is not a token id`);
      }
    }
  }
  return m;
}
