//! A title as the engine sees it: the packetization index and the media
//! file, mapped read-only and open for the paths that read or sendfile.
//! Sessions share it through an `Arc`; a re-ingested title is a new `Title`,
//! so playing sessions keep the mapping they started with.

use std::{
    fs::File,
    io,
    os::fd::{AsFd, BorrowedFd},
    path::Path,
};

use fjord_media::{index::Index, plan::PacketRecord};
use memmap2::Mmap;

pub struct Title {
    index: Index,
    file: File,
    media: Mmap,
}

impl Title {
    pub fn new(index: Index, media_path: &Path) -> io::Result<Self> {
        let file = File::open(media_path)?;
        let media = fjord_media::index::map_media(media_path)?;
        Ok(Self { index, file, media })
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
        let run1 = self.run(rec.offset, rec.len)?;
        if rec.len2 == 0 {
            return Some((run1, &[]));
        }
        let offset2 = rec
            .offset
            .checked_add(u64::from(rec.len))?
            .checked_add(u64::from(rec.skip))?;
        Some((run1, self.run(offset2, rec.len2)?))
    }

    fn run(&self, offset: u64, len: u32) -> Option<&[u8]> {
        let start = usize::try_from(offset).ok()?;
        let end = start.checked_add(len as usize)?;
        self.media.get(start..end)
    }
}
