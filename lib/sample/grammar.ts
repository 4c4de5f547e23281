/**
 * Grammar-constrained sampling over a vocabulary (llama.cpp's grammar
 * sampler): candidates whose text cannot continue the grammar get logit
 * -inf; end-of-generation tokens survive only where the grammar can end.
 *
 * Pre-filter: token pieces are decoded once into a trie of code points, and
 * the live stacks walk the trie; a subtree is entered only while some stack
 * survives its prefix, so rejected regions of the vocabulary cost nothing and
 * shared prefixes are matched once. When the previous token left a partial
 * UTF-8 sequence the exact per-candidate check is used instead.
 *
 * It lives with the samplers (lib/sample) rather than the grammar engine
 * (lib/grammar) so the dependency runs one way: sampling uses grammars,
 * grammars know nothing of token candidates.
 *
 * @module
 */
import type { TokenCandidates } from "./candidates.ts";
import {
  CompiledGrammar,
  decodeUtf8,
  type GrammarStack,
  GrammarState,
  type PartialUtf8,
  stackAccepts,
  unionStacks,
} from "../grammar/matcher.ts";
import { GrammarMatchError } from "../grammar/errors.ts";
import { parseGrammar, type ParseGrammarOptions } from "../grammar/parser.ts";

/** The vocabulary facts the grammar needs. */
export interface GrammarVocab {
  /** Number of tokens. */
  nVocab: number;
  /** Raw bytes of a token's piece, special tokens rendered (token_to_piece, special=true). */
  pieces: (id: number) => Uint8Array;
  /** End-of-generation tokens. */
  eogTokens: Iterable<number>;
}

/** A trie node: children by code point, tokens ending here, DFS range of its subtree. */
export interface TrieNode {
  /** Children by next code point. */
  children: Map<number, TrieNode>;
  /** Tokens whose full code points end here, with their trailing partial UTF-8. */
  ends: { id: number; partial: PartialUtf8 }[];
  /** Range of token order (DFS) covered by this subtree. */
  /** Start of the subtree's range in the DFS order. */
  lo: number;
  /** End (exclusive) of that range. */
  hi: number;
}

/** Token pieces decoded to code points, as a trie. */
export class PieceTrie {
  /** The empty prefix. */
  root: TrieNode = { children: new Map(), ends: [], lo: 0, hi: 0 };
  /** Token ids in DFS order (for subtree ranges). */
  order: Int32Array;

  /** Builds the trie. */
  constructor(tokens: { id: number; cps: number[]; partial: PartialUtf8 }[]) {
    for (const t of tokens) {
      let n = this.root;
      for (const cp of t.cps) {
        let c = n.children.get(cp);
        if (!c) n.children.set(cp, c = { children: new Map(), ends: [], lo: 0, hi: 0 });
        n = c;
      }
      n.ends.push({ id: t.id, partial: t.partial });
    }
    const order: number[] = [];
    const visit = (n: TrieNode) => {
      n.lo = order.length;
      for (const e of n.ends) order.push(e.id);
      for (const c of n.children.values()) visit(c);
      n.hi = order.length;
    };
    visit(this.root);
    this.order = Int32Array.from(order);
  }
}

/**
 * Per-vocabulary data shared by every grammar sampler on that vocabulary:
 * build it once (SamplingOptions.grammarIndex) to save each new grammar
 * sampler a pass over the whole vocabulary.
 */
export class GrammarVocabIndex {
  /** Vocabulary size. */
  readonly nVocab: number;
  /**
   * Piece bytes by id (as llama.cpp decodes them: up to the first NUL).
   *
   * @internal
   */
  readonly pieces: Uint8Array[];
  /**
   * Whether a token is end-of-generation.
   *
   * @internal
   */
  readonly isEog: Uint8Array;
  /**
   * Fresh-start decoding of each piece.
   *
   * @internal
   */
  readonly decoded: { cps: number[]; partial: PartialUtf8 }[];
  /**
   * Trie of the acceptable pieces.
   *
   * @internal
   */
  readonly trie: PieceTrie;

  /** Decodes every piece of `v` and builds the trie of those a grammar can accept. */
  constructor(v: GrammarVocab) {
    this.nVocab = v.nVocab;
    this.isEog = new Uint8Array(v.nVocab);
    for (const id of v.eogTokens) if (id >= 0 && id < v.nVocab) this.isEog[id] = 1;
    this.pieces = [];
    this.decoded = [];
    const tokens: { id: number; cps: number[]; partial: PartialUtf8 }[] = [];
    for (let id = 0; id < v.nVocab; id++) {
      const p = v.pieces(id);
      this.pieces.push(p);
      const d = decodeUtf8(p);
      this.decoded.push(d);
      // Empty pieces and invalid UTF-8 can never be accepted; EOG is handled apart.
      if (this.isEog[id] || p.length === 0 || p[0] === 0 || d.partial.nRemain < 0) continue;
      tokens.push({ id, cps: d.cps, partial: d.partial });
    }
    this.trie = new PieceTrie(tokens);
  }
}

/** Options of {@link GrammarSampler}. */
export interface GrammarSamplerOptions extends ParseGrammarOptions {
  /** A prebuilt vocabulary index to share between samplers. */
  index?: GrammarVocabIndex;
}

