//! The `Range` header, normal play time only (RFC 2326 §3.6, §12.29).
//!
//! Parsing of the npt grammar is rtsp-types' `NptRange`; we add the unit
//! check, range checks and the conversion to seconds.

use rtsp_types::headers::{NptRange as WireRange, NptTime};

/// A requested play range in seconds from the start of the title.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct NptRange {
    /// `None` = `now` (continue from the current position).
    pub start: Option<f64>,
    /// `None` = to the end.
    pub end: Option<f64>,
}

/// Why a `Range` header cannot be honoured (answer 457 Invalid Range).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RangeError {
    /// `clock=`, `smpte=` or another unit.
    #[error("unsupported range unit")]
    Unsupported,
    /// Not valid npt, or end before start.
    #[error("invalid npt range")]
    Invalid,
}

impl RangeError {
    /// 457 for both kinds.
    pub fn status(&self) -> u16 {
        457
    }
}

/// Parse `npt=5-`, `npt=5.5-10`, `npt=now-`, `npt=-10` (start 0),
/// `npt=0:01:05.5-`. A `;time=` suffix is ignored.
pub fn parse_npt(header: &str) -> Result<NptRange, RangeError> {
    parse_directed(header, false)
}

/// As [`parse_npt`], for reverse play (a negative `Scale`): the range runs
/// from its start back to its end, so the end may not lie after it
/// (RFC 2326 §12.34: `npt=20-10` plays from 20 s back to 10 s).
pub fn parse_npt_backwards(header: &str) -> Result<NptRange, RangeError> {
    parse_directed(header, true)
}

fn parse_directed(header: &str, backwards: bool) -> Result<NptRange, RangeError> {
    let spec = header.split(';').next().unwrap_or("");
    let spec: String = spec.chars().filter(|c| !c.is_ascii_whitespace()).collect();
    let Some((unit, _)) = spec.split_once('=') else {
        return Err(if spec.eq_ignore_ascii_case("npt") || spec.is_empty() {
            RangeError::Invalid
        } else {
            RangeError::Unsupported
        });
    };
    if !unit.eq_ignore_ascii_case("npt") {
        return Err(RangeError::Unsupported);
    }
    let spec = format!("npt{}", &spec[unit.len()..]);
    let wire: WireRange = spec.parse().map_err(|_| RangeError::Invalid)?;
    let (start, end) = match wire {
        WireRange::Empty => return Err(RangeError::Invalid),
        WireRange::From(s) => (seconds(s)?, None),
        WireRange::FromTo(s, e) => (seconds(s)?, Some(seconds(e)?)),
        WireRange::To(e) => (Some(0.0), Some(seconds(e)?)),
    };
    let end = match end {
        // `now` as an end point means nothing for stored media.
        Some(None) => return Err(RangeError::Invalid),
        Some(Some(e)) => Some(e),
        None => None,
    };
    if let (Some(s), Some(e)) = (start, end)
        && (if backwards { e > s } else { e < s })
    {
        return Err(RangeError::Invalid);
    }
    Ok(NptRange { start, end })
}

fn seconds(t: NptTime) -> Result<Option<f64>, RangeError> {
    let frac = |ns: Option<u32>| f64::from(ns.unwrap_or(0)) / 1e9;
    let s = match t {
        NptTime::Now => return Ok(None),
        NptTime::Seconds(s, ns) => s as f64 + frac(ns),
        NptTime::Hms(h, m, s, ns) => {
            if m >= 60 || s >= 60 {
                return Err(RangeError::Invalid);
            }
            h as f64 * 3600.0 + f64::from(m) * 60.0 + f64::from(s) + frac(ns)
        }
    };
    if s.is_finite() {
        Ok(Some(s))
    } else {
        Err(RangeError::Invalid)
    }
}

