/**
 * The vocabulary as llama.cpp's `llama_vocab::impl::load` builds it: token
 * texts, scores and attributes, special ids with their defaults per model
 * type, the end-of-generation set, and the flags that steer tokenization.
 *
 * @module
 */
import type { GGUFHeader } from "../gguf/mod.ts";
import { type PreType, preType } from "./pre_types.ts";

/** Token attribute bits (llama.h `llama_token_attr`). */
export const TokenAttr = {
  UNDEFINED: 0,
  UNKNOWN: 1 << 0,
  UNUSED: 1 << 1,
  NORMAL: 1 << 2,
  CONTROL: 1 << 3,
  USER_DEFINED: 1 << 4,
  BYTE: 1 << 5,
  NORMALIZED: 1 << 6,
  LSTRIP: 1 << 7,
  RSTRIP: 1 << 8,
  SINGLE_WORD: 1 << 9,
} as const;

/** Vocabulary fields as stored in GGUF metadata (`tokenizer.ggml.*`). */
export interface VocabData {
  /** `tokenizer.ggml.model`: "llama" (SPM), "gpt2" (BPE) or "bert" (WPM). */
  model: string;
  /** `tokenizer.ggml.pre`. */
  pre?: string;
  /** `tokenizer.ggml.tokens`. */
  tokens: readonly string[];
  /** `tokenizer.ggml.scores`. */
  scores?: ArrayLike<number>;
  /** `tokenizer.ggml.token_type` (llama_token_type values). */
  tokenTypes?: ArrayLike<number>;
  /** `tokenizer.ggml.merges` ("left right"). */
  merges?: readonly string[];
  /** Special ids from metadata (`*_token_id`); absent = llama.cpp's default. */
  ids?: Partial<Record<SpecialName, number>>;
  /** `tokenizer.ggml.add_bos_token`. */
  addBos?: boolean;
  /** `tokenizer.ggml.add_eos_token`. */
  addEos?: boolean;
  /** `tokenizer.ggml.add_sep_token`. */
  addSep?: boolean;
  /** `tokenizer.ggml.add_space_prefix`. */
  addSpacePrefix?: boolean;
  /** `tokenizer.ggml.normalizer.lowercase` (WPM). */
  lowercase?: boolean;
  /** `tokenizer.ggml.normalizer.strip_accents` (WPM). */
  stripAccents?: boolean;
  /** `general.name` (some per-model attribute fixes key on it). */
  name?: string;
  /** `general.architecture`. */
  arch?: string;
}

/** Names of the special ids llama.cpp reads from metadata. */
export type SpecialName =
  | "bos"
  | "eos"
  | "eot"
  | "eom"
  | "unk"
  | "sep"
  | "pad"
  | "mask"
  | "fim_pre"
  | "fim_suf"
  | "fim_mid"
  | "fim_pad"
  | "fim_rep"
  | "fim_sep";

const META_IDS: Array<[string, SpecialName]> = [
  ["bos_token_id", "bos"],
  ["eos_token_id", "eos"],
  ["eot_token_id", "eot"],
  ["eom_token_id", "eom"],
  ["unknown_token_id", "unk"],
  ["seperator_token_id", "sep"],
  ["padding_token_id", "pad"],
  ["mask_token_id", "mask"],
  ["fim_pre_token_id", "fim_pre"],
  ["fim_suf_token_id", "fim_suf"],
  ["fim_mid_token_id", "fim_mid"],
  ["fim_pad_token_id", "fim_pad"],
  ["fim_rep_token_id", "fim_rep"],
  ["fim_sep_token_id", "fim_sep"],
  ["prefix_token_id", "fim_pre"],
  ["suffix_token_id", "fim_suf"],
  ["middle_token_id", "fim_mid"],
];

