//! `weft ida bench`: encode and decode throughput of the coding core, beside `memcpy` of the
//! same bytes in the same run (the ratio survives this machine's noise; absolute numbers do not).
//!
//! Encode is what ISA-L's `ec_encode_data` measures: the coded rows only (parity for
//! systematic, all `n` pieces for Rabin). Decode loses as many data pieces as the code allows
//! (`min(n - m, m)` for systematic, any `m` survivors for Rabin) and rebuilds the lost chunks.
//! Throughput is file bytes per second.

use crate::ida::{Dispersal, IdaError, Kernel, Mode};
use crate::rng::SimRng;
use serde::Serialize;
use std::hint::black_box;
use std::time::{Duration, Instant};

/// One measurement (a JSON line of `weft ida bench --json`).
#[derive(Clone, Debug, Serialize)]
pub struct BenchRow {
    /// `encode`, `decode` or `memcpy`.
    pub op: &'static str,
    /// Coding mode (`-` for memcpy).
    pub mode: String,
    /// Pieces needed.
    pub m: usize,
    /// Pieces made.
    pub n: usize,
    /// File bytes.
    pub bytes: usize,
    /// File bytes per second, in 10^9.
    pub gb_per_s: f64,
    /// Region kernel (`isal`, `isal-avx2` for the ISA-L peer).
    pub kernel: String,
    /// Data pieces lost (decode).
    pub lost: usize,
    /// Repetitions timed (best is reported).
    pub reps: u32,
}

/// Time `f` until `budget` is spent (at least 3 runs); the best run, in seconds.
fn best_of(budget: Duration, mut f: impl FnMut()) -> (f64, u32) {
    f(); // warm caches and page in buffers
    let start = Instant::now();
    let mut best = f64::MAX;
    let mut reps = 0;
    while reps < 3 || start.elapsed() < budget {
        let t = Instant::now();
        f();
        best = best.min(t.elapsed().as_secs_f64());
        reps += 1;
    }
    (best, reps)
}

/// The data, pieces and survivors of one configuration, shared by weft and its peers.
struct Setup {
    d: Dispersal,
    bytes: usize,
    /// The `m` data chunks (padded).
    chunks: Vec<Vec<u8>>,
    /// All `n` pieces.
    pieces: Vec<Vec<u8>>,
    /// Surviving piece indices for the decode measurement, and data pieces lost.
    survivors: Vec<usize>,
    lost: usize,
}

impl Setup {
    fn new(m: usize, n: usize, bytes: usize, mode: Mode, kernel: Kernel) -> Result<Self, IdaError> {
        let d = Dispersal::with_kernel(n, m, mode, kernel)?;
        let mut rng = SimRng::new(bytes as u64 ^ (m * 1000 + n) as u64);
        let data: Vec<u8> = (0..bytes).map(|_| rng.next_u64() as u8).collect();
        let l = d.piece_len(bytes);
        let mut padded = data.clone();
        padded.resize(l * m, 0);
        let chunks = padded
            .chunks(l.max(1))
            .map(|c| c.to_vec())
            .take(m)
            .collect();
        let pieces = d.encode(&data);
        // Systematic: lose as many data pieces as the parity covers; Rabin: any m survive.
        let (survivors, lost) = match mode {
            Mode::Systematic => {
                let lost = (n - m).min(m);
                ((lost..n).take(m).collect(), lost)
            }
            Mode::Rabin => ((n - m..n).collect(), m),
        };
        Ok(Self {
            d,
            bytes,
            chunks,
            pieces,
            survivors,
            lost,
        })
    }

    fn row(&self, op: &'static str, kernel: String, t: f64, lost: usize, reps: u32) -> BenchRow {
        BenchRow {
            op,
            mode: self.d.mode().to_string(),
            m: self.d.m(),
            n: self.d.n(),
            bytes: self.bytes,
            gb_per_s: self.bytes as f64 / t / 1e9,
            kernel,
            lost,
            reps,
        }
    }

    /// Rows the encoder computes: parity for systematic, all for Rabin.
    fn coded_rows(&self) -> std::ops::Range<usize> {
        match self.d.mode() {
            Mode::Systematic => self.d.m()..self.d.n(),
            Mode::Rabin => 0..self.d.n(),
        }
    }
}

