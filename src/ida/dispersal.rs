//! The dispersal matrix and the coding itself: `n` pieces from `m` chunks, and back.
//!
//! The file is cut into `m` chunks of `L = ceil(|F| / m)` bytes (the last one padded with
//! zeros); piece `i` is `Σ_j A[i][j] · chunk_j` for an `n × m` matrix `A` any `m` rows of which
//! are invertible, and any `m` pieces give the chunks back through the inverse of those rows.
//!
//! The matrices:
//! - `Rabin` (non-systematic, as in the paper: every piece a combination of all chunks): the
//!   Vandermonde matrix `A[i][j] = (i+1)^j` at the distinct non-zero points `1..=n`. Any `m` of
//!   its rows form a square Vandermonde matrix at distinct points, which is invertible.
//! - `Systematic`: `[I_m ; C]` with `C` the `(n-m) × m` Cauchy matrix `C[i][j] = 1/(x_i + y_j)`,
//!   `x_i = m + i`, `y_j = j` (disjoint, so no denominator is 0). Pieces `0..m` are the chunks
//!   themselves. Any `m` rows are invertible because every square submatrix of a Cauchy matrix
//!   is. Encoding costs `(n-m)/n` of Rabin's, and rebuilding is free when the data pieces survive.

use super::gf256;
use super::kernel::{DotProduct, Kernel};
use super::matrix::Matrix;
use super::IdaError;
use serde::Serialize;
use std::collections::HashMap;
use std::fmt;
use std::sync::{Arc, Mutex};

/// How pieces relate to the data.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Mode {
    /// Every piece is a linear combination of all chunks (Rabin 1989).
    Rabin,
    /// Pieces `0..m` hold the data; the rest are parity.
    Systematic,
}

impl fmt::Display for Mode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Mode::Rabin => "rabin",
            Mode::Systematic => "systematic",
        })
    }
}

/// Rows of the inverse that rebuild the chunks a set of pieces lacks.
#[derive(Debug)]
struct DecodePlan {
    /// Chunks to compute, in increasing order.
    missing: Vec<usize>,
    /// `missing.len() × m` coefficients applied to the pieces, in the order given.
    dp: DotProduct,
}

/// An `(n, m)` dispersal: `n` pieces, any `m` of which rebuild the data.
#[derive(Debug)]
pub struct Dispersal {
    n: usize,
    m: usize,
    mode: Mode,
    kernel: Kernel,
    matrix: Matrix,
    /// Rows computed when encoding: all `n` (Rabin) or the `n - m` parity rows (systematic).
    encoder: DotProduct,
    /// Inverted submatrices per set of piece indices.
    plans: Mutex<HashMap<Vec<u8>, Arc<DecodePlan>>>,
}

impl Dispersal {
    /// A dispersal into `n` pieces any `m` of which suffice, `1 <= m <= n <= 255`, using the
    /// fastest kernel (or `WEFT_GF_KERNEL`'s).
    pub fn new(n: usize, m: usize, mode: Mode) -> Result<Self, IdaError> {
        Self::with_kernel(n, m, mode, Kernel::detect()?)
    }

    /// As [`Self::new`], with a given kernel.
    pub fn with_kernel(n: usize, m: usize, mode: Mode, kernel: Kernel) -> Result<Self, IdaError> {
        if !(1 <= m && m <= n && n <= 255) {
            return Err(IdaError::Params { n, m });
        }
        if !kernel.available() {
            return Err(IdaError::Kernel(super::kernel::KernelError::Unavailable(
                kernel,
            )));
        }
        let mut matrix = Matrix::zero(n, m);
        match mode {
            Mode::Rabin => {
                for i in 0..n {
                    for j in 0..m {
                        matrix.set(i, j, gf256::pow(i as u8 + 1, j as u32));
                    }
                }
            }
            Mode::Systematic => {
                for i in 0..m {
                    matrix.set(i, i, 1);
                }
                for i in 0..n - m {
                    for j in 0..m {
                        let x = (m + i) as u8;
                        let y = j as u8;
                        matrix.set(m + i, j, gf256::inv(x ^ y).ok_or(IdaError::Singular)?);
                    }
                }
            }
        }
        let first = match mode {
            Mode::Rabin => 0,
            Mode::Systematic => m,
        };
        let rows: Vec<usize> = (first..n).collect();
        let enc = matrix.select_rows(&rows);
        let coefs: Vec<u8> = (0..enc.rows()).flat_map(|r| enc.row(r).to_vec()).collect();
        Ok(Self {
            n,
            m,
            mode,
            kernel,
            encoder: DotProduct::new(rows.len(), m, &coefs),
            matrix,
            plans: Mutex::new(HashMap::new()),
        })
    }

