/**
 * Attention-window helpers shared by the KV cache: sliding-window rules
 * (llama_hparams::is_masked_swa) and F16 mask values.
 *
 * @module
 */

/** Sliding-window attention kinds (llama_swa_type). */
export const SwaType = { NONE: 0, STANDARD: 1, CHUNKED: 2, SYMMETRIC: 3 } as const;
/** A sliding-window attention kind. */
export type SwaType = typeof SwaType[keyof typeof SwaType];

/** Whether a key at p0 is outside the window of a query at p1 (llama_hparams::is_masked_swa). */
export function isMaskedSwa(nSwa: number, type: SwaType, p0: number, p1: number): boolean {
  switch (type) {
    case SwaType.STANDARD:
      return p1 - p0 >= nSwa;
    case SwaType.CHUNKED:
      return p0 < Math.floor(p1 / nSwa) * nSwa;
    case SwaType.SYMMETRIC: {
      const half = Math.trunc(nSwa / 2);
      const d = p1 - p0;
      return d < -half || d > half;
    }
  }
  return false;
}

/** Nearest IEEE half bits of x (for F16 masks; exact for 0, ±inf and small integers). */
export function floatToHalf(x: number): number {
  const f = new Float32Array([x]);
  const u = new Uint32Array(f.buffer)[0];
  const sign = (u >>> 16) & 0x8000;
  const e = ((u >>> 23) & 0xff) - 127 + 15;
  const m = u & 0x7fffff;
  if (((u >>> 23) & 0xff) === 0xff) return sign | 0x7c00 | (m ? 0x200 : 0);
  if (e >= 31) return sign | 0x7c00;
  if (e <= 0) {
    if (e < -10) return sign;
    const mm = (m | 0x800000) >> (1 - e + 13);
    return sign | mm;
  }
  let h = sign | (e << 10) | (m >> 13);
  const rest = m & 0x1fff;
  if (rest > 0x1000 || (rest === 0x1000 && (h & 1))) h++;
  return h;
}
