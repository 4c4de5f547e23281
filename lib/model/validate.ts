/**
 * Load-time checks of a model, the ones llama.cpp's llama_model_loader and
 * load_hparams make, so a bad file fails at {@link Model.load} with one
 * {@link ModelError} naming the file and the key or tensor, instead of a
 * GraphError later or garbage output: the architecture is one we build, the
 * hyper-parameters are positive, finite and consistent, and each weight has
 * a type its op can read. {@link scanTensorData} is llama.cpp's
 * `--check-tensors`: it reads every weight and finds NaN/Inf.
 *
 * @module
 */
import type { GGUFHeader, GGUFModelFile } from "../gguf/mod.ts";
import { GGMLType, ggmlTypeInfo, ggmlTypeName } from "../ggml/types.ts";
import { COMPUTE_TYPES, Op, opSupported } from "../graph/ops.ts";
import { DEQUANT } from "../ggml/ref_quants.ts";
import { type HParams, ModelError, normEpsKey, readHParams } from "./hparams.ts";
import type { WeightRef, WeightRole } from "./weights.ts";
import { architecture } from "./arch/registry.ts";
import type { Architecture } from "./arch/types.ts";

/**
 * Checks what must hold before the hyper-parameters are read: an
 * architecture this engine builds (others fail here, not on a key they lack).
 */
export function validateHeader(h: GGUFHeader): Architecture {
  const kv = h.get("general.architecture");
  if (!kv || typeof kv.value !== "string") {
    throw new ModelError(`${h.path}: general.architecture is missing or not a string`);
  }
  return architecture(kv.value, h.path);
}

/** The shortest decimal that reads back as the same f32 (metadata floats are f32). */
function f32Text(v: number): string {
  if (!Number.isFinite(v) || Number.isInteger(v)) return String(v);
  for (let p = 1; p < 17; p++) {
    const x = Number(v.toPrecision(p));
    if (Math.fround(x) === Math.fround(v)) return String(x);
  }
  return String(v);
}

/** Hyper-parameter fields that must be positive integers, with their GGUF keys. */
const POSITIVE_INTS: ReadonlyArray<[keyof HParams, string]> = [
  ["nVocab", "vocab_size (or the tokenizer.ggml.tokens count)"],
  ["nCtxTrain", "context_length"],
  ["nEmbd", "embedding_length"],
  ["nLayer", "block_count"],
  ["nHead", "attention.head_count"],
  ["nHeadKv", "attention.head_count_kv"],
  ["nFF", "feed_forward_length"],
  ["headDimK", "attention.key_length"],
  ["headDimV", "attention.value_length"],
];

/** The fields every architecture has, attention or not. */
const ALWAYS = { nVocab: 1, nCtxTrain: 1, nEmbd: 1, nLayer: 1 };

/** Checks the values readHParams produced; names the GGUF key of the first bad one. */
export function validateHParams(path: string, hp: HParams, norm: "rms" | "layer"): void {
  const bad = (key: string, v: number, want: string): never => {
    throw new ModelError(`${path}: ${hp.arch}.${key} = ${f32Text(v)} is invalid: ${want}`);
  };
  const noAttn = hp.attention === false;
  for (const [field, key] of POSITIVE_INTS) {
    if (noAttn && !(field in ALWAYS)) continue;
    const v = hp[field] as number;
    if (!Number.isSafeInteger(v) || v <= 0) bad(key, v, "expected a positive integer");
  }
  if (!Number.isFinite(hp.normEps) || hp.normEps <= 0 || hp.normEps >= 1) {
    bad(normEpsKey(norm), hp.normEps, "expected a finite number in (0, 1)");
  }
  // Without attention there is no RoPE to check.
  if (noAttn) return;
  const r = hp.rope;
  if (!Number.isSafeInteger(r.nDims) || r.nDims <= 0 || r.nDims % 2 || r.nDims > hp.headDimK) {
    bad(
      "rope.dimension_count",
      r.nDims,
      `expected an even number in 2..${hp.headDimK} (the head size)`,
    );
  }
  if (!Number.isFinite(r.freqBase) || r.freqBase <= 0) {
    bad("rope.freq_base", r.freqBase, "expected a finite number > 0");
  }
  if (!Number.isFinite(r.freqScale) || r.freqScale <= 0) {
    bad("rope.scaling.factor", 1 / r.freqScale, "expected a finite number > 0");
  }
  if (!Number.isFinite(r.attnFactor) || r.attnFactor <= 0) {
    bad("rope.scaling.attn_factor", r.attnFactor, "expected a finite number > 0");
  }
  if (!Number.isSafeInteger(r.nCtxOrig) || r.nCtxOrig <= 0) {
    bad("rope.scaling.original_context_length", r.nCtxOrig, "expected a positive integer");
  }
  if (!Number.isFinite(r.betaFast) || r.betaFast <= 0) {
    bad("rope.scaling.yarn_beta_fast", r.betaFast, "expected a finite number > 0");
  }
  if (!Number.isFinite(r.betaSlow) || r.betaSlow <= 0) {
    bad("rope.scaling.yarn_beta_slow", r.betaSlow, "expected a finite number > 0");
  }
}

const names = (types: readonly number[]) => types.map(ggmlTypeName).join(", ");

