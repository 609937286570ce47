//! An elementary stream as the packetizers see it: one logical byte string
//! that lives in the media file as one run (an ES or MP3 file) or as the
//! payloads of many PES packets (a program stream). Packetizers work on
//! logical offsets; [`Es::runs`] maps a logical range back to at most two
//! file runs, as a [`PacketRecord`] can carry.
//!
//! Also the timing shared by the MPEG packetizers: each access unit (picture
//! or audio frame) gets a presentation and decoding time, and [`Timed`]
//! turns them into packet send times and RTP timestamps on the title timeline.

use memchr::memmem;

use crate::plan::{FLAG_RANDOM_ACCESS, PacketRecord, SyncPoint, rtp_ticks};

/// Largest file offset the index can store (48 bits).
pub(crate) const MAX_FILE_LEN: u64 = 1 << 48;

/// One contiguous piece of the stream in the file.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Seg {
    /// Logical offset of the first byte.
    pub log: u64,
    /// File offset of the first byte.
    pub file: u64,
    pub len: u64,
    /// PES presentation/decoding timestamps (ns, unwrapped) of the PES packet
    /// this piece is the payload of.
    pub pts: Option<i64>,
    pub dts: Option<i64>,
}

/// An elementary stream over the bytes of a media file.
#[derive(Debug, Clone)]
pub(crate) struct Es<'a> {
    pub data: &'a [u8],
    pub segs: Vec<Seg>,
    pub len: u64,
}

