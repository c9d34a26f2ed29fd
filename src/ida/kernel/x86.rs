//! x86-64 paths: SSSE3 and AVX2 split-nibble shuffles, GFNI affine transforms on 256- and
//! 512-bit registers.
//!
//! One generic body ([`group`]) walks the regions; each instruction set supplies the vector
//! type and the multiply ([`Lane`]). The body is `#[inline(always)]` into a thin
//! `#[target_feature]` wrapper per set, so every intrinsic is compiled for the set it needs.

use super::DotProduct;
use super::Kernel;
use std::arch::x86_64::*;

/// One instruction set's vector operations.
trait Lane {
    /// A vector register.
    type V: Copy;
    /// An input vector prepared for multiplication (nibbles split, or as is).
    type Prep: Copy;
    /// Bytes per vector.
    const W: usize;
    /// Outputs updated per pass over the inputs (bounded by the register file).
    const GROUP: usize;
    unsafe fn zero() -> Self::V;
    unsafe fn load(p: *const u8) -> Self::V;
    unsafe fn store(p: *mut u8, v: Self::V);
    unsafe fn xor(a: Self::V, b: Self::V) -> Self::V;
    unsafe fn prep(x: Self::V) -> Self::Prep;
    unsafe fn mul(x: Self::Prep, dp: &DotProduct, o: usize, j: usize) -> Self::V;
    /// Two products by the same coefficient, sharing its table loads.
    unsafe fn mul2(
        x: Self::Prep,
        y: Self::Prep,
        dp: &DotProduct,
        o: usize,
        j: usize,
    ) -> (Self::V, Self::V);
}

struct Ssse3;
struct Avx2;
struct Gfni256;
struct Gfni512;

impl Lane for Ssse3 {
    type V = __m128i;
    type Prep = (__m128i, __m128i);
    const W: usize = 16;
    const GROUP: usize = 3;
    #[inline(always)]
    unsafe fn zero() -> __m128i {
        _mm_setzero_si128()
    }
    #[inline(always)]
    unsafe fn load(p: *const u8) -> __m128i {
        // SAFETY: the caller passes a pointer with 16 readable bytes.
        unsafe { _mm_loadu_si128(p.cast()) }
    }
    #[inline(always)]
    unsafe fn store(p: *mut u8, v: __m128i) {
        // SAFETY: the caller passes a pointer with 16 writable bytes.
        unsafe { _mm_storeu_si128(p.cast(), v) }
    }
    #[inline(always)]
    unsafe fn xor(a: __m128i, b: __m128i) -> __m128i {
        _mm_xor_si128(a, b)
    }
    #[inline(always)]
    unsafe fn prep(x: __m128i) -> (__m128i, __m128i) {
        let mask = _mm_set1_epi8(0x0f);
        (
            _mm_and_si128(x, mask),
            _mm_and_si128(_mm_srli_epi64(x, 4), mask),
        )
    }
    #[inline(always)]
    unsafe fn mul((lo, hi): (__m128i, __m128i), dp: &DotProduct, o: usize, j: usize) -> __m128i {
        let t = dp.nibble(o, j);
        // SAFETY: NibbleTable is 64-byte aligned and `lo`/`hi` sit at offsets 0 and 32.
        let (tl, th) = unsafe {
            (
                _mm_load_si128(t.lo.as_ptr().cast()),
                _mm_load_si128(t.hi.as_ptr().cast()),
            )
        };
        _mm_xor_si128(_mm_shuffle_epi8(tl, lo), _mm_shuffle_epi8(th, hi))
    }
    #[inline(always)]
    unsafe fn mul2(
        x: (__m128i, __m128i),
        y: (__m128i, __m128i),
        dp: &DotProduct,
        o: usize,
        j: usize,
    ) -> (__m128i, __m128i) {
        let t = dp.nibble(o, j);
        // SAFETY: as in `mul`.
        let (tl, th) = unsafe {
            (
                _mm_load_si128(t.lo.as_ptr().cast()),
                _mm_load_si128(t.hi.as_ptr().cast()),
            )
        };
        (
            _mm_xor_si128(_mm_shuffle_epi8(tl, x.0), _mm_shuffle_epi8(th, x.1)),
            _mm_xor_si128(_mm_shuffle_epi8(tl, y.0), _mm_shuffle_epi8(th, y.1)),
        )
    }
}