/** Reads the vocabulary fields out of a parsed GGUF header. */
export function vocabDataFromGGUF(h: GGUFHeader): VocabData {
  const T = "tokenizer.ggml.";
  const tokens = h.strings(T + "tokens");
  if (!tokens) throw new TokenizerError(`${h.path}: missing ${T}tokens`);
  const flag = (k: string) => (h.get(k) ? h.bool(k) : undefined);
  const nums = (k: string): ArrayLike<number> | undefined => {
    const a = h.numbers(k);
    if (a instanceof BigInt64Array || a instanceof BigUint64Array) {
      throw new TokenizerError(`${h.path}: invalid gguf type for ${k} (64-bit integers)`);
    }
    return a;
  };
  const ids: Partial<Record<SpecialName, number>> = {};
  for (const [k, name] of META_IDS) if (h.get(T + k)) ids[name] = h.number(T + k);
  return {
    model: h.string(T + "model"),
    pre: h.get(T + "pre") ? h.string(T + "pre") : undefined,
    tokens,
    scores: nums(T + "scores"),
    tokenTypes: nums(T + "token_type"),
    merges: h.strings(T + "merges"),
    ids,
    addBos: flag(T + "add_bos_token"),
    addEos: flag(T + "add_eos_token"),
    addSep: flag(T + "add_sep_token"),
    addSpacePrefix: flag(T + "add_space_prefix"),
    lowercase: flag(T + "normalizer.lowercase"),
    stripAccents: flag(T + "normalizer.strip_accents"),
    name: h.get("general.name") ? h.string("general.name") : undefined,
    arch: h.get("general.architecture") ? h.string("general.architecture") : undefined,
  };
}

/** A vocabulary or input the tokenizer cannot handle. */
export class TokenizerError extends Error {
  /** Creates the error. */
  constructor(message: string) {
    super(message);
    this.name = "TokenizerError";
  }
}

/** The tokenizer family. */
export type VocabType = "spm" | "bpe" | "wpm";

const EOT_TEXTS = [
  "<|eot_id|>",
  "<|im_end|>",
  "<|end|>",
  "<end_of_turn>",
  "<|endoftext|>",
  "<|end_of_text|>",
  "<EOT>",
  "_<EOT>",
  "[EOT]",
  "<｜end▁of▁sentence｜>",
  "<end_of_utterance>",
];
const FIM_TEXTS: Array<[SpecialName, string[]]> = [
  ["eom", ["<|eom_id|>"]],
  ["fim_pre", [
    "<|fim_prefix|>",
    "<fim-prefix>",
    "<fim_prefix>",
    "<｜fim▁begin｜>",
    "<PRE>",
    "▁<PRE>",
    "<|code_prefix|>",
    "<|prefix|>",
  ]],
  ["fim_suf", [
    "<|fim_suffix|>",
    "<fim-suffix>",
    "<fim_suffix>",
    "<｜fim▁hole｜>",
    "<SUF>",
    "▁<SUF>",
    "<|code_suffix|>",
    "<|suffix|>",
  ]],
  ["fim_mid", [
    "<|fim_middle|>",
    "<fim-middle>",
    "<fim_middle>",
    "<｜fim▁end｜>",
    "<MID>",
    "▁<MID>",
    "<|code_middle|>",
    "<|middle|>",
  ]],
  ["fim_pad", ["<|fim_pad|>", "<fim-pad>", "<fim_pad>", "<PAD>", "[PAD]"]],
  ["fim_rep", ["<|fim_repo|>", "<|repo_name|>", "<fim-repo>", "<REPO>", "<reponame>"]],
  ["fim_sep", ["<|file_sep|>"]],
];
const EOG_TEXTS = new Set([
  "<|eot_id|>",
  "<|im_end|>",
  "<|end|>",
  "<|return|>",
  "<|call|>",
  "<|flush|>",
  "<|calls|>",
  "<end_of_turn>",
  "<|endoftext|>",
  "</s>",
  "<|eom_id|>",
  "<EOT>",
  "_<EOT>",
  "[EOT]",
  "[EOS]",
  "<|end_of_text|>",
  "<end_of_utterance>",
  "<eos>",
  "<turn|>",
  "<|tool_response>",
  "<｜end▁of▁sentence｜>",
  "[e~[",
]);

