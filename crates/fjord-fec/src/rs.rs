//! The Reed-Solomon codec of RFC 5510 section 8 for m = 8, as RFC 6865 uses
//! it: systematic, over GF(2^8) ([`crate::gf`]), k source symbols and up to
//! n − k repair symbols per block with n ≤ 255.
//!
//! Generator matrix: V_{k,n} is the k × n Vandermonde matrix whose column j
//! holds the powers x_j^0 … x_j^(k−1) of the evaluation point of ESI j,
//! x_0 = 0 and x_j = α^(j−1) (0, 1, α, …, α^(n−2)), and
//! GM = V_{k,k}^-1 · V_{k,n}, whose first k columns are the identity. The
//! encoding symbol with ESI j is e_j = Σ_i s_i · GM(i, j); for j ≥ k it is a
//! repair symbol. Equivalently e_j is the value at x_j of the polynomial of
//! degree < k that takes the value s_i at x_i (the tests check it that way).
//! These are the points of Luigi Rizzo's fec.c, with which RFC 5510 says its
//! schemes are compatible, and of its descendants (zfec; OpenFEC's RFC 5510
//! codec builds the same matrix): the known-answer test reproduces zfec's
//! repair symbols byte for byte.
//!
//! No Rust crate implements this matrix (the crates build other Vandermonde
//! or Cauchy matrices, or other fields), so it is built here by hand: a
//! Gauss-Jordan inversion of V_{k,k} once per k, then one column per repair
//! ESI.

use crate::gf;

/// Most encoding symbols per block (source and repair): 2^8 − 1.
pub const MAX_N: usize = 255;

/// Why a block cannot be encoded or decoded.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum CodecError {
    #[error("block layout outside the code: k = {k}, n = {n}")]
    Layout { k: usize, n: usize },
    #[error("{missing} source symbols missing and only {repairs} repair symbols")]
    TooFew { missing: usize, repairs: usize },
    #[error("symbols of different lengths")]
    SymbolLength,
    #[error("singular decoding matrix")]
    Singular,
}

/// Inverts the n × n row-major matrix `a` in place (Gauss-Jordan with
/// row pivoting). `work` is scratch space.
fn invert(a: &mut [u8], n: usize, work: &mut Vec<u8>) -> Result<(), CodecError> {
    // Augment: [A | I], reduce to [I | A^-1].
    let w = 2 * n;
    work.clear();
    work.resize(n * w, 0);
    for r in 0..n {
        work[r * w..r * w + n].copy_from_slice(&a[r * n..r * n + n]);
        work[r * w + n + r] = 1;
    }
    for col in 0..n {
        let pivot = (col..n)
            .find(|&r| work[r * w + col] != 0)
            .ok_or(CodecError::Singular)?;
        if pivot != col {
            for c in 0..w {
                work.swap(pivot * w + c, col * w + c);
            }
        }
        let inv = gf::inv(work[col * w + col]).ok_or(CodecError::Singular)?;
        for c in 0..w {
            work[col * w + c] = gf::mul(work[col * w + c], inv);
        }
        let (before, rest) = work.split_at_mut(col * w);
        let (row, after) = rest.split_at_mut(w);
        for other in before.chunks_exact_mut(w).chain(after.chunks_exact_mut(w)) {
            let f = other[col];
            if f != 0 {
                gf::mul_add(f, row, other);
            }
        }
    }
    for r in 0..n {
        a[r * n..r * n + n].copy_from_slice(&work[r * w + n..r * w + w]);
    }
    Ok(())
}

/// The evaluation point of encoding symbol `esi` (< 255): 0, then α^(esi−1).
pub fn point(esi: usize) -> u8 {
    esi.checked_sub(1).map_or(0, gf::exp)
}

/// RFC 5510's systematic generator for blocks of k source symbols.
#[derive(Debug, Clone)]
pub struct Generator {
    k: usize,
    /// V_{k,k}^-1, row-major.
    v_inv: Vec<u8>,
}

