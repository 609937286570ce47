//! Rebuilding bytes of a title's media or packet file that the disk fails
//! to read (EIO), for the storage layer to lay over the mapping
//! (`fjord_storage::Source::rebuild`): the session plays on.
//!
//! 1. The range is read page by page with `pread` (never through the
//!    mapping: a failed page there is SIGBUS): the readable pages as they
//!    are, and which pages fail.
//! 2. The packets whose bytes lie in a failed page are what must be made
//!    again. A packet's file runs come from the media file; for a packet of
//!    the packet file they are read from the media (its other copy), and
//!    only when they fail there too is the packet lost.
//! 3. Lost packets are erasures of their FEC block: the block's other
//!    packets (read from the media with `pread`) and its repair symbols
//!    (read from the sidecar with `pread`) rebuild them with fjord-fec's
//!    decoder (`fjord_fec::storage::decode_block`, the one `fjord repair`
//!    uses), checked against the symbol hashes written at ingest.
//! 4. The packets' bytes go back where the file holds them: media runs at
//!    their offsets (a packet's payload-header bytes live in the index, not
//!    in the file); a packet-file packet is its RTP header
//!    (`prefab::rtp_header`) and payload at its table offset.
//!
//! A block with more lost packets than repair symbols, failed bytes outside
//! every packet (container overhead, the packet file's tables) or a title
//! without parity where the parity is needed: an error, and the sessions
//! reading those bytes end.

use std::{collections::BTreeMap, io, ops::Range};

use fjord_fec::rs::Codec;
use fjord_media::{plan::PacketRecord, prefab};

use crate::{Title, files::Slot};

/// Reads `buf.len()` bytes of a title's file at an offset, by `pread`.
pub(crate) type ReadAt<'a> = &'a dyn Fn(Slot, &mut [u8], u64) -> io::Result<()>;

/// What a rebuild did.
#[derive(Debug, Default, PartialEq, Eq)]
pub(crate) struct Rebuilt {
    /// The bytes (file offsets) that failed to read, merged.
    pub failed: Vec<Range<u64>>,
    /// Packets whose bytes were made again.
    pub packets: usize,
    /// Of those, packets rebuilt from the parity.
    pub from_parity: usize,
}

/// Fills `out` with bytes `range` of `slot` (the media or the packet
/// file), reading with `read` and rebuilding the pages it fails on.
pub(crate) fn rebuild(
    title: &Title,
    slot: Slot,
    range: Range<usize>,
    out: &mut [u8],
    read: ReadAt<'_>,
) -> Result<Rebuilt, String> {
    if !matches!(slot, Slot::Media | Slot::Prefab) {
        return Err("only the media and packet files can be rebuilt".into());
    }
    if out.len() != range.len() {
        return Err("the buffer does not fit the range".into());
    }
    let failed = read_pages(slot, range.clone(), out, read)?;
    if failed.is_empty() {
        return Ok(Rebuilt::default());
    }
    // The packets with bytes in a failed page, and where those bytes are.
    let mut wanted: Vec<Wanted> = Vec::new();
    for t in 0..title.index().track_count() {
        match slot {
            Slot::Media => media_packets(title, t, &failed, &mut wanted),
            _ => packet_file_packets(title, t, &failed, read, &mut wanted)?,
        }
    }
    let runs = runs_of(title, slot, &wanted, read)?;
    let covered = put_back(title, (slot, range), out, &wanted, &runs)?;
    all_covered(&failed, covered)?;
    Ok(Rebuilt {
        failed,
        packets: wanted.len(),
        from_parity: runs.from_parity,
    })
}

/// Reads bytes `range` of `slot` into `out` page by page; the pages that
/// fail, merged.
fn read_pages(
    slot: Slot,
    range: Range<usize>,
    out: &mut [u8],
    read: ReadAt<'_>,
) -> Result<Vec<Range<u64>>, String> {
    let page = fjord_storage::overlay::page_size();
    let mut failed: Vec<Range<u64>> = Vec::new();
    let mut at = range.start;
    while at < range.end {
        let end = ((at / page + 1) * page).min(range.end);
        match read(
            slot,
            &mut out[at - range.start..end - range.start],
            at as u64,
        ) {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => {
                return Err("the file is shorter than when it was loaded".into());
            }
            Err(_) => match failed.last_mut() {
                Some(last) if last.end == at as u64 => last.end = end as u64,
                _ => failed.push(at as u64..end as u64),
            },
        }
        at = end;
    }
    Ok(failed)
}

