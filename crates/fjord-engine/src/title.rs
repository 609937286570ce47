//! A title as the engine sees it: the packetization index and the media
//! file, mapped read-only and open for the paths that read or sendfile.
//! Sessions share it through an `Arc`; a re-ingested title is a new `Title`,
//! so playing sessions keep the mapping they started with. A title may carry
//! the parity sidecar written at ingest: its repair symbols are sent by
//! reference, like the media. It may carry the prefabricated packets
//! written at ingest, which the batching paths send instead of building
//! headers (`fjord_media::prefab`).
//! An edge title's files are sparse files of slices fetched from the
//! origin ([`Title::filled`], [`Title::attach_filled_prefab`]): their bytes
//! are filled in before the storage layer reads them ahead, and only their
//! identity and size tell a change.

use std::{
    fs::File,
    io,
    ops::Range,
    os::fd::{AsFd, BorrowedFd},
    path::Path,
    sync::{
        Arc,
        atomic::{AtomicBool, Ordering},
    },
};

use fjord_storage::{Filled, Hold};

use fjord_fec::{Sidecar, SidecarError, sidecar::TrackFec};
use fjord_media::{
    guard::Guarded,
    index::{Check, Index},
    plan::PacketRecord,
    prefab::{Ids, Prefab, PrefabError, PrefabTrack},
};

use crate::files::{Files, Slot};

pub struct Title {
    index: Index,
    file: File,
    media: Guarded,
    /// Fetch bytes not yet on local disk (an edge title).
    fills: Fills,
    fec: Option<Parity>,
    prefab: Option<(File, Prefab<Guarded>)>,
    /// The files as loaded, to tell when one changes on disk.
    files: Files,
    /// A file failed to read (EIO) while playing: `fjord repair` it.
    needs_repair: AtomicBool,
    /// A file failed [`Title::verify`]: its sessions end, it is loaded afresh.
    corrupt: AtomicBool,
    /// A snapshot of a recording still being written ([`Title::grows`]).
    growing: bool,
}

/// What brings a filled title's files onto local disk (none for a local
/// title).
#[derive(Default)]
struct Fills {
    index: Option<Arc<dyn Filled>>,
    media: Option<Arc<dyn Filled>>,
    prefab: Option<Arc<dyn Filled>>,
    parity: Option<Arc<dyn Filled>>,
}

/// Why [`Title::verify`] failed.
#[derive(Debug, thiserror::Error)]
pub enum VerifyError {
    /// A file's content is not what was written.
    #[error("{0}")]
    Damaged(String),
    /// The disk failed to read a file (EIO).
    #[error("{0}")]
    Unreadable(String),
}

/// The sidecar, checked against the index, and per track the repair window:
/// the longest time from a block's first source packet to its last one.
struct Parity {
    file: File,
    sidecar: Sidecar<Guarded>,
    windows_ns: Vec<u64>,
    /// Sessions encode their repair symbols as they send instead of
    /// reading the sidecar's (for `fjord bench capacity --fec-live`).
    live: bool,
}

impl Title {
    /// The title of the media file at `media_path`, whose index is beside
    /// it (`fjord_media::index::index_path_for`).
    pub fn new(index: Index, media_path: &Path) -> io::Result<Self> {
        let index_path = fjord_media::index::index_path_for(media_path);
        Self::open(index, media_path, &index_path, Fills::default())
    }

    /// A title whose media file and index are on local disk only in part
    /// (an edge's sparse files of slices from the origin): each file's
    /// [`Filled`] brings bytes in before they are read ahead or sent. The
    /// index must have been opened with its head filled in
    /// (`fjord_media::index::head_ranges`).
    pub fn filled(
        index: Index,
        (media_path, media_fill): (&Path, Arc<dyn Filled>),
        (index_path, index_fill): (&Path, Arc<dyn Filled>),
    ) -> io::Result<Self> {
        let fills = Fills {
            index: Some(index_fill),
            media: Some(media_fill),
            prefab: None,
            parity: None,
        };
        Self::open(index, media_path, index_path, fills)
    }

