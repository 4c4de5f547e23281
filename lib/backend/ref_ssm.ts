/**
 * The reference backend's SSM_CONV and SSM_SCAN (Mamba). Unlike the other
 * reference ops these round to float at every step, in ggml's order as its
 * plain C build runs it (llama.cpp's x64 variant: every product and sum
 * rounded, nothing fused, libm expf/logf), so the C kernels' scalar level
 * can be compared bit for bit; float64 then float rounding of one + - * is
 * exact (53 >= 2*24 + 2), and exp/log rounded from float64 agree with
 * glibc's expf/logf except in rare near-halfway cases.
 *
 * @module
 */
import { SsmScanParam } from "../graph/ops.ts";
import type { ExecNode, ResolvedTensor } from "./types.ts";

const fr = Math.fround;

function dataView(t: ResolvedTensor): DataView {
  const b = t.data.buffer.bytes;
  return new DataView(b.buffer, b.byteOffset, b.byteLength);
}

/** ggml_compute_softplus_f32: log(1 + exp(v)) in float, v itself above 20. */
function softplus(v: number): number {
  return v > 20 ? v : fr(Math.log(fr(1 + fr(Math.exp(v)))));
}

/** ggml_ssm_conv: dst [dInner, nT, nS] from sx [dConv-1+nT, dInner, nS] and c [dConv, dInner]. */
export function ssmConv(n: ExecNode): void {
  const [sx, c] = n.src, d = n.dst;
  const vs = dataView(sx), vc = dataView(c), vd = dataView(d);
  const nc = c.ne[0], nr = sx.ne[1], nt = d.ne[1], ns = d.ne[2];
  for (let i3 = 0; i3 < ns; i3++) {
    for (let i2 = 0; i2 < nt; i2++) {
      for (let i1 = 0; i1 < nr; i1++) {
        const so = sx.data.offset + i1 * sx.nb[1] + i2 * sx.nb[0] + i3 * sx.nb[2];
        const co = c.data.offset + i1 * c.nb[1];
        let sum = 0;
        for (let i0 = 0; i0 < nc; i0++) {
          sum = fr(sum + fr(vs.getFloat32(so + 4 * i0, true) * vc.getFloat32(co + 4 * i0, true)));
        }
        vd.setFloat32(d.data.offset + i1 * d.nb[0] + i2 * d.nb[1] + i3 * d.nb[2], sum, true);
      }
    }
  }
}

/** ggml_ssm_scan: y then the final (and, with K > 1, rollback) states, into the 1-D dst. */
export function ssmScan(n: ExecNode): void {
  const [t0, t1, t2, t3, t4, t5, t6] = n.src, d = n.dst;
  const [v0, v1, v2, v3, v4, v5, v6, vd] = [t0, t1, t2, t3, t4, t5, t6, d].map(dataView);
  const nc = t0.ne[0], nr = t0.ne[1], nh = t1.ne[1], ng = t4.ne[1], nt = t1.ne[2], ns = t1.ne[3];
  const K = n.params[SsmScanParam.K];
  const sOff = t1.ne[0] * t1.ne[1] * t1.ne[2] * t1.ne[3] * 4;
  const mamba2 = t3.ne[0] === 1;
  const A = (i: number) => v3.getFloat32(t3.data.offset + 4 * i, true);
  for (let i3 = 0; i3 < ns; i3++) {
    const id = v6.getInt32(t6.data.offset + 4 * i3, true);
    if (!(id >= 0 && id < t0.ne[3])) {
      throw new RangeError(`ssm_scan: state id ${id} outside 0..${t0.ne[3] - 1}`);
    }
    // the state read: sequence `id` of src0 for the first token, then dst's
    let rv = v0, r0 = t0.data.offset + id * t0.nb[3];
    const w0 = d.data.offset + sOff + i3 * t0.nb[3];
    for (let i2 = 0; i2 < nt; i2++) {
      const xo = t1.data.offset + i2 * t1.nb[2] + i3 * t1.nb[3];
      const dto = t2.data.offset + i2 * t2.nb[1] + i3 * t2.nb[2];
      const bo = t4.data.offset + i2 * t4.nb[2] + i3 * t4.nb[3];
      const co = t5.data.offset + i2 * t5.nb[2] + i3 * t5.nb[3];
      const yo = d.data.offset + (i2 * nh * nr + i3 * nt * nh * nr) * 4;
      for (let h = 0; h < nh; h++) {
        const dtSp = softplus(v2.getFloat32(dto + 4 * h, true));
        const g = Math.floor(h / (nh / ng));
        const dA = mamba2 ? fr(Math.exp(fr(dtSp * A(h)))) : 0;
        for (let i1 = 0; i1 < nr; i1++) {
          const ii = i1 + h * nr;
          const xDt = fr(v1.getFloat32(xo + 4 * ii, true) * dtSp);
          let sum = 0;
          for (let i0 = 0; i0 < nc; i0++) {
            const e = mamba2 ? dA : fr(Math.exp(fr(dtSp * A(i0 + h * nc))));
            const ig = 4 * (i0 + g * nc);
            const prev = rv.getFloat32(r0 + 4 * (i0 + ii * nc), true);
            const state = fr(fr(prev * e) + fr(v4.getFloat32(bo + ig, true) * xDt));
            sum = fr(sum + fr(state * v5.getFloat32(co + ig, true)));
            vd.setFloat32(w0 + 4 * (i0 + ii * nc), state, true);
          }
          vd.setFloat32(yo + 4 * ii, sum, true);
        }
      }
      const slot = nt - 1 - i2;
      if (K > 1 && slot > 0 && slot < K) {
        const snap = d.data.offset + sOff + (slot * ns + i3) * t0.nb[3];
        const bytes = d.data.buffer.bytes;
        bytes.copyWithin(snap, w0, w0 + t0.nb[3]);
      }
      rv = vd, r0 = w0;
    }
  }
}
