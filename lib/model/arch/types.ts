/**
 * What an architecture declares, in the spirit of llama.cpp's
 * `src/models/<name>.cpp`: how its hyper-parameters differ from the common
 * ones, which tensors it reads, what memory a context keeps for it, and how
 * one micro-batch's forward pass is built from the shared blocks of
 * {@link GraphBuilder}.
 *
 * @module
 */
import type { GGUFHeader } from "../../gguf/mod.ts";
import type { Tensor } from "../../graph/graph.ts";
import type { SlotInfo } from "../../kv/cache.ts";
import type { HParams } from "../hparams.ts";
import type { WeightMap, WeightRef } from "../weights.ts";
import type { GraphBuilder } from "./builder.ts";

/**
 * What a context keeps between decodes: "kv" an attention cache of keys and
 * values (decoders), "recurrent" one state per sequence (Mamba: llama.cpp's
 * llama_memory_recurrent), "none" nothing (encoders: every call sees the
 * whole input at once).
 */
export type MemoryKind = "kv" | "recurrent" | "none";

/** What the graph's output rows hold: next-token logits, or hidden states (encoders). */
export type OutputKind = "logits" | "embeddings";

/** Which norm an architecture's blocks use, and so which epsilon key it reads. */
export type NormKind = "rms" | "layer";

/** How RoPE rotates a head: adjacent pairs (normal), halves (NeoX), or no RoPE. */
export type RopeKind = "normal" | "neox" | "none";

/** What one evaluation of a graph covers. */
export interface Step {
  /** Tokens in the micro-batch. */
  readonly nTokens: number;
  /** Rows that produce outputs (indices into the micro-batch). */
  readonly nOutputs: number;
  /** Keys each token attends over: cache cells (padded window), or nTokens without a cache. */
  readonly nKv: number;
  /** Cells receiving this micro-batch's keys and values; null without a cache. */
  readonly slot: SlotInfo | null;
  /**
   * Output the final hidden states (after the output norm, llama.cpp's
   * `result_norm`) instead of logits: a decoder context in embeddings mode.
   */
  readonly embeddings?: boolean;
  /** The micro-batch brings embeddings [nEmbd, nTokens] instead of token ids. */
  readonly inputEmbd?: boolean;
  /**
   * Sequence sets of an equal split (recurrent memory: nTokens = nSeqs ×
   * tokens per set, set after set). Default 1.
   */
  readonly nSeqs?: number;
}

/** A built graph's inputs, to be filled before compute, and its outputs. */
export interface ArchGraph {
  /** I32 [nTokens] token ids (null when the batch brings embeddings). */
  readonly tokens: Tensor | null;
  /** F32 [nEmbd, nTokens] input embeddings, or null. */
  readonly embd: Tensor | null;
  /** I32 [nTokens] positions, or null when the architecture reads none. */
  readonly pos: Tensor | null;
  /** F32 [nKv, nTokens] additive attention mask. */
  readonly mask: Tensor;
  /** I32 [nOutputs] rows kept for the output, or null when every row is. */
  readonly outIds: Tensor | null;
  /**
   * F32 [nVocab, nOutputs] logits or [nEmbd, nOutputs] hidden states; null
   * when the micro-batch has no output rows.
   */
  readonly output: Tensor | null;
  /** Tensors asked for by taps, by llama.cpp callback name (kept as graph outputs). */
  readonly taps: Map<string, Tensor>;
  /** I32 [n] source cell of each state cell of the slot (recurrent memory), or null. */
  readonly sCopy: Tensor | null;
}

/**
 * One architecture. `W` is its weight record, made by {@link weights} and
 * read only by its own {@link build}.
 *
 * @example A dense decoder in a few lines (see lib/model/arch/llama.ts)
 * ```ts ignore
 * export const myArch: Architecture<MyWeights> = {
 *   name: "myarch", memory: "kv", output: "logits", norm: "rms", rope: "neox",
 *   weights: (m, hp) => ({ ... m.need("token_embd.weight", "embedding", [hp.nEmbd, hp.nVocab]) ... }),
 *   build: (b, w) => { ... return b.logits(cur, w.outputNorm, w.output); },
 * };
 * ```
 */
export interface Architecture<W = unknown> {
  /** `general.architecture` value(s) this entry builds. */
  readonly names: readonly string[];
  /** What a context keeps between decodes. */
  readonly memory: MemoryKind;
  /** What the output rows hold. */
  readonly output: OutputKind;
  /** The norm the blocks use (decides `attention.layer_norm_rms_epsilon` vs `attention.layer_norm_epsilon`). */
  readonly norm: NormKind;
  /** RoPE kind (llama.cpp's llama_model_rope_type for this architecture). */
  readonly rope: RopeKind;
  /** Whether tokens attend only to earlier positions (default true). */
  readonly causal?: boolean;
  /** False for architectures without attention (no head or RoPE keys are read); default true. */
  readonly attention?: boolean;
  /** Adjusts the common hyper-parameters (extra keys, checks); default none. */
  hparams?(header: GGUFHeader, hp: HParams): HParams;
  /**
   * Floats of one sequence's recurrent state per layer (llama.cpp's
   * n_embd_r: the conv state, n_embd_s: the ssm state); recurrent memory only.
   */
  stateSizes?(hp: HParams): { readonly r: number; readonly s: number };
  /**
   * RoPE frequency factors for a sequence context of `nCtxSeq` cells
   * (llama_model::get_rope_factors), when the architecture has them: the
   * forward pass and the K-shift of cached keys must rotate alike.
   */
  ropeFactors?(w: W, hp: HParams, nCtxSeq: number): WeightRef | undefined;
  /** Finds and shape-checks every weight the graph reads. */
  weights(m: WeightMap, hp: HParams): W;
  /** Builds one micro-batch's forward pass and returns the output rows (or null). */
  build(b: GraphBuilder, w: W): Tensor | null;
}