/** The op that reads a weight of each role, and the role's name in errors. */
const ROLE_OPS: Record<WeightRole, { op: Op; what: string }> = {
  matrix: { op: Op.MUL_MAT, what: "a matrix" },
  embedding: { op: Op.GET_ROWS, what: "a token embedding" },
  norm: { op: Op.MUL, what: "a norm weight" },
  bias: { op: Op.ADD, what: "a bias" },
  // Rope reads its frequency factors as f32 only, as MUL reads its operand.
  factors: { op: Op.MUL, what: "RoPE frequency factors" },
  // ssm_conv, ssm_scan and the D skip read f32 only.
  ssm: { op: Op.MUL, what: "an ssm parameter" },
};

/**
 * Checks each weight's type against the op that reads it (both backends
 * implement the same set): matrices for MUL_MAT, embeddings for GET_ROWS,
 * norms for MUL and biases for ADD with f32 activations.
 */
export function validateWeightTypes(path: string, refs: readonly WeightRef[]): void {
  const { F32, I32 } = GGMLType;
  const mats = names(COMPUTE_TYPES);
  for (const ref of refs) {
    const { op, what } = ROLE_OPS[ref.role];
    const ok = op === Op.MUL_MAT
      ? opSupported({ op, srcTypes: [ref.type, F32], dstType: F32 })
      : op === Op.GET_ROWS
      ? opSupported({ op, srcTypes: [ref.type, I32], dstType: F32 })
      : opSupported({ op, srcTypes: [F32, ref.type], dstType: F32 });
    if (!ok) {
      const t = ggmlTypeInfo(ref.type)?.name ?? `type id ${ref.type}`;
      const allowed = op === Op.MUL_MAT || op === Op.GET_ROWS ? mats : "f32";
      throw new ModelError(
        `${path}: tensor ${ref.name} has type ${t}, which cannot be used as ${what} ` +
          `(supported: ${allowed})`,
      );
    }
  }
}

/** Index of the first non-finite element of a tensor's bytes, or -1 (and a reason). */
function firstNonFinite(type: number, bytes: Uint8Array, n: number): number {
  const dv = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  // Float types by their exponent bits (all ones = Inf or NaN): no conversion.
  if (type === GGMLType.F32) {
    for (let i = 0; i < n; i++) {
      if ((dv.getUint32(4 * i, true) & 0x7f800000) === 0x7f800000) return i;
    }
    return -1;
  }
  if (type === GGMLType.F16 || type === GGMLType.BF16) {
    const mask = type === GGMLType.F16 ? 0x7c00 : 0x7f80;
    for (let i = 0; i < n; i++) if ((dv.getUint16(2 * i, true) & mask) === mask) return i;
    return -1;
  }
  // Quantized: dequantize a chunk of blocks; a bad scale poisons its whole block.
  const dq = DEQUANT.get(type);
  const info = ggmlTypeInfo(type);
  if (!dq || !info) return -1;
  const blocksPerChunk = Math.max(1, Math.floor(4096 / info.blockSize));
  const out = new Float64Array(blocksPerChunk * info.blockSize);
  for (let b0 = 0; b0 * info.blockSize < n; b0 += blocksPerChunk) {
    const m = Math.min(blocksPerChunk * info.blockSize, n - b0 * info.blockSize);
    dq(dv, b0 * info.typeSize, out, m);
    for (let i = 0; i < m; i++) if (!Number.isFinite(out[i])) return b0 * info.blockSize + i;
  }
  return -1;
}

/**
 * Reads every tensor of `file` and throws a ModelError naming the first one
 * holding NaN or Inf and the element index (llama.cpp's `--check-tensors`).
 * Types without a dequantizer here are skipped. Costs one pass over the
 * weights, so it is opt-in: `Model.load(path, { validate: "data" })`.
 */
export function scanTensorData(file: GGUFModelFile): void {
  for (const t of file.header.tensors) {
    const n = t.ne.reduce((a, b) => a * b, 1);
    const at = firstNonFinite(t.type, file.tensorBytes(t.name), n);
    if (at >= 0) {
      const dims = t.ne.length > 1
        ? ` (row ${Math.floor(at / t.ne[0])}, column ${at % t.ne[0]})`
        : "";
      throw new ModelError(
        `${file.header.path}: tensor ${t.name} (${ggmlTypeName(t.type)}) holds a NaN or Inf ` +
          `at element ${at}${dims}`,
      );
    }
  }
}

/**
 * The file's architecture and its {@link readHParams} (with the
 * architecture's own adjustments), every value checked.
 */
export function checkedHParams(h: GGUFHeader): { arch: Architecture; hp: HParams } {
  const arch = validateHeader(h);
  const hp = readHParams(h, arch);
  validateHParams(h.path, hp, arch.norm);
  const own = arch.hparams ? arch.hparams(h, hp) : hp;
  // The architecture may have read keys of its own (mistral3's YaRN keys).
  if (own !== hp) validateHParams(h.path, own, arch.norm);
  return { arch, hp: own };
}

/** Everything {@link Model.load} checks after mapping the weights. */
export function validateModel(
  file: GGUFModelFile,
  refs: readonly WeightRef[],
  opts: { validate?: "metadata" | "data" } = {},
): void {
  validateWeightTypes(file.header.path, refs);
  if (opts.validate === "data") scanTensorData(file);
}
