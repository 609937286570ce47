//! Fragmented MP4 input (CMAF, what packagers and browser recorders write):
//! the samples of every `moof`'s track fragments (`tfhd`, `tfdt`, `trun`,
//! with the `trex` defaults of `mvex`), appended to their track's sample
//! table so the rest of ingest treats them as any MP4's. `sidx` and `mfra`
//! are indexes of what this reads anyway: skipped.

use super::{BoxRef, Boxes, Reader, Sample, child, invalid};
use crate::format::FormatError;

/// `tfhd` flags.
const BASE_DATA_OFFSET: u32 = 0x1;
const DESCRIPTION_INDEX: u32 = 0x2;
const DEFAULT_DURATION: u32 = 0x8;
const DEFAULT_SIZE: u32 = 0x10;
const DEFAULT_FLAGS: u32 = 0x20;
const DEFAULT_BASE_IS_MOOF: u32 = 0x2_0000;
/// `trun` flags.
const DATA_OFFSET: u32 = 0x1;
const FIRST_SAMPLE_FLAGS: u32 = 0x4;
const SAMPLE_DURATION: u32 = 0x100;
const SAMPLE_SIZE: u32 = 0x200;
const SAMPLE_FLAGS: u32 = 0x400;
const SAMPLE_CTO: u32 = 0x800;
/// Sample flags: sample_is_non_sync_sample.
const NON_SYNC: u32 = 0x1_0000;

/// A track's sample defaults (`trex`, overridden per fragment by `tfhd`).
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct Defaults {
    duration: u32,
    size: u32,
    flags: u32,
}

/// The `trex` defaults of every track, by track ID.
pub(super) fn defaults(data: &[u8], moov: BoxRef) -> Result<Vec<(u32, Defaults)>, FormatError> {
    let Some(mvex) = child(data, moov, b"mvex")? else {
        return Ok(Vec::new());
    };
    let mut out = Vec::new();
    for b in Boxes::of(data, mvex) {
        let b = b?;
        if &b.kind != b"trex" {
            continue;
        }
        let mut r = Reader::new(data, b, "trex");
        r.version()?;
        let id = r.u32()?;
        r.u32()?;
        out.push((
            id,
            Defaults {
                duration: r.u32()?,
                size: r.u32()?,
                flags: r.u32()?,
            },
        ));
    }
    Ok(out)
}

/// Appends the samples of track `id` in every fragment of `moofs` (file
/// offset of the box's header, and the box; in file order) to `samples`,
/// `next_dts` the decode time of the next (a `tfdt` sets it). A fragment
/// that cannot be read ends the track there with a warning, unless it is
/// the first of `moofs` (then an error: the file is refused).
pub(super) fn append(
    data: &[u8],
    moofs: &[super::Moof],
    id: u32,
    trex: &[(u32, Defaults)],
    next_dts: &mut i64,
    samples: &mut Vec<Sample>,
    warnings: &mut Vec<String>,
) -> Result<(), FormatError> {
    let base = trex
        .iter()
        .find(|(t, _)| *t == id)
        .map(|&(_, d)| d)
        .unwrap_or_default();
    for (i, &(header, moof)) in moofs.iter().enumerate() {
        if let Err(e) = fragment(data, header, moof, id, base, next_dts, samples) {
            if i == 0 {
                return Err(e);
            }
            warnings.push(format!(
                "fragment at byte {header} unreadable ({e}); track {id} ends there"
            ));
            break;
        }
    }
    Ok(())
}

/// The samples of track `id` in one `moof` whose header is at `header`.
fn fragment(
    data: &[u8],
    header: u64,
    moof: BoxRef,
    id: u32,
    trex: Defaults,
    next_dts: &mut i64,
    samples: &mut Vec<Sample>,
) -> Result<(), FormatError> {
    // Without explicit bases, a fragment's first track data starts at the
    // moof and each next at the end of the previous (ISO 14496-12 §8.8.7.1).
    let mut data_end = header;
    for traf in Boxes::of(data, moof) {
        let traf = traf?;
        if &traf.kind != b"traf" {
            continue;
        }
        let tfhd = child(data, traf, b"tfhd")?.ok_or_else(|| invalid("'traf' without 'tfhd'"))?;
        let (tid, mut base, d) = read_tfhd(data, tfhd, trex)?;
        if base == u64::MAX {
            base = data_end;
        } else if base == u64::MAX - 1 {
            base = header;
        }
        if let Some(tfdt) = child(data, traf, b"tfdt")?
            && tid == id
        {
            let mut r = Reader::new(data, tfdt, "tfdt");
            let v = r.version()?;
            let t = if v == 1 {
                r.u64()?
            } else {
                u64::from(r.u32()?)
            };
            *next_dts = i64::try_from(t).map_err(|_| invalid("'tfdt' time out of range"))?;
        }
        let mut pos = base;
        for trun in Boxes::of(data, traf) {
            let trun = trun?;
            if &trun.kind != b"trun" {
                continue;
            }
            let mine = (tid == id).then_some(&mut *samples);
            pos = read_trun(data, trun, base, pos, d, next_dts, mine)?;
        }
        data_end = pos;
    }
    Ok(())
}

