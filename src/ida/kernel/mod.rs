//! Region kernels: multiply whole buffers by GF(2^8) constants, the hot path of dispersal.
//!
//! One operation covers every use: the dot product `out[o] (^)= Σ_j c[o][j] · in[j]` over `k`
//! input regions and `p` output regions ([`DotProduct`]). Each pass over the data loads every
//! input byte once and updates a group of outputs held in registers, instead of reloading the
//! inputs for every output: that is what makes erasure coding memory-bound instead of
//! load-bound. `mul_region` and `mul_add_region` are its `k = p = 1` cases.
//!
//! Paths, chosen at run time ([`Kernel::detect`]) and forced with `WEFT_GF_KERNEL`:
//! - `scalar`: 256-entry product tables, portable;
//! - `ssse3`, `avx2`: the split-nibble method, `c·x = T_lo[x & 15] ^ T_hi[x >> 4]`, sixteen or
//!   thirty-two table lookups per PSHUFB;
//! - `gfni`, `avx512`: `GF2P8AFFINEQB` applies multiplication by `c` as an 8×8 bit matrix (for our
//!   polynomial 0x11d; the instruction's own `GF2P8MULB` is tied to AES's 0x11b), one instruction
//!   per 32 or 64 bytes;
//! - `neon` (aarch64): the split-nibble method with `TBL`.

#[cfg(target_arch = "aarch64")]
mod neon;
mod scalar;
#[cfg(target_arch = "x86_64")]
mod x86;

use super::gf256;
use serde::Serialize;
use std::fmt;

/// An implementation of the region kernels.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Kernel {
    /// Portable table lookups.
    Scalar,
    /// x86-64 SSSE3 split-nibble PSHUFB, 16 bytes at a time.
    Ssse3,
    /// x86-64 AVX2 split-nibble VPSHUFB, 32 bytes at a time.
    Avx2,
    /// x86-64 GFNI affine transform on 256-bit registers (AVX2 + GFNI).
    Gfni,
    /// x86-64 GFNI affine transform on 512-bit registers (AVX-512BW + GFNI).
    Avx512,
    /// aarch64 NEON split-nibble TBL.
    Neon,
}

impl fmt::Display for Kernel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Every kernel, slowest first.
pub const ALL: [Kernel; 6] = [
    Kernel::Scalar,
    Kernel::Ssse3,
    Kernel::Avx2,
    Kernel::Gfni,
    Kernel::Avx512,
    Kernel::Neon,
];

impl Kernel {
    /// The name `WEFT_GF_KERNEL` and `--kernel` accept.
    pub fn name(self) -> &'static str {
        match self {
            Kernel::Scalar => "scalar",
            Kernel::Ssse3 => "ssse3",
            Kernel::Avx2 => "avx2",
            Kernel::Gfni => "gfni",
            Kernel::Avx512 => "avx512",
            Kernel::Neon => "neon",
        }
    }

    /// Parse a kernel name.
    pub fn parse(s: &str) -> Option<Kernel> {
        ALL.into_iter()
            .find(|k| k.name().eq_ignore_ascii_case(s.trim()))
    }

    /// Whether this CPU can run the kernel.
    pub fn available(self) -> bool {
        match self {
            Kernel::Scalar => true,
            #[cfg(target_arch = "x86_64")]
            Kernel::Ssse3 => is_x86_feature_detected!("ssse3"),
            #[cfg(target_arch = "x86_64")]
            Kernel::Avx2 => is_x86_feature_detected!("avx2"),
            #[cfg(target_arch = "x86_64")]
            Kernel::Gfni => is_x86_feature_detected!("avx2") && is_x86_feature_detected!("gfni"),
            #[cfg(target_arch = "x86_64")]
            Kernel::Avx512 => {
                is_x86_feature_detected!("avx512f")
                    && is_x86_feature_detected!("avx512bw")
                    && is_x86_feature_detected!("gfni")
            }
            #[cfg(target_arch = "aarch64")]
            Kernel::Neon => std::arch::is_aarch64_feature_detected!("neon"),
            #[allow(unreachable_patterns)]
            _ => false,
        }
    }

    /// The kernels this CPU can run, slowest first.
    pub fn available_all() -> Vec<Kernel> {
        ALL.into_iter().filter(|k| k.available()).collect()
    }

    /// The fastest kernel this CPU runs, unless `WEFT_GF_KERNEL` names another; a forced kernel
    /// the CPU cannot run is an error, never a silent fallback.
    pub fn detect() -> Result<Kernel, KernelError> {
        match std::env::var("WEFT_GF_KERNEL") {
            Ok(name) if !name.trim().is_empty() => {
                let k = Kernel::parse(&name).ok_or(KernelError::Unknown(name.clone()))?;
                if k.available() {
                    Ok(k)
                } else {
                    Err(KernelError::Unavailable(k))
                }
            }
            _ => Ok(Kernel::best()),
        }
    }

    /// The fastest kernel this CPU runs.
    pub fn best() -> Kernel {
        *Kernel::available_all().last().unwrap_or(&Kernel::Scalar)
    }
}