/** The grammar constraint a sampler chain consults (see ./chain.ts). */
export class GrammarSampler {
  /** Sampler name, as llama.cpp's chain prints it. */
  readonly name = "grammar";
  /**
   * The compiled grammar.
   *
   * @internal
   */
  readonly grammar: CompiledGrammar;
  /**
   * The vocabulary index in use (shared or built by the constructor).
   *
   * @internal
   */
  readonly index: GrammarVocabIndex;
  /**
   * Current match state.
   *
   * @internal
   */
  state: GrammarState;
  #allowed: Uint8Array;

  /** Parses and compiles `gbnf` (throws GrammarSyntaxError) for a vocabulary. */
  constructor(gbnf: string, vocab: GrammarVocab, opts: GrammarSamplerOptions = {}) {
    this.grammar = new CompiledGrammar(parseGrammar(gbnf, opts));
    this.index = opts.index ?? new GrammarVocabIndex(vocab);
    this.state = new GrammarState(this.grammar);
    this.#allowed = new Uint8Array(this.index.nVocab);
  }

  /** Marks every token the grammar allows now (1) in a per-id mask. */
  allowedMask(): Uint8Array {
    const a = this.#allowed;
    a.fill(0);
    const ix = this.index, st = this.state;
    const canEnd = st.canEnd;
    for (let id = 0; id < ix.nVocab; id++) if (ix.isEog[id] && canEnd) a[id] = 1;
    if (st.partial.nRemain > 0) {
      for (let id = 0; id < ix.nVocab; id++) {
        if (!ix.isEog[id] && this.#allowsSlow(id)) a[id] = 1;
      }
      return a;
    }
    this.#walk(ix.trie.root, st.stacks, a);
    return a;
  }

  #walk(node: TrieNode, stacks: GrammarStack[], a: Uint8Array): void {
    const g = this.grammar;
    for (const e of node.ends) {
      if (a[e.id]) continue;
      if (e.partial.nRemain === 0) a[e.id] = 1;
      else {
        for (const s of stacks) {
          if (s.top >= 0 && !g.isTokenTop(s) && g.matchPartial(s.top, e.partial)) {
            a[e.id] = 1;
            break;
          }
        }
      }
    }
    if (node.children.size === 0) return;
    const order = this.index.trie.order;
    for (const [cp, child] of node.children) {
      const lists: GrammarStack[][] = [];
      for (const s of stacks) {
        if (s.top < 0) continue;
        if (g.isTokenTop(s)) {
          // Mid-token, a token element compares ids only (as llama.cpp does).
          for (let k = child.lo; k < child.hi; k++) {
            if (g.matchToken(s.top, order[k])) a[order[k]] = 1;
          }
          continue;
        }
        const n = g.step(s, cp);
        if (n.length) lists.push(n);
      }
      if (lists.length === 0) continue;
      this.#walk(child, lists.length === 1 ? lists[0] : unionStacks(lists), a);
    }
  }

  #allowsSlow(id: number): boolean {
    const ix = this.index;
    const p = ix.pieces[id];
    if (p.length === 0 || p[0] === 0) return false;
    const { cps, partial } = decodeUtf8(p, this.state.partial);
    if (partial.nRemain < 0) return false;
    return this.state.stacks.some((s) => stackAccepts(this.grammar, s, cps, 0, partial, id));
  }

  /** Whether one token is allowed now (exact check, no trie). */
  allows(id: number): boolean {
    const ix = this.index;
    if (id < 0 || id >= ix.nVocab) return false;
    if (ix.isEog[id]) return this.state.canEnd;
    return this.#allowsSlow(id);
  }

  /**
   * Sets the logit of every disallowed candidate to -inf
   * (llama_grammar_apply_impl). Throws {@link GrammarMatchError} when the
   * grammar admits no token of the whole vocabulary: llama.cpp would sample
   * from all -inf logits and fail at accept; this says why, one step earlier.
   */
  apply(c: TokenCandidates): void {
    if (c.size === 1) {
      if (!this.allows(c.ids[0])) {
        c.logits[0] = -Infinity;
        this.#checkAdmitsSome(this.allowedMask());
      }
      return;
    }
    const a = this.allowedMask();
    let any = false;
    for (let i = 0; i < c.size; i++) {
      if (!a[c.ids[i]]) c.logits[i] = -Infinity;
      else any = true;
    }
    if (!any) this.#checkAdmitsSome(a);
  }

  #checkAdmitsSome(mask: Uint8Array): void {
    if (mask.indexOf(1) >= 0) return;
    throw new GrammarMatchError(
      this.state.canEnd
        ? "the grammar is complete but the vocabulary has no end-of-generation token"
        : "the grammar admits no token of the vocabulary here",
    );
  }

  /**
   * Advances by a chosen token (llama_grammar_accept_impl). EOG is accepted
   * only where the grammar can end; throws {@link GrammarMatchError} when the
   * token cannot continue.
   */
  accept(token: number): void {
    const ix = this.index;
    if (token < 0 || token >= ix.nVocab) {
      throw new RangeError(`grammar: token ${token} out of range`);
    }
    if (ix.isEog[token]) {
      if (this.state.canEnd) return;
      throw new GrammarMatchError(
        `end-of-generation token ${token} before the grammar is complete`,
        token,
      );
    }
    this.state.acceptToken(token, ix.pieces[token]);
  }

  /** Whether the grammar is complete here (an EOG token would be allowed). */
  get canEnd(): boolean {
    return this.state.canEnd;
  }

  /** Back to the start of the grammar. */
  reset(): void {
    this.state = new GrammarState(this.grammar);
  }
}