/// Writes the `wanted` packets' bytes (from `runs`) where `slot` holds
/// them, within bytes `range` that `out` holds; the file ranges written.
fn put_back(
    title: &Title,
    (slot, range): (Slot, Range<usize>),
    out: &mut [u8],
    wanted: &[Wanted],
    runs: &Runs,
) -> Result<Vec<Range<u64>>, String> {
    let mut covered: Vec<Range<u64>> = Vec::new();
    let mut put = |at: u64, bytes: &[u8]| {
        let (from, to) = (
            at.max(range.start as u64),
            (at + bytes.len() as u64).min(range.end as u64),
        );
        if from < to {
            let src = &bytes[(from - at) as usize..(to - at) as usize];
            out[(from as usize - range.start)..(to as usize - range.start)].copy_from_slice(src);
            covered.push(from..to);
        }
    };
    for w in wanted {
        let bytes = runs
            .payloads
            .get(&(w.track, w.packet))
            .ok_or("a packet was neither read nor rebuilt")?;
        let (run1, run2) = bytes.split_at(w.rec.len as usize);
        match slot {
            Slot::Media => {
                put(w.rec.offset, run1);
                put(w.rec.offset2(), run2);
            }
            _ => put(w.at.start, &packet_file_bytes(title, w, bytes)?),
        }
    }
    Ok(covered)
}

/// A packet as the packet file holds it: its RTP header, payload-header
/// bytes and `payload`.
fn packet_file_bytes(title: &Title, w: &Wanted, payload: &[u8]) -> Result<Vec<u8>, String> {
    let p = title.prefab(w.track).ok_or("no packet file")?;
    let pt = (title.index().track(w.track))
        .map(|t| t.payload_type())
        .unwrap_or_default();
    let header = prefab::rtp_header(p.ids, pt, w.packet as usize, &w.rec);
    let mut packet = Vec::with_capacity(header.len() + w.rec.payload_len());
    packet.extend_from_slice(&header);
    packet.extend_from_slice(w.rec.prefix());
    packet.extend_from_slice(payload);
    if packet.len() as u64 != w.at.end - w.at.start {
        return Err("a packet's length differs from the packet file's table".into());
    }
    Ok(packet)
}

/// Checks that the packets written cover every failed byte: others are
/// container or table bytes, which the parity does not hold.
fn all_covered(failed: &[Range<u64>], mut covered: Vec<Range<u64>>) -> Result<(), String> {
    covered.sort_by_key(|r| r.start);
    for f in failed {
        let mut at = f.start;
        for c in &covered {
            if c.start <= at && c.end > at {
                at = c.end;
            }
        }
        if at < f.end {
            return Err(format!(
                "bytes {at}..{} belong to no packet (container or table bytes): the parity does not cover them",
                f.end
            ));
        }
    }
    Ok(())
}

/// A packet to make again: its record, and for the packet file its bytes
/// there.
struct Wanted {
    track: usize,
    packet: u64,
    rec: PacketRecord,
    at: Range<u64>,
}

fn overlaps(failed: &[Range<u64>], r: Range<u64>) -> bool {
    !r.is_empty() && failed.iter().any(|f| f.start < r.end && r.start < f.end)
}

/// Packets of track `t` whose media runs lie in a failed range. A scan of
/// the track's records (in the mapped index): rare, and no order of
/// records by offset is assumed.
fn media_packets(title: &Title, t: usize, failed: &[Range<u64>], out: &mut Vec<Wanted>) {
    let Some(track) = title.index().track(t) else {
        return;
    };
    for i in 0..track.packet_count() {
        let Some(rec) = track.packet(i) else { break };
        let run1 = rec.offset..rec.offset + u64::from(rec.len);
        if overlaps(failed, run1) || overlaps(failed, rec.offset2()..rec.file_end()) {
            out.push(Wanted {
                track: t,
                packet: i as u64,
                rec,
                at: 0..0,
            });
        }
    }
}

/// Packets of track `t` whose bytes in the packet file lie in a failed
/// range, found by binary search in the track's offset table (read with
/// `pread`: it may sit in a failed page too).
fn packet_file_packets(
    title: &Title,
    t: usize,
    failed: &[Range<u64>],
    read: ReadAt<'_>,
    out: &mut Vec<Wanted>,
) -> Result<(), String> {
    let (Some(p), Some(track)) = (title.prefab(t), title.index().track(t)) else {
        return Ok(());
    };
    let count = track.packet_count();
    let table = p.table_offset();
    let entry = |i: usize| -> Result<u64, String> {
        let mut b = [0u8; 8];
        read(Slot::Prefab, &mut b, table + 8 * i as u64).map_err(|e| {
            format!(
                "the packet file's offset table cannot be read ({e}): the parity does not cover it"
            )
        })?;
        Ok(u64::from_le_bytes(b))
    };
    for f in failed {
        // The last packet starting at or before f.start (or the first).
        let (mut lo, mut hi) = (0usize, count);
        while hi - lo > 1 {
            let mid = lo + (hi - lo) / 2;
            if entry(mid)? <= f.start {
                lo = mid;
            } else {
                hi = mid;
            }
        }
        let mut i = lo;
        let mut start = if count > 0 { entry(i)? } else { 0 };
        while i < count && start < f.end {
            let end = entry(i + 1)?;
            if end > f.start && !out.iter().any(|w| w.track == t && w.packet == i as u64) {
                let rec = track.packet(i).ok_or("index record missing")?;
                out.push(Wanted {
                    track: t,
                    packet: i as u64,
                    rec,
                    at: start..end,
                });
            }
            (i, start) = (i + 1, end);
        }
    }
    Ok(())
}

