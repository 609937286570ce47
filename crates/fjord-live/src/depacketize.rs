//! A publisher's RTP payloads back into the codec's frames, for the
//! recording ([`crate::record`]): H.264 (RFC 6184: single NAL units,
//! STAP-A, FU-A) and H.265 (RFC 7798 without DONL: single NAL units, AP,
//! FU) into access units of 4-byte-length-prefixed NAL units (the MP4
//! form), AAC (`MPEG4-GENERIC`, RFC 3640 AU headers, fragmented
//! AUs too; `MP4A-LATM`, RFC 6416, an AudioMuxElement in packets up to
//! the marker, [`crate::latm`]) and Opus (RFC 7587: a packet is a frame). No reordering: a
//! packet lost or out of order drops the frame it damages, counted. Every
//! frame is within `max_frame_bytes` (a larger one is dropped, counted).
//! No crate depacketizes into owned frames without its own I/O around it
//! (`retina` is a whole RTSP client); these are the RFCs' few rules.

/// One frame: its RTP timestamp, its bytes, whether a decoder can start
/// at it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Frame {
    pub ts: u32,
    pub data: Vec<u8>,
    pub key: bool,
}

/// The RFC 3640 AU header layout (`a=fmtp`: `sizelength`, `indexlength`,
/// `indexdeltalength`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AuHeaders {
    pub size_bits: u8,
    pub index_bits: u8,
    pub delta_bits: u8,
}

/// What a track's payloads hold.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Payload {
    H264,
    H265,
    /// AAC in RFC 3640 AU headers; `frame` samples per AU (1024).
    Aac {
        headers: AuHeaders,
        frame: u32,
    },
    /// AAC in LATM AudioMuxElements of `sub_frames` AUs each; `frame`
    /// samples per AU.
    Latm {
        sub_frames: usize,
        frame: u32,
    },
    Opus,
}

/// Frames made and dropped (damaged by loss, malformed, too large).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Counts {
    pub frames: u64,
    pub dropped: u64,
}

/// One track's depacketizer.
#[derive(Debug)]
pub struct Depacketizer {
    payload: Payload,
    max_frame_bytes: usize,
    /// The timestamp of the frame being put together, if one is.
    current: Option<u32>,
    buf: Vec<u8>,
    /// H.264: where the FU-A being put together starts in `buf`. AAC: the
    /// size of the fragmented AU being put together.
    partial: Option<usize>,
    damaged: bool,
    next_seq: Option<u16>,
    pub counts: Counts,
}

impl Depacketizer {
    pub fn new(payload: Payload, max_frame_bytes: usize) -> Self {
        Depacketizer {
            payload,
            max_frame_bytes,
            current: None,
            buf: Vec::new(),
            partial: None,
            damaged: false,
            next_seq: None,
            counts: Counts::default(),
        }
    }

    /// Takes a packet's fields and payload; the frames it completes are
    /// appended to `out`.
    pub fn push(&mut self, (seq, ts, marker): (u16, u32, bool), p: &[u8], out: &mut Vec<Frame>) {
        let lost = self.next_seq.is_some_and(|n| n != seq);
        self.next_seq = Some(seq.wrapping_add(1));
        if lost {
            // The missing packets were the end of the frame in progress,
            // or the start of this one: both are damaged.
            self.damaged |= self.current.is_some();
        }
        if self.current.is_some_and(|t| t != ts) {
            self.complete(out);
        }
        self.damaged |= lost;
        self.current = Some(ts);
        match self.payload {
            Payload::H264 => self.h264(p),
            Payload::H265 => self.h265(p),
            Payload::Aac { headers, frame } => {
                return self.aac((ts, marker), p, headers, frame, out);
            }
            Payload::Opus | Payload::Latm { .. } => self.add(p),
        }
        if marker || self.payload == Payload::Opus {
            self.complete(out);
        }
    }

    /// The stream ended: a frame left without its marker is complete if
    /// nothing in it was lost.
    pub fn flush(&mut self, out: &mut Vec<Frame>) {
        self.complete(out);
    }

    /// The packets stop here and others follow (another publisher): a
    /// frame in progress is dropped, counted.
    pub fn break_off(&mut self) {
        if self.current.is_some() {
            self.damaged = true;
            self.complete(&mut Vec::new());
        }
        self.next_seq = None;
    }

