/**
 * Hyper-parameters of a transformer model, read from GGUF metadata with
 * llama.cpp's keys and defaults, plus the derived RoPE settings a context
 * uses (llama_context's cparams).
 *
 * @module
 */
import type { GGUFHeader } from "../gguf/mod.ts";
import { RopeMode } from "../graph/ops.ts";

/** Thrown when a model's metadata is missing or inconsistent. */
export class ModelError extends Error {
  /** Creates the error. */
  constructor(message: string) {
    super(message);
    this.name = "ModelError";
  }
}

/** RoPE settings as the graph's rope op takes them. */
export interface RopeParams {
  /** Rotated dimensions of each head. */
  readonly nDims: number;
  /** 0 normal (interleaved pairs), 2 NeoX (halves). */
  readonly mode: number;
  /** Training context the RoPE frequencies were fitted to (YaRN). */
  readonly nCtxOrig: number;
  /** RoPE base frequency. */
  readonly freqBase: number;
  /** Position scale (1 / linear scaling factor). */
  readonly freqScale: number;
  /** YaRN extrapolation mix (0 off). */
  readonly extFactor: number;
  /** YaRN magnitude correction. */
  readonly attnFactor: number;
  /** YaRN ramp start. */
  readonly betaFast: number;
  /** YaRN ramp end. */
  readonly betaSlow: number;
}

/** A decoder-only transformer's shape. */
export interface HParams {
  /** `general.architecture`. */
  readonly arch: string;
  /** Vocabulary size. */
  readonly nVocab: number;
  /** Context length the model was trained with. */
  readonly nCtxTrain: number;
  /** Embedding width. */
  readonly nEmbd: number;
  /** Transformer blocks. */
  readonly nLayer: number;
  /** Query heads. */
  readonly nHead: number;
  /** Key/value heads (GQA groups). */
  readonly nHeadKv: number;
  /** Feed-forward width. */
  readonly nFF: number;
  /** Dimension of each K head (and Q head). */
  readonly headDimK: number;
  /** Dimension of each V head. */
  readonly headDimV: number;
  /** Epsilon of the architecture's norm (RMSNorm or LayerNorm). */
  readonly normEps: number;
  /** Whether tokens attend only to earlier positions (false for encoders such as bert). */
  readonly causal: boolean;
  /** RoPE settings. */
  readonly rope: RopeParams;
  /**
   * False for architectures without attention (Mamba): the head counts,
   * head sizes, feed-forward width and RoPE are then placeholders, not read
   * or checked. Default true.
   */
  readonly attention?: boolean;
  /** State-space hyper-parameters (Mamba). */
  readonly ssm?: SsmParams;
}

/** A Mamba model's `ssm.*` hyper-parameters (llama.cpp's ssm_d_conv, …). */
export interface SsmParams {
  /** `ssm.conv_kernel`: width of the causal convolution. */
  readonly dConv: number;
  /** `ssm.inner_size`: channels of the inner projection. */
  readonly dInner: number;
  /** `ssm.state_size`: state size per channel. */
  readonly dState: number;
  /** `ssm.time_step_rank`: rank of the time-step projection. */
  readonly dtRank: number;
  /** `ssm.dt_b_c_rms`: RMS-normalize dt, B and C (FalconMamba). */
  readonly dtBCRms: boolean;
}

function scalarOrFirst(h: GGUFHeader, key: string, fallback?: number): number {
  const kv = h.get(key);
  if (!kv) {
    if (fallback === undefined) throw new ModelError(`${h.path}: missing metadata key ${key}`);
    return fallback;
  }
  if (typeof kv.value === "object") {
    const vals = kv.value.values;
    // Per-layer arrays: this engine needs them uniform.
    const first = Number((vals as ArrayLike<number | bigint>)[0]);
    for (let i = 1; i < vals.length; i++) {
      if (Number((vals as ArrayLike<number | bigint>)[i]) !== first) {
        throw new ModelError(`${h.path}: per-layer ${key} values differ; not supported`);
      }
    }
    return first;
  }
  return h.number(key);
}

/** What the common hyper-parameter reader needs to know of an architecture. */
export interface HParamsSpec {
  /** RMSNorm reads `attention.layer_norm_rms_epsilon`, LayerNorm `attention.layer_norm_epsilon`. */
  readonly norm: "rms" | "layer";
  /** RoPE kind: adjacent pairs, halves, or none. */
  readonly rope: "normal" | "neox" | "none";
  /** Default of `attention.causal` (true for decoders). */
  readonly causal?: boolean;
  /** False: no attention keys are read (see {@link HParams.attention}). Default true. */
  readonly attention?: boolean;
}

