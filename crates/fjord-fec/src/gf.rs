//! GF(2^8) with the primitive polynomial x^8 + x^4 + x^3 + x^2 + 1 (0x11D),
//! the field of RFC 5510 section 8.1 for m = 8, with α = x (the element 2).
//!
//! The bulk operation, `dst ^= c · src` over byte slices, is what encoding
//! and decoding spend their time in. It is a small std::arch kernel chosen
//! at run time: GFNI's `gf2p8affineqb` with the 8 × 8 bit matrix of "times
//! c" (32 bytes per instruction) where the CPU has it, else the usual
//! split-nibble table lookup `c · b = T_lo[b & 15] ^ T_hi[b >> 4]` (32
//! bytes per AVX2 `vpshufb` pair, 16 per SSSE3), else a scalar fallback. Why not a crate: reed-solomon-erasure 6's
//! `galois_8::mul_slice_xor` (`simd-accel`) uses the same polynomial and ran
//! at 9.1 GB/s on 1324-byte slices here, but its C kernel is compiled with
//! `-march=haswell` and no run-time detection (an illegal instruction on
//! x86-64 CPUs without AVX2), it panics on empty slices and it brings lru,
//! parking_lot and ahash for one function. The nibble kernel here runs at
//! about the same speed on every x86-64 CPU, the GFNI one faster
//! (benches/fec.rs `mul_add`), and elsewhere portable Rust does it.

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
static EXP: [u8; 512] = EXP_TABLE;
const EXP_TABLE: [u8; 512] = build_exp();
/// LOG[x] = i with α^i = x, for x ≠ 0 (LOG[0] is unused).
static LOG: [u8; 256] = LOG_TABLE;
const LOG_TABLE: [u8; 256] = build_log(&EXP_TABLE);

const fn const_mul(a: u8, b: u8) -> u8 {
    if a == 0 || b == 0 {
        return 0;
    }
    EXP_TABLE[LOG_TABLE[a as usize] as usize + LOG_TABLE[b as usize] as usize]
}

/// Per coefficient c: the products of c with the 16 low nibbles, then with
/// the 16 high nibbles (the split-nibble kernels' tables).
static NIBBLES: [[[u8; 16]; 2]; 256] = {
    let mut t = [[[0u8; 16]; 2]; 256];
    let mut c = 0;
    while c < 256 {
        let mut x = 0;
        while x < 16 {
            t[c][0][x] = const_mul(c as u8, x as u8);
            t[c][1][x] = const_mul(c as u8, (x as u8) << 4);
            x += 1;
        }
        c += 1;
    }
    t
};

/// Per coefficient c: multiplication by c as an 8 × 8 bit matrix in the
/// layout of GFNI's `gf2p8affineqb` (which works in any field, unlike
/// `gf2p8mulb`, fixed to AES's polynomial): the byte at index 7 − i selects
/// the input bits k whose products c·2^k have bit i set.
static AFFINE: [u64; 256] = {
    let mut t = [0u64; 256];
    let mut c = 0;
    while c < 256 {
        let mut i = 0;
        while i < 8 {
            let mut row = 0u8;
            let mut k = 0;
            while k < 8 {
                row |= ((const_mul(c as u8, 1 << k) >> i) & 1) << k;
                k += 1;
            }
            t[c] |= (row as u64) << (8 * (7 - i));
            i += 1;
        }
        c += 1;
    }
    t
};

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
fn nibble_tables(c: u8) -> (&'static [u8; 16], &'static [u8; 16]) {
    let [lo, hi] = &NIBBLES[usize::from(c)];
    (lo, hi)
}

fn affine_matrix(c: u8) -> u64 {
    AFFINE[usize::from(c)]
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
                if std::arch::is_x86_feature_detected!("gfni")
                    && std::arch::is_x86_feature_detected!("avx2")
                {
                    // SAFETY: GFNI and AVX2 are present (checked just above).
                    unsafe { x86::mul_add_gfni(affine_matrix(c), src, dst) };
                    return;
                }
                if std::arch::is_x86_feature_detected!("avx2") {
                    // SAFETY: AVX2 is present (checked just above).
                    unsafe { x86::mul_add_avx2(lo, hi, src, dst) };
                    return;
                }
                if std::arch::is_x86_feature_detected!("ssse3") {
                    // SAFETY: SSSE3 is present (checked just above).
                    unsafe { x86::mul_add_ssse3(lo, hi, src, dst) };
                    return;
                }
            }
            mul_add_scalar(lo, hi, src, dst);
        }
    }
}