    /// Appends `bytes` to the frame, or damages it past the bound.
    fn add(&mut self, bytes: &[u8]) {
        if self.damaged {
            return;
        }
        if self.buf.len() + bytes.len() > self.max_frame_bytes {
            self.damaged = true;
            self.buf = Vec::new();
            return;
        }
        self.buf.extend_from_slice(bytes);
    }

    /// Appends one NAL unit, length first.
    fn nal(&mut self, nal: &[u8]) {
        if nal.is_empty() {
            self.damaged = true;
            return;
        }
        self.add(&(nal.len() as u32).to_be_bytes());
        self.add(nal);
    }

    /// An H.264 payload (RFC 6184 §5.6-5.8).
    fn h264(&mut self, p: &[u8]) {
        let Some(&first) = p.first() else {
            self.damaged = true;
            return;
        };
        match first & 0x1f {
            1..=23 => self.nal(p),
            24 => self.aggregate(&p[1..]),
            // FU-A (§5.8): the NAL unit's header is made from the
            // indicator's F and NRI bits and the FU header's type.
            28 => match p.get(1) {
                Some(&h) => self.fragment(h, &[(first & 0xe0) | (h & 0x1f)], &p[2..]),
                None => self.damaged = true,
            },
            _ => self.damaged = true,
        }
    }

    /// An H.265 payload (RFC 7798 §4.4, no DONL: `sprop-max-don-diff` 0).
    fn h265(&mut self, p: &[u8]) {
        let (Some(&h0), Some(&h1)) = (p.first(), p.get(1)) else {
            self.damaged = true;
            return;
        };
        match (h0 >> 1) & 0x3f {
            0..=47 => self.nal(p),
            48 => self.aggregate(&p[2..]),
            // FU (§4.4.3): the header is the payload header's, the FU
            // header's type in it.
            49 => match p.get(2) {
                Some(&fu) => self.fragment(fu, &[(h0 & 0x81) | ((fu & 0x3f) << 1), h1], &p[3..]),
                None => self.damaged = true,
            },
            // PACI (50) and the unspecified types.
            _ => self.damaged = true,
        }
    }

    /// NAL units each after its 16-bit size: STAP-A (RFC 6184 §5.7.1),
    /// AP (RFC 7798 §4.4.2).
    fn aggregate(&mut self, mut rest: &[u8]) {
        while !rest.is_empty() {
            let Some(len) = rest
                .get(..2)
                .map(|b| usize::from(u16::from_be_bytes([b[0], b[1]])))
            else {
                self.damaged = true;
                return;
            };
            let Some(nal) = rest.get(2..2 + len) else {
                self.damaged = true;
                return;
            };
            self.nal(nal);
            rest = &rest[2 + len..];
        }
    }

    /// A fragment of a NAL unit: `fu` is the FU header (S and E bits),
    /// `head` the unit's header, `data` the fragment's bytes.
    fn fragment(&mut self, fu: u8, head: &[u8], data: &[u8]) {
        let (start, end) = (fu & 0x80 != 0, fu & 0x40 != 0);
        match (start, self.partial) {
            (true, None) => {
                self.partial = Some(self.buf.len());
                self.add(&[0; 4]);
                self.add(head);
            }
            (false, Some(_)) => {}
            // A start inside a unit, or a middle without its start.
            _ => {
                self.damaged = true;
                self.partial = None;
                return;
            }
        }
        self.add(data);
        if end {
            let Some(at) = self.partial.take() else {
                return;
            };
            if self.damaged || self.buf.len() < at + 4 {
                return;
            }
            let len = (self.buf.len() - at - 4) as u32;
            self.buf[at..at + 4].copy_from_slice(&len.to_be_bytes());
        }
    }

    /// An AAC payload (RFC 3640 §3.2): AU headers, then the AUs; one AU
    /// larger than the packet comes in fragments of the same timestamp.
    fn aac(
        &mut self,
        (ts, marker): (u32, bool),
        p: &[u8],
        h: AuHeaders,
        frame: u32,
        out: &mut Vec<Frame>,
    ) {
        let Some((sizes, data)) = au_headers(p, h) else {
            self.damaged = true;
            return self.complete(out);
        };
        if let Some(total) = self.partial {
            // A continuation of a fragmented AU.
            self.add(data);
            if marker || self.buf.len() >= total {
                self.damaged |= self.buf.len() != total;
                self.partial = None;
                self.complete(out);
            }
            return;
        }
        if let [size] = sizes[..]
            && size > data.len()
        {
            self.partial = Some(size);
            self.add(data);
            return;
        }
        self.current = None;
        let mut at = 0;
        for (i, size) in sizes.into_iter().enumerate() {
            let Some(au) = data
                .get(at..at + size)
                .filter(|au| au.len() <= self.max_frame_bytes)
            else {
                self.counts.dropped += 1;
                break;
            };
            at += size;
            self.counts.frames += 1;
            out.push(Frame {
                ts: ts.wrapping_add(frame.wrapping_mul(i as u32)),
                data: au.to_vec(),
                key: true,
            });
        }
        self.damaged = false;
    }

