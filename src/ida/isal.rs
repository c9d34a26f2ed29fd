//! Intel ISA-L as a peer in benchmarks and a reference in tests (feature `isal`; needs Debian's
//! `libisal-dev`). ISA-L's `gf_gen_cauchy1_matrix` systematic code is exactly weft's systematic
//! matrix (`1/(i ^ j)` below the identity), so the two must produce identical parity.

use super::matrix::Matrix;
use std::os::raw::{c_int, c_uchar};

#[link(name = "isal")]
unsafe extern "C" {
    fn ec_init_tables(k: c_int, rows: c_int, a: *const c_uchar, gftbls: *mut c_uchar);
    fn ec_encode_data(
        len: c_int,
        k: c_int,
        rows: c_int,
        gftbls: *const c_uchar,
        data: *const *const c_uchar,
        coding: *const *mut c_uchar,
    );
    fn ec_encode_data_avx2(
        len: c_int,
        k: c_int,
        rows: c_int,
        gftbls: *const c_uchar,
        data: *const *const c_uchar,
        coding: *const *mut c_uchar,
    );
}

/// Which ISA-L entry point.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Variant {
    /// `ec_encode_data`: ISA-L's own dispatch (AVX-512 where available).
    Auto,
    /// `ec_encode_data_avx2`.
    Avx2,
}

/// A `p × k` coefficient matrix expanded into ISA-L's tables.
pub struct IsalDot {
    k: usize,
    p: usize,
    tables: Vec<u8>,
}

impl IsalDot {
    /// Tables for `rows` (each `k` coefficients).
    pub fn new(rows: &Matrix) -> Self {
        let (p, k) = (rows.rows(), rows.cols());
        let coefs: Vec<u8> = (0..p).flat_map(|r| rows.row(r).to_vec()).collect();
        let mut tables = vec![0u8; 32 * k * p];
        if p > 0 && k > 0 {
            // SAFETY: `coefs` holds p*k bytes and `tables` the 32*k*p ISA-L writes.
            unsafe { ec_init_tables(k as c_int, p as c_int, coefs.as_ptr(), tables.as_mut_ptr()) };
        }
        Self { k, p, tables }
    }

    /// `out[o] = Σ_j c[o][j] · in[j]` with ISA-L.
    pub fn apply(&self, variant: Variant, inputs: &[&[u8]], outputs: &mut [&mut [u8]]) {
        assert_eq!((inputs.len(), outputs.len()), (self.k, self.p));
        let len = inputs.first().map_or(0, |i| i.len());
        assert!(inputs.iter().all(|i| i.len() == len) && outputs.iter().all(|o| o.len() == len));
        assert!(len <= c_int::MAX as usize);
        if len == 0 || self.p == 0 {
            return;
        }
        let ins: Vec<*const u8> = inputs.iter().map(|i| i.as_ptr()).collect();
        let outs: Vec<*mut u8> = outputs.iter_mut().map(|o| o.as_mut_ptr()).collect();
        // SAFETY: k input and p output regions of `len` bytes each, and tables for k*p
        // coefficients, as ISA-L requires; the regions do not overlap (distinct borrows).
        unsafe {
            let f = match variant {
                Variant::Auto => ec_encode_data,
                Variant::Avx2 => ec_encode_data_avx2,
            };
            f(
                len as c_int,
                self.k as c_int,
                self.p as c_int,
                self.tables.as_ptr(),
                ins.as_ptr(),
                outs.as_ptr(),
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ida::{Dispersal, Mode};

    #[test]
    fn isal_and_weft_compute_the_same_pieces() {
        for (m, n) in [(4, 6), (10, 14), (8, 16), (16, 32)] {
            for mode in [Mode::Systematic, Mode::Rabin] {
                let d = Dispersal::new(n, m, mode).unwrap();
                let data: Vec<u8> = (0..100_003u32)
                    .map(|i| (i.wrapping_mul(2654435761) >> 13) as u8)
                    .collect();
                let ours = d.encode(&data);
                let first = if mode == Mode::Systematic { m } else { 0 };
                let rows = d.matrix().select_rows(&(first..n).collect::<Vec<_>>());
                let chunks: Vec<&[u8]> = ours[..m].iter().map(|v| v.as_slice()).collect();
                let plain: Vec<Vec<u8>>;
                let inputs: Vec<&[u8]> = if mode == Mode::Systematic {
                    chunks
                } else {
                    // Rabin pieces are not the data; cut the padded data into chunks.
                    let l = d.piece_len(data.len());
                    let mut padded = data.clone();
                    padded.resize(l * m, 0);
                    plain = padded.chunks(l).map(|c| c.to_vec()).collect();
                    plain.iter().map(|v| v.as_slice()).collect()
                };
                let mut theirs: Vec<Vec<u8>> =
                    (first..n).map(|_| vec![0u8; inputs[0].len()]).collect();
                let mut outs: Vec<&mut [u8]> =
                    theirs.iter_mut().map(|v| v.as_mut_slice()).collect();
                IsalDot::new(&rows).apply(Variant::Auto, &inputs, &mut outs);
                assert_eq!(&ours[first..], &theirs[..], "({m}, {n}) {mode}");
            }
        }
    }
}