/// `npt=5.000-10.000`, or `npt=5.000-` without an end. Negative or NaN
/// values are written as 0.
pub fn format_npt(start_s: f64, end_s: Option<f64>) -> String {
    let clean = |v: f64| if v.is_finite() && v > 0.0 { v } else { 0.0 };
    match end_s {
        Some(e) => format!("npt={:.3}-{:.3}", clean(start_s), clean(e)),
        None => format!("npt={:.3}-", clean(start_s)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn r(start: Option<f64>, end: Option<f64>) -> NptRange {
        NptRange { start, end }
    }

    #[test]
    fn forms() {
        assert_eq!(parse_npt("npt=5-"), Ok(r(Some(5.0), None)));
        assert_eq!(parse_npt("npt=5.5-10"), Ok(r(Some(5.5), Some(10.0))));
        assert_eq!(parse_npt("npt=now-"), Ok(r(None, None)));
        assert_eq!(parse_npt("npt=-10"), Ok(r(Some(0.0), Some(10.0))));
        assert_eq!(parse_npt("npt=0:01:05.5-"), Ok(r(Some(65.5), None)));
        assert_eq!(parse_npt("npt=1:00:00-"), Ok(r(Some(3600.0), None)));
        assert_eq!(parse_npt(" npt = 0.000 - "), Ok(r(Some(0.0), None)));
        assert_eq!(parse_npt("NPT=3-"), Ok(r(Some(3.0), None)));
        assert_eq!(
            parse_npt("npt=1-2;time=19970123T143720Z"),
            Ok(r(Some(1.0), Some(2.0)))
        );
        assert_eq!(parse_npt("npt=now-5"), Ok(r(None, Some(5.0))));
    }

    #[test]
    fn backwards_ranges_end_before_their_start() {
        assert_eq!(
            parse_npt_backwards("npt=20-10"),
            Ok(r(Some(20.0), Some(10.0)))
        );
        assert_eq!(parse_npt_backwards("npt=20-"), Ok(r(Some(20.0), None)));
        assert_eq!(parse_npt_backwards("npt=10-20"), Err(RangeError::Invalid));
        assert_eq!(parse_npt("npt=20-10"), Err(RangeError::Invalid));
    }

    #[test]
    fn unsupported_units() {
        for h in [
            "clock=19961108T142300Z-19961108T143520Z",
            "smpte=10:07:00-10:07:33:05.01",
            "smpte-25=10:07:00-",
            "bytes=0-",
            "foo",
        ] {
            assert_eq!(parse_npt(h), Err(RangeError::Unsupported), "{h}");
        }
        assert_eq!(RangeError::Unsupported.status(), 457);
    }

    #[test]
    fn invalid() {
        for h in [
            "",
            "npt",
            "npt=",
            "npt=-",
            "npt=-5-",
            "npt=abc-",
            "npt=5-now",
            "npt=10-5",
            "npt=-1-",
            "npt=NaN-",
            "npt=inf-",
            "npt=1e3-",
            "npt=0:60:00-",
            "npt=0:00:60-",
            "npt=1.-",
            "npt=1.1234567890-",
            "npt=99999999999999999999999-",
            "npt=0:00-",
        ] {
            assert_eq!(parse_npt(h), Err(RangeError::Invalid), "{h}");
        }
        assert_eq!(RangeError::Invalid.status(), 457);
    }

    #[test]
    fn format() {
        assert_eq!(format_npt(5.0, Some(10.0)), "npt=5.000-10.000");
        assert_eq!(format_npt(0.0, None), "npt=0.000-");
        assert_eq!(format_npt(-3.0, Some(f64::NAN)), "npt=0.000-0.000");
        assert_eq!(format_npt(1.23456, None), "npt=1.235-");
    }

    proptest! {
        #[test]
        fn round_trip(start in 0.0f64..1e7, len in proptest::option::of(0.0f64..1e7)) {
            let end = len.map(|l| start + l);
            let parsed = parse_npt(&format_npt(start, end)).unwrap();
            prop_assert!((parsed.start.unwrap() - start).abs() <= 0.0005 + 1e-9);
            match (parsed.end, end) {
                (Some(p), Some(e)) => prop_assert!((p - e).abs() <= 0.0005 + 1e-9),
                (None, None) => {}
                other => prop_assert!(false, "{other:?}"),
            }
        }

        #[test]
        fn never_panics(s in "\\PC{0,60}") {
            let _ = parse_npt(&s);
        }

        #[test]
        fn never_panics_nptish(s in "npt=[0-9:.now+-]{0,30}") {
            if let Ok(r) = parse_npt(&s) {
                prop_assert!(r.start.is_none_or(|v| v.is_finite() && v >= 0.0));
                prop_assert!(r.end.is_none_or(|v| v.is_finite() && v >= 0.0));
            }
        }
    }
}
