/**
 * The options objects of the graph builder's ops that take more than
 * tensors (ggml's scalar arguments), apart from the builder so it stays
 * about building.
 *
 * @module
 */
import type { Tensor } from "./tensor.ts";

/** Options of `Graph.rope` (ggml_rope_ext arguments). */
export interface RopeOptions {
  /** Leading dimensions of each head that are rotated. */
  nDims: number;
  /** RopeMode.NORMAL (0) or RopeMode.NEOX (2). Default NORMAL. */
  mode?: number;
  /** Original training context (YaRN). Default 0. */
  nCtxOrig?: number;
  /** Default 10000. */
  freqBase?: number;
  /** Default 1. */
  freqScale?: number;
  /** YaRN extrapolation mix; default 0. */
  extFactor?: number;
  /** Default 1. */
  attnFactor?: number;
  /** Default 32. */
  betaFast?: number;
  /** Default 1. */
  betaSlow?: number;
  /** Write the result over `x` (ggml_rope_ext_inplace), e.g. K-shift of the cache. */
  inplace?: boolean;
  /**
   * Per-pair frequency divisors (ggml_rope_ext's `c`): F32 [>= nDims/2],
   * dividing each pair's angle (llama3's rope_freqs, phi3's rope_factors_long/short).
   */
  freqFactors?: Tensor;
}

/** Options of `Graph.softMax`. */
export interface SoftMaxOptions {
  /** Additive mask, F32 or F16, [ne0, >= ne1, divides ne2, divides ne3]. */
  mask?: Tensor;
  /** Multiplier applied before the mask. Default 1. */
  scale?: number;
  /** ALiBi max bias (needs a mask). Default 0. */
  maxBias?: number;
}

/** Options of `Graph.flashAttnExt`. */
export interface FlashAttnOptions {
  /** F16 additive mask [nKv, >= nTokens], or none. */
  mask?: Tensor;
  /** kq scale. Default 1. */
  scale?: number;
  /** ALiBi max bias. Default 0. */
  maxBias?: number;
  /**
   * GGML_PREC_F32 (ggml_flash_attn_ext_set_prec): the CPU backend may then
   * run its f32 decode kernel instead of ggml-cpu's arithmetic. Default
   * false.
   */
  precF32?: boolean;
}