    /// Pieces made.
    pub fn n(&self) -> usize {
        self.n
    }

    /// Pieces needed.
    pub fn m(&self) -> usize {
        self.m
    }

    /// The mode.
    pub fn mode(&self) -> Mode {
        self.mode
    }

    /// The region kernel in use.
    pub fn kernel(&self) -> Kernel {
        self.kernel
    }

    /// The `n × m` dispersal matrix.
    pub fn matrix(&self) -> &Matrix {
        &self.matrix
    }

    /// Bytes per piece for a file of `len` bytes: `ceil(len / m)`.
    pub fn piece_len(&self, len: usize) -> usize {
        len.div_ceil(self.m)
    }

    /// The `m` chunks of `data`, borrowing whole chunks and padding the rest into `spill`.
    fn chunks<'a>(&self, data: &'a [u8], spill: &'a mut Vec<u8>) -> Vec<&'a [u8]> {
        let l = self.piece_len(data.len());
        let full = data.len().checked_div(l).unwrap_or(0).min(self.m);
        spill.clear();
        spill.resize((self.m - full) * l, 0);
        let tail = &data[full * l..];
        spill[..tail.len()].copy_from_slice(tail);
        let spill: &'a [u8] = spill;
        (0..self.m)
            .map(|j| {
                if j < full {
                    &data[j * l..(j + 1) * l]
                } else {
                    &spill[(j - full) * l..(j - full + 1) * l]
                }
            })
            .collect()
    }

    /// The coded rows only: for `Systematic`, the `n - m` parity pieces of `m` data chunks (what
    /// ISA-L's `ec_encode_data` computes); for `Rabin`, all `n` pieces. Every region has the
    /// same length. This is the hot path benchmarks measure.
    pub fn encode_rows(&self, chunks: &[&[u8]], out: &mut [&mut [u8]]) {
        self.encoder.apply(self.kernel, chunks, out, false);
    }

    /// Disperse `data` into `n` piece bodies of [`Self::piece_len`] bytes.
    pub fn encode(&self, data: &[u8]) -> Vec<Vec<u8>> {
        let l = self.piece_len(data.len());
        let mut spill = Vec::new();
        let chunks = self.chunks(data, &mut spill);
        let mut pieces: Vec<Vec<u8>> = (0..self.n).map(|_| vec![0u8; l]).collect();
        let coded = match self.mode {
            Mode::Rabin => &mut pieces[..],
            Mode::Systematic => {
                let (data_pieces, parity) = pieces.split_at_mut(self.m);
                for (p, c) in data_pieces.iter_mut().zip(&chunks) {
                    p.copy_from_slice(c);
                }
                parity
            }
        };
        let mut outs: Vec<&mut [u8]> = coded.iter_mut().map(|p| p.as_mut_slice()).collect();
        self.encode_rows(&chunks, &mut outs);
        pieces
    }

    /// The chunks a rebuild from the pieces `indices` computes (what [`Self::decode_rows`]
    /// fills, in order): every chunk in Rabin mode, the data chunks whose pieces are not among
    /// `indices` in systematic mode (the others are those pieces' bodies).
    pub fn rebuilt_chunks(&self, indices: &[u8]) -> Vec<usize> {
        (0..self.m)
            .filter(|&j| self.mode == Mode::Rabin || !indices.contains(&(j as u8)))
            .collect()
    }