impl Lane for Avx2 {
    type V = __m256i;
    type Prep = (__m256i, __m256i);
    const W: usize = 32;
    // 16 registers: 2 × 4 accumulators, two split inputs, two tables, the mask.
    const GROUP: usize = 4;
    #[inline(always)]
    unsafe fn zero() -> __m256i {
        _mm256_setzero_si256()
    }
    #[inline(always)]
    unsafe fn load(p: *const u8) -> __m256i {
        // SAFETY: the caller passes a pointer with 32 readable bytes.
        unsafe { _mm256_loadu_si256(p.cast()) }
    }
    #[inline(always)]
    unsafe fn store(p: *mut u8, v: __m256i) {
        // SAFETY: the caller passes a pointer with 32 writable bytes.
        unsafe { _mm256_storeu_si256(p.cast(), v) }
    }
    #[inline(always)]
    unsafe fn xor(a: __m256i, b: __m256i) -> __m256i {
        _mm256_xor_si256(a, b)
    }
    #[inline(always)]
    unsafe fn prep(x: __m256i) -> (__m256i, __m256i) {
        let mask = _mm256_set1_epi8(0x0f);
        (
            _mm256_and_si256(x, mask),
            _mm256_and_si256(_mm256_srli_epi64(x, 4), mask),
        )
    }
    #[inline(always)]
    unsafe fn mul((lo, hi): (__m256i, __m256i), dp: &DotProduct, o: usize, j: usize) -> __m256i {
        let t = dp.nibble(o, j);
        // SAFETY: NibbleTable is 64-byte aligned and `lo`/`hi` (32 bytes each, the 16-entry
        // table repeated for both lanes) sit at offsets 0 and 32.
        let (tl, th) = unsafe {
            (
                _mm256_load_si256(t.lo.as_ptr().cast()),
                _mm256_load_si256(t.hi.as_ptr().cast()),
            )
        };
        _mm256_xor_si256(_mm256_shuffle_epi8(tl, lo), _mm256_shuffle_epi8(th, hi))
    }
    #[inline(always)]
    unsafe fn mul2(
        x: (__m256i, __m256i),
        y: (__m256i, __m256i),
        dp: &DotProduct,
        o: usize,
        j: usize,
    ) -> (__m256i, __m256i) {
        let t = dp.nibble(o, j);
        // SAFETY: as in `mul`.
        let (tl, th) = unsafe {
            (
                _mm256_load_si256(t.lo.as_ptr().cast()),
                _mm256_load_si256(t.hi.as_ptr().cast()),
            )
        };
        (
            _mm256_xor_si256(_mm256_shuffle_epi8(tl, x.0), _mm256_shuffle_epi8(th, x.1)),
            _mm256_xor_si256(_mm256_shuffle_epi8(tl, y.0), _mm256_shuffle_epi8(th, y.1)),
        )
    }
}

impl Lane for Gfni256 {
    type V = __m256i;
    type Prep = __m256i;
    const W: usize = 32;
    const GROUP: usize = 6;
    // Same registers as AVX2: only the multiply differs.
    #[inline(always)]
    unsafe fn zero() -> __m256i {
        // SAFETY: forwarded; GFNI-256 runs only where AVX2 does.
        unsafe { Avx2::zero() }
    }
    #[inline(always)]
    unsafe fn load(p: *const u8) -> __m256i {
        // SAFETY: forwarded (32 readable bytes).
        unsafe { Avx2::load(p) }
    }
    #[inline(always)]
    unsafe fn store(p: *mut u8, v: __m256i) {
        // SAFETY: forwarded (32 writable bytes).
        unsafe { Avx2::store(p, v) }
    }
    #[inline(always)]
    unsafe fn xor(a: __m256i, b: __m256i) -> __m256i {
        // SAFETY: forwarded.
        unsafe { Avx2::xor(a, b) }
    }
    #[inline(always)]
    unsafe fn prep(x: __m256i) -> __m256i {
        x
    }
    #[inline(always)]
    unsafe fn mul(x: __m256i, dp: &DotProduct, o: usize, j: usize) -> __m256i {
        _mm256_gf2p8affine_epi64_epi8::<0>(x, _mm256_set1_epi64x(dp.affine(o, j) as i64))
    }
    #[inline(always)]
    unsafe fn mul2(
        x: __m256i,
        y: __m256i,
        dp: &DotProduct,
        o: usize,
        j: usize,
    ) -> (__m256i, __m256i) {
        let a = _mm256_set1_epi64x(dp.affine(o, j) as i64);
        (
            _mm256_gf2p8affine_epi64_epi8::<0>(x, a),
            _mm256_gf2p8affine_epi64_epi8::<0>(y, a),
        )
    }
}