/**
 * The UTF-8 length of `s`, as `new TextEncoder().encode(s).length` (a lone
 * surrogate counts as U+FFFD's 3 bytes) without the array: a vocabulary of
 * 32,000 tokens made that many arrays of garbage at every load.
 */
export function utf8Length(s: string): number {
  let n = 0;
  for (let i = 0; i < s.length; i++) {
    const c = s.charCodeAt(i);
    if (c < 0x80) n += 1;
    else if (c < 0x800) n += 2;
    else if (c >= 0xd800 && c < 0xdc00 && i + 1 < s.length) {
      const d = s.charCodeAt(i + 1);
      if (d >= 0xdc00 && d < 0xe000) {
        n += 4;
        i++;
      } else n += 3;
    } else n += 3;
  }
  return n;
}

/** A loaded vocabulary with llama.cpp's derived state. */
export class Vocab {
  /** Tokenizer family. */
  readonly type: VocabType;
  /** Pre-tokenizer (BPE only). */
  readonly pre: PreType | null;
  /** Token texts by id. */
  readonly texts: readonly string[];
  /** Scores by id. */
  readonly scores: Float32Array;
  /** Attributes by id (TokenAttr bits). */
  readonly attrs: Uint16Array;
  /** Text → id (the last id wins on duplicates, as llama.cpp's map assignment). */
  readonly byText: Map<string, number> = new Map<string, number>();
  /** "left right" → merge rank. */
  readonly ranks: Map<string, number> = new Map<string, number>();
  /** Special ids (-1 = none). */
  readonly ids: Record<SpecialName, number>;
  /** End-of-generation ids. */
  readonly eog: Set<number> = new Set<number>();
  /** Control/user-defined/unknown ids, longest text first. */
  readonly specials: number[];
  /** Longest token in UTF-8 bytes. */
  readonly maxTokenLen: number;
  /** Tokenize adds BOS. */
  addBos = false;
  /** Tokenize adds EOS. */
  addEos = false;
  /** Tokenize adds SEP (bert). */
  addSep = false;
  /** SPM prefixes a space to each text segment. */
  addSpacePrefix = false;
  /** Detokenize cleans up spaces around punctuation. */
  cleanSpaces = false;
  /** BPE takes whole-word tokens before merging (llama3). */
  ignoreMerges = false;
  /** WPM lowercases. */
  lowercase = true;
  /** WPM strips accents. */
  stripAccents = true;