    /// The plan for rebuilding from the pieces `indices` (sorted, distinct, `m` of them).
    fn plan(&self, indices: &[u8]) -> Result<Arc<DecodePlan>, IdaError> {
        let mut cache = self.plans.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(p) = cache.get(indices) {
            return Ok(p.clone());
        }
        let rows: Vec<usize> = indices.iter().map(|&i| i as usize).collect();
        let inverse = self.matrix.select_rows(&rows).invert()?;
        // Systematic data pieces that survive are copied, not computed.
        let missing = self.rebuilt_chunks(indices);
        let coefs: Vec<u8> = missing
            .iter()
            .flat_map(|&j| inverse.row(j).to_vec())
            .collect();
        let plan = Arc::new(DecodePlan {
            dp: DotProduct::new(missing.len(), self.m, &coefs),
            missing,
        });
        if cache.len() > 4096 {
            cache.clear(); // erasure patterns are few in practice; bound the memory anyway
        }
        cache.insert(indices.to_vec(), plan.clone());
        Ok(plan)
    }

    /// Rebuild the `len`-byte file from `m` or more pieces given as `(index, body)`; the first
    /// `m` distinct indices are used. Bodies must all be [`Self::piece_len`]`(len)` long.
    pub fn decode(&self, pieces: &[(u8, &[u8])], len: usize) -> Result<Vec<u8>, IdaError> {
        let mut out = vec![0u8; len];
        self.decode_into(pieces, &mut out)?;
        Ok(out)
    }

    /// [`Self::decode`] into a caller's buffer of the file's length.
    pub fn decode_into(&self, pieces: &[(u8, &[u8])], out: &mut [u8]) -> Result<(), IdaError> {
        let l = self.piece_len(out.len());
        let mut chosen: Vec<(u8, &[u8])> = Vec::with_capacity(self.m);
        for &(i, body) in pieces {
            if i as usize >= self.n {
                return Err(IdaError::IndexOutOfRange {
                    index: i,
                    n: self.n,
                });
            }
            if body.len() != l {
                return Err(IdaError::Truncated { index: i });
            }
            if chosen.iter().any(|&(c, _)| c == i) {
                return Err(IdaError::DuplicateIndex(i));
            }
            if chosen.len() < self.m {
                chosen.push((i, body));
            }
        }
        if chosen.len() < self.m {
            return Err(IdaError::TooFewPieces {
                have: chosen.len(),
                need: self.m,
            });
        }
        chosen.sort_by_key(|&(i, _)| i);
        let indices: Vec<u8> = chosen.iter().map(|&(i, _)| i).collect();
        let plan = self.plan(&indices)?;
        if l == 0 {
            return Ok(());
        }
        // Chunks that come straight from systematic data pieces.
        let mut rebuilt: Vec<Vec<u8>> = plan.missing.iter().map(|_| vec![0u8; l]).collect();
        {
            let inputs: Vec<&[u8]> = chosen.iter().map(|&(_, b)| b).collect();
            let mut outs: Vec<&mut [u8]> = rebuilt.iter_mut().map(|v| v.as_mut_slice()).collect();
            plan.dp.apply(self.kernel, &inputs, &mut outs, false);
        }
        let mut next_missing = 0;
        for j in 0..self.m {
            let start = j * l;
            if start >= out.len() {
                break;
            }
            let end = (start + l).min(out.len());
            let src: &[u8] = if plan.missing.get(next_missing) == Some(&j) {
                next_missing += 1;
                &rebuilt[next_missing - 1]
            } else {
                chosen
                    .iter()
                    .find(|&&(i, _)| i as usize == j)
                    .map(|&(_, b)| b)
                    .ok_or(IdaError::Singular)?
            };
            out[start..end].copy_from_slice(&src[..end - start]);
        }
        Ok(())
    }