impl<'a> Es<'a> {
    /// The stream is `data[range]` itself.
    pub fn contiguous(data: &'a [u8], start: usize, end: usize) -> Es<'a> {
        let len = end.saturating_sub(start) as u64;
        Es {
            data,
            segs: vec![Seg {
                log: 0,
                file: start as u64,
                len,
                pts: None,
                dts: None,
            }],
            len,
        }
    }

    /// An empty stream to append PES payloads to.
    pub fn pieces(data: &'a [u8]) -> Es<'a> {
        Es {
            data,
            segs: Vec::new(),
            len: 0,
        }
    }

    /// Appends `len` file bytes at `file` (a PES payload) with its timestamps.
    pub fn push(&mut self, file: u64, len: u64, pts: Option<i64>, dts: Option<i64>) {
        if len == 0 {
            return;
        }
        self.segs.push(Seg {
            log: self.len,
            file,
            len,
            pts,
            dts,
        });
        self.len += len;
    }

    /// Index of the segment holding logical offset `pos` (< len).
    pub fn seg_of(&self, pos: u64) -> usize {
        self.segs.partition_point(|s| s.log + s.len <= pos)
    }

    fn bytes(&self, s: &Seg) -> &'a [u8] {
        &self.data[s.file as usize..(s.file + s.len) as usize]
    }

    /// Copies bytes from logical `pos` into `buf`; returns how many were
    /// available.
    pub fn read(&self, pos: u64, buf: &mut [u8]) -> usize {
        let mut done = 0;
        let mut i = self.seg_of(pos);
        while done < buf.len() {
            let Some(s) = self.segs.get(i) else { break };
            let at = (pos + done as u64).saturating_sub(s.log) as usize;
            let src = self.bytes(s).get(at..).unwrap_or_default();
            let n = src.len().min(buf.len() - done);
            buf[done..done + n].copy_from_slice(&src[..n]);
            done += n;
            i += 1;
        }
        done
    }

    /// Fixed-size read; `None` past the end.
    pub fn get<const N: usize>(&self, pos: u64) -> Option<[u8; N]> {
        let mut b = [0; N];
        (self.read(pos, &mut b) == N).then_some(b)
    }

    /// Logical offset of the next byte `b` at or after `pos`.
    pub fn find_byte(&self, pos: u64, b: u8) -> Option<u64> {
        let mut i = self.seg_of(pos);
        while let Some(s) = self.segs.get(i) {
            let at = pos.saturating_sub(s.log) as usize;
            if let Some(k) = memchr::memchr(b, &self.bytes(s)[at..]) {
                return Some(s.log + (at + k) as u64);
            }
            i += 1;
        }
        None
    }

    /// Every start code (`00 00 01 xx`): its logical offset and `xx`, in order,
    /// including those split between pieces.
    pub fn start_codes(&self) -> Vec<(u64, u8)> {
        let finder = memmem::Finder::new(&[0, 0, 1]);
        let mut out = Vec::new();
        for s in &self.segs {
            let b = self.bytes(s);
            let tail = b.len().saturating_sub(3);
            for k in finder.find_iter(b) {
                if k >= tail {
                    break;
                }
                out.push((s.log + k as u64, b[k + 3]));
            }
            // The last three bytes may begin a start code that ends in the
            // next piece (or, for the single-run case, at the very end).
            for k in tail..b.len() {
                if let Some([0, 0, 1, c]) = self.get::<4>(s.log + k as u64) {
                    out.push((s.log + k as u64, c));
                }
            }
        }
        out
    }

    /// How many bytes from `pos` (at most `max`) fit in two file runs.
    pub fn fit(&self, pos: u64, max: u64) -> u64 {
        let i = self.seg_of(pos);
        let mut n = 0;
        for s in self.segs.iter().skip(i).take(2) {
            n += s.len - pos.saturating_sub(s.log);
        }
        n.min(max).min(self.len.saturating_sub(pos))
    }

    /// The file runs of logical `[pos, pos + n)`: `(offset, len, skip, len2)`,
    /// `None` if it needs more than two.
    pub fn runs(&self, pos: u64, n: u64) -> Option<(u64, u32, u32, u32)> {
        let i = self.seg_of(pos);
        let a = self.segs.get(i)?;
        let at = pos - a.log;
        let len1 = (a.len - at).min(n);
        let off = a.file + at;
        if len1 == n {
            return Some((off, n as u32, 0, 0));
        }
        let b = self.segs.get(i + 1)?;
        let len2 = n - len1;
        if len2 > b.len {
            return None;
        }
        let skip = b.file.checked_sub(off + len1)?;
        Some((off, len1 as u32, u32::try_from(skip).ok()?, len2 as u32))
    }

    /// A record carrying `prefix` then logical `[pos, pos + n)`; the caller
    /// has checked the range with [`Es::fit`] or [`Es::runs`].
    pub fn record(&self, prefix: &[u8], pos: u64, n: u64) -> PacketRecord {
        let (offset, len, skip, len2) = self.runs(pos, n).unwrap_or((0, 0, 0, 0));
        PacketRecord {
            offset,
            len,
            skip,
            len2,
            ..PacketRecord::default()
        }
        .with_prefix(prefix)
    }
}

/// One access unit (picture, audio frame) and the packets that carry it.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Unit {
    /// First packet; the unit's packets run to the next unit's first.
    pub first_pkt: u32,
    /// Logical offset where the unit starts (its PES timestamp belongs to
    /// the piece holding it).
    pub pos: u64,
    /// Presentation and decoding time, ns; any origin until [`Timed::finish`].
    pub pts: i64,
    pub dts: i64,
    pub dur: i64,
    /// A random access point (sync point).
    pub key: bool,
}

/// Packets of one track with their units' times, before the title origin is
/// known.
#[derive(Debug, Clone, Default)]
pub(crate) struct Timed {
    pub packets: Vec<PacketRecord>,
    pub units: Vec<Unit>,
}

