/**
 * The KQ attention mask of a micro-batch over the cache cells, with
 * llama.cpp's rules (causality, per-sequence isolation, sliding window,
 * optional ALiBi distances).
 *
 * @module
 */
import type { Ubatch } from "./batch.ts";
import { type KvCells, KvError } from "./cells.ts";
import { f32ToFp16 } from "../ggml/half.ts";
import { isMaskedSwa, SwaType } from "./swa.ts";

/** Options of {@link KvCache.fillMask}. */
export interface MaskOptions {
  /** Causal attention (default true). */
  causal?: boolean;
  /** ALiBi: store -|p0 - p1| instead of 0 for visible cells. */
  alibi?: boolean;
}

/** The window facts of a cache the mask depends on. */
export interface MaskWindow {
  /** Number of cells. */
  readonly size: number;
  /** Sliding window size (0: none). */
  readonly nSwa: number;
  /** Sliding window kind. */
  readonly swaType: SwaType;
}

/**
 * Fill the KQ mask [nKv, nTokens] (row per token): 0 where token t may
 * attend cell j (cell holds t's first sequence at a position <= t's,
 * inside the SWA window), -inf elsewhere. F32 (Float32Array) or F16 bits
 * (Uint16Array).
 */
export function fillKqMask(
  c: KvCells,
  window: MaskWindow,
  ub: Ubatch,
  nKv: number,
  out: Float32Array | Uint16Array,
  o: MaskOptions = {},
): void {
  if (out.length !== nKv * ub.nTokens) {
    throw new KvError(`fillMask: need ${nKv * ub.nTokens} values, got ${out.length}`);
  }
  if (nKv > window.size) throw new KvError(`fillMask: nKv ${nKv} > size ${window.size}`);
  const causal = o.causal ?? true;
  const half = out instanceof Uint16Array;
  const drop = half ? 0xfc00 : -Infinity;
  for (let t = 0; t < ub.nTokens; t++) {
    const s = ub.seqId[t][0];
    const p1 = ub.pos[t];
    const row = t * nKv;
    for (let j = 0; j < nKv; j++) {
      const p0 = c.pos[j];
      let v: number = drop;
      if (
        p0 !== -1 && c.seqHas(j, s) && !(causal && p0 > p1) &&
        !(window.swaType !== SwaType.NONE && isMaskedSwa(window.nSwa, window.swaType, p0, p1))
      ) {
        const a = o.alibi ? -Math.abs(p0 - p1) : 0;
        v = half ? f32ToFp16(a) : a;
      }
      out[row + j] = v;
    }
  }
}
