//! GF(2^8) with the primitive polynomial x^8 + x^4 + x^3 + x^2 + 1 (0x11D),
//! the field of RFC 5510 section 8.1 for m = 8, with α = x (the element 2).
//!
//! The bulk operation, `dst ^= c · src` over byte slices, is what encoding
//! and decoding spend their time in. It is a small std::arch kernel (the
//! usual split-nibble table lookup: `c · b = T_lo[b & 15] ^ T_hi[b >> 4]`,
//! 32 bytes per AVX2 `vpshufb` pair, 16 per SSSE3) chosen at run time, with
//! a table-driven scalar fallback. Why not a crate: reed-solomon-erasure 6's
//! `galois_8::mul_slice_xor` (`simd-accel`) uses the same polynomial and ran
//! at 9.1 GB/s on 1324-byte slices here, but its C kernel is compiled with
//! `-march=haswell` and no run-time detection (an illegal instruction on
//! x86-64 CPUs without AVX2), it panics on empty slices and it brings lru,
//! parking_lot and ahash for one function. This kernel runs at about the
//! same speed (benches/fec.rs) on every x86-64 CPU and elsewhere in
//! portable Rust.

/// The primitive polynomial, x^8 + x^4 + x^3 + x^2 + 1.
pub const POLY: u16 = 0x11D;

const fn build_exp() -> [u8; 512] {
    let mut t = [0u8; 512];
    let mut x: u16 = 1;
    let mut i = 0;
    while i < 255 {
        t[i] = x as u8;
        t[i + 255] = x as u8;
        x <<= 1;
        if x & 0x100 != 0 {
            x ^= POLY;
        }
        i += 1;
    }
    t[510] = t[0];
    t[511] = t[1];
    t
}

const fn build_log(exp: &[u8; 512]) -> [u8; 256] {
    let mut t = [0u8; 256];
    let mut i = 0;
    while i < 255 {
        t[exp[i] as usize] = i as u8;
        i += 1;
    }
    t
}

/// EXP[i] = α^i, for i in 0..510 (doubled so a sum of two logs needs no reduction).
static EXP: [u8; 512] = build_exp();
/// LOG[x] = i with α^i = x, for x ≠ 0 (LOG[0] is unused).
static LOG: [u8; 256] = build_log(&EXP);

/// α^e.
pub fn exp(e: usize) -> u8 {
    EXP[e % 255]
}

pub fn mul(a: u8, b: u8) -> u8 {
    if a == 0 || b == 0 {
        return 0;
    }
    EXP[usize::from(LOG[usize::from(a)]) + usize::from(LOG[usize::from(b)])]
}

/// The multiplicative inverse; `None` for 0.
pub fn inv(a: u8) -> Option<u8> {
    (a != 0).then(|| EXP[255 - usize::from(LOG[usize::from(a)])])
}

/// The two 16-entry tables of `c`: products with the low and high nibbles.
fn nibble_tables(c: u8) -> ([u8; 16], [u8; 16]) {
    let mut lo = [0u8; 16];
    let mut hi = [0u8; 16];
    for x in 0..16u8 {
        lo[usize::from(x)] = mul(c, x);
        hi[usize::from(x)] = mul(c, x << 4);
    }
    (lo, hi)
}

/// `dst[i] ^= c · src[i]` for every i. The slices must have equal lengths.
pub fn mul_add(c: u8, src: &[u8], dst: &mut [u8]) {
    assert_eq!(src.len(), dst.len(), "mul_add: slices of different lengths");
    match c {
        0 => {}
        1 => dst.iter_mut().zip(src).for_each(|(d, s)| *d ^= s),
        _ => {
            let (lo, hi) = nibble_tables(c);
            #[cfg(target_arch = "x86_64")]
            {
                if std::arch::is_x86_feature_detected!("avx2") {
                    // SAFETY: AVX2 is present (checked just above).
                    unsafe { x86::mul_add_avx2(&lo, &hi, src, dst) };
                    return;
                }
                if std::arch::is_x86_feature_detected!("ssse3") {
                    // SAFETY: SSSE3 is present (checked just above).
                    unsafe { x86::mul_add_ssse3(&lo, &hi, src, dst) };
                    return;
                }
            }
            mul_add_scalar(&lo, &hi, src, dst);
        }
    }
}