impl Generator {
    /// Builds GM's left factor for `k` source symbols (1 ≤ k < 255).
    pub fn new(k: usize) -> Result<Generator, CodecError> {
        if k == 0 || k >= MAX_N {
            return Err(CodecError::Layout { k, n: k });
        }
        // V_{k,k}: entry (i, j) = point(j)^i.
        let mut v = vec![0u8; k * k];
        for j in 0..k {
            let x = point(j);
            let mut p = 1u8;
            for i in 0..k {
                v[i * k + j] = p;
                p = gf::mul(p, x);
            }
        }
        invert(&mut v, k, &mut Vec::new())?;
        Ok(Generator { k, v_inv: v })
    }

    pub fn k(&self) -> usize {
        self.k
    }

    /// Column `esi` of GM (k entries): the coefficients of the source
    /// symbols in encoding symbol `esi` (k ≤ esi < 255).
    pub fn column(&self, esi: usize, out: &mut [u8]) {
        self.column_at(point(esi), out);
    }

    /// GM · (1, x, x², …)ᵀ: the column of the point x.
    fn column_at(&self, x: u8, out: &mut [u8]) {
        let k = self.k;
        out[..k].fill(0);
        let mut p = 1u8;
        // out[i] = Σ_l V^-1(i, l) · x^l
        for l in 0..k {
            for (i, o) in out[..k].iter_mut().enumerate() {
                *o ^= gf::mul(self.v_inv[i * k + l], p);
            }
            p = gf::mul(p, x);
        }
    }
}

/// Encoder and decoder state for one block layout, reusable across blocks.
#[derive(Debug, Clone, Default)]
pub struct Codec {
    generator: Option<Generator>,
    /// Repair columns, m × k, row j = column of ESI k + j.
    repair_rows: Vec<u8>,
    m: usize,
    work: Vec<u8>,
    matrix: Vec<u8>,
}

impl Codec {
    pub fn new() -> Codec {
        Codec::default()
    }

    /// Prepares for blocks of `k` source and `m` repair symbols (cheap when
    /// unchanged).
    pub fn set_layout(&mut self, k: usize, m: usize) -> Result<(), CodecError> {
        if k == 0 || m == 0 || k + m > MAX_N {
            return Err(CodecError::Layout { k, n: k + m });
        }
        if self.generator.as_ref().is_some_and(|g| g.k == k) && self.m == m {
            return Ok(());
        }
        if self.generator.as_ref().is_none_or(|g| g.k != k) {
            self.generator = Some(Generator::new(k)?);
        }
        let g = self.generator.as_ref().expect("just set");
        self.repair_rows.resize(m * k, 0);
        for (j, row) in self.repair_rows.chunks_exact_mut(k).enumerate() {
            g.column(k + j, row);
        }
        self.m = m;
        Ok(())
    }

    fn k(&self) -> usize {
        self.generator.as_ref().map_or(0, Generator::k)
    }

    /// Encodes k source symbols of E bytes (`sources`, back to back) into
    /// m repair symbols (`repairs`, back to back, overwritten).
    pub fn encode(&self, sources: &[u8], repairs: &mut [u8]) -> Result<(), CodecError> {
        let (k, m) = (self.k(), self.m);
        if k == 0 || !sources.len().is_multiple_of(k) {
            return Err(CodecError::SymbolLength);
        }
        let e = sources.len() / k;
        if repairs.len() != m * e || e == 0 {
            return Err(CodecError::SymbolLength);
        }
        gf::dot(&self.repair_rows, sources, e, repairs);
        Ok(())
    }

