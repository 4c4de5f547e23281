/**
 * The cache edits of a context (llama_memory_seq_rm, _cp, _keep, _add,
 * _div, _pos_min, _pos_max), with their arguments checked: bad ids and
 * positions are OptionErrors naming the argument, not KV-layer failures.
 *
 * @module
 */
import type { KvCache } from "../kv/cache.ts";
import type { RecurrentMemory } from "../kv/recurrent.ts";
import type { Model } from "../model/model.ts";
import { checkInt, checkPos, checkSeqId } from "./batch_input.ts";
import { ContextError } from "./errors.ts";
import type { MemoryOps } from "./lease.ts";

/** What the edits need of their context. */
export interface MemoryOwner {
  /** The cache (null: an encoder, or a recurrent model). */
  kv(): KvCache | null;
  /** The recurrent state memory (null unless the model is recurrent). */
  rs(): RecurrentMemory | null;
  /** Sequence ids are below this. */
  nSeqMax(): number;
  /** The model (whether its keys can be shifted). */
  arch(): Model;
  /** Throws when the context is disposed. */
  assertOpen(what: string): void;
}

/** The checked edits of `o`'s cache. */
export function memoryOps(o: MemoryOwner): MemoryOps {
  const seq = (what: string, name: string, s: number) => checkSeqId(what, name, s, o.nSeqMax());
  const range = (what: string, p0: number, p1: number) => {
    checkPos(what, "p0", p0), checkPos(what, "p1", p1);
  };
  // llama_kv_cache::get_can_shift: moving positions needs keys that can be re-rotated.
  const shiftable = (what: string) => {
    const m = o.arch();
    if (o.kv() && m.arch.rope === "none") {
      throw new ContextError(`${what}: ${m.hparams.arch} has no RoPE to shift keys with`);
    }
  };
  const mem = () => o.kv() ?? o.rs();
  return {
    clear() {
      o.assertOpen("clear");
      mem()?.clear();
    },
    seqRm(s, p0 = -1, p1 = -1) {
      o.assertOpen("seqRm");
      if (s !== -1) seq("seqRm", "seq", s);
      range("seqRm", p0, p1);
      return mem()?.seqRm(s, p0, p1) ?? true;
    },
    seqCp(src, dst, p0 = -1, p1 = -1) {
      o.assertOpen("seqCp");
      seq("seqCp", "src", src), seq("seqCp", "dst", dst);
      range("seqCp", p0, p1);
      mem()?.seqCp(src, dst, p0, p1);
    },
    seqKeep(s) {
      o.assertOpen("seqKeep");
      seq("seqKeep", "seq", s);
      mem()?.seqKeep(s);
    },
    seqAdd(s, p0, p1, delta) {
      o.assertOpen("seqAdd");
      seq("seqAdd", "seq", s);
      range("seqAdd", p0, p1);
      checkInt("seqAdd", "delta", delta, -(2 ** 31 - 1));
      shiftable("seqAdd");
      mem()?.seqAdd(s, p0, p1, delta);
    },
    seqDiv(s, p0, p1, d) {
      o.assertOpen("seqDiv");
      seq("seqDiv", "seq", s);
      range("seqDiv", p0, p1);
      checkInt("seqDiv", "d", d, 1);
      shiftable("seqDiv");
      mem()?.seqDiv(s, p0, p1, d);
    },
    seqPosMin(s) {
      seq("seqPosMin", "seq", s);
      return mem()?.seqPosMin(s) ?? -1;
    },
    seqPosMax(s) {
      seq("seqPosMax", "seq", s);
      return mem()?.seqPosMax(s) ?? -1;
    },
  };
}