    /// The hot path of a rebuild, for benchmarks: compute the chunks `pieces` (exactly `m`,
    /// sorted by index) lack into `out` (one region per missing chunk). Returns how many chunks
    /// were computed.
    pub fn decode_rows(
        &self,
        pieces: &[(u8, &[u8])],
        out: &mut [Vec<u8>],
    ) -> Result<usize, IdaError> {
        let indices: Vec<u8> = pieces.iter().map(|&(i, _)| i).collect();
        let plan = self.plan(&indices)?;
        let inputs: Vec<&[u8]> = pieces.iter().map(|&(_, b)| b).collect();
        let mut outs: Vec<&mut [u8]> = out
            .iter_mut()
            .take(plan.missing.len())
            .map(|v| v.as_mut_slice())
            .collect();
        plan.dp.apply(self.kernel, &inputs, &mut outs, false);
        Ok(plan.missing.len())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rng::SimRng;
    use proptest::prelude::*;

    fn data(seed: u64, len: usize) -> Vec<u8> {
        let mut r = SimRng::new(seed);
        (0..len).map(|_| r.next_u64() as u8).collect()
    }

    #[test]
    fn every_m_rows_are_invertible_small_cases() {
        // Exhaustive over all m-subsets for small (n, m).
        for mode in [Mode::Rabin, Mode::Systematic] {
            for n in 1..=8 {
                for m in 1..=n {
                    let d = Dispersal::with_kernel(n, m, mode, Kernel::Scalar).unwrap();
                    for mask in 0u32..(1 << n) {
                        if mask.count_ones() as usize != m {
                            continue;
                        }
                        let rows: Vec<usize> = (0..n).filter(|&i| mask >> i & 1 == 1).collect();
                        assert!(
                            d.matrix().select_rows(&rows).invert().is_ok(),
                            "{mode} {n} {m} {rows:?}"
                        );
                    }
                }
            }
        }
    }

    #[test]
    fn systematic_pieces_hold_the_data() {
        let d = Dispersal::new(6, 4, Mode::Systematic).unwrap();
        let f = data(3, 1000);
        let p = d.encode(&f);
        assert_eq!(p[0], f[..250]);
        assert_eq!(p[3], f[750..]);
    }

    #[test]
    fn errors_never_data() {
        let d = Dispersal::new(5, 3, Mode::Rabin).unwrap();
        let f = data(4, 100);
        let p = d.encode(&f);
        let two: Vec<(u8, &[u8])> = vec![(0, &p[0]), (4, &p[4])];
        assert_eq!(
            d.decode(&two, 100),
            Err(IdaError::TooFewPieces { have: 2, need: 3 })
        );
        let dup: Vec<(u8, &[u8])> = vec![(0, &p[0]), (0, &p[0]), (4, &p[4])];
        assert_eq!(d.decode(&dup, 100), Err(IdaError::DuplicateIndex(0)));
        let short: Vec<(u8, &[u8])> = vec![(0, &p[0][..10]), (1, &p[1]), (4, &p[4])];
        assert_eq!(d.decode(&short, 100), Err(IdaError::Truncated { index: 0 }));
        let far: Vec<(u8, &[u8])> = vec![(9, &p[0]), (1, &p[1]), (4, &p[4])];
        assert_eq!(
            d.decode(&far, 100),
            Err(IdaError::IndexOutOfRange { index: 9, n: 5 })
        );
        assert!(matches!(
            Dispersal::new(3, 4, Mode::Rabin),
            Err(IdaError::Params { .. })
        ));
        assert!(matches!(
            Dispersal::new(256, 4, Mode::Rabin),
            Err(IdaError::Params { .. })
        ));
        assert!(matches!(
            Dispersal::new(4, 0, Mode::Rabin),
            Err(IdaError::Params { .. })
        ));
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(200))]
        #[test]
        fn any_m_pieces_rebuild_the_data(
            n in 1usize..=40, m_frac in 0.0f64..1.0, len in 0usize..3000,
            seed in any::<u64>(), systematic in any::<bool>(), kernel_pick in any::<u8>(),
        ) {
            let m = 1 + ((n - 1) as f64 * m_frac) as usize;
            let mode = if systematic { Mode::Systematic } else { Mode::Rabin };
            let kernels = Kernel::available_all();
            let kernel = kernels[kernel_pick as usize % kernels.len()];
            let d = Dispersal::with_kernel(n, m, mode, kernel).unwrap();
            let f = data(seed, len);
            let pieces = d.encode(&f);
            prop_assert_eq!(pieces.len(), n);
            // A random subset of m pieces, in random order.
            let mut r = SimRng::new(seed ^ 1);
            let mut idx: Vec<usize> = (0..n).collect();
            for i in (1..n).rev() {
                idx.swap(i, r.below(i as u64 + 1) as usize);
            }
            let chosen: Vec<(u8, &[u8])> = idx[..m].iter().map(|&i| (i as u8, pieces[i].as_slice())).collect();
            prop_assert_eq!(d.decode(&chosen, len).unwrap(), f);
        }
    }
}
