/**
 * Attention-window rules shared by the KV cache: sliding-window kinds and
 * llama_hparams::is_masked_swa.
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
