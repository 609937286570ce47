//! Block layout parameters: K source packets and M repair packets per block.

use std::fmt;
use std::str::FromStr;

/// Most packets (K + M) in one block: n ≤ 2^8 − 1 for Reed-Solomon over
/// GF(2^8) (RFC 5510, RFC 6865 with m = 8).
pub const MAX_BLOCK_PACKETS: u32 = crate::rs::MAX_N as u32;
/// Added delay the default layout aims for: a receiver waits at most one
/// block for its repair packets.
pub const DEFAULT_MAX_DELAY_NS: u64 = 300_000_000;
/// Largest default block: n = 255, 1 repair packet in 8 (32 of 255, 12.5 %).
pub const DEFAULT_MAX: FecParams = FecParams { k: 223, m: 32 };

/// K source symbols and M repair symbols per block.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FecParams {
    pub k: u16,
    pub m: u16,
}

/// Why a `--fec` value is refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ParamsError {
    #[error("expected K:M (e.g. 223:32), \"auto\" or \"off\", got {0:?}")]
    Syntax(String),
    #[error("K and M must both be at least 1 (got {k}:{m})")]
    Zero { k: u32, m: u32 },
    #[error("K + M must be at most {MAX_BLOCK_PACKETS} (got {k}:{m})")]
    TooLarge { k: u32, m: u32 },
}

impl FecParams {
    /// Checked constructor: 1 ≤ K, 1 ≤ M, K + M ≤ [`MAX_BLOCK_PACKETS`].
    pub fn new(k: u32, m: u32) -> Result<FecParams, ParamsError> {
        if k == 0 || m == 0 {
            return Err(ParamsError::Zero { k, m });
        }
        if k + m > MAX_BLOCK_PACKETS {
            return Err(ParamsError::TooLarge { k, m });
        }
        Ok(FecParams {
            k: k as u16,
            m: m as u16,
        })
    }

    /// Repair bytes as a share of everything sent, M / (K + M).
    pub fn overhead(&self) -> f64 {
        f64::from(self.m) / (f64::from(self.k) + f64::from(self.m))
    }

    /// The default for a track: blocks that span at most
    /// [`DEFAULT_MAX_DELAY_NS`] of the track at its bitrate, 1 repair packet
    /// per 8 (12.5 %), at most [`DEFAULT_MAX`]. Very low rates get smaller
    /// blocks (and so a higher overhead) rather than a longer delay.
    pub fn for_track(bitrate_bps: u64, avg_packet_bytes: u64) -> FecParams {
        let per_window = (u128::from(bitrate_bps) * u128::from(DEFAULT_MAX_DELAY_NS))
            / (8 * 1_000_000_000 * u128::from(avg_packet_bytes.max(1)));
        let max = u128::from(DEFAULT_MAX.k + DEFAULT_MAX.m);
        let n = per_window.clamp(2, max) as u16;
        let m = n.div_ceil(8).max(1);
        FecParams { k: n - m, m }
    }
}

impl fmt::Display for FecParams {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.k, self.m)
    }
}

/// What `--fec` asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum FecChoice {
    /// No parity sidecar.
    Off,
    /// [`FecParams::for_track`] per track.
    #[default]
    Auto,
    /// The same layout for every track.
    Fixed(FecParams),
}

impl FromStr for FecChoice {
    type Err = ParamsError;

    fn from_str(s: &str) -> Result<FecChoice, ParamsError> {
        match s {
            "off" => return Ok(FecChoice::Off),
            "auto" => return Ok(FecChoice::Auto),
            _ => {}
        }
        let syntax = || ParamsError::Syntax(s.to_owned());
        let (k, m) = s.split_once(':').ok_or_else(syntax)?;
        let number = |v: &str| {
            if v.is_empty() || !v.bytes().all(|b| b.is_ascii_digit()) {
                return Err(syntax());
            }
            v.parse::<u32>()
                .map_err(|_| ParamsError::TooLarge { k: u32::MAX, m: 0 })
        };
        Ok(FecChoice::Fixed(FecParams::new(number(k)?, number(m)?)?))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_strictly() {
        assert_eq!("off".parse(), Ok(FecChoice::Off));
        assert_eq!("auto".parse(), Ok(FecChoice::Auto));
        assert_eq!(
            "223:32".parse(),
            Ok(FecChoice::Fixed(FecParams { k: 223, m: 32 }))
        );
        for bad in [
            "", "224", "224:", ":32", "+1:2", "1: 2", "1:2:3", "a:b", "OFF",
        ] {
            assert!(
                matches!(bad.parse::<FecChoice>(), Err(ParamsError::Syntax(_))),
                "{bad}"
            );
        }
        assert!(matches!(
            "0:4".parse::<FecChoice>(),
            Err(ParamsError::Zero { .. })
        ));
        assert!(matches!(
            "4:0".parse::<FecChoice>(),
            Err(ParamsError::Zero { .. })
        ));
        assert!(matches!(
            "255:1".parse::<FecChoice>(),
            Err(ParamsError::TooLarge { .. })
        ));
        assert!(matches!(
            "99999999999:1".parse::<FecChoice>(),
            Err(ParamsError::TooLarge { .. })
        ));
        assert!(matches!(
            "224:32".parse::<FecChoice>(),
            Err(ParamsError::TooLarge { .. })
        ));
        assert!("254:1".parse::<FecChoice>().is_ok());
    }

    #[test]
    fn default_bounds_delay_and_overhead() {
        // 8 Mbit/s of 1316-byte packets: 227 whole packets in 300 ms.
        let p = FecParams::for_track(8_000_000, 1316);
        assert_eq!(p, FecParams { k: 198, m: 29 });
        assert_eq!(FecParams::for_track(100_000_000, 1316), DEFAULT_MAX);
        assert!((DEFAULT_MAX.overhead() - 0.125).abs() < 0.001);
        // 64 kbit/s audio of 200-byte packets: 12 packets in 300 ms.
        assert_eq!(FecParams::for_track(64_000, 200), FecParams { k: 10, m: 2 });
        assert_eq!(FecParams::for_track(0, 0), FecParams { k: 1, m: 1 });
    }
}