impl Lane for Gfni512 {
    type V = __m512i;
    type Prep = __m512i;
    const W: usize = 64;
    // 32 registers: 2 × 8 accumulators, two inputs, and room for the broadcast matrices.
    const GROUP: usize = 8;
    #[inline(always)]
    unsafe fn zero() -> __m512i {
        _mm512_setzero_si512()
    }
    #[inline(always)]
    unsafe fn load(p: *const u8) -> __m512i {
        // SAFETY: the caller passes a pointer with 64 readable bytes.
        unsafe { _mm512_loadu_si512(p.cast()) }
    }
    #[inline(always)]
    unsafe fn store(p: *mut u8, v: __m512i) {
        // SAFETY: the caller passes a pointer with 64 writable bytes.
        unsafe { _mm512_storeu_si512(p.cast(), v) }
    }
    #[inline(always)]
    unsafe fn xor(a: __m512i, b: __m512i) -> __m512i {
        _mm512_xor_si512(a, b)
    }
    #[inline(always)]
    unsafe fn prep(x: __m512i) -> __m512i {
        x
    }
    #[inline(always)]
    unsafe fn mul(x: __m512i, dp: &DotProduct, o: usize, j: usize) -> __m512i {
        _mm512_gf2p8affine_epi64_epi8::<0>(x, _mm512_set1_epi64(dp.affine(o, j) as i64))
    }
    #[inline(always)]
    unsafe fn mul2(
        x: __m512i,
        y: __m512i,
        dp: &DotProduct,
        o: usize,
        j: usize,
    ) -> (__m512i, __m512i) {
        let a = _mm512_set1_epi64(dp.affine(o, j) as i64);
        (
            _mm512_gf2p8affine_epi64_epi8::<0>(x, a),
            _mm512_gf2p8affine_epi64_epi8::<0>(y, a),
        )
    }
}

/// Outputs `o0 .. o0 + G` over the first `len` bytes (a multiple of `L::W`): each input vector
/// is loaded once and multiplied into `G` accumulators. Two vectors are done per step where
/// possible, so every table or matrix load serves both.
#[inline(always)]
unsafe fn group<L: Lane, const G: usize>(
    dp: &DotProduct,
    inputs: &[&[u8]],
    outs: &mut [&mut [u8]],
    o0: usize,
    len: usize,
    accumulate: bool,
) {
    debug_assert!(outs.len() == G && len.is_multiple_of(L::W));
    let mut pos = 0;
    while pos + 2 * L::W <= len {
        // SAFETY (all pointer arithmetic below): `pos + 2W <= len`, and every region is at
        // least `len` bytes long (checked by `DotProduct::apply`).
        unsafe {
            let mut acc = [[L::zero(); 2]; G];
            if accumulate {
                for g in 0..G {
                    let p = outs[g].as_ptr().add(pos);
                    acc[g] = [L::load(p), L::load(p.add(L::W))];
                }
            }
            for (j, input) in inputs.iter().enumerate() {
                let p = input.as_ptr().add(pos);
                let (x, y) = (L::prep(L::load(p)), L::prep(L::load(p.add(L::W))));
                for (g, a) in acc.iter_mut().enumerate() {
                    let (mx, my) = L::mul2(x, y, dp, o0 + g, j);
                    a[0] = L::xor(a[0], mx);
                    a[1] = L::xor(a[1], my);
                }
            }
            for g in 0..G {
                let p = outs[g].as_mut_ptr().add(pos);
                L::store(p, acc[g][0]);
                L::store(p.add(L::W), acc[g][1]);
            }
        }
        pos += 2 * L::W;
    }
    while pos < len {
        // SAFETY: as above, with `pos + W <= len`.
        unsafe {
            let mut acc = [L::zero(); G];
            if accumulate {
                for g in 0..G {
                    acc[g] = L::load(outs[g].as_ptr().add(pos));
                }
            }
            for (j, input) in inputs.iter().enumerate() {
                let x = L::prep(L::load(input.as_ptr().add(pos)));
                for (g, a) in acc.iter_mut().enumerate() {
                    *a = L::xor(*a, L::mul(x, dp, o0 + g, j));
                }
            }
            for g in 0..G {
                L::store(outs[g].as_mut_ptr().add(pos), acc[g]);
            }
        }
        pos += L::W;
    }
}

