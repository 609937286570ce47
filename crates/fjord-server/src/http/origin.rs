//! An origin title's file as the fragmenters read it ([`super::fmp4`]):
//! the bytes they parse are filled in from the origin first and held while
//! they read. Of an MP4 file that is its top-level box headers, `moov` and
//! `moof` boxes (`fjord_media::mp4::fragments::reads`), a small part of it.
//! A Matroska or WebM file's block headers run through the whole file: its
//! frame table, published beside it (`NAME.fjfrm`,
//! `fjord_media::mkv::table`), stands in for them, so only the file's head
//! and a VP9 track's first key frame are filled in; without a usable table
//! the whole file is. The segments' samples are filled in as they are
//! sent ([`super::send::Body::filled_from`]).

use std::ops::Range;

use fjord_engine::Title;
use fjord_media::mkv::demux::Demuxed;
use fjord_media::mkv::table::Table;
use fjord_storage::Hold;

/// Bytes of a whole file asked for at once: slices fetched side by side,
/// within the fill's time limit on a link of a few hundred Mbit/s.
const PIECE: u64 = 32 << 20;

/// The frame table published beside a title, fetched (`None`: there is
/// none).
pub(super) type FrameTable<'a> = &'a dyn Fn() -> Result<Option<Vec<u8>>, String>;

/// Fills in and holds what fragmenting `title` reads; of a Matroska file
/// with a usable frame table, the file as its table reads it.
pub(super) fn hold_parsed(
    title: &Title,
    table: FrameTable,
) -> Result<(Vec<Hold>, Option<Demuxed>), String> {
    let len = title.media_len();
    let mut holds = Vec::new();
    let mut fill = |r: Range<u64>| -> Result<(), String> {
        holds.extend(title.fill_media(r.start.min(len)..r.end.min(len))?);
        Ok(())
    };
    fill(0..64)?;
    if !fjord_media::mkv::demux::looks_like_matroska(title.media()) {
        fjord_media::mp4::fragments::reads(title.media(), &mut fill)?;
        return Ok((holds, None));
    }
    if let Some(d) = from_table(title, table, &mut fill)? {
        return Ok((holds, Some(d)));
    }
    for at in (0..len).step_by(PIECE as usize) {
        fill(at..at + PIECE)?;
    }
    Ok((holds, None))
}

/// The title's Matroska file demuxed from its frame table, what that
/// reads of the file filled in by `fill`; `None` when it has no table,
/// or one that cannot be had or is not of this file (said in the log), so
/// the whole file is read.
fn from_table(
    title: &Title,
    table: FrameTable,
    fill: &mut dyn FnMut(Range<u64>) -> Result<(), String>,
) -> Result<Option<Demuxed>, String> {
    let bytes = match table() {
        Ok(Some(bytes)) => bytes,
        Ok(None) => return Ok(None),
        Err(e) => return unusable(&format!("it could not be fetched: {e}")),
    };
    let table = match Table::parse(&bytes) {
        Ok(t) if t.media_len == title.media_len() => t,
        Ok(_) => return unusable("it is of a file of another length"),
        Err(e) => return unusable(&e.to_string()),
    };
    fill(table.head())?;
    let d = match table.demuxed(title.media()) {
        Ok(d) => d,
        Err(e) => return unusable(&e.to_string()),
    };
    for r in fjord_media::mkv::fragments::frame_reads(&d) {
        fill(r)?;
    }
    Ok(Some(d))
}

fn unusable(why: &str) -> Result<Option<Demuxed>, String> {
    tracing::warn!("an origin title's frame table is not used, the whole file is read: {why}");
    Ok(None)
}
