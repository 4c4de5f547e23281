/**
 * Random-weight Mamba GGUFs in llama.cpp's layout (llama_model_mamba's
 * tensor names and shapes, the metadata convert_hf_to_gguf.py writes for a
 * MambaForCausalLM): `ssm_a` holds -exp(A_log) as the converter stores it,
 * `ssm_a` and `ssm_d` have no ".weight" suffix, the convolution and the
 * scan parameters stay f32 whatever the matrices' type. Weights follow
 * Mamba's initialisation in spirit (A_log = log(1..dState), D = 1, dt
 * biases giving time steps in [0.001, 0.1], projections ~ 1/sqrt(fan-in)),
 * and the output head is scaled so logits spread over a few units: greedy
 * decoding is far from uniform yet not one-hot.
 */
import { type RandomTensor, randomVocabSize, writeRandomGGUF } from "../../lib/model/random.ts";

/** Shape and content of {@link writeRandomMamba}'s model. */
export interface RandomMambaOptions {
  /** Embedding width (default 64); dInner is twice it. */
  nEmbd?: number;
  /** Blocks (default 2). */
  nLayer?: number;
  /** ssm.state_size (default 16). */
  dState?: number;
  /** ssm.conv_kernel (default 4). */
  dConv?: number;
  /** ssm.time_step_rank (default ceil(nEmbd / 16)). */
  dtRank?: number;
  /** Type of the matrices (default f32). */
  type?: "f32" | "f16" | "q8_0";
  /** Leave output.weight out: the head is tied to token_embd (default false). */
  tied?: boolean;
  /** Vocabulary size of the minimal vocabulary (default 512). */
  nVocab?: number;
  /** A GGUF whose tokenizer is copied (default: a minimal vocabulary). */
  tokenizerFrom?: string;
  /** Seed (default 1). */
  seed?: number;
  /** ssm.dt_b_c_rms: RMS-normalise dt, B and C (FalconMamba; default false). */
  dtBCRms?: boolean;
}

/** Writes a Mamba GGUF with random weights to `path`. */
export async function writeRandomMamba(path: string, o: RandomMambaOptions = {}): Promise<void> {
  const nEmbd = o.nEmbd ?? 64, nLayer = o.nLayer ?? 2;
  const dInner = 2 * nEmbd, dState = o.dState ?? 16, dConv = o.dConv ?? 4;
  const dtRank = o.dtRank ?? Math.ceil(nEmbd / 16);
  const nVocab = await randomVocabSize({ tokenizerFrom: o.tokenizerFrom, nVocab: o.nVocab ?? 512 });
  const t: RandomTensor[] = [];
  const matrix = (name: string, cols: number, rows: number, std = 1 / Math.sqrt(cols)) =>
    t.push({ name, ne: [cols, rows], kind: "matrix", std });
  // Token embeddings of unit scale (each block RMS-normalises its input);
  // tied, they are also the head: logits of std ~ sqrt(nEmbd) then, so
  // the tied model's embeddings are scaled down to keep logits in range.
  t.push({
    name: "token_embd.weight",
    ne: [nEmbd, nVocab],
    kind: "matrix",
    std: o.tied ? 2 / Math.sqrt(nEmbd) : 1,
  });
  // Seeded uniform-ish draws from the index: deterministic and spread.
  const frac = (i: number, k: number) =>
    ((Math.sin(i * 12.9898 + k * 78.233) * 43758.5453) % 1 + 1) % 1;
  for (let i = 0; i < nLayer; i++) {
    const b = `blk.${i}.`;
    t.push({ name: `${b}attn_norm.weight`, ne: [nEmbd], kind: "norm" });
    matrix(`${b}ssm_in.weight`, nEmbd, 2 * dInner);
    t.push({ name: `${b}ssm_conv1d.weight`, ne: [dConv, dInner], kind: "f32", std: 0.5 });
    t.push({ name: `${b}ssm_conv1d.bias`, ne: [dInner], kind: "bias" });
    matrix(`${b}ssm_x.weight`, dInner, dtRank + 2 * dState);
    matrix(`${b}ssm_dt.weight`, dtRank, dInner);
    // dt = exp(U(log 0.001, log 0.1)); the bias is its inverse softplus.
    t.push({
      name: `${b}ssm_dt.bias`,
      ne: [dInner],
      kind: "f32",
      values: (j) => {
        const dt = Math.exp(Math.log(0.001) + frac(j, i + 1) * (Math.log(0.1) - Math.log(0.001)));
        return dt + Math.log(-Math.expm1(-dt));
      },
    });
    // A = -exp(A_log) with A_log = log(1..dState) per channel, slightly jittered.
    t.push({
      name: `${b}ssm_a`,
      ne: [dState, dInner],
      kind: "f32",
      values: (j) => -((j % dState) + 1) * (0.9 + 0.2 * frac(j, i + 7)),
    });
    t.push({ name: `${b}ssm_d`, ne: [dInner], kind: "norm" });
    matrix(`${b}ssm_out.weight`, dInner, nEmbd);
  }
  t.push({ name: "output_norm.weight", ne: [nEmbd], kind: "norm" });
  if (!o.tied) matrix("output.weight", nEmbd, nVocab, 2 / Math.sqrt(nEmbd));
  await writeRandomGGUF(path, {
    arch: "mamba",
    meta: {
      context_length: 1024 * 1024,
      embedding_length: nEmbd,
      block_count: nLayer,
      // What the converter writes for attention-free Mamba.
      feed_forward_length: 0,
      "attention.head_count": 0,
      "attention.layer_norm_rms_epsilon": { f32: 1e-5 },
      "ssm.conv_kernel": dConv,
      "ssm.inner_size": dInner,
      "ssm.state_size": dState,
      "ssm.time_step_rank": dtRank,
      "ssm.dt_b_c_rms": o.dtBCRms ?? false,
    },
    tensors: t,
    type: o.type ?? "f32",
    seed: o.seed ?? 1,
    nVocab: o.nVocab ?? 512,
    tokenizerFrom: o.tokenizerFrom,
  });
}
