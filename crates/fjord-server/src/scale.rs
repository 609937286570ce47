//! Which `Scale` and `Speed` a PLAY gets (RFC 2326 §12.34, §12.35).
//!
//! `Scale`: 1, or a whole number up to [`MAX_SCALE`] either way, played
//! from the key frames of a title that has them (trick play, in the
//! engine). Slow motion (fractions) and `Speed` other than 1 are not
//! built: 456 with the reason, never a stream at the wrong rate.

use fjord_engine::{MAX_SCALE, Title};
use fjord_proto::rtsp::rate;

/// Why a PLAY's rate cannot be honoured: status and reason.
pub type Refusal = (u16, String);

/// The `Scale` a PLAY of `title` asks for (1 without the header).
pub fn requested(scale: Option<&str>, speed: Option<&str>, title: &Title) -> Result<i32, Refusal> {
    if let Some(v) = speed {
        match rate::parse(v, false) {
            Some(1.0) => {}
            Some(_) => {
                return Err((
                    456,
                    format!("Speed {v} is not supported: 1 only (use Scale)"),
                ));
            }
            None => return Err((400, format!("invalid Speed: {v}"))),
        }
    }
    let Some(v) = scale else { return Ok(1) };
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