  /** Builds the vocabulary from metadata fields. */
  constructor(d: VocabData) {
    const n = d.tokens.length;
    const ids: Record<SpecialName, number> = {
      bos: -1,
      eos: -1,
      eot: -1,
      eom: -1,
      unk: -1,
      sep: -1,
      pad: -1,
      mask: -1,
      fim_pre: -1,
      fim_suf: -1,
      fim_mid: -1,
      fim_pad: -1,
      fim_rep: -1,
      fim_sep: -1,
    };
    this.ids = ids;
    if (d.model === "llama") {
      this.type = "spm";
      Object.assign(ids, { bos: 1, eos: 2, unk: 0 });
      this.pre = null;
      this.addSpacePrefix = true;
      this.addBos = true;
    } else if (d.model === "bert") {
      this.type = "wpm";
      Object.assign(ids, { bos: 101, unk: 100, sep: 102, pad: 0, mask: 103 });
      this.pre = null;
      this.cleanSpaces = true;
      this.addBos = true;
      this.addSep = true;
    } else if (d.model === "gpt2") {
      this.type = "bpe";
      if (!d.merges) throw new TokenizerError("cannot find tokenizer merges in model file");
      Object.assign(ids, { bos: 11, eos: 11 });
      const pre = preType(d.pre ?? "");
      if (!pre) throw new TokenizerError(`unsupported pre-tokenizer type: '${d.pre}'`);
      this.pre = pre;
      this.cleanSpaces = pre.cleanSpaces ?? true;
      this.ignoreMerges = pre.ignoreMerges ?? false;
      this.addBos = pre.addBos ?? false;
      this.addSep = pre.addSep ?? false;
      if (pre.noBos) ids.bos = -1;
      d.merges.forEach((m, i) => {
        const sp = m.indexOf(" ", 1);
        // llama.cpp keys a merge without a space as ("", ""); keep that quirk.
        const key = sp === -1 ? " " : m.slice(0, sp) + " " + m.slice(sp + 1);
        if (!this.ranks.has(key)) this.ranks.set(key, i);
      });
    } else {
      throw new TokenizerError(`unsupported tokenizer model: '${d.model}'`);
    }
    if (d.addSpacePrefix !== undefined) this.addSpacePrefix = d.addSpacePrefix;

    const texts = d.tokens.map((t, i) => (t === "" ? `[EMPTY_${i}]` : t));
    this.texts = texts;
    this.scores = new Float32Array(n);
    if (d.scores) { for (let i = 0; i < n; i++) this.scores[i] = d.scores[i]; }
    this.attrs = new Uint16Array(n).fill(TokenAttr.NORMAL);
    let maxLen = 0;
    for (let i = 0; i < n; i++) {
      this.byText.set(texts[i], i);
      maxLen = Math.max(maxLen, utf8Length(texts[i]));
      if (d.tokenTypes) this.attrs[i] = attrOfType(d.tokenTypes[i]);
    }
    this.maxTokenLen = maxLen;

    // Defaults out of range are dropped; metadata ids out of range keep the default.
    for (const k of Object.keys(ids) as SpecialName[]) {
      if (ids[k] >= n) ids[k] = -1;
      const v = d.ids?.[k];
      if (v !== undefined && v >= 0 && v < n) ids[k] = v;
    }
    if (d.addBos !== undefined) this.addBos = d.addBos;
    if (d.addEos !== undefined) this.addEos = d.addEos;
    if (d.addSep !== undefined) this.addSep = d.addSep;
    if (d.lowercase !== undefined) this.lowercase = d.lowercase;
    this.stripAccents = d.stripAccents ?? this.lowercase;

    this.#detectSpecials();
    const specials: number[] = [];
    const sizes = new Int32Array(n);
    for (let i = 0; i < n; i++) {
      const a = this.attrs[i];
      if (a & (TokenAttr.CONTROL | TokenAttr.USER_DEFINED | TokenAttr.UNKNOWN)) {
        specials.push(i);
        sizes[i] = utf8Length(texts[i]);
      }
    }
    // llama.cpp uses an unstable std::sort by byte length; ties keep id order here.
    specials.sort((a, b) => sizes[b] - sizes[a] || a - b);
    this.specials = specials;
    this.#perModelAttrs(d);
  }