    /// The frame in progress is done: out, or dropped when damaged.
    fn complete(&mut self, out: &mut Vec<Frame>) {
        let Some(ts) = self.current.take() else {
            return;
        };
        let buf = std::mem::take(&mut self.buf);
        // Both reset, whichever says so: a unit left in progress is damage.
        let unfinished = self.partial.take().is_some();
        let damaged = std::mem::replace(&mut self.damaged, false) | unfinished;
        if damaged || buf.is_empty() {
            self.counts.dropped += 1;
            return;
        }
        if let Payload::Latm { sub_frames, frame } = self.payload {
            return self.latm((ts, &buf), (sub_frames, frame), out);
        }
        let key = match self.payload {
            Payload::H264 => has_key_nal(&buf, |b| b & 0x1f == 5),
            Payload::H265 => has_key_nal(&buf, |b| (16..=23).contains(&((b >> 1) & 0x3f))),
            _ => true,
        };
        self.counts.frames += 1;
        out.push(Frame { ts, data: buf, key });
    }
}

impl Depacketizer {
    /// The AUs of a whole LATM frame, stamped `frame` samples apart.
    fn latm(
        &mut self,
        (ts, buf): (u32, &[u8]),
        (sub_frames, frame): (usize, u32),
        out: &mut Vec<Frame>,
    ) {
        let units = crate::latm::access_units(buf, sub_frames)
            .filter(|u| !u.is_empty() && u.iter().all(|u| !u.is_empty()));
        let Some(units) = units else {
            self.counts.dropped += 1;
            return;
        };
        for (i, au) in units.into_iter().enumerate() {
            self.counts.frames += 1;
            out.push(Frame {
                ts: ts.wrapping_add(frame.wrapping_mul(i as u32)),
                data: au.to_vec(),
                key: true,
            });
        }
    }
}

/// Whether a length-prefixed access unit holds a NAL unit whose first
/// byte says key (an H.264 IDR slice, an H.265 IRAP picture).
fn has_key_nal(mut au: &[u8], key: impl Fn(u8) -> bool) -> bool {
    while au.len() > 4 {
        let len = u32::from_be_bytes([au[0], au[1], au[2], au[3]]) as usize;
        if key(au[4]) {
            return true;
        }
        au = au.get(4 + len..).unwrap_or_default();
    }
    false
}

/// The AU sizes of an RFC 3640 payload and the data after its headers.
fn au_headers(p: &[u8], h: AuHeaders) -> Option<(Vec<usize>, &[u8])> {
    let bits = usize::from(u16::from_be_bytes([*p.first()?, *p.get(1)?]));
    let head = p.get(2..2 + bits.div_ceil(8))?;
    let data = &p[2 + head.len()..];
    let (first, next) = (
        usize::from(h.size_bits) + usize::from(h.index_bits),
        usize::from(h.size_bits) + usize::from(h.delta_bits),
    );
    if h.size_bits == 0 || h.size_bits > 16 || bits < first {
        return None;
    }
    let mut sizes = Vec::new();
    let mut at = 0;
    while at < bits {
        let len = if sizes.is_empty() { first } else { next };
        if at + len > bits {
            return None;
        }
        sizes.push(read_bits(head, at, h.size_bits)? as usize);
        at += len;
    }
    Some((sizes, data))
}

/// `n` bits (up to 16) of `b` from bit `at`, most significant first.
fn read_bits(b: &[u8], at: usize, n: u8) -> Option<u32> {
    let mut v = 0u32;
    for k in at..at + usize::from(n) {
        let byte = b.get(k / 8)?;
        v = (v << 1) | u32::from((byte >> (7 - k % 8)) & 1);
    }
    Some(v)
}

#[cfg(test)]
mod tests;