/// Every output, in groups of at most `L::GROUP`; returns the bytes done.
#[inline(always)]
unsafe fn all<L: Lane>(
    dp: &DotProduct,
    inputs: &[&[u8]],
    outputs: &mut [&mut [u8]],
    accumulate: bool,
) -> usize {
    let len = inputs[0].len() / L::W * L::W;
    let mut o = 0;
    while o < outputs.len() {
        let g = L::GROUP.min(outputs.len() - o);
        let outs = &mut outputs[o..o + g];
        // SAFETY: forwarded from the caller (the instruction set is available).
        unsafe {
            match g {
                1 => group::<L, 1>(dp, inputs, outs, o, len, accumulate),
                2 => group::<L, 2>(dp, inputs, outs, o, len, accumulate),
                3 => group::<L, 3>(dp, inputs, outs, o, len, accumulate),
                4 => group::<L, 4>(dp, inputs, outs, o, len, accumulate),
                5 => group::<L, 5>(dp, inputs, outs, o, len, accumulate),
                6 => group::<L, 6>(dp, inputs, outs, o, len, accumulate),
                7 => group::<L, 7>(dp, inputs, outs, o, len, accumulate),
                8 => group::<L, 8>(dp, inputs, outs, o, len, accumulate),
                9 => group::<L, 9>(dp, inputs, outs, o, len, accumulate),
                10 => group::<L, 10>(dp, inputs, outs, o, len, accumulate),
                11 => group::<L, 11>(dp, inputs, outs, o, len, accumulate),
                12 => group::<L, 12>(dp, inputs, outs, o, len, accumulate),
                13 => group::<L, 13>(dp, inputs, outs, o, len, accumulate),
                14 => group::<L, 14>(dp, inputs, outs, o, len, accumulate),
                15 => group::<L, 15>(dp, inputs, outs, o, len, accumulate),
                _ => group::<L, 16>(dp, inputs, outs, o, len, accumulate),
            }
        }
        o += g;
    }
    len
}

#[target_feature(enable = "ssse3")]
unsafe fn dot_ssse3(dp: &DotProduct, i: &[&[u8]], o: &mut [&mut [u8]], acc: bool) -> usize {
    // SAFETY: this function only runs where SSSE3 is available.
    unsafe { all::<Ssse3>(dp, i, o, acc) }
}

#[target_feature(enable = "avx2")]
unsafe fn dot_avx2(dp: &DotProduct, i: &[&[u8]], o: &mut [&mut [u8]], acc: bool) -> usize {
    // SAFETY: this function only runs where AVX2 is available.
    unsafe { all::<Avx2>(dp, i, o, acc) }
}

#[target_feature(enable = "avx2,gfni")]
unsafe fn dot_gfni256(dp: &DotProduct, i: &[&[u8]], o: &mut [&mut [u8]], acc: bool) -> usize {
    // SAFETY: this function only runs where AVX2 and GFNI are available.
    unsafe { all::<Gfni256>(dp, i, o, acc) }
}

#[target_feature(enable = "avx512f,avx512bw,gfni")]
unsafe fn dot_gfni512(dp: &DotProduct, i: &[&[u8]], o: &mut [&mut [u8]], acc: bool) -> usize {
    // SAFETY: this function only runs where AVX-512BW and GFNI are available.
    unsafe { all::<Gfni512>(dp, i, o, acc) }
}

/// Run `kernel` over the whole vectors of the regions; returns how many bytes it did (the
/// rest, under one vector, is the caller's).
pub(super) fn dot(
    kernel: Kernel,
    dp: &DotProduct,
    inputs: &[&[u8]],
    outputs: &mut [&mut [u8]],
    accumulate: bool,
) -> usize {
    debug_assert!(kernel.available());
    // SAFETY: `DotProduct::apply` checked `kernel.available()`, i.e. the CPU has the
    // instructions each function is compiled for.
    unsafe {
        match kernel {
            Kernel::Ssse3 => dot_ssse3(dp, inputs, outputs, accumulate),
            Kernel::Avx2 => dot_avx2(dp, inputs, outputs, accumulate),
            Kernel::Gfni => dot_gfni256(dp, inputs, outputs, accumulate),
            Kernel::Avx512 => dot_gfni512(dp, inputs, outputs, accumulate),
            _ => 0,
        }
    }
}