/// `dst_r = Σ_i coeffs[r·k + i] · src_i` for every output r: the dot
/// products of `rows` = dst.len() / e coefficient rows (k each) with the k
/// symbols of `src` (E = `e` bytes each, back to back), overwriting `dst`
/// (rows × E). What encoding and decoding do; with GFNI, 8 outputs at a
/// time are accumulated in registers so each source byte is loaded once
/// per 8 products instead of each product loading and storing its output.
pub fn dot(coeffs: &[u8], src: &[u8], e: usize, dst: &mut [u8]) {
    assert!(e > 0 && src.len().is_multiple_of(e) && dst.len().is_multiple_of(e));
    let (k, rows) = (src.len() / e, dst.len() / e);
    assert_eq!(
        coeffs.len(),
        k * rows,
        "dot: one coefficient per source and output"
    );
    dst.fill(0);
    let mut r = 0;
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("gfni") && std::arch::is_x86_feature_detected!("avx2") {
        let mut matrices = Vec::with_capacity(k * 8);
        while rows - r >= 8 {
            // Matrices in source-major order: the 8 of source i together.
            matrices.clear();
            for i in 0..k {
                matrices.extend((0..8).map(|q| AFFINE[usize::from(coeffs[(r + q) * k + i])]));
            }
            let out = &mut dst[r * e..(r + 8) * e];
            // SAFETY: GFNI and AVX2 are present (checked above); the
            // lengths are as the kernel requires.
            unsafe { x86::dot8_gfni(&matrices, src, e, out) };
            r += 8;
        }
    }
    for r in r..rows {
        let out = &mut dst[r * e..(r + 1) * e];
        for (i, s) in src.chunks_exact(e).enumerate() {
            mul_add(coeffs[r * k + i], s, out);
        }
    }
}

fn mul_add_scalar(lo: &[u8; 16], hi: &[u8; 16], src: &[u8], dst: &mut [u8]) {
    for (d, &s) in dst.iter_mut().zip(src) {
        *d ^= lo[usize::from(s & 15)] ^ hi[usize::from(s >> 4)];
    }
}

