/**
 * Small helpers for native pointers: addresses as plain numbers (x86-64 and
 * arm64 user addresses fit in 53 bits), C strings, zero-copy views.
 *
 * @module
 */

/** The address of `p` as a number (0 for null). */
export function address(p: Deno.PointerValue): number {
  if (p === null) return 0;
  const v = Deno.UnsafePointer.value(p);
  const n = Number(v);
  if (!Number.isSafeInteger(n)) throw new RangeError(`native address ${v} exceeds 2^53`);
  return n;
}

/** A pointer for a numeric address (null for 0). */
export function pointerAt(addr: number): Deno.PointerValue {
  return addr === 0 ? null : Deno.UnsafePointer.create(BigInt(addr));
}

/** A zero-copy Uint8Array over `size` native bytes at `p`. */
export function nativeBytes(p: Deno.PointerObject, size: number): Uint8Array {
  if (size === 0) return new Uint8Array(0);
  return new Uint8Array(Deno.UnsafePointerView.getArrayBuffer(p, size));
}

/**
 * Detaches the ArrayBuffer under a view of native memory (from
 * {@link nativeBytes}) before that memory is freed or unmapped: every view of
 * it then reads as empty instead of reaching freed memory (a segfault).
 */
export function detachNative(view: ArrayBufferView): void {
  try {
    (view.buffer as ArrayBuffer).transfer(0);
  } catch {
    // already detached, or not detachable: nothing more to do
  }
}

/** The NUL-terminated UTF-8 string at `p` ("" for null). */
export function cString(p: Deno.PointerValue): string {
  return p === null ? "" : Deno.UnsafePointerView.getCString(p);
}

/** `s` as a NUL-terminated UTF-8 buffer for a "buffer" parameter. */
export function toCString(s: string): Uint8Array<ArrayBuffer> {
  const b = new TextEncoder().encode(s);
  const out = new Uint8Array(b.length + 1);
  out.set(b);
  return out;
}

/** Writes a numeric address as a little-endian u64 into `view` at `off`. */
export function setAddress(view: DataView, off: number, addr: number): void {
  view.setUint32(off, addr % 0x1_0000_0000, true);
  view.setUint32(off + 4, Math.floor(addr / 0x1_0000_0000), true);
}