/// A kernel that cannot be used.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum KernelError {
    /// `WEFT_GF_KERNEL` names no kernel.
    #[error("unknown GF kernel {0:?} (scalar, ssse3, avx2, gfni, avx512, neon)")]
    Unknown(String),
    /// The CPU lacks the instructions.
    #[error("GF kernel {0} is not supported by this CPU")]
    Unavailable(Kernel),
}

/// Split-nibble tables of one coefficient, each half repeated for both 128-bit lanes.
#[derive(Clone, Copy, Debug)]
#[repr(C, align(64))]
pub(crate) struct NibbleTable {
    /// `c · x` for `x` in `0..16`, twice.
    pub lo: [u8; 32],
    /// `c · (x << 4)` for `x` in `0..16`, twice.
    pub hi: [u8; 32],
}

impl NibbleTable {
    fn new(c: u8) -> Self {
        let mut t = NibbleTable {
            lo: [0; 32],
            hi: [0; 32],
        };
        for x in 0..16u8 {
            let (l, h) = (gf256::mul(c, x), gf256::mul(c, x << 4));
            t.lo[x as usize] = l;
            t.lo[x as usize + 16] = l;
            t.hi[x as usize] = h;
            t.hi[x as usize + 16] = h;
        }
        t
    }
}

/// The 8×8 bit matrix of `x ↦ c·x`, in `GF2P8AFFINEQB`'s layout: byte `7 - i` of the qword is the
/// row giving output bit `i`, whose bit `j` is bit `i` of `c · 2^j`.
fn affine_matrix(c: u8) -> u64 {
    let mut m = 0u64;
    for i in 0..8 {
        let mut row = 0u8;
        for j in 0..8 {
            if gf256::mul(c, 1 << j) >> i & 1 == 1 {
                row |= 1 << j;
            }
        }
        m |= (row as u64) << (8 * (7 - i));
    }
    m
}

/// A `p × k` coefficient matrix prepared for the region kernels.
#[derive(Clone, Debug)]
pub struct DotProduct {
    k: usize,
    p: usize,
    /// Row-major coefficients, `c[o][j]` at `o * k + j`.
    coefs: Vec<u8>,
    nibbles: Vec<NibbleTable>,
    affine: Vec<u64>,
}

impl DotProduct {
    /// Prepare `p` rows of `k` coefficients (`coefs.len() == p * k`).
    pub fn new(p: usize, k: usize, coefs: &[u8]) -> Self {
        assert_eq!(coefs.len(), p * k, "coefficient count");
        Self {
            k,
            p,
            coefs: coefs.to_vec(),
            nibbles: coefs.iter().map(|&c| NibbleTable::new(c)).collect(),
            affine: coefs.iter().map(|&c| affine_matrix(c)).collect(),
        }
    }

    /// Inputs per output.
    pub fn inputs(&self) -> usize {
        self.k
    }

    /// Outputs.
    pub fn outputs(&self) -> usize {
        self.p
    }

    /// `out[o] = Σ_j c[o][j] · in[j]`, or `out[o] ^= ...` when `accumulate`. All regions must
    /// have the same length; `kernel` must be available (see [`Kernel::available`]).
    pub fn apply(
        &self,
        kernel: Kernel,
        inputs: &[&[u8]],
        outputs: &mut [&mut [u8]],
        accumulate: bool,
    ) {
        assert_eq!(inputs.len(), self.k, "input count");
        assert_eq!(outputs.len(), self.p, "output count");
        let len = inputs.first().map_or(0, |i| i.len());
        assert!(
            inputs.iter().all(|i| i.len() == len) && outputs.iter().all(|o| o.len() == len),
            "regions must have equal lengths"
        );
        assert!(
            kernel.available(),
            "kernel {kernel} is not available on this CPU"
        );
        if len == 0 || self.p == 0 {
            return;
        }
        if self.k == 0 {
            if !accumulate {
                outputs.iter_mut().for_each(|o| o.fill(0));
            }
            return;
        }
        let done = match kernel {
            Kernel::Scalar => 0,
            #[cfg(target_arch = "x86_64")]
            Kernel::Ssse3 | Kernel::Avx2 | Kernel::Gfni | Kernel::Avx512 => {
                x86::dot(kernel, self, inputs, outputs, accumulate)
            }
            #[cfg(target_arch = "aarch64")]
            Kernel::Neon => neon::dot(self, inputs, outputs, accumulate),
            #[allow(unreachable_patterns)]
            _ => 0,
        };
        // The SIMD paths handle whole vectors; the scalar path finishes the tail.
        if done < len {
            let ins: Vec<&[u8]> = inputs.iter().map(|i| &i[done..]).collect();
            let mut outs: Vec<&mut [u8]> = outputs.iter_mut().map(|o| &mut o[done..]).collect();
            scalar::dot(self, &ins, &mut outs, accumulate);
        }
    }

    pub(crate) fn coef(&self, o: usize, j: usize) -> u8 {
        self.coefs[o * self.k + j]
    }

