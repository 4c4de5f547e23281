/**
 * `tokenizer.ggml.pre` names → the regex list and the flags llama.cpp's
 * llama-vocab.cpp gives them (for BPE vocabularies).
 *
 * @module
 */
import { RE_GPT2, RE_LLAMA3, RE_QWEN2, RE_QWEN35 } from "./pretokenize.ts";

/** How llama.cpp treats one pre-tokenizer type. */
export interface PreType {
  /** Regexes applied in order. */
  readonly exprs: readonly string[];
  /** Whole words that are tokens skip merging. */
  readonly ignoreMerges?: boolean;
  /** Post-process decoded text (" ," → ","...). Defaults to true for BPE. */
  readonly cleanSpaces?: boolean;
  /** Default of add_bos before metadata. */
  readonly addBos?: boolean;
  /** Default of add_sep before metadata. */
  readonly addSep?: boolean;
  /** The model has no BOS unless metadata names one. */
  readonly noBos?: boolean;
}

const NL = "[\r\n]";
const DEFAULT = [
  "[\\p{P}\\$\\+<=>\\^~\\|]+",
  RE_GPT2,
  "\\p{N}+",
  "[0-9][0-9][0-9]",
];
const DEEPSEEK_LLM = [
  NL,
  // Non-ASCII as escapes: some of these letters are canonical singletons
  // (U+1FD3, U+212A...) that editors silently normalise.
  "\\s?[A-Za-z\u00B5\u00C0-\u00D6\u00D8-\u00F6\u00F8-\u01BA\u01BC-\u01BF\u01C4-\u0293\u0295-\u02AF\u0370-\u0373\u0376\u0377\u037B-\u037D\u037F\u0386\u0388-\u038A\u038C\u038E-\u03A1\u03A3-\u03F5\u03F7-\u0481\u048A-\u052F\u0531-\u0556\u10A0-\u10C5\u13A0-\u13F5\u13F8-\u13FD\u1C90-\u1CBA\u1CBD-\u1CBF\u1D00-\u1D2B\u1D6B-\u1D77\u1D79-\u1D9A\u1E00-\u1F15\u1F18-\u1F1D\u1F20-\u1F45\u1F48-\u1F4D\u1F50-\u1F57\u1F59\u1F5B\u1F5D\u1F5F-\u1F7D\u1F80-\u1FB4\u1FB6-\u1FBC\u1FBE\u1FC2-\u1FC4\u1FC6-\u1FCC\u1FD0-\u1FD3\u1FD6-\u1FDB\u1FE0-\u1FEC\u1FF2-\u1FF4\u1FF6-\u1FFC\u2102\u2107\u210A-\u2113\u2115\u2119-\u211D\u2124\u2126\u2128\u212A-\u212D\u212F-\u2134\u2139\u213C-\u213F\u2145-\u2149\u214E\u2183\u2184\u2C00-\u2C7B\u2C7E-\u2CE4\u2CEB-\u2CEE\u2CF2\u2CF3\uA640-\uA66D\uA680-\uA69B\uA722-\uA76F\uA771-\uA787\uA78B-\uA78E\uAB70-\uABBF\uFB00-\uFB06\uFB13-\uFB17\uFF21-\uFF3A\uFF41-\uFF5A\u{10400}-\u{1044F}\u{104B0}-\u{104D3}\u{104D8}-\u{104FB}\u{10C80}-\u{10CB2}\u{10CC0}-\u{10CF2}\u{118A0}-\u{118DF}\u{1E900}-\u{1E943}]+",
  "\\s?[!-/:-~！-／：-～‘-‟　-。]+",
  "\\s+$",
  "[一-龥ࠀ-一가-퟿]+",
  "\\p{N}+",
];
const DEEPSEEK_CODER = [NL, "\\s?\\p{L}+", "\\s?\\p{P}+", "[一-龥ࠀ-一가-퟿]+", "\\p{N}"];
const DEEPSEEK3 = [
  "\\p{N}{1,3}",
  "[一-龥぀-ゟ゠-ヿ]+",
  "[!\"#$%&'()*+,\\-./:;<=>?@\\[\\\\\\]^_`{|}~][A-Za-z]+|[^\r\n\\p{L}\\p{P}\\p{S}]?[\\p{L}\\p{M}]+| ?[\\p{P}\\p{S}]+[\r\n]*|\\s*[\r\n]+|\\s+(?!\\S)|\\s+",
];
const FALCON = ["[\\p{P}\\$\\+<=>\\^~\\|`]+", RE_GPT2, "[0-9][0-9][0-9]"];
const STARCODER = ["\\p{N}", RE_GPT2];
const BLOOM = [" ?[^(\\s|.,!?…。，、।۔،)]+"];
const CONTR = "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])";
const TEKKEN = [
  "[^\\r\\n\\p{L}\\p{N}]?((?=[\\p{L}])([^a-z]))*((?=[\\p{L}])([^A-Z]))+|[^\\r\\n\\p{L}\\p{N}]?((?=[\\p{L}])([^a-z]))+((?=[\\p{L}])([^A-Z]))*|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+",
];
const GPT4O = [
  `[^\\r\\n\\p{L}\\p{N}]?((?=[\\p{L}])([^a-z]))*((?=[\\p{L}])([^A-Z]))+${CONTR}?|[^\\r\\n\\p{L}\\p{N}]?((?=[\\p{L}])([^a-z]))+((?=[\\p{L}])([^A-Z]))*${CONTR}?|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+`,
];
const CHAMELEON = [
  "<sentinel:[0-9]+>",
  "(IMGIMG)((A|B|C|D|E|F|G|H|I){1,4})Z",
  "([\\t\\n]|    |  )",
  "\\p{N}",
  "[\\p{P}!-/:-@\\[-`{-~]",
  RE_GPT2,
];

