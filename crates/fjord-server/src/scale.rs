//! Which `Scale` and `Speed` a PLAY gets (RFC 2326 §12.34, §12.35).
//!
//! `Scale`: 1, or a whole number up to [`MAX_SCALE`] either way, played
//! from the key frames of a title that has them (trick play, in the
//! engine). `Speed`: a decimal up to the configured `max_speed`, the same
//! packets delivered that much faster or slower. Slow motion (fractional
//! Scale) and both at once are not built: 456 with the reason, never a
//! stream at the wrong rate.

use fjord_engine::{MAX_SCALE, REAL_TIME, Title};
use fjord_proto::rtsp::rate;

/// Why a PLAY's rate cannot be honoured: status and reason.
pub type Refusal = (u16, String);

/// What a PLAY asked for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Rate {
    pub scale: i32,
    /// In millionths of real time ([`REAL_TIME`]).
    pub speed: u32,
}

impl Rate {
    /// Every packet, in real time.
    pub(crate) const NORMAL: Rate = Rate {
        scale: 1,
        speed: REAL_TIME,
    };
}

/// RTSP 2.0's `Media-Properties` (RFC 7826 §18.29) for `title`, which
/// RTSP 1.0 clients ignore: seekable anywhere, unchanging, always there,
/// and the Scales trick play offers (only 1 without key frames).
pub fn media_properties(title: &Title) -> String {
    let key_frames = title.index().tracks().any(|t| t.sync_count() > 0);
    let scales = if key_frames {
        format!("-{MAX_SCALE}:-1, 1:{MAX_SCALE}")
    } else {
        "1".to_owned()
    };
    format!("Random-Access, Immutable, Unlimited, Scales=\"{scales}\"")
}

/// The rate a PLAY of `title` asks for with its `Scale` and `Speed`
/// headers (1 and real time without them).
pub fn requested(
    scale: Option<&str>,
    speed: Option<&str>,
    max_speed: f64,
    title: &Title,
) -> Result<Rate, Refusal> {
    let speed = match speed {
        None => REAL_TIME,
        Some(v) => requested_speed(v, max_speed)?,
    };
    let scale = match scale {
        None => 1,
        Some(v) => requested_scale(v, title)?,
    };
    if scale != 1 && speed != REAL_TIME {
        return Err((456, "Scale and Speed together are not supported".to_owned()));
    }
    Ok(Rate { scale, speed })
}

fn requested_speed(v: &str, max_speed: f64) -> Result<u32, Refusal> {
    let Some(x) = rate::parse(v, false) else {
        return Err((400, format!("invalid Speed: {v}")));
    };
    let millionths = (x * f64::from(REAL_TIME)).round();
    if x > max_speed || millionths < 1.0 {
        let why = format!("Speed {v} is not supported: up to {max_speed} (max_speed)");
        return Err((456, why));
    }
    Ok(millionths as u32)
}

fn requested_scale(v: &str, title: &Title) -> Result<i32, Refusal> {
    let Some(x) = rate::parse(v, true) else {
        return Err((400, format!("invalid Scale: {v}")));
    };
    let whole = x.fract() == 0.0 && x.abs() <= f64::from(MAX_SCALE);
    if !whole {
        let why = format!(
            "Scale {v} is not supported: whole numbers from -{MAX_SCALE} to {MAX_SCALE} (no slow motion)"
        );
        return Err((456, why));
    }
    let scale = x as i32;
    let key_frames = title.index().tracks().any(|t| t.sync_count() > 0);
    if scale != 1 && !key_frames {
        return Err((
            456,
            format!("Scale {v}: this title has no key frames to play fast"),
        ));
    }
    Ok(scale)
}
