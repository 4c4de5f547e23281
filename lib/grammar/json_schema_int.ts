/**
 * GBNF for integers within [min, max] (either bound may be absent), as
 * llama.cpp's build_min_max_int writes it: digit-by-digit ranges, numbers
 * of each digit count in turn, no leading zeros, at most 16 digits when a
 * side is open. Bounds are BigInts: llama.cpp works on int64_t, and a JS
 * number stops being exact (and prints as "1e+21") long before that range
 * ends.
 *
 * @module
 */

function digits(c: string, d: number): string {
  return String.fromCharCode(c.charCodeAt(0) + d);
}

/**
 * Alternatives (without outer parentheses) matching integers in [min, max];
 * `null` is an open side. The caller keeps the bounds inside int64 and
 * `min <= max`, as llama.cpp's converter needs.
 */
export function buildMinMaxInt(
  min: bigint | null,
  max: bigint | null,
  decimalsLeft = 16,
  topLevel = true,
): string {
  let out = "";
  const range = (from: string, to: string) => {
    out += from === to ? `[${from}]` : `[${from}-${to}]`;
  };
  const more = (minD: number, maxD: number) => {
    out += "[0-9]";
    if (minD === maxD && minD === 1) return;
    out += `{${minD}`;
    if (maxD !== minD) out += "," + (maxD === Infinity ? "" : maxD);
    out += "}";
  };
  // Recursion depth is bounded by the digit count (at most 19 for int64).
  const uniform = (from: string, to: string): void => {
    let i = 0;
    while (i < from.length && i < to.length && from[i] === to[i]) i++;
    if (i > 0) out += `"${from.slice(0, i)}"`;
    if (i < from.length && i < to.length) {
      if (i > 0) out += " ";
      const subLen = from.length - i - 1;
      if (subLen > 0) {
        const fromSub = from.slice(i + 1), toSub = to.slice(i + 1);
        const zeros = "0".repeat(subLen), nines = "9".repeat(subLen);
        let toReached = false;
        out += "(";
        if (fromSub === zeros) {
          range(from[i], digits(to[i], -1));
          out += " ";
          more(subLen, subLen);
        } else {
          out += `[${from[i]}] (`;
          uniform(fromSub, nines);
          out += ")";
          if (from[i] < digits(to[i], -1)) {
            out += " | ";
            if (toSub === nines) {
              range(digits(from[i], 1), to[i]);
              toReached = true;
            } else range(digits(from[i], 1), digits(to[i], -1));
            out += " ";
            more(subLen, subLen);
          }
        }
        if (!toReached) {
          out += " | ";
          range(to[i], to[i]);
          out += " ";
          uniform(zeros, toSub);
        }
        out += ")";
      } else out += `[${from[i]}-${to[i]}]`;
    }
  };

  if (min !== null && max !== null) {
    if (min < 0n && max < 0n) return `"-" (${buildMinMaxInt(-max, -min, decimalsLeft, true)})`;
    if (min < 0n) {
      out += `"-" (${buildMinMaxInt(0n, -min, decimalsLeft, true)}) | `;
      min = 0n;
    }
    let minS = String(min);
    const maxS = String(max);
    for (let d = minS.length; d < maxS.length; d++) {
      uniform(minS, "9".repeat(d));
      minS = "1" + "0".repeat(d);
      out += " | ";
    }
    uniform(minS, maxS);
    return out;
  }
  const less = Math.max(decimalsLeft - 1, 1);
  if (min !== null) {
    if (min < 0n) {
      out += `"-" (${buildMinMaxInt(null, -min, decimalsLeft, false)}) | [0] | [1-9] `;
      more(0, decimalsLeft - 1);
    } else if (min === 0n) {
      if (topLevel) {
        out += "[0] | [1-9] ";
        more(0, less);
      } else more(1, decimalsLeft);
    } else if (min <= 9n) {
      const c = String(min), start = topLevel ? "1" : "0";
      if (c > start) {
        range(start, digits(c, -1));
        out += " ";
        more(1, less);
        out += " | ";
      }
      range(c, "9");
      out += " ";
      more(0, less);
    } else {
      const minS = String(min), len = minS.length, c = minS[0];
      if (c > "1") {
        range(topLevel ? "1" : "0", digits(c, -1));
        out += " ";
        more(len, less);
        out += " | ";
      }
      range(c, c);
      // As llama.cpp (std::stoll of the rest): leading zeros of the rest are lost.
      out += ` (${buildMinMaxInt(BigInt(minS.slice(1)), null, less, false)})`;
      if (c < "9") {
        out += " | ";
        range(digits(c, 1), "9");
        out += " ";
        more(len - 1, less);
      }
    }
    return out;
  }
  if (max !== null) {
    if (max >= 0n) {
      if (topLevel) {
        out += '"-" [1-9] ';
        more(0, less);
        out += " | ";
      }
      out += buildMinMaxInt(0n, max, decimalsLeft, true);
    } else {
      out += `"-" (${buildMinMaxInt(-max, null, decimalsLeft, false)})`;
    }
    return out;
  }
  throw new RangeError("buildMinMaxInt: at least one bound is needed");
}