/// Track ID, base data offset (`u64::MAX`: after the previous track
/// fragment's data, `u64::MAX - 1`: the moof) and sample defaults of a `tfhd`.
fn read_tfhd(
    data: &[u8],
    tfhd: BoxRef,
    trex: Defaults,
) -> Result<(u32, u64, Defaults), FormatError> {
    let mut r = Reader::new(data, tfhd, "tfhd");
    let flags = r.u32()? & 0xff_ffff;
    let id = r.u32()?;
    let mut base = if flags & DEFAULT_BASE_IS_MOOF != 0 {
        u64::MAX - 1
    } else {
        u64::MAX
    };
    if flags & BASE_DATA_OFFSET != 0 {
        base = r.u64()?;
    }
    if flags & DESCRIPTION_INDEX != 0 {
        r.u32()?;
    }
    let mut d = trex;
    if flags & DEFAULT_DURATION != 0 {
        d.duration = r.u32()?;
    }
    if flags & DEFAULT_SIZE != 0 {
        d.size = r.u32()?;
    }
    if flags & DEFAULT_FLAGS != 0 {
        d.flags = r.u32()?;
    }
    Ok((id, base, d))
}

/// Reads one `trun`; its samples go to `out` when it is of the wanted
/// track. `pos` is where its data starts unless it says; returns where
/// its data ends.
fn read_trun(
    data: &[u8],
    trun: BoxRef,
    base: u64,
    mut pos: u64,
    d: Defaults,
    next_dts: &mut i64,
    mut out: Option<&mut Vec<Sample>>,
) -> Result<u64, FormatError> {
    let mut r = Reader::new(data, trun, "trun");
    let word = r.u32()?;
    let flags = word & 0xff_ffff;
    let fields = [SAMPLE_DURATION, SAMPLE_SIZE, SAMPLE_FLAGS, SAMPLE_CTO]
        .iter()
        .filter(|&&f| flags & f != 0)
        .count();
    let count = r.u32()? as usize;
    if flags & DATA_OFFSET != 0 {
        pos = base
            .checked_add_signed(i64::from(r.u32()? as i32))
            .ok_or_else(|| invalid("'trun' data offset before the file"))?;
    }
    let first_flags = if flags & FIRST_SAMPLE_FLAGS != 0 {
        Some(r.u32()?)
    } else {
        None
    };
    // Bounded by the box (per-sample fields) or the file (default sizes).
    let fits = if fields > 0 {
        count <= r.b.len().saturating_sub(r.pos) / (4 * fields)
    } else {
        d.size > 0 && count <= data.len() / d.size as usize
    };
    if !fits {
        return Err(invalid(format!(
            "'trun' claims {count} samples, more than it or the file holds"
        )));
    }
    for i in 0..count {
        let dur = if flags & SAMPLE_DURATION != 0 {
            r.u32()?
        } else {
            d.duration
        };
        let size = if flags & SAMPLE_SIZE != 0 {
            r.u32()?
        } else {
            d.size
        };
        let sflags = if flags & SAMPLE_FLAGS != 0 {
            r.u32()?
        } else {
            first_flags.filter(|_| i == 0).unwrap_or(d.flags)
        };
        // Signed in version 1; version 0 writers put negative values too.
        let cto = if flags & SAMPLE_CTO == 0 {
            0
        } else {
            i64::from(r.u32()? as i32)
        };
        if let Some(out) = out.as_deref_mut() {
            out.push(Sample {
                offset: pos,
                size,
                dts: *next_dts,
                cts: next_dts.saturating_add(cto),
                dur,
                sync: sflags & NON_SYNC == 0,
            });
            *next_dts = next_dts.saturating_add(i64::from(dur));
        }
        pos = pos.saturating_add(u64::from(size));
    }
    Ok(pos)
}
