//! The `Scale` and `Speed` headers (RFC 2326 §12.34, §12.35): a decimal
//! number, negative for reverse play (Scale only). Parsed here; the server
//! decides which values it honours.

/// A `Scale` or `Speed` value: `1`, `-2`, `0.5`, `4.000`. `None` for
/// anything else (exponents, `inf`, `nan`, a bare sign or point, zero,
/// and negative values where `signed` is false).
pub fn parse(value: &str, signed: bool) -> Option<f64> {
    let v = value.trim();
    let digits = v.strip_prefix('-').filter(|_| signed).unwrap_or(v);
    let (int, frac) = digits.split_once('.').unwrap_or((digits, ""));
    let decimal = |s: &str| s.bytes().all(|b| b.is_ascii_digit());
    if int.is_empty() || !decimal(int) || !decimal(frac) {
        return None;
    }
    v.parse::<f64>().ok().filter(|x| x.is_finite() && *x != 0.0)
}

#[cfg(test)]
mod tests {
    use super::parse;
    use proptest::prelude::*;

    #[test]
    fn decimals_with_an_optional_sign_where_allowed() {
        assert_eq!(parse("1", true), Some(1.0));
        assert_eq!(parse(" -2.0 ", true), Some(-2.0));
        assert_eq!(parse("0.5", false), Some(0.5));
        assert_eq!(parse("4.", false), Some(4.0));
        for bad in [
            "-2", "", "-", ".5", "1e3", "inf", "NaN", "0", "0.000", "+1", "1,5",
        ] {
            assert_eq!(parse(bad, false), None, "{bad:?}");
        }
    }

    proptest! {
        #[test]
        fn never_panics_and_only_accepts_what_it_prints(s in "\\PC{0,12}") {
            if let Some(x) = parse(&s, true) {
                prop_assert!(x.is_finite() && x != 0.0);
                prop_assert_eq!(s.trim().parse::<f64>().ok(), Some(x));
            }
        }
    }
}
