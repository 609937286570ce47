//! An origin title's file as the fragmenters read it ([`super::fmp4`]):
//! the bytes they parse are filled in from the origin first and held while
//! they read. Of an MP4 file that is its top-level box headers, `moov` and
//! `moof` boxes (`fjord_media::mp4::fragments::reads`), a small part of it;
//! of a Matroska or WebM file, all of it, since its block headers run
//! through the whole file. The segments' samples are filled in as they are
//! sent ([`super::send::Body::filled_from`]).

use std::ops::Range;

use fjord_engine::Title;
use fjord_storage::Hold;

/// Bytes of a whole file asked for at once: slices fetched side by side,
/// within the fill's time limit on a link of a few hundred Mbit/s.
const PIECE: u64 = 32 << 20;

/// Fills in and holds what fragmenting `title` reads.
pub(super) fn hold_parsed(title: &Title) -> Result<Vec<Hold>, String> {
    let len = title.media_len();
    let mut holds = Vec::new();
    let mut fill = |r: Range<u64>| -> Result<(), String> {
        holds.extend(title.fill_media(r.start.min(len)..r.end.min(len))?);
        Ok(())
    };
    fill(0..64)?;
    if fjord_media::mkv::demux::looks_like_matroska(title.media()) {
        for at in (0..len).step_by(PIECE as usize) {
            fill(at..at + PIECE)?;
        }
    } else {
        fjord_media::mp4::fragments::reads(title.media(), &mut fill)?;
    }
    Ok(holds)
}