/// The product a matrix of [`affine_matrix`] gives for one byte (the
/// GFNI kernel's tail).
#[cfg(target_arch = "x86_64")]
fn mul_slow_matrix(matrix: u64, x: u8) -> u8 {
    (0..8).fold(0u8, |out, i| {
        let row = (matrix >> (8 * (7 - i))) as u8;
        out | (((row & x).count_ones() as u8) & 1) << i
    })
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
    /// The CPU must support GFNI and AVX2; `src` and `dst` must have equal
    /// lengths.
    #[target_feature(enable = "gfni,avx2")]
    pub unsafe fn mul_add_gfni(matrix: u64, src: &[u8], dst: &mut [u8]) {
        let n = src.len() - src.len() % 32;
        // SAFETY: as in `mul_add_avx2`.
        unsafe {
            let a = _mm256_set1_epi64x(matrix as i64);
            let (s, d) = (src.as_ptr(), dst.as_mut_ptr());
            let mut i = 0;
            while i < n {
                let x = _mm256_loadu_si256(s.add(i).cast());
                let p = _mm256_gf2p8affine_epi64_epi8::<0>(x, a);
                let y = _mm256_loadu_si256(d.add(i).cast());
                _mm256_storeu_si256(d.add(i).cast(), _mm256_xor_si256(y, p));
                i += 32;
            }
        }
        for (d, &s) in dst[n..].iter_mut().zip(&src[n..]) {
            *d ^= super::mul_slow_matrix(matrix, s);
        }
    }

    /// `dst` (8 × e, zeroed) gets the 8 dot products of `matrices` (per
    /// source i, the affine matrices of its 8 coefficients) with the
    /// sources in `src` (k × e).
    ///
    /// # Safety
    /// The CPU must support GFNI and AVX2; `matrices.len() == 8 k` where
    /// `src.len() == k e`, and `dst.len() == 8 e`.
    #[target_feature(enable = "gfni,avx2")]
    pub unsafe fn dot8_gfni(matrices: &[u64], src: &[u8], e: usize, dst: &mut [u8]) {
        let k = src.len() / e;
        // Windows of 32 bytes; the last one ends at e, overlapping the one
        // before it: the kernel writes (does not accumulate into) `dst`, so
        // bytes computed twice get the same value twice. Symbols shorter
        // than 32 bytes are done byte by byte.
        let vector_end = if e >= 32 { e } else { 0 };
        // SAFETY: loads at i·e + off + 0..32 with off + 32 ≤ e stay in
        // `src` (k·e bytes); stores at q·e + off likewise in `dst`; matrix
        // reads at 8i + q < 8k.
        unsafe {
            let (s, d, a) = (src.as_ptr(), dst.as_mut_ptr(), matrices.as_ptr());
            let mut next = 0;
            while next < vector_end {
                let off = next.min(e - 32);
                let mut acc = [_mm256_setzero_si256(); 8];
                for i in 0..k {
                    let x = _mm256_loadu_si256(s.add(i * e + off).cast());
                    let m = a.add(8 * i);
                    for (q, acc) in acc.iter_mut().enumerate() {
                        let mq = _mm256_set1_epi64x(*m.add(q) as i64);
                        *acc = _mm256_xor_si256(*acc, _mm256_gf2p8affine_epi64_epi8::<0>(x, mq));
                    }
                }
                for (q, acc) in acc.iter().enumerate() {
                    _mm256_storeu_si256(d.add(q * e + off).cast(), *acc);
                }
                next += 32;
            }
        }
        if vector_end == 0 {
            for (q, out) in dst.chunks_exact_mut(e).enumerate() {
                for (i, sym) in src.chunks_exact(e).enumerate() {
                    for (o, &x) in out.iter_mut().zip(sym) {
                        *o ^= super::mul_slow_matrix(matrices[8 * i + q], x);
                    }
                }
            }
        }
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
        fn dot_is_sums_of_products(
            k in 1usize..12,
            rows in 1usize..20,
            e in 1usize..100,
            seed: u32,
        ) {
            let byte = |i: usize| (i as u32).wrapping_mul(seed | 1).rotate_left(7) as u8;
            let src: Vec<u8> = (0..k * e).map(byte).collect();
            let coeffs: Vec<u8> = (0..k * rows).map(|i| byte(i + 99_991)).collect();
            let mut expect = vec![0u8; rows * e];
            for r in 0..rows {
                for i in 0..k {
                    for b in 0..e {
                        expect[r * e + b] ^= mul_slow(coeffs[r * k + i], src[i * e + b]);
                    }
                }
            }
            let mut dst = vec![0xEEu8; rows * e];
            dot(&coeffs, &src, e, &mut dst);
            prop_assert_eq!(dst, expect);
        }

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
            mul_add_scalar(lo, hi, &src, &mut dst);
            prop_assert_eq!(&dst, &expect);
            #[cfg(target_arch = "x86_64")]
            if std::arch::is_x86_feature_detected!("avx2") {
                let mut dst = start.clone();
                // SAFETY: AVX2 present; equal lengths.
                unsafe { x86::mul_add_avx2(lo, hi, &src, &mut dst) };
                prop_assert_eq!(&dst, &expect);
            }
            #[cfg(target_arch = "x86_64")]
            for x in src.iter().copied() {
                prop_assert_eq!(mul_slow_matrix(affine_matrix(c), x), mul_slow(c, x));
            }
            #[cfg(target_arch = "x86_64")]
            if std::arch::is_x86_feature_detected!("gfni")
                && std::arch::is_x86_feature_detected!("avx2")
            {
                let mut dst = start.clone();
                // SAFETY: GFNI and AVX2 present; equal lengths.
                unsafe { x86::mul_add_gfni(affine_matrix(c), &src, &mut dst) };
                prop_assert_eq!(&dst, &expect);
            }
            #[cfg(target_arch = "x86_64")]
            if std::arch::is_x86_feature_detected!("ssse3") {
                let mut dst = start.clone();
                // SAFETY: SSSE3 present; equal lengths.
                unsafe { x86::mul_add_ssse3(lo, hi, &src, &mut dst) };
                prop_assert_eq!(&dst, &expect);
            }
        }
    }
}