  // Token-text heuristics of llama.cpp for EOT/EOM/FIM/EOG/unused tokens. llama.cpp
  // walks a hash map, so when several candidate texts exist the one it picks is
  // hash-order dependent; we pick the lowest id.
  #detectSpecials(): void {
    const { attrs, ids, byText } = this;
    const mark = (id: number) => (attrs[id] |= TokenAttr.CONTROL);
    const first = (texts: string[]) => {
      let best = -1;
      for (const t of texts) {
        const id = byText.get(t);
        if (id !== undefined && (best === -1 || id < best)) best = id;
      }
      return best;
    };
    if (ids.eot === -1) {
      ids.eot = first(EOT_TEXTS);
      if (ids.eot !== -1) mark(ids.eot);
    }
    for (const [name, texts] of FIM_TEXTS) {
      if (ids[name] !== -1) continue;
      ids[name] = first(texts);
      if (ids[name] !== -1) mark(ids[name]);
    }
    // forEach, not for-of: the entries' [text, id] pairs of a 32k-token
    // vocabulary were ~9 MB of garbage at load, enough to grow V8's young
    // generation for the rest of the process (peak RSS).
    byText.forEach((id, text) => {
      if ((attrs[id] & TokenAttr.CONTROL) && text.includes("unused")) {
        attrs[id] |= TokenAttr.UNUSED;
      }
    });
    for (const k of ["fim_pad", "fim_rep", "fim_sep"] as const) {
      if (ids[k] !== -1) this.eog.add(ids[k]);
    }
    byText.forEach((id, text) => {
      if (EOG_TEXTS.has(text)) {
        this.eog.add(id);
        mark(id);
      }
    });
    for (const t of ["<|channel|>", "<|message|>", "<|start|>", "<|constrain|>"]) {
      const id = byText.get(t);
      if (id !== undefined) attrs[id] = TokenAttr.USER_DEFINED;
    }
    for (const k of ["eos", "eot", "eom"] as const) if (ids[k] !== -1) this.eog.add(ids[k]);
    const eogText = (t: string) => [...this.eog].some((id) => this.texts[id] === t);
    const end = [...this.eog].find((id) => this.texts[id] === "<|end|>");
    if (
      end !== undefined &&
      ((eogText("<|return|>") && (eogText("<|call|>") || eogText("<|calls|>"))) ||
        ((eogText("<|call|>") || eogText("<|calls|>")) && eogText("<|flush|>")))
    ) {
      this.eog.delete(end);
      attrs[end] = TokenAttr.USER_DEFINED;
    }
    const s = [...this.eog].find((id) => this.texts[id] === "</s>");
    if (s !== undefined && eogText("<|tool_response>")) {
      this.eog.delete(s);
      attrs[s] = TokenAttr.NORMAL;
    }
  }

  // Attribute fixes llama.cpp applies by model/tokenizer name.
  #perModelAttrs(d: VocabData): void {
    const set = (text: string, bit: number, on: boolean) => {
      const id = this.byText.get(text);
      if (id === undefined) throw new TokenizerError(`token '${text}' missing from vocabulary`);
      this.attrs[id] = on ? this.attrs[id] | bit : this.attrs[id] & ~bit;
    };
    const name = (d.name ?? "").toLowerCase();
    const pre = d.pre ?? "";
    const arch = d.arch ?? "";
    if (
      ["jina-v2-de", "jina-v2-es", "jina-v2-code"].some((s) => pre.includes(s)) ||
      ["nomic-bert-moe", "jina-bert-v3"].some((s) => arch.includes(s))
    ) {
      if (this.byText.has("<mask>")) set("<mask>", TokenAttr.LSTRIP, true);
    } else if (name.includes("phi-3") || name.includes("phi3")) {
      for (const id of this.specials) this.attrs[id] |= TokenAttr.RSTRIP;
      set("</s>", TokenAttr.RSTRIP, true);
      for (const t of ["<unk>", "<s>", "<|endoftext|>"]) set(t, TokenAttr.RSTRIP, false);
    } else if (name.includes("modern-bert")) {
      if (this.byText.has("[MASK]")) set("[MASK]", TokenAttr.LSTRIP, true);
    }
  }
}

function attrOfType(t: number): number {
  switch (t) {
    case 2:
      return TokenAttr.UNKNOWN;
    case 5:
      return TokenAttr.UNUSED;
    case 1:
      return TokenAttr.NORMAL;
    case 3:
      return TokenAttr.CONTROL;
    case 4:
      return TokenAttr.USER_DEFINED;
    case 6:
      return TokenAttr.BYTE;
    default:
      return TokenAttr.UNDEFINED;
  }
}
