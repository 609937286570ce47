//! A title as the storage layer sees it (`fjord_storage::Source`): its
//! mapped files, the bytes each run of packets touches, whether a file
//! changed on disk since it was loaded, the fill of bytes not yet on local
//! disk (an edge title's media, index, packet file and parity), and the rebuild of
//! bytes the disk fails to read.

use std::{ops::Range, path::Path};

use fjord_storage::{Extent, Hold, MappedFile, Source, Uses};

use crate::{Title, files::Slot};

impl Source for Title {
    fn files(&self) -> &[MappedFile] {
        self.files().mapped()
    }

    fn device(&self) -> u64 {
        self.files().device()
    }

    fn track_count(&self) -> usize {
        self.index().track_count()
    }

    fn default_uses(&self) -> Uses {
        if self.has_prefab() {
            Uses::INDEX | Uses::PREFAB
        } else {
            Uses::INDEX | Uses::MEDIA
        }
    }

    fn packet_count(&self, t: usize) -> u32 {
        self.index().track(t).map_or(0, |t| t.packet_count() as u32)
    }

    fn duration_ns(&self) -> u64 {
        self.index().duration_ns()
    }

    fn send_time_ns(&self, t: usize, i: u32) -> Option<u64> {
        Some(self.index().track(t)?.packet(i as usize)?.send_time_ns)
    }

    fn extents(&self, t: usize, packets: Range<u32>, uses: Uses, out: &mut Vec<Extent>) {
        let Some(track) = self.index().track(t) else {
            return;
        };
        // What sending reads besides the tables the packets are found from.
        self.tables(t, packets.clone(), uses, out);
        let range = packets.start as usize..packets.end as usize;
        let mut add = |slot: Slot, bytes: &[u8]| self.files().extent(slot, bytes, out);
        if uses.has(Uses::PREFAB)
            && let Some((_, bytes)) = self.prefab(t).and_then(|p| p.spans(range.clone()))
        {
            add(Slot::Prefab, bytes);
        }
        if uses.has(Uses::MEDIA) {
            let span =
                range
                    .clone()
                    .filter_map(|i| track.packet(i))
                    .fold(None::<(u64, u64)>, |acc, r| {
                        let (a, b) = acc.unwrap_or((r.offset, r.file_end()));
                        Some((a.min(r.offset), b.max(r.file_end())))
                    });
            if let Some((a, b)) = span {
                let media = self.media();
                add(
                    Slot::Media,
                    media.get(a as usize..b as usize).unwrap_or_default(),
                );
            }
        }
        if uses.has(Uses::PARITY) {
            self.parity_extents(t, range, &mut add);
        }
    }

    fn tables(&self, t: usize, packets: Range<u32>, uses: Uses, out: &mut Vec<Extent>) {
        let Some(track) = self.index().track(t) else {
            return;
        };
        let range = packets.start as usize..packets.end as usize;
        let mut add = |slot: Slot, bytes: &[u8]| self.files().extent(slot, bytes, out);
        add(Slot::Index, track.records(range.clone()));
        if uses.has(Uses::PREFAB)
            && let Some(p) = self.prefab(t)
        {
            add(Slot::Prefab, p.entries(range));
        }
    }

    fn table_bytes(&self, t: usize, uses: Uses) -> u64 {
        // Found from the mappings' lengths, as `tables` finds them.
        let mut out = Vec::new();
        self.tables(t, 0..1, uses, &mut out);
        out.iter().map(|e| e.range.len() as u64).sum()
    }

    fn head(&self, out: &mut Vec<Extent>) {
        let mut add = |slot: Slot, bytes: &[u8]| self.files().extent(slot, bytes, out);
        let index = self.index();
        add(Slot::Index, &index.bytes()[..index.head_len()]);
        for track in index.tracks() {
            add(Slot::Index, track.sync_table());
        }
        if let Some(head) = self.prefab_head() {
            add(Slot::Prefab, head);
        }
        if let Some((sidecar, _)) = self.sidecar() {
            add(Slot::Parity, sidecar.head());
            for t in 0..sidecar.track_count() {
                if let Some(fec) = sidecar.track(t) {
                    add(Slot::Parity, fec.block_table());
                }
            }
        }
    }

    fn trailing_packets(&self, t: usize) -> u32 {
        // A block's repair packets read its first packet's record.
        self.fec(t).map_or(1, |f| u32::from(f.params().k) + 1)
    }

    fn changed(&self) -> bool {
        self.files_changed()
    }

    fn fill(&self, file: usize, range: Range<usize>) -> Result<Option<Hold>, String> {
        let range = range.start as u64..range.end as u64;
        match file {
            f if f == Slot::Media as usize => self.fill(Slot::Media, range),
            f if f == Slot::Index as usize => self.fill(Slot::Index, range),
            f if f == Slot::Prefab as usize => self.fill(Slot::Prefab, range),
            f if f == Slot::Parity as usize => self.fill(Slot::Parity, range),
            _ => Ok(None),
        }
    }

    fn filled(&self) -> bool {
        self.needs_origin()
    }

    fn rebuild(&self, file: usize, range: Range<usize>, out: &mut [u8]) -> Result<usize, String> {
        let slot = match file {
            f if f == Slot::Media as usize => Slot::Media,
            f if f == Slot::Prefab as usize => Slot::Prefab,
            _ => return Err("only the media and packet files can be rebuilt".into()),
        };
        let files = self.files();
        let shown = |s: Slot| {
            files
                .path(s)
                .map_or("?".into(), |p| p.display().to_string())
        };
        let name = shown(slot);
        let media = files
            .path(Slot::Media)
            .map(Path::to_owned)
            .unwrap_or_default();
        let media = match files.path(Slot::Parity) {
            Some(p) if p != fjord_fec::sidecar_path_for(&media) => {
                format!("--parity {} {}", p.display(), media.display())
            }
            _ => media.display().to_string(),
        };
        let read = |s: Slot, buf: &mut [u8], at: u64| files.read_at(s, buf, at);
        let bytes = format!("bytes {}..{}", range.start, range.end);
        match crate::rebuild::rebuild(self, slot, range, out, &read) {
            Ok(r) if r.failed.is_empty() => Ok(0),
            Ok(r) => {
                self.flag_for_repair();
                let failed: Vec<String> = r
                    .failed
                    .iter()
                    .map(|f| format!("{}..{}", f.start, f.end))
                    .collect();
                tracing::warn!(
                    file = %name,
                    "read error at bytes {}: rebuilt {} packets ({} from the parity) in memory, the title plays on; run `fjord repair {media}`",
                    failed.join(", "),
                    r.packets,
                    r.from_parity,
                );
                Ok(r.packets)
            }
            Err(why) => {
                self.flag_for_repair();
                tracing::warn!(
                    file = %name,
                    "read error in {bytes} that cannot be rebuilt: {why}; its sessions end; run `fjord repair {media}` (or restore the file)"
                );
                Err(why)
            }
        }
    }
}

impl Title {
    /// The repair symbols of the blocks holding packets `range` of track `t`.
    fn parity_extents(&self, t: usize, range: Range<usize>, add: &mut impl FnMut(Slot, &[u8])) {
        let Some(fec) = self.fec(t) else { return };
        let first = fec.block_of(range.start as u64);
        let last = range
            .end
            .checked_sub(1)
            .and_then(|i| fec.block_of(i as u64));
        let (Some(first), Some(last)) = (first, last) else {
            return;
        };
        for b in first..=last {
            if let Some(data) = fec.block(b).and_then(|blk| fec.repair_data(&blk)) {
                add(Slot::Parity, data);
            }
        }
    }
}