    /// Erasure decoding. `symbols` holds the block's k source symbols of E
    /// bytes back to back, those with `present[i]` false unknown; `repairs`
    /// are (repair index j = ESI − k, symbol). Rebuilds every missing source
    /// symbol in place and returns their indexes.
    ///
    /// With L the missing indexes (t of them) and t repair symbols r_j:
    /// r_j − Σ_{i∉L} GM(i, k+j)·s_i = Σ_{l∈L} GM(l, k+j)·s_l, a t × t system
    /// solved by inverting its matrix (RFC 5510's decoding by inversion of
    /// the received symbols' columns, restricted to the erased ones).
    pub fn decode(
        &mut self,
        symbols: &mut [u8],
        present: &[bool],
        repairs: &[(usize, &[u8])],
    ) -> Result<Vec<usize>, CodecError> {
        let (k, m) = (self.k(), self.m);
        if k == 0 || present.len() != k || !symbols.len().is_multiple_of(k) {
            return Err(CodecError::SymbolLength);
        }
        let e = symbols.len() / k;
        let lost: Vec<usize> = (0..k).filter(|&i| !present[i]).collect();
        let t = lost.len();
        if t == 0 {
            return Ok(lost);
        }
        if repairs.len() < t {
            return Err(CodecError::TooFew {
                missing: t,
                repairs: repairs.len(),
            });
        }
        let used = &repairs[..t];
        if used.iter().any(|(j, r)| *j >= m || r.len() != e) {
            return Err(CodecError::SymbolLength);
        }
        // Syndromes: each repair symbol with the received sources' share
        // removed (the missing sources get coefficient 0).
        self.matrix.clear();
        for (j, _) in used {
            let row = &self.repair_rows[j * k..j * k + k];
            self.matrix.extend(
                row.iter()
                    .zip(present)
                    .map(|(&c, &p)| if p { c } else { 0 }),
            );
        }
        let mut syn = vec![0u8; t * e];
        gf::dot(&self.matrix, symbols, e, &mut syn);
        for ((_, r), out) in used.iter().zip(syn.chunks_exact_mut(e)) {
            gf::mul_add(1, r, out);
        }
        // B(a, b) = GM(lost[b], k + j_a); s_lost = B^-1 · syndromes.
        self.matrix.clear();
        for (j, _) in used {
            let row = &self.repair_rows[j * k..j * k + k];
            self.matrix.extend(lost.iter().map(|&l| row[l]));
        }
        invert(&mut self.matrix, t, &mut self.work)?;
        let mut rebuilt = vec![0u8; t * e];
        gf::dot(&self.matrix, &syn, e, &mut rebuilt);
        for (&l, sym) in lost.iter().zip(rebuilt.chunks_exact(e)) {
            symbols[l * e..l * e + e].copy_from_slice(sym);
        }
        Ok(lost)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// An independent reading of RFC 5510's definition: the value at
    /// x_esi of the polynomial through (x_i, s_i), by Lagrange
    /// interpolation with plain field arithmetic, no matrix inversion.
    fn lagrange_coefficients(points: &[u8], x: u8) -> Vec<u8> {
        (0..points.len())
            .map(|i| {
                let (mut num, mut den) = (1u8, 1u8);
                for (l, &p) in points.iter().enumerate() {
                    if l != i {
                        num = gf::mul(num, x ^ p);
                        den = gf::mul(den, points[i] ^ p);
                    }
                }
                gf::mul(num, gf::inv(den).unwrap())
            })
            .collect()
    }

    #[test]
    fn generator_is_rfc5510s_definition() {
        for k in [1usize, 2, 3, 7, 32, 100, 223, 254] {
            let g = Generator::new(k).unwrap();
            let points: Vec<u8> = (0..k).map(point).collect();
            let mut col = vec![0u8; k];
            for esi in [k, k + 1, 254].into_iter().filter(|&e| e < MAX_N) {
                g.column(esi, &mut col);
                assert_eq!(
                    col,
                    lagrange_coefficients(&points, point(esi)),
                    "k {k} esi {esi}"
                );
            }
            // The first k columns are the identity (systematic).
            for esi in 0..k.min(5) {
                g.column(esi, &mut col);
                let unit: Vec<u8> = (0..k).map(|i| u8::from(i == esi)).collect();
                assert_eq!(col, unit);
            }
        }
    }

    /// The source symbols of the fixture: byte b of symbol i.
    fn fixture_sources(k: usize, e: usize) -> Vec<u8> {
        (0..k)
            .flat_map(|i| (0..e).map(move |b| ((i * 31 + b * 7 + 1) & 0xFF) as u8))
            .collect()
    }

    /// Known answers from tests/fixtures/rfc5510_kat.py: `rfc5510` lines by
    /// Lagrange interpolation in Python (independent of this code), `zfec`
    /// lines by zfec 1.6, a third-party implementation of Rizzo's codec.
    /// `Codec` must reproduce both.
    #[test]
    fn fixture_known_answers() {
        let fixture = include_str!("../tests/fixtures/rfc5510_kat.txt");
        let mut checked = (0, 0);
        for line in fixture.lines() {
            let mut words = line.split_whitespace();
            match words.next().unwrap() {
                "rfc5510" => checked.0 += 1,
                "zfec" => checked.1 += 1,
                other => panic!("unknown fixture line {other}"),
            }
            let mut num = |name: &str| -> usize {
                let w = words.next().unwrap();
                w.strip_prefix(name).unwrap().parse().unwrap()
            };
            let (k, m, e) = (num("k="), num("m="), num("e="));
            let expect: Vec<u8> = words
                .flat_map(|hex| {
                    (0..hex.len())
                        .step_by(2)
                        .map(move |i| u8::from_str_radix(&hex[i..i + 2], 16).unwrap())
                })
                .collect();
            let sources = fixture_sources(k, e);
            let mut repairs = vec![0u8; m * e];
            let mut c = Codec::new();
            c.set_layout(k, m).unwrap();
            c.encode(&sources, &mut repairs).unwrap();
            assert_eq!(repairs, expect, "{line:.40}");
        }
        assert_eq!(checked, (3, 3));
    }

    proptest! {
        #[test]
        fn decodes_any_k_of_n(
            k in 1usize..40,
            m in 1usize..12,
            e in 1usize..70,
            seed: u64,
            lose in proptest::collection::vec(any::<bool>(), 52),
        ) {
            let mut rng = seed;
            let mut next = || {
                rng = rng.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
                (rng >> 33) as u8
            };
            let sources: Vec<u8> = (0..k * e).map(|_| next()).collect();
            let mut codec = Codec::new();
            codec.set_layout(k, m).unwrap();
            let mut repairs = vec![0u8; m * e];
            codec.encode(&sources, &mut repairs).unwrap();
            // Lose up to m symbols among sources and repairs: the first m
            // of those `lose` picks.
            let mut budget = m;
            let mut take = |pick: bool| {
                let lost = pick && budget > 0;
                budget -= usize::from(lost);
                lost
            };
            let present: Vec<bool> = lose[..k].iter().map(|&l| !take(l)).collect();
            let kept_repairs: Vec<usize> = (0..m).filter(|&j| !take(lose[40 + j])).collect();
            let mut symbols = sources.clone();
            for i in (0..k).filter(|&i| !present[i]) {
                symbols[i * e..i * e + e].fill(0xEE);
            }
            let reps: Vec<(usize, &[u8])> =
                kept_repairs.iter().map(|&j| (j, &repairs[j * e..j * e + e])).collect();
            let rebuilt = codec.decode(&mut symbols, &present, &reps).unwrap();
            prop_assert_eq!(rebuilt.len(), present.iter().filter(|p| !**p).count());
            prop_assert_eq!(symbols, sources);
        }
    }

    #[test]
    fn refuses_what_it_cannot_do() {
        let mut c = Codec::new();
        assert!(c.set_layout(0, 1).is_err());
        assert!(c.set_layout(223, 33).is_err());
        c.set_layout(223, 32).unwrap();
        let mut sym = vec![0u8; 223 * 4];
        let mut present = vec![true; 223];
        present[..2].fill(false);
        assert_eq!(
            c.decode(&mut sym, &present, &[(0, &[0u8; 4][..])]),
            Err(CodecError::TooFew {
                missing: 2,
                repairs: 1
            })
        );
    }
}
