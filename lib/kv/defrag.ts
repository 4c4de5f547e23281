/**
 * Defragmentation planning: which runs of used cells move into which holes
 * so that every used cell sits at the front of the cache.
 *
 * @module
 */
import type { Graph } from "../graph/graph.ts";
import type { Tensor } from "../graph/tensor.ts";
import { rowSize } from "../ggml/types.ts";
import type { KvCache } from "./cache.ts";
import type { KvCells } from "./cells.ts";

/** One defrag step: cells [src, src+len) move to [dst, dst+len). */
export interface DefragMove {
  /** First source cell. */
  readonly src: number;
  /** First destination cell. */
  readonly dst: number;
  /** Cells moved. */
  readonly len: number;
}

/** Moves that pack all used cells to the front (the last used cells fill the first holes). */
export function planDefragMoves(c: KvCells, size: number): DefragMove[] {
  const moves: Array<{ src: number; dst: number; len: number }> = [];
  let hole = 0;
  let tail = c.usedMaxP1() - 1;
  while (true) {
    while (hole < size && !c.isEmpty(hole)) hole++;
    while (tail >= 0 && c.isEmpty(tail)) tail--;
    if (hole >= tail) break;
    const last = moves[moves.length - 1];
    if (last && last.src + last.len === tail && last.dst + last.len === hole) last.len++;
    else moves.push({ src: tail, dst: hole, len: 1 });
    hole++;
    tail--;
  }
  return moves;
}

/**
 * Add the copy nodes of `moves` to g (every layer, K and V) and update the
 * cells as if they ran. Run g before the next decode.
 */
export function applyDefragMoves(kv: KvCache, g: Graph, moves: readonly DefragMove[]): Tensor[] {
  const nodes: Tensor[] = [];
  for (let il = 0; il < kv.nLayer; il++) {
    const k = kv.kTensor(g, il), v = kv.vTensor(g, il);
    const rk = rowSize(kv.typeK, kv.nEmbdKGqa);
    for (const m of moves) {
      nodes.push(
        g.cpy(
          g.view(k, [kv.nEmbdKGqa, m.len], [rk], m.src * rk),
          g.view(k, [kv.nEmbdKGqa, m.len], [rk], m.dst * rk),
        ),
      );
      if (kv.vTrans) {
        const es = rowSize(kv.typeV, 1), rs = rowSize(kv.typeV, kv.size);
        nodes.push(
          g.cpy(
            g.view(v, [m.len, kv.nEmbdVGqa], [rs], m.src * es),
            g.view(v, [m.len, kv.nEmbdVGqa], [rs], m.dst * es),
          ),
        );
      } else {
        const rv = rowSize(kv.typeV, kv.nEmbdVGqa);
        nodes.push(
          g.cpy(
            g.view(v, [kv.nEmbdVGqa, m.len], [rv], m.src * rv),
            g.view(v, [kv.nEmbdVGqa, m.len], [rv], m.dst * rv),
          ),
        );
      }
    }
  }
  for (const n of nodes) g.expand(n);
  for (const m of moves) for (let k = 0; k < m.len; k++) kv.cells.move(m.src + k, m.dst + k);
  kv.head = kv.cells.used;
  return nodes;
}
