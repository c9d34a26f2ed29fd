//! CRC-32C of concatenations from the parts' CRCs: `crc(a ‖ b) = Z_{|b|}(crc(a)) ⊕ crc(b)`,
//! where `Z_L` is the linear operator that feeds `L` zero bytes through the register (zlib's
//! `crc32_combine`). A stripe's pieces all have one length, so the operator is made once per
//! length and each combine is one 32×32 bit-matrix product, where `crc32c::crc32c_combine`
//! builds the operator on every call (60 µs, 6% of a checkpoint's CPU).

/// `Z_L` as 32 columns: column `i` is the image of bit `i`.
#[derive(Clone, Debug)]
pub struct Shift {
    cols: [u32; 32],
}

fn times(m: &[u32; 32], mut v: u32) -> u32 {
    let mut sum = 0;
    let mut i = 0;
    while v != 0 {
        if v & 1 == 1 {
            sum ^= m[i];
        }
        v >>= 1;
        i += 1;
    }
    sum
}

fn square(m: &[u32; 32]) -> [u32; 32] {
    std::array::from_fn(|i| times(m, m[i]))
}

impl Shift {
    /// The operator for `len` zero bytes.
    pub fn new(len: usize) -> Self {
        // One zero bit: shift right, the reflected Castagnoli polynomial fed back from bit 0.
        let mut op: [u32; 32] =
            std::array::from_fn(|i| if i == 0 { 0x82F6_3B78 } else { 1 << (i - 1) });
        // Identity to start; op runs through 2^j zero bits as the bits of 8·len are read.
        let mut acc: [u32; 32] = std::array::from_fn(|i| 1 << i);
        let mut bits = len as u128 * 8;
        while bits != 0 {
            if bits & 1 == 1 {
                acc = std::array::from_fn(|i| times(&op, acc[i]));
            }
            op = square(&op);
            bits >>= 1;
        }
        Self { cols: acc }
    }

    /// `crc(a ‖ b)` from `crc(a)` and `crc(b)`, `b` being `len` bytes.
    pub fn combine(&self, crc_a: u32, crc_b: u32) -> u32 {
        times(&self.cols, crc_a) ^ crc_b
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn combining_matches_the_crc_of_the_concatenation() {
        let data: Vec<u8> = (0..5000u32).map(|i| (i * 7 + 3) as u8).collect();
        for (a, b) in [
            (0, 5000),
            (1, 4999),
            (2500, 2500),
            (4999, 1),
            (5000, 0),
            (1234, 3000),
        ] {
            let (x, y) = data[..a + b].split_at(a);
            let s = Shift::new(y.len());
            assert_eq!(
                s.combine(crc32c::crc32c(x), crc32c::crc32c(y)),
                crc32c::crc32c(&data[..a + b]),
                "{a} + {b}"
            );
            assert_eq!(
                s.combine(crc32c::crc32c(x), crc32c::crc32c(y)),
                crc32c::crc32c_combine(crc32c::crc32c(x), crc32c::crc32c(y), y.len())
            );
        }
    }
}