    fn open(index: Index, media_path: &Path, index_path: &Path, fills: Fills) -> io::Result<Self> {
        let file = File::open(media_path)?;
        let media = fjord_media::index::map_media(media_path)?;
        let files = Files::new(
            (media_path, &file, &media),
            (index_path, index.bytes()),
            fills.media.is_some(),
        )?;
        Ok(Self {
            index,
            file,
            media,
            fills,
            fec: None,
            prefab: None,
            files,
            needs_repair: AtomicBool::new(false),
            corrupt: AtomicBool::new(false),
            growing: false,
        })
    }

    /// Brings bytes `range` of the media file onto local disk and keeps
    /// them there while the hold lives (`None`: the file is all there).
    /// Waits: call it where blocking is allowed.
    pub fn fill_media(&self, range: Range<u64>) -> Result<Option<Hold>, String> {
        self.fill(Slot::Media, range)
    }

    /// Marks the title a snapshot of a recording still being written, its
    /// index made from the media file's durable prefix
    /// (`fjord_media::ingest::snapshot`): the file growing past it, or the
    /// index replaced by the next snapshot's, is no change that ends its
    /// sessions (they play what the snapshot holds).
    pub fn grows(&mut self) {
        self.growing = true;
        self.files.grows();
    }

    /// Whether the title is a growing recording's snapshot: its media is
    /// [`Title::media`] up to [`Title::media_len`], the index's source
    /// size, not the whole file.
    pub fn is_growing(&self) -> bool {
        self.growing
    }

    /// Whether the title's files are filled in as they are read (an edge's).
    pub fn is_filled(&self) -> bool {
        self.fills.media.is_some()
    }

    /// Whether a stream would fetch some of what it reads: a filled title
    /// whose index, or packet file (else media), is not all on local disk.
    pub fn needs_origin(&self) -> bool {
        let sent = match self.has_prefab() {
            true => &self.fills.prefab,
            false => &self.fills.media,
        };
        [&self.fills.index, sent]
            .into_iter()
            .any(|f| f.as_ref().is_some_and(|f| !f.complete()))
    }

    /// As [`Title::fill_media`], for file `slot`.
    pub(crate) fn fill(&self, slot: Slot, range: Range<u64>) -> Result<Option<Hold>, String> {
        let fill = match slot {
            Slot::Media => &self.fills.media,
            Slot::Index => &self.fills.index,
            Slot::Prefab => &self.fills.prefab,
            Slot::Parity => &self.fills.parity,
        };
        fill.as_ref().map(|f| f.fill(range)).transpose()
    }

    /// Attaches the prefabricated packets at `path` after checking they
    /// were made from this title's index (with `Check::Later` only their
    /// header: the offsets are left to [`Title::verify`]).
    pub fn attach_prefab(&mut self, path: &Path, check: Check) -> Result<(), PrefabError> {
        let (file, prefab) = match check {
            Check::Now => fjord_media::prefab::open(path, &self.index)?,
            Check::Later => fjord_media::prefab::open_unverified(path, &self.index)?,
        };
        self.files.set(Slot::Prefab, path, &file, prefab.bytes())?;
        self.prefab = Some((file, prefab));
        Ok(())
    }

    /// [`Title::attach_prefab`] of a packet file on local disk only in part
    /// (an edge's), whose header is there: `fill` brings the rest in as
    /// for [`Title::filled`].
    pub fn attach_filled_prefab(
        &mut self,
        path: &Path,
        fill: Arc<dyn Filled>,
    ) -> Result<(), PrefabError> {
        self.attach_prefab(path, Check::Later)?;
        self.files.written_while_served(Slot::Prefab);
        self.fills.prefab = Some(fill);
        Ok(())
    }

    /// [`Title::attach_fec`] of a parity sidecar on local disk only in
    /// part (an edge's, as [`Title::attach_filled_prefab`]): its header,
    /// track entries and meta checksum must be filled in; its block tables
    /// are filled in with the title's head, its repair symbols as the
    /// sessions that asked for repair reach them.
    pub fn attach_filled_fec(
        &mut self,
        path: &Path,
        index_path: &Path,
        fill: Arc<dyn Filled>,
    ) -> Result<(), SidecarError> {
        self.attach_fec(path, index_path, Check::Later)?;
        self.files.written_while_served(Slot::Parity);
        self.fills.parity = Some(fill);
        Ok(())
    }

