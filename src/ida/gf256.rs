//! Arithmetic in GF(2^8) with the polynomial `x^8 + x^4 + x^3 + x^2 + 1` (0x11d), the field of
//! ISA-L, Jerasure and most erasure codes, so pieces can be checked by independent tools.
//!
//! Multiplication goes through log/exp tables (generator 2); the region kernels in
//! [`super::kernel`] use these only to build their per-coefficient tables.

/// The reduction polynomial, including the x^8 term.
pub const POLY: u16 = 0x11d;

/// `EXP[i] = 2^i` for `i` in `0..510` (doubled so `EXP[log a + log b]` needs no reduction).
pub static EXP: [u8; 512] = build_exp();
/// `LOG[a]` for `a != 0`; `LOG[0]` is unused.
pub static LOG: [u8; 256] = build_log();

const fn build_exp() -> [u8; 512] {
    let mut t = [0u8; 512];
    let mut x: u16 = 1;
    let mut i = 0;
    while i < 512 {
        t[i] = x as u8;
        x <<= 1;
        if x & 0x100 != 0 {
            x ^= POLY;
        }
        i += 1;
    }
    t
}

const fn build_log() -> [u8; 256] {
    let exp = build_exp();
    let mut t = [0u8; 256];
    let mut i = 0;
    while i < 255 {
        t[exp[i] as usize] = i as u8;
        i += 1;
    }
    t
}

/// `a · b`.
#[inline]
pub fn mul(a: u8, b: u8) -> u8 {
    if a == 0 || b == 0 {
        0
    } else {
        EXP[LOG[a as usize] as usize + LOG[b as usize] as usize]
    }
}

/// The multiplicative inverse of `a`, `None` for 0.
#[inline]
pub fn inv(a: u8) -> Option<u8> {
    (a != 0).then(|| EXP[255 - LOG[a as usize] as usize])
}

/// `a / b`, `None` when `b` is 0.
#[inline]
pub fn div(a: u8, b: u8) -> Option<u8> {
    inv(b).map(|ib| mul(a, ib))
}

/// `a^e`.
pub fn pow(a: u8, e: u32) -> u8 {
    if e == 0 {
        return 1;
    }
    if a == 0 {
        return 0;
    }
    EXP[(LOG[a as usize] as u64 * e as u64 % 255) as usize]
}

/// Carry-less multiply then reduce: the definition. A `const fn`, so compile-time tables (the
/// scalar kernel's) are built from it, and the tests check the log/exp tables against it.
pub const fn mul_slow(a: u8, b: u8) -> u8 {
    let (mut a, mut b, mut p) = (a, b, 0u8);
    while b != 0 {
        if b & 1 != 0 {
            p ^= a;
        }
        let carry = a & 0x80 != 0;
        a <<= 1;
        if carry {
            a ^= (POLY & 0xff) as u8;
        }
        b >>= 1;
    }
    p
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tables_agree_with_the_definition() {
        for a in 0..=255u8 {
            for b in 0..=255u8 {
                assert_eq!(mul(a, b), mul_slow(a, b), "{a} * {b}");
            }
        }
    }

    #[test]
    fn inverse_and_division() {
        assert_eq!(inv(0), None);
        assert_eq!(div(7, 0), None);
        for a in 1..=255u8 {
            let ia = inv(a).unwrap();
            assert_eq!(mul(a, ia), 1);
            for b in 1..=255u8 {
                assert_eq!(mul(div(a, b).unwrap(), b), a);
            }
        }
        // 2 generates the whole multiplicative group.
        let mut seen = [false; 256];
        for i in 0..255 {
            seen[EXP[i] as usize] = true;
        }
        assert_eq!(seen.iter().filter(|&&s| s).count(), 255);
        assert_eq!(pow(2, 8), 0x1d);
    }
}