/**
 * The GGUF key (after the architecture prefix) holding the norm epsilon of
 * an architecture with norm kind `norm`.
 */
export function normEpsKey(norm: HParamsSpec["norm"]): string {
  return norm === "rms" ? "attention.layer_norm_rms_epsilon" : "attention.layer_norm_epsilon";
}

/**
 * Reads the hyper-parameters every architecture shares from `header`, with
 * llama.cpp's keys and defaults (throws ModelError naming a missing key).
 */
export function readHParams(header: GGUFHeader, spec: HParamsSpec): HParams {
  const arch = header.string("general.architecture");
  const k = (s: string) => `${arch}.${s}`;
  if (spec.attention === false) return readNoAttention(header, spec, k);
  const nEmbd = scalarOrFirst(header, k("embedding_length"));
  const nHead = scalarOrFirst(header, k("attention.head_count"));
  const nHeadKv = scalarOrFirst(header, k("attention.head_count_kv"), nHead);
  const nCtxTrain = scalarOrFirst(header, k("context_length"));
  const tokens = header.strings("tokenizer.ggml.tokens");
  const nVocab = scalarOrFirst(header, k("vocab_size"), tokens?.length ?? 0);
  for (const [key, v] of [["embedding_length", nEmbd], ["attention.head_count", nHead]] as const) {
    if (!Number.isSafeInteger(v) || v <= 0) {
      throw new ModelError(
        `${header.path}: ${k(key)} = ${v} is invalid: expected a positive integer`,
      );
    }
  }
  if (!Number.isSafeInteger(nHeadKv) || nHeadKv <= 0) {
    throw new ModelError(
      `${header.path}: ${
        k("attention.head_count_kv")
      } = ${nHeadKv} is invalid: expected a positive integer`,
    );
  }
  if (nEmbd % nHead !== 0) {
    throw new ModelError(
      `${header.path}: embedding_length ${nEmbd} is not a multiple of head_count ${nHead}`,
    );
  }
  if (nHead % nHeadKv !== 0) {
    throw new ModelError(
      `${header.path}: head_count ${nHead} is not a multiple of head_count_kv ${nHeadKv}`,
    );
  }
  const headDimK = scalarOrFirst(header, k("attention.key_length"), nEmbd / nHead);
  const headDimV = scalarOrFirst(header, k("attention.value_length"), nEmbd / nHead);
  const nRot = scalarOrFirst(header, k("rope.dimension_count"), headDimK);
  return {
    arch,
    nVocab,
    nCtxTrain,
    nEmbd,
    nLayer: scalarOrFirst(header, k("block_count")),
    nHead,
    nHeadKv,
    nFF: scalarOrFirst(header, k("feed_forward_length")),
    headDimK,
    headDimV,
    // llama.cpp requires the LayerNorm epsilon and defaults the RMSNorm one.
    normEps: spec.norm === "rms"
      ? header.number(k(normEpsKey("rms")), 1e-5)
      : header.number(k(normEpsKey("layer"))),
    causal: header.bool(k("attention.causal"), spec.causal ?? true),
    rope: readRopeParams(header, {
      nDims: nRot,
      mode: spec.rope === "neox" ? RopeMode.NEOX : RopeMode.NORMAL,
      nCtxTrain,
    }),
  };
}

// The common keys of an architecture without attention: one placeholder
// head as wide as the embedding, no feed-forward width, no RoPE.
function readNoAttention(
  header: GGUFHeader,
  spec: HParamsSpec,
  k: (s: string) => string,
): HParams {
  const nEmbd = scalarOrFirst(header, k("embedding_length"));
  const nCtxTrain = scalarOrFirst(header, k("context_length"));
  const tokens = header.strings("tokenizer.ggml.tokens");
  return {
    arch: header.string("general.architecture"),
    nVocab: scalarOrFirst(header, k("vocab_size"), tokens?.length ?? 0),
    nCtxTrain,
    nEmbd,
    nLayer: scalarOrFirst(header, k("block_count")),
    nHead: 1,
    nHeadKv: 1,
    nFF: 0,
    headDimK: nEmbd,
    headDimV: nEmbd,
    normEps: spec.norm === "rms"
      ? header.number(k(normEpsKey("rms")))
      : header.number(k(normEpsKey("layer"))),
    causal: true,
    rope: readRopeParams(header, { nDims: 0, mode: RopeMode.NORMAL, nCtxTrain }),
    attention: false,
  };
}