impl Timed {
    /// Re-times units from their PES timestamps: a unit that begins in a PES
    /// packet with a timestamp (the first one to begin there) takes it; the
    /// others keep their offset from the last such unit. Audio passes a
    /// `tolerance`: PES timestamps within it of the frame count are ignored,
    /// so rounded 90 kHz stamps do not jitter exact frame times.
    pub fn anchor(&mut self, es: &Es, tolerance: i64) -> bool {
        let mut off: Option<(i64, i64)> = None;
        let mut first_off = None;
        let mut last_seg = usize::MAX;
        let mut offs = Vec::with_capacity(self.units.len());
        for u in &self.units {
            let k = es.seg_of(u.pos);
            if k != last_seg {
                last_seg = k;
                if let Some(s) = es.segs.get(k).filter(|s| s.pts.is_some()) {
                    let pts = s.pts.unwrap_or_default();
                    let new = (
                        pts.saturating_sub(u.pts),
                        s.dts.unwrap_or(pts).saturating_sub(u.dts),
                    );
                    let keep = tolerance > 0
                        && off.is_some_and(|(p, _)| p.abs_diff(new.0) <= tolerance as u64);
                    if !keep {
                        off = Some(new);
                    }
                    first_off.get_or_insert(new);
                }
            }
            offs.push(off);
        }
        let Some(first) = first_off else {
            return false;
        };
        for (u, o) in self.units.iter_mut().zip(offs) {
            let (p, d) = o.unwrap_or(first);
            u.pts = u.pts.saturating_add(p);
            u.dts = u.dts.saturating_add(d);
        }
        true
    }

    /// Earliest presentation time.
    pub fn start(&self) -> Option<i64> {
        self.units.iter().map(|u| u.pts).min()
    }

    /// Stamps every packet relative to the title origin `t0` (ns): RTP
    /// timestamp = presentation time, send time = decoding time clamped at 0
    /// and non-decreasing. Returns the sync points and the end of the last
    /// presented unit.
    pub fn finish(&mut self, t0: i64, clock_rate: u32) -> (Vec<SyncPoint>, u64) {
        let mut sync: Vec<SyncPoint> = Vec::new();
        let mut send = 0u64;
        let mut end = 0u64;
        let n = self.packets.len() as u32;
        for (i, u) in self.units.iter().enumerate() {
            let last = self.units.get(i + 1).map_or(n, |v| v.first_pkt);
            let pts = u.pts.saturating_sub(t0).max(0) as u64;
            let dts = u.dts.saturating_sub(t0).max(0) as u64;
            send = send.max(dts.min(pts));
            end = end.max(pts.saturating_add(u.dur.max(0) as u64));
            let ts = rtp_ticks(pts, clock_rate);
            for p in &mut self.packets[u.first_pkt as usize..last as usize] {
                p.send_time_ns = send;
                p.rtp_ts = ts;
            }
            if u.key && u.first_pkt < last && sync.last().is_none_or(|s| s.time_ns < pts) {
                self.packets[u.first_pkt as usize].flags |= FLAG_RANDOM_ACCESS;
                sync.push(SyncPoint {
                    packet: u.first_pkt,
                    time_ns: pts,
                });
            }
        }
        (sync, end)
    }
}

/// `a * b / c` rounded to nearest without overflow; 0 if `c` is 0.
pub(crate) fn mul_div(a: u64, b: u64, c: u64) -> i64 {
    if c == 0 {
        return 0;
    }
    let v = (u128::from(a) * u128::from(b) + u128::from(c) / 2) / u128::from(c);
    i64::try_from(v).unwrap_or(i64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn start_codes_across_pieces() {
        let data = [9, 0, 0, 7, 7, 1, 0xb3, 0, 0, 1, 5, 8, 0, 0, 1];
        let mut es = Es::pieces(&data);
        es.push(1, 2, None, None); // 00 00
        es.push(5, 2, None, None); // 01 b3
        es.push(7, 4, None, None); // 00 00 01 05
        es.push(12, 3, None, None); // 00 00 01 (no code byte)
        assert_eq!(es.start_codes(), vec![(0, 0xb3), (4, 5)]);
        assert_eq!(es.runs(1, 3), Some((2, 1, 2, 2)));
        assert_eq!(es.runs(1, 5), None);
        assert_eq!(es.fit(1, 100), 3);
        assert_eq!(es.get::<3>(3), Some([0xb3, 0, 0]));
        assert_eq!(es.find_byte(3, 5), Some(7));
    }
}