/// The file runs (back to back) of every wanted packet, and how many of
/// them came from the parity.
struct Runs {
    payloads: BTreeMap<(usize, u64), Vec<u8>>,
    from_parity: usize,
}

/// Reads packet `rec`'s file runs from the media, back to back.
fn read_runs(rec: &PacketRecord, read: ReadAt<'_>) -> io::Result<Vec<u8>> {
    let mut buf = vec![0u8; rec.len as usize + rec.len2 as usize];
    let (run1, run2) = buf.split_at_mut(rec.len as usize);
    read(Slot::Media, run1, rec.offset)?;
    if !run2.is_empty() {
        read(Slot::Media, run2, rec.offset2())?;
    }
    Ok(buf)
}

fn runs_of(title: &Title, slot: Slot, wanted: &[Wanted], read: ReadAt<'_>) -> Result<Runs, String> {
    let mut payloads = BTreeMap::new();
    // Lost packets by (track, block).
    let mut lost: BTreeMap<(usize, u64), Vec<u64>> = BTreeMap::new();
    for w in wanted {
        // A media packet in a failed page is lost; a packet-file packet is
        // read from the media, and lost only when that fails too.
        let got = match slot {
            Slot::Media => None,
            _ => read_runs(&w.rec, read).ok(),
        };
        match got {
            Some(bytes) => {
                payloads.insert((w.track, w.packet), bytes);
            }
            None => {
                let fec = title.fec(w.track).ok_or_else(|| {
                    "the title has no parity to rebuild lost packets from".to_owned()
                })?;
                let b = fec.block_of(w.packet).ok_or("packet beyond the parity")?;
                lost.entry((w.track, b)).or_default().push(w.packet);
            }
        }
    }
    let mut from_parity = 0;
    let mut codec = Codec::new();
    for ((t, b), packets) in lost {
        let (Some(fec), Some(track)) = (title.fec(t), title.index().track(t)) else {
            return Err("parity or index track missing".into());
        };
        let blk = fec.block(b).ok_or("parity block missing")?;
        let mut parity = vec![0u8; (blk.repair_range().end - blk.repair_range().start) as usize];
        read(Slot::Parity, &mut parity, blk.repair_off)
            .map_err(|e| format!("the parity of block {b} cannot be read: {e}"))?;
        let mut held: Vec<Option<Vec<u8>>> = Vec::with_capacity(usize::from(blk.source_count));
        let mut recs = Vec::with_capacity(usize::from(blk.source_count));
        for i in blk.packets() {
            let rec = track.packet(i as usize).ok_or("index record missing")?;
            held.push(if packets.contains(&i) {
                None
            } else {
                read_runs(&rec, read).ok()
            });
            recs.push(rec);
        }
        let runs: Vec<Option<[&[u8]; 2]>> = held
            .iter()
            .zip(&recs)
            .map(|(h, rec)| {
                h.as_deref().map(|bytes| {
                    let (a, b) = bytes.split_at(rec.len as usize);
                    [a, b]
                })
            })
            .collect();
        let rebuilt =
            fjord_fec::storage::decode_block(&track, &fec, &blk, &parity, &runs, &mut codec)
                .map_err(|e| format!("track {t}: {e}"))?;
        for (i, bytes) in rebuilt {
            if packets.contains(&i) {
                from_parity += 1;
                payloads.insert((t, i), bytes);
            }
        }
    }
    Ok(Runs {
        payloads,
        from_parity,
    })
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use fjord_fec::{FecChoice, FecParams};
    use fjord_media::{index, synthetic::write_constant_rate};

    use super::*;

    const MS: u64 = 1_000_000;
    const PAYLOAD: usize = 7 * 188;

    /// 200 packets of 1316 bytes (every byte of packet i is i as u8) with
    /// 10:6 parity and prefabricated packets.
    fn title(dir: &Path) -> (Title, Vec<u8>, Vec<u8>) {
        let media = dir.join("t.ts");
        let layouts = fjord_fec::layouts(FecChoice::Fixed(FecParams::new(10, 6).unwrap()));
        drop(write_constant_rate(&media, PAYLOAD, 10 * MS, 200, &layouts).unwrap());
        fjord_fec::protect(&media, &mut |_, _| {}).unwrap();
        fjord_media::prefab::prefabricate(&media, &mut |_, _| {}).unwrap();
        let index_path = index::index_path_for(&media);
        let mut title = Title::new(index::Index::open(&index_path).unwrap(), &media).unwrap();
        title
            .attach_fec(
                &fjord_fec::sidecar_path_for(&media),
                &index_path,
                index::Check::Now,
            )
            .unwrap();
        let packets = fjord_media::prefab::prefab_path_for(&media);
        title.attach_prefab(&packets, index::Check::Now).unwrap();
        (
            title,
            std::fs::read(&media).unwrap(),
            std::fs::read(&packets).unwrap(),
        )
    }

    /// Reads the title's files with `pread`, failing (EIO) every page that
    /// overlaps a range of `bad` of its file.
    fn failing<'a>(
        title: &'a Title,
        bad: &'a [(Slot, Range<u64>)],
    ) -> impl Fn(Slot, &mut [u8], u64) -> io::Result<()> + 'a {
        move |slot, buf, at| {
            let page = fjord_storage::overlay::page_size() as u64;
            let pages = at / page * page..(at + buf.len() as u64).div_ceil(page) * page;
            if bad.iter().any(|(s, r)| {
                *s as usize == slot as usize && r.start < pages.end && pages.start < r.end
            }) {
                return Err(io::Error::from_raw_os_error(libc::EIO));
            }
            title.files().read_at(slot, buf, at)
        }
    }

    #[test]
    fn failed_media_pages_are_rebuilt_from_the_parity() {
        let dir = tempfile::tempdir().unwrap();
        let (title, media, _) = title(dir.path());
        // One page inside block 3 (packets 30..40, bytes 39480..52640).
        let bad = [(Slot::Media, 40_000..40_001)];
        let read = failing(&title, &bad);
        let range = 32_768..65_536;
        let mut out = vec![0u8; range.len()];
        let r = rebuild(&title, Slot::Media, range.clone(), &mut out, &read).unwrap();
        assert_eq!(r.failed, vec![36_864..40_960]);
        assert!(r.packets >= 3 && r.from_parity == r.packets, "{r:?}");
        assert_eq!(out, media[range]);
    }

    #[test]
    fn failed_packet_file_pages_are_read_from_the_media_or_rebuilt_from_the_parity() {
        let dir = tempfile::tempdir().unwrap();
        let (title, media, packets) = title(dir.path());
        let range = 65_536..131_072;
        // The packet file fails; the media holds the same payloads.
        let bad = [(Slot::Prefab, 70_000..80_000)];
        let mut out = vec![0u8; range.len()];
        let r = rebuild(
            &title,
            Slot::Prefab,
            range.clone(),
            &mut out,
            &failing(&title, &bad),
        );
        let r = r.unwrap();
        assert_eq!(r.from_parity, 0);
        assert!(r.packets >= 8, "{r:?}");
        assert_eq!(out, packets[range.clone()]);
        // The media fails under the same packets too: the parity rebuilds
        // them (a page of each file, both in block 5, bytes 65800..78960).
        let p = title.prefab(0).unwrap();
        let (at, _) = p.packet(52).unwrap();
        let bad = [(Slot::Prefab, at..at + 1), (Slot::Media, 70_000..70_001)];
        let mut out = vec![0u8; range.len()];
        let r = rebuild(
            &title,
            Slot::Prefab,
            range.clone(),
            &mut out,
            &failing(&title, &bad),
        );
        let r = r.unwrap();
        assert!(r.from_parity >= 1, "{r:?}");
        assert_eq!(out, packets[range.clone()]);
        assert!(!media.is_empty());
    }

    #[test]
    fn more_lost_packets_than_the_parity_repairs_is_an_error() {
        let dir = tempfile::tempdir().unwrap();
        let (title, _, _) = title(dir.path());
        // Block 3 (bytes 39480..52640): 12 KiB lose about 10 of its packets.
        let bad = [(Slot::Media, 40_000..52_000)];
        let mut out = vec![0u8; 32_768];
        let r = rebuild(
            &title,
            Slot::Media,
            32_768..65_536,
            &mut out,
            &failing(&title, &bad),
        );
        let why = r.unwrap_err();
        assert!(why.contains("the parity repairs at most 6"), "{why}");
        // Without failures nothing is rebuilt and the bytes are the file's.
        let r = rebuild(
            &title,
            Slot::Media,
            32_768..65_536,
            &mut out,
            &failing(&title, &[]),
        );
        assert_eq!(r.unwrap(), Rebuilt::default());
    }
}