const table: Array<[string[], PreType]> = [
  [["default"], { exprs: DEFAULT }],
  [
    [
      "llama3",
      "llama-v3",
      "llama-bpe",
      "falcon3",
      "falcon-h1",
      "pixtral",
      "midm-2.0",
      "lfm2",
      "jina-v5-nano",
    ],
    { exprs: [RE_LLAMA3], ignoreMerges: true, addBos: true },
  ],
  [["dbrx", "smaug-bpe"], { exprs: [RE_LLAMA3] }],
  [["deepseek-llm"], { exprs: DEEPSEEK_LLM, cleanSpaces: false }],
  [["deepseek-coder"], { exprs: DEEPSEEK_CODER, cleanSpaces: false }],
  [["deepseek-v3", "hunyuan-dense", "joyai-llm", "hy_v4"], {
    exprs: DEEPSEEK3,
    cleanSpaces: false,
  }],
  [["falcon"], { exprs: FALCON }],
  [["mpt", "olmo", "jais", "exaone4"], { exprs: [RE_GPT2] }],
  [["trillion", "granite-docling"], { exprs: [RE_GPT2], cleanSpaces: false }],
  [[
    "gpt-2",
    "phi-2",
    "jina-es",
    "jina-de",
    "gigachat",
    "jina-v2-es",
    "jina-v2-de",
    "a.x-4.0",
    "mellum",
    "modern-bert",
  ], { exprs: [RE_GPT2] }],
  [["jina-v1-en", "jina-v2-code", "roberta-bpe"], { exprs: [RE_GPT2], addSep: true }],
  [["starcoder", "refact", "codeshell", "exaone", "minerva-7b", "mellum2"], {
    exprs: STARCODER,
  }],
  [["command-r", "smollm"], { exprs: STARCODER, cleanSpaces: false }],
  [["qwen2", "deepseek-r1-qwen", "kormo", "f2llmv2", "hunyuan", "solar-open"], {
    exprs: [RE_QWEN2],
    cleanSpaces: false,
  }],
  [["stablelm2", "megrez"], { exprs: [RE_QWEN2] }],
  [["qwen35"], { exprs: [RE_QWEN35], cleanSpaces: false }],
  [["poro-chat"], { exprs: BLOOM, cleanSpaces: false }],
  [["bloom", "gpt3-finnish"], { exprs: BLOOM }],
  [["viking"], { exprs: [...BLOOM, "\\p{N}"], cleanSpaces: false }],
  [["glm4", "chatglm-bpe"], { exprs: [RE_LLAMA3], noBos: true }],
  [["tekken"], { exprs: TEKKEN, cleanSpaces: false, ignoreMerges: true, addBos: true }],
  [["chameleon"], { exprs: CHAMELEON, cleanSpaces: false, addBos: true }],
  [["gpt-4o", "llama4", "kanana2", "talkie", "minimax-m2"], { exprs: GPT4O, cleanSpaces: false }],
  [["seed-coder"], {
    exprs: [
      CONTR +
      "|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1}| ?[^\\s\\p{L}\\p{N}\\r\\n]+|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+",
    ],
    cleanSpaces: false,
  }],
  [["ufakzeka"], {
    exprs: [
      "[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+",
    ],
    cleanSpaces: false,
  }],
  [["grok-2"], { exprs: [RE_QWEN2], cleanSpaces: false }],
  [["bailingmoe", "bailingmoe2", "llada-moe"], {
    exprs: [
      "'(?:[sSdDmMtT]|[lL][lL]|[vV][eE]|[rR][eE])|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]|\\s+(?!\\S)|\\s+",
    ],
    cleanSpaces: false,
  }],
  [["minicpm5"], {
    exprs: [
      "\\p{N}{1,3}",
      CONTR +
      "|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}+| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+",
    ],
    ignoreMerges: true,
  }],
];

const BY_NAME = new Map<string, PreType>();
for (const [names, t] of table) for (const n of names) BY_NAME.set(n, t);

/** The pre-tokenizer llama.cpp uses for `tokenizer.ggml.pre` = `name` ("" = default). */
export function preType(name: string): PreType | undefined {
  return BY_NAME.get(name === "" ? "default" : name);
}
