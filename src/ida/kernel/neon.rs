//! aarch64 path: the split-nibble method with `TBL` (`vqtbl1q_u8`), 16 bytes at a time, four
//! outputs per pass over the inputs.

use super::DotProduct;
use std::arch::aarch64::*;

const W: usize = 16;
const GROUP: usize = 4;

#[target_feature(enable = "neon")]
unsafe fn group(
    dp: &DotProduct,
    inputs: &[&[u8]],
    outs: &mut [&mut [u8]],
    o0: usize,
    len: usize,
    accumulate: bool,
) {
    let g_count = outs.len();
    let mask = vdupq_n_u8(0x0f);
    let mut pos = 0;
    while pos < len {
        // SAFETY: `pos + 16 <= len` and every region holds at least `len` bytes; NibbleTable
        // holds 32 bytes per half, of which the first 16 are read.
        unsafe {
            let mut acc = [vdupq_n_u8(0); GROUP];
            if accumulate {
                for g in 0..g_count {
                    acc[g] = vld1q_u8(outs[g].as_ptr().add(pos));
                }
            }
            for (j, input) in inputs.iter().enumerate() {
                let x = vld1q_u8(input.as_ptr().add(pos));
                let lo = vandq_u8(x, mask);
                let hi = vshrq_n_u8::<4>(x);
                for (g, a) in acc.iter_mut().enumerate().take(g_count) {
                    let t = dp.nibble(o0 + g, j);
                    let tl = vld1q_u8(t.lo.as_ptr());
                    let th = vld1q_u8(t.hi.as_ptr());
                    *a = veorq_u8(*a, veorq_u8(vqtbl1q_u8(tl, lo), vqtbl1q_u8(th, hi)));
                }
            }
            for g in 0..g_count {
                vst1q_u8(outs[g].as_mut_ptr().add(pos), acc[g]);
            }
        }
        pos += W;
    }
}

/// Run over the whole 16-byte vectors; returns how many bytes were done.
pub(super) fn dot(
    dp: &DotProduct,
    inputs: &[&[u8]],
    outputs: &mut [&mut [u8]],
    accumulate: bool,
) -> usize {
    let len = inputs[0].len() / W * W;
    let mut o = 0;
    while o < outputs.len() {
        let g = GROUP.min(outputs.len() - o);
        // SAFETY: `DotProduct::apply` checked that NEON is available.
        unsafe { group(dp, inputs, &mut outputs[o..o + g], o, len, accumulate) };
        o += g;
    }
    len
}