fn mul_add_scalar(lo: &[u8; 16], hi: &[u8; 16], src: &[u8], dst: &mut [u8]) {
    for (d, &s) in dst.iter_mut().zip(src) {
        *d ^= lo[usize::from(s & 15)] ^ hi[usize::from(s >> 4)];
    }
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    use std::arch::x86_64::*;

    /// # Safety
    /// The CPU must support AVX2; `src` and `dst` must have equal lengths.
    #[target_feature(enable = "avx2")]
    pub unsafe fn mul_add_avx2(lo: &[u8; 16], hi: &[u8; 16], src: &[u8], dst: &mut [u8]) {
        let n = src.len() - src.len() % 32;
        // SAFETY: every access is inside 0..n of both slices, which are at
        // least n long; unaligned loads and stores are used throughout.
        unsafe {
            let tlo = _mm256_broadcastsi128_si256(_mm_loadu_si128(lo.as_ptr().cast()));
            let thi = _mm256_broadcastsi128_si256(_mm_loadu_si128(hi.as_ptr().cast()));
            let mask = _mm256_set1_epi8(0x0f);
            let (s, d) = (src.as_ptr(), dst.as_mut_ptr());
            let mut i = 0;
            while i < n {
                let x = _mm256_loadu_si256(s.add(i).cast());
                let l = _mm256_and_si256(x, mask);
                let h = _mm256_and_si256(_mm256_srli_epi64(x, 4), mask);
                let p = _mm256_xor_si256(_mm256_shuffle_epi8(tlo, l), _mm256_shuffle_epi8(thi, h));
                let y = _mm256_loadu_si256(d.add(i).cast());
                _mm256_storeu_si256(d.add(i).cast(), _mm256_xor_si256(y, p));
                i += 32;
            }
        }
        super::mul_add_scalar(lo, hi, &src[n..], &mut dst[n..]);
    }

    /// # Safety
    /// The CPU must support SSSE3; `src` and `dst` must have equal lengths.
    #[target_feature(enable = "ssse3")]
    pub unsafe fn mul_add_ssse3(lo: &[u8; 16], hi: &[u8; 16], src: &[u8], dst: &mut [u8]) {
        let n = src.len() - src.len() % 16;
        // SAFETY: as in `mul_add_avx2`, with 16-byte steps.
        unsafe {
            let tlo = _mm_loadu_si128(lo.as_ptr().cast());
            let thi = _mm_loadu_si128(hi.as_ptr().cast());
            let mask = _mm_set1_epi8(0x0f);
            let (s, d) = (src.as_ptr(), dst.as_mut_ptr());
            let mut i = 0;
            while i < n {
                let x = _mm_loadu_si128(s.add(i).cast());
                let l = _mm_and_si128(x, mask);
                let h = _mm_and_si128(_mm_srli_epi64(x, 4), mask);
                let p = _mm_xor_si128(_mm_shuffle_epi8(tlo, l), _mm_shuffle_epi8(thi, h));
                let y = _mm_loadu_si128(d.add(i).cast());
                _mm_storeu_si128(d.add(i).cast(), _mm_xor_si128(y, p));
                i += 16;
            }
        }
        super::mul_add_scalar(lo, hi, &src[n..], &mut dst[n..]);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// Carry-less multiplication reduced by the polynomial: the definition.
    fn mul_slow(a: u8, b: u8) -> u8 {
        let (mut a, mut b, mut p) = (u16::from(a), b, 0u16);
        while b != 0 {
            if b & 1 != 0 {
                p ^= a;
            }
            a <<= 1;
            if a & 0x100 != 0 {
                a ^= POLY;
            }
            b >>= 1;
        }
        p as u8
    }

    #[test]
    fn field_tables_follow_the_polynomial() {
        for a in 0..=255u8 {
            for b in 0..=255u8 {
                assert_eq!(mul(a, b), mul_slow(a, b), "{a}·{b}");
            }
            if a != 0 {
                assert_eq!(mul(a, inv(a).unwrap()), 1);
            }
        }
        assert_eq!(inv(0), None);
        // α = 2 is primitive: its powers run through all 255 non-zero elements.
        let mut seen = [false; 256];
        (0..255).for_each(|e| seen[usize::from(exp(e))] = true);
        assert_eq!(seen.iter().filter(|&&s| s).count(), 255);
        assert_eq!(exp(8), 0x1D);
    }

    proptest! {
        #[test]
        fn kernels_agree_with_the_definition(
            c: u8,
            src in proptest::collection::vec(any::<u8>(), 0..200),
            seed: u8,
        ) {
            let start: Vec<u8> = (0..src.len()).map(|i| (i as u8).wrapping_mul(seed)).collect();
            let expect: Vec<u8> =
                start.iter().zip(&src).map(|(d, s)| d ^ mul_slow(c, *s)).collect();
            let mut dst = start.clone();
            mul_add(c, &src, &mut dst);
            prop_assert_eq!(&dst, &expect);
            let (lo, hi) = nibble_tables(c);
            let mut dst = start.clone();
            mul_add_scalar(&lo, &hi, &src, &mut dst);
            prop_assert_eq!(&dst, &expect);
            #[cfg(target_arch = "x86_64")]
            if std::arch::is_x86_feature_detected!("ssse3") {
                let mut dst = start.clone();
                // SAFETY: SSSE3 present; equal lengths.
                unsafe { x86::mul_add_ssse3(&lo, &hi, &src, &mut dst) };
                prop_assert_eq!(&dst, &expect);
            }
        }
    }
}
