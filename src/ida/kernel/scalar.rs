//! The portable path: one 256-byte product row per coefficient.

use super::super::gf256;
use super::DotProduct;

/// `MUL[c][x] = c · x`: 64 KiB, built at compile time.
static MUL: [[u8; 256]; 256] = build();

const fn build() -> [[u8; 256]; 256] {
    let mut t = [[0u8; 256]; 256];
    let mut c = 0;
    while c < 256 {
        let mut x = 0;
        while x < 256 {
            t[c][x] = gf256::mul_slow(c as u8, x as u8);
            x += 1;
        }
        c += 1;
    }
    t
}

/// The dot product over whole regions, one output at a time.
pub(super) fn dot(dp: &DotProduct, inputs: &[&[u8]], outputs: &mut [&mut [u8]], accumulate: bool) {
    for (o, out) in outputs.iter_mut().enumerate() {
        if !accumulate {
            out.fill(0);
        }
        for (j, input) in inputs.iter().enumerate() {
            let c = dp.coef(o, j);
            match c {
                0 => {}
                1 => out.iter_mut().zip(input.iter()).for_each(|(d, &s)| *d ^= s),
                _ => {
                    let row = &MUL[c as usize];
                    out.iter_mut()
                        .zip(input.iter())
                        .for_each(|(d, &s)| *d ^= row[s as usize]);
                }
            }
        }
    }
}