    /// The prefabricated packets of track `t`, when the title has them.
    pub fn prefab(&self, t: usize) -> Option<PrefabTrack<'_>> {
        self.prefab.as_ref()?.1.track(t)
    }

    pub fn has_prefab(&self) -> bool {
        self.prefab.is_some()
    }

    /// The packet file, for the paths that read or sendfile.
    pub fn prefab_fd(&self) -> Option<BorrowedFd<'_>> {
        Some(self.prefab.as_ref()?.0.as_fd())
    }

    /// The SSRC, first sequence number and timestamp offset of track `t`'s
    /// packets when they are prefabricated: a session must use them to send
    /// those packets.
    pub fn prefab_ids(&self, t: usize) -> Option<Ids> {
        Some(self.prefab(t)?.ids)
    }

    /// Attaches the parity sidecar `sidecar_path` after checking it was made
    /// from this media file and its index at `index_path` (with
    /// `Check::Later` only its header: the tables are left to
    /// [`Title::verify`]); without it the title is served without a repair
    /// stream.
    pub fn attach_fec(
        &mut self,
        sidecar_path: &Path,
        index_path: &Path,
        check: Check,
    ) -> Result<(), SidecarError> {
        let (file, sidecar) = match check {
            Check::Now => fjord_fec::sidecar::open_with_file(sidecar_path)?,
            Check::Later => fjord_fec::sidecar::open_unverified(sidecar_path)?,
        };
        let checksum = fjord_fec::sidecar::index_checksum(index_path)?;
        sidecar.check_belongs(&self.index, &checksum)?;
        // Sidecars written before the window was recorded: computed from
        // every block's first and last record (reads the whole index).
        let windows_ns = self
            .index
            .tracks()
            .enumerate()
            .map(|(t, track)| {
                sidecar.track(t).map_or(0, |fec| {
                    fec.repair_window_ns().unwrap_or_else(|| {
                        fjord_fec::encode::repair_window_ns(&track, fec.params().k)
                    })
                })
            })
            .collect();
        self.set_parity(sidecar_path, file, sidecar, windows_ns)?;
        Ok(())
    }

    fn set_parity(
        &mut self,
        path: &Path,
        file: File,
        sidecar: Sidecar<Guarded>,
        windows_ns: Vec<u64>,
    ) -> io::Result<()> {
        self.files.set(Slot::Parity, path, &file, sidecar.bytes())?;
        self.fec = Some(Parity {
            file,
            sidecar,
            windows_ns,
            live: false,
        });
        Ok(())
    }

    /// Attaches a growing recording's parity ([`fjord_fec::growing`]) to
    /// its snapshot: the whole blocks made so far, each track's packets
    /// past them sent without repair. Not bound to this index (the
    /// snapshots share the sidecar, which grows in place; the title keeps
    /// what it mapped now).
    pub fn attach_growing_fec(&mut self, sidecar_path: &Path) -> Result<(), SidecarError> {
        let (file, sidecar) = fjord_fec::sidecar::open_unverified(sidecar_path)?;
        sidecar.check_covers(&self.index)?;
        let windows_ns = (0..sidecar.track_count())
            .map(|t| sidecar.track(t).and_then(|f| f.repair_window_ns()))
            .map(Option::unwrap_or_default)
            .collect();
        self.set_parity(sidecar_path, file, sidecar, windows_ns)?;
        self.files.replaced(Slot::Parity);
        Ok(())
    }

    /// Makes sessions encode repair symbols on the fly, as a server without
    /// stored parity must; the sidecar then only gives the block layout.
    /// Only for data paths that send from memory (the symbols are in the
    /// session, not in a file). False when the title has no parity.
    pub fn encode_parity_live(&mut self) -> bool {
        self.fec.as_mut().map(|f| f.live = true).is_some()
    }

    /// Whether sessions encode repair symbols on the fly.
    pub fn parity_is_live(&self) -> bool {
        self.fec.as_ref().is_some_and(|f| f.live)
    }

    /// Parity of track `t`, when the title has a sidecar.
    pub fn fec(&self, t: usize) -> Option<TrackFec<'_>> {
        self.fec.as_ref()?.sidecar.track(t)
    }

    /// How long after a block's first source packet its repair packets go,
    /// at most, for track `t` (SDP `repair-window`).
    pub fn repair_window_ns(&self, t: usize) -> Option<u64> {
        self.fec.as_ref()?.windows_ns.get(t).copied()
    }

    /// The sidecar file and repair symbol `j` of block `b` of track `t`, by
    /// reference (offset in the file, bytes in the mapping).
    pub fn repair_symbol(&self, t: usize, b: u64, j: u16) -> Option<(BorrowedFd<'_>, u64, &[u8])> {
        let fec = self.fec.as_ref()?;
        let (offset, len) = fec.sidecar.track(t)?.block(b)?.repair_symbol_range(j)?;
        let start = usize::try_from(offset).ok()?;
        let bytes = fec.sidecar.bytes().get(start..start.checked_add(len)?)?;
        Some((fec.file.as_fd(), offset, bytes))
    }

    /// Checks the title's files whole, which loading left to this (to
    /// load in a few pages): the index's checksum and records, the media
    /// file's sampled content, the packet file's offsets and the parity's
    /// checksum. Every piece is read into the page cache by file I/O first,
    /// after `pace` (called with its length: bulk I/O waits there for its
    /// turn). Damage makes the title damaged from then on (its sessions
    /// end, the catalog loads it afresh); a disk read error flags it for
    /// `fjord repair` (sessions rebuild what they read).
    pub fn verify(&self, pace: &mut dyn FnMut(u64)) -> Result<(), VerifyError> {
        let result = self.verify_files(pace);
        match &result {
            Err(VerifyError::Damaged(_)) => self.corrupt.store(true, Ordering::Relaxed),
            Err(VerifyError::Unreadable(_)) => self.flag_for_repair(),
            Ok(()) => {}
        }
        result
    }

    fn verify_files(&self, pace: &mut dyn FnMut(u64)) -> Result<(), VerifyError> {
        let files = &self.files;
        let mut readers = [None, None, None, None];
        let mut read = |slot: Slot, piece: &[u8]| {
            pace(piece.len() as u64);
            let reader = &mut readers[slot as usize];
            if reader.is_none() {
                *reader = Some(files.whole_reader(slot)?);
            }
            reader.as_ref().map_or(Ok(()), |r| r.read_into_cache(piece))
        };
        let index = &self.index;
        let fail = |slot, unreadable: bool, e: &dyn std::fmt::Display| {
            let path = files
                .path(slot)
                .map_or("?".into(), |p| p.display().to_string());
            match unreadable {
                true => VerifyError::Unreadable(format!("{path}: {e}")),
                false => VerifyError::Damaged(format!("{path}: {e}")),
            }
        };
        use fjord_media::IndexError;
        let index_failed = |slot| {
            move |e| match e {
                IndexError::Io(e) => fail(slot, true, &e),
                e => fail(slot, false, &e),
            }
        };
        index
            .verify(&mut |p| read(Slot::Index, p))
            .map_err(index_failed(Slot::Index))?;
        index
            .verify_media(&self.media, &mut |p| read(Slot::Media, p))
            .map_err(index_failed(Slot::Media))?;
        if let Some((_, prefab)) = &self.prefab {
            // It reads index records too.
            let slot = |p: &[u8]| files.slot_of(p).unwrap_or(Slot::Prefab);
            prefab
                .verify(index, &mut |p| read(slot(p), p))
                .map_err(|e| fail(Slot::Prefab, matches!(e, PrefabError::Io(_)), &e))?;
        }
        if let Some(f) = &self.fec {
            f.sidecar
                .verify(&mut |p| read(Slot::Parity, p))
                .map_err(|e| fail(Slot::Parity, matches!(e, SidecarError::Io(_)), &e))?;
        }
        if self.damaged() {
            return Err(VerifyError::Damaged(
                "a file shrank while it was verified".into(),
            ));
        }
        Ok(())
    }

    /// Whether one of the title's files shrank under its mapping and a
    /// vanished page was read since (as zeros, see `fjord_media::guard`):
    /// the index, the media, the packet file or the parity sidecar; or one
    /// failed [`Title::verify`]. What sessions send of the title can no
    /// longer be trusted; the engine ends them, and the catalog opens the
    /// files afresh for the next client.
    pub fn damaged(&self) -> bool {
        self.corrupt.load(Ordering::Relaxed)
            || self.index.damaged()
            || self.media.damaged()
            || self
                .prefab
                .as_ref()
                .is_some_and(|(_, p)| p.storage().damaged())
            || self
                .fec
                .as_ref()
                .is_some_and(|f| f.sidecar.storage().damaged())
    }

    pub fn index(&self) -> &Index {
        &self.index
    }

    pub fn fd(&self) -> BorrowedFd<'_> {
        self.file.as_fd()
    }

    /// The file runs of a packet (the second empty when it has none), by
    /// reference into the mapped file. `None` when a run points past the
    /// mapping (the file shrank since it was mapped; the engine stops the
    /// session rather than fault).
    pub fn runs(&self, rec: &PacketRecord) -> Option<(&[u8], &[u8])> {
        rec.runs(&self.media)
    }

    /// The media file's length as loaded.
    pub fn media_len(&self) -> u64 {
        self.media().len() as u64
    }

    /// The media file as mapped (of an edge's title, zeros where its
    /// slices are not filled in: [`Title::fill_media`] them first; of a
    /// growing recording's snapshot, its durable prefix).
    pub fn media(&self) -> &[u8] {
        match self.growing {
            true => self
                .media
                .get(..self.index.source().size as usize)
                .unwrap_or(&self.media),
            false => &self.media,
        }
    }

    /// Whether a file of the title failed to read (EIO) while it played:
    /// the bytes were rebuilt in memory (or its sessions ended), but the
    /// disk still holds the damage; `fjord repair` the title.
    pub fn needs_repair(&self) -> bool {
        self.needs_repair.load(Ordering::Relaxed)
    }

    pub(crate) fn flag_for_repair(&self) {
        self.needs_repair.store(true, Ordering::Relaxed);
    }

    pub(crate) fn prefab_head(&self) -> Option<&[u8]> {
        Some(self.prefab.as_ref()?.1.head())
    }

    pub(crate) fn sidecar(&self) -> Option<(&Sidecar<Guarded>, BorrowedFd<'_>)> {
        let f = self.fec.as_ref()?;
        Some((&f.sidecar, f.file.as_fd()))
    }

    /// Whether a file of the title is no longer what was loaded (deleted,
    /// replaced, truncated or written): load it again.
    pub fn files_changed(&self) -> bool {
        self.files.changed()
    }

    pub(crate) fn files(&self) -> &Files {
        &self.files
    }

    /// The start packet of track `t` for a PLAY at `ns` on the title
    /// timeline: the sync point at or before it (the sync tables stay
    /// resident), or for a track without any the first packet sent at or
    /// after it. May read the index from disk (a track without sync
    /// points): the control plane asks, not an engine thread. The records
    /// from the start on are the storage layer's to read.
    pub fn start_packet(&self, t: usize, ns: u64) -> u32 {
        self.index.track(t).map_or(0, |t| {
            let p = if t.sync_count() > 0 {
                t.sync_before(ns).packet
            } else {
                self.first_sent_at_or_after(&t, ns)
            };
            p.min(t.packet_count() as u32)
        })
    }

    /// The packet before which track `t` stops for a PLAY to `ns`: its
    /// first packet sent at or after it. May read the index from disk.
    pub fn end_packet(&self, t: usize, ns: u64) -> u32 {
        self.index
            .track(t)
            .map_or(0, |t| self.first_sent_at_or_after(&t, ns))
    }

    fn first_sent_at_or_after(&self, t: &fjord_media::Track<'_>, ns: u64) -> u32 {
        let end = self.index.duration_ns();
        t.first_sent_at_or_after(ns, end, &mut |r| self.read_record(r))
    }

    /// Reads index records into the page cache by file I/O, not by a
    /// fault in the mapping: a search's probes are far apart, and each
    /// fault would read the device's whole read-ahead window around its
    /// page (8 MB on virtio disks) where the mapping is not random-access.
    fn read_record(&self, record: &[u8]) -> std::io::Result<()> {
        self.files.read_into_cache(Slot::Index, record)
    }
}