    #[allow(dead_code)] // used by the SIMD paths, which a target may not have
    pub(crate) fn nibble(&self, o: usize, j: usize) -> &NibbleTable {
        &self.nibbles[o * self.k + j]
    }

    #[allow(dead_code)]
    pub(crate) fn affine(&self, o: usize, j: usize) -> u64 {
        self.affine[o * self.k + j]
    }
}

/// `dst = c · src`.
pub fn mul_region(kernel: Kernel, c: u8, src: &[u8], dst: &mut [u8]) {
    DotProduct::new(1, 1, &[c]).apply(kernel, &[src], &mut [dst], false);
}

/// `dst ^= c · src`.
pub fn mul_add_region(kernel: Kernel, c: u8, src: &[u8], dst: &mut [u8]) {
    DotProduct::new(1, 1, &[c]).apply(kernel, &[src], &mut [dst], true);
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn bytes(seed: u64, len: usize) -> Vec<u8> {
        let mut r = crate::rng::SimRng::new(seed);
        (0..len).map(|_| r.next_u64() as u8).collect()
    }

    #[test]
    fn affine_matrix_multiplies() {
        // Apply the bit matrix by hand, as the instruction does.
        for c in [0u8, 1, 2, 3, 0x1d, 0x80, 0xff, 0x53] {
            let m = affine_matrix(c);
            for x in 0..=255u8 {
                let mut y = 0u8;
                for i in 0..8 {
                    let row = (m >> (8 * (7 - i))) as u8;
                    y |= (((row & x).count_ones() & 1) as u8) << i;
                }
                assert_eq!(y, gf256::mul(c, x), "c = {c}, x = {x}");
            }
        }
    }

    /// `p` regions of `stride - offset` bytes, each starting `offset` bytes into its stride.
    fn split(buf: &mut [u8], p: usize, stride: usize, offset: usize) -> Vec<&mut [u8]> {
        let mut out = Vec::with_capacity(p);
        let mut rest = buf;
        for _ in 0..p {
            let (head, tail) = std::mem::take(&mut rest).split_at_mut(stride);
            out.push(&mut head[offset..]);
            rest = tail;
        }
        out
    }

    #[test]
    fn every_kernel_matches_scalar_on_every_length_and_offset() {
        let (p, k) = (5, 7);
        let coefs = bytes(1, p * k);
        let dp = DotProduct::new(p, k, &coefs);
        let lens = (0..=300).chain([511, 1024, 4095, 4096, 4097, 70_001]);
        for kernel in Kernel::available_all() {
            for len in lens.clone() {
                for offset in [0usize, 1, 7, 31] {
                    let data = bytes(len as u64, k * (len + offset));
                    let stride = len + offset;
                    let inputs: Vec<&[u8]> = (0..k)
                        .map(|i| &data[i * stride + offset..(i + 1) * stride])
                        .collect();
                    for accumulate in [false, true] {
                        let init = bytes(99, p * (len + offset));
                        let mut want = init.clone();
                        let mut got = init.clone();
                        {
                            let mut w: Vec<&mut [u8]> = split(&mut want, p, stride, offset);
                            scalar::dot(&dp, &inputs, &mut w, accumulate);
                        }
                        let mut g: Vec<&mut [u8]> = split(&mut got, p, stride, offset);
                        dp.apply(kernel, &inputs, &mut g, accumulate);
                        drop(g);
                        assert!(
                            want == got,
                            "{kernel}: len {len} offset {offset} acc {accumulate}"
                        );
                    }
                }
            }
        }
    }

    #[test]
    fn scalar_dot_is_the_definition() {
        let coefs = [3u8, 0, 0xff, 7];
        let dp = DotProduct::new(2, 2, &coefs);
        let (a, b) = ([1u8, 2, 3], [9u8, 0, 255]);
        let (mut o0, mut o1) = ([0u8; 3], [0u8; 3]);
        scalar::dot(&dp, &[&a, &b], &mut [&mut o0, &mut o1], false);
        for i in 0..3 {
            assert_eq!(o0[i], gf256::mul(3, a[i]));
            assert_eq!(o1[i], gf256::mul(0xff, a[i]) ^ gf256::mul(7, b[i]));
        }
    }

    #[test]
    fn forcing_an_unknown_kernel_is_an_error() {
        assert_eq!(Kernel::parse("AVX2"), Some(Kernel::Avx2));
        assert_eq!(Kernel::parse("sse9"), None);
    }

    proptest! {
        #[test]
        fn mul_and_mul_add_region_agree_on_all_kernels(c in any::<u8>(), data in proptest::collection::vec(any::<u8>(), 0..2000)) {
            let mut want = vec![0u8; data.len()];
            for (w, &d) in want.iter_mut().zip(&data) {
                *w = gf256::mul(c, d);
            }
            for kernel in Kernel::available_all() {
                let mut got = vec![0xa5u8; data.len()];
                mul_region(kernel, c, &data, &mut got);
                prop_assert_eq!(&got, &want);
                mul_add_region(kernel, c, &data, &mut got);
                prop_assert!(got.iter().all(|&x| x == 0), "x ^ x = 0");
            }
        }
    }
}