/// Measure one `(m, n)` at `bytes`, both directions, with weft's kernel.
pub fn measure(
    m: usize,
    n: usize,
    bytes: usize,
    mode: Mode,
    kernel: Kernel,
    budget: Duration,
) -> Result<Vec<BenchRow>, IdaError> {
    let s = Setup::new(m, n, bytes, mode, kernel)?;
    let l = s.d.piece_len(bytes);
    let chunks: Vec<&[u8]> = s.chunks.iter().map(|v| v.as_slice()).collect();
    let mut coded: Vec<Vec<u8>> = s.coded_rows().map(|_| vec![0u8; l]).collect();
    let (t_enc, reps_enc) = best_of(budget, || {
        let mut outs: Vec<&mut [u8]> = coded.iter_mut().map(|v| v.as_mut_slice()).collect();
        s.d.encode_rows(black_box(&chunks), &mut outs);
    });
    let given: Vec<(u8, &[u8])> = s
        .survivors
        .iter()
        .map(|&i| (i as u8, s.pieces[i].as_slice()))
        .collect();
    let mut rebuilt: Vec<Vec<u8>> = (0..m).map(|_| vec![0u8; l]).collect();
    s.d.decode_rows(&given, &mut rebuilt)?; // caches the inverse, as a long-running node would
    let (t_dec, reps_dec) = best_of(budget, || {
        black_box(s.d.decode_rows(black_box(&given), &mut rebuilt).ok());
    });
    Ok(vec![
        s.row("encode", kernel.to_string(), t_enc, 0, reps_enc),
        s.row("decode", kernel.to_string(), t_dec, s.lost, reps_dec),
    ])
}

/// The same measurements with Intel ISA-L doing the arithmetic (same matrices, same data).
#[cfg(feature = "isal")]
pub fn measure_isal(
    m: usize,
    n: usize,
    bytes: usize,
    mode: Mode,
    variant: crate::ida::isal::Variant,
    budget: Duration,
) -> Result<Vec<BenchRow>, IdaError> {
    use crate::ida::isal::{IsalDot, Variant};
    let name = match variant {
        Variant::Auto => "isal",
        Variant::Avx2 => "isal-avx2",
    };
    let s = Setup::new(m, n, bytes, mode, Kernel::best())?;
    let l = s.d.piece_len(bytes);
    let chunks: Vec<&[u8]> = s.chunks.iter().map(|v| v.as_slice()).collect();
    let enc = IsalDot::new(
        &s.d.matrix()
            .select_rows(&s.coded_rows().collect::<Vec<_>>()),
    );
    let mut coded: Vec<Vec<u8>> = s.coded_rows().map(|_| vec![0u8; l]).collect();
    let (t_enc, reps_enc) = best_of(budget, || {
        let mut outs: Vec<&mut [u8]> = coded.iter_mut().map(|v| v.as_mut_slice()).collect();
        enc.apply(variant, black_box(&chunks), &mut outs);
    });
    // Decode: the rows of the inverse for the lost chunks, as ISA-L's own examples do.
    let inverse = s.d.matrix().select_rows(&s.survivors).invert()?;
    let lost_chunks: Vec<usize> = (0..m)
        .filter(|&j| mode == Mode::Rabin || !s.survivors.contains(&j))
        .collect();
    let dec = IsalDot::new(&inverse.select_rows(&lost_chunks));
    let inputs: Vec<&[u8]> = s
        .survivors
        .iter()
        .map(|&i| s.pieces[i].as_slice())
        .collect();
    let mut rebuilt: Vec<Vec<u8>> = lost_chunks.iter().map(|_| vec![0u8; l]).collect();
    let (t_dec, reps_dec) = best_of(budget, || {
        let mut outs: Vec<&mut [u8]> = rebuilt.iter_mut().map(|v| v.as_mut_slice()).collect();
        dec.apply(variant, black_box(&inputs), &mut outs);
    });
    Ok(vec![
        s.row("encode", name.into(), t_enc, 0, reps_enc),
        s.row("decode", name.into(), t_dec, s.lost, reps_dec),
    ])
}

/// `memcpy` of `bytes`: the ceiling any coding of the same bytes is compared with.
pub fn memcpy(bytes: usize, budget: Duration) -> BenchRow {
    let src = vec![7u8; bytes];
    let mut dst = vec![0u8; bytes];
    let (t, reps) = best_of(budget, || dst.copy_from_slice(black_box(&src)));
    black_box(&dst);
    BenchRow {
        op: "memcpy",
        mode: "-".into(),
        m: 0,
        n: 0,
        bytes,
        gb_per_s: bytes as f64 / t / 1e9,
        kernel: "-".into(),
        lost: 0,
        reps,
    }
}

/// The configurations of the issue and of ISA-L's own benchmarks: (m, n).
pub const CONFIGS: [(usize, usize); 4] = [(8, 16), (10, 14), (4, 6), (16, 32)];
/// File sizes: one cache-resident, one not.
pub const SIZES: [usize; 2] = [1 << 20, 16 << 20];