/** The YaRN keys an architecture's own load_arch_hparams reads (llama.cpp reads none of them in common). */
export interface YarnKeys {
  /** `rope.scaling.yarn_beta_fast` / `yarn_beta_slow` (mistral3). */
  readonly beta?: boolean;
  /** `rope.scaling.yarn_log_multiplier` (mistral3). */
  readonly logMul?: boolean;
}

/** llama.cpp's rope scaling types (LLAMA_ROPE_SCALING_TYPES); any other value is refused. */
const ROPE_SCALING_TYPES: readonly string[] = ["none", "linear", "yarn", "longrope"];

/** The f32 constant 0.1f. */
const TENTH = Math.fround(0.1);

/** YaRN's magnitude scale (llama_context's get_mscale), in f32 like llama.cpp. */
function yarnMscale(scale: number, mscale: number): number {
  const f = Math.fround;
  return scale <= 1 ? 1 : f(f(f(TENTH * mscale) * f(Math.log(scale))) + 1);
}

/**
 * The RoPE settings a llama.cpp context runs with: llama_model::load_hparams'
 * common rope keys (`rope.freq_base`, `rope.scaling.type`, `.factor` or the
 * old `rope.scale_linear`, `.attn_factor`, `.original_context_length`), the
 * architecture's own YaRN keys (`keys`), and llama_context's derivation of
 * ext_factor and attn_factor from them, each step rounded to f32 as there.
 */
export function readRopeParams(
  header: GGUFHeader,
  o: { nDims: number; mode: number; nCtxTrain: number },
  keys: YarnKeys = {},
): RopeParams {
  const f = Math.fround;
  const arch = header.string("general.architecture");
  const k = (s: string) => `${arch}.${s}`;
  const scaling = header.string(k("rope.scaling.type"), "linear");
  if (!ROPE_SCALING_TYPES.includes(scaling)) {
    throw new ModelError(
      `${header.path}: ${k("rope.scaling.type")} = '${scaling}' is not supported ` +
        `(supported: ${ROPE_SCALING_TYPES.join(", ")})`,
    );
  }
  const factor = header.get(k("rope.scaling.factor"))
    ? header.number(k("rope.scaling.factor"))
    : header.number(k("rope.scale_linear"), 0);
  // hparams.rope_freq_scale_train, then cparams: type "none" never scales.
  const freqScale = scaling === "none" || factor === 0 ? 1 : f(1 / f(factor));
  // cparams.yarn_ext_factor: "not set" (-1) becomes 1 under YaRN, else 0.
  const extFactor = scaling === "yarn" ? 1 : 0;
  const logMul = keys.logMul ? header.number(k("rope.scaling.yarn_log_multiplier"), 0) : 0;
  let attnFactor = 1;
  if (extFactor !== 0) {
    const scale = f(1 / freqScale);
    // With a log multiplier: mscale / mscale_all_dims (mscale assumed 1).
    attnFactor = logMul !== 0
      ? f(yarnMscale(scale, 1) / yarnMscale(scale, f(logMul)))
      : yarnMscale(scale, 1);
    // ggml's rope multiplies by 1 + 0.1 ln(1/freq_scale) under YaRN; cancelled here.
    attnFactor = f(attnFactor * f(1 / f(1 + f(TENTH * f(Math.log(scale))))));
  }
  attnFactor = f(attnFactor * f(header.number(k("rope.scaling.attn_factor"), 1)));
  // cparams.n_ctx_orig_yarn: the key, or the training context when absent or 0.
  const nCtxOrig = scalarOrFirst(header, k("rope.scaling.original_context_length"), 0) ||
    o.nCtxTrain;
  return {
    nDims: o.nDims,
    mode: o.mode,
    nCtxOrig,
    freqBase: header.number(k("rope.freq_base"), 10000),
    freqScale,
    extFactor,
    attnFactor,
    betaFast: keys.beta ? header.number(k("rope.scaling.yarn_beta_fast"), 32) : 32,
    betaSlow: keys.beta ? header.number(k("rope.scaling.yarn_beta_slow"), 1) : 1,
  };
}
