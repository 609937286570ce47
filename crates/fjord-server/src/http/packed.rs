//! HLS of a stored ADTS (AAC) or MP3 title as packed audio (RFC 8216
//! §3.4): segments `seg-N.aac` / `seg-N.mp3`, each an ID3 tag with the
//! time of its first frame (made here) and then a byte range of the file,
//! cut at frame boundaries the index knows: no audio byte is read.

use fjord_engine::Title;
use fjord_media::mp4::fragments::{Fragment, Fragmented, Part, TrackInfo};

/// An audio file HLS can carry as it is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Packed {
    Aac,
    Mp3,
}

impl Packed {
    /// Segment names' extension.
    pub fn ext(self) -> &'static str {
        match self {
            Packed::Aac => "aac",
            Packed::Mp3 => "mp3",
        }
    }

    pub fn content_type(self) -> &'static str {
        match self {
            Packed::Aac => "audio/aac",
            Packed::Mp3 => "audio/mpeg",
        }
    }
}

/// Whether `t` is an ADTS or MP3 file (not audio inside another
/// container).
pub(crate) fn kind_of(t: &Title) -> Option<Packed> {
    let index = t.index();
    let track = index.track(0).filter(|_| index.track_count() == 1)?;
    let format = index.format();
    match track.encoding() {
        "mpeg4-generic" if format == "ADTS AAC" => Some(Packed::Aac),
        "MPA" if format.contains("audio layer III") && !format.contains("PS") => Some(Packed::Mp3),
        _ => None,
    }
}

/// The title's segments of at least `target_ns`; `None` when its index
/// cannot be read.
pub(crate) fn fragmented(t: &Title, kind: Packed, target_ns: u64) -> Option<Fragmented> {
    let index = t.index();
    let track = index.track(0)?;
    // Frames that may begin a segment: their time and where their bytes
    // (header included) begin.
    let (mut times, mut offsets) = (Vec::new(), Vec::new());
    let mut prev: Option<fjord_media::PacketRecord> = None;
    // ADTS: the header's length (7, or 9 with a CRC), from the gap between
    // the first two AUs' data.
    let mut adts_header = None;
    for i in 0..track.packet_count() {
        let rec = track.packet(i)?;
        let start = match kind {
            // An AU's ADTS header begins where the previous AU's data ends.
            Packed::Aac => match prev {
                None => Some(rec.offset),
                Some(p) => p.marker().then(|| {
                    adts_header.get_or_insert(rec.offset.saturating_sub(p.file_end()).min(9));
                    p.file_end()
                }),
            },
            // RFC 2250: a packet whose fragment offset is 0 begins a frame.
            Packed::Mp3 => (rec.prefix().get(2..4) == Some(&[0, 0])).then_some(rec.offset),
        };
        if let Some(o) = start {
            times.push(rec.send_time_ns);
            offsets.push(o);
        }
        prev = Some(rec);
    }
    if let (Some(first), Some(h)) = (offsets.first_mut(), adts_header) {
        *first = first.saturating_sub(h);
    }
    let mut segments = fjord_proto::hls::cut(
        &times[1.min(times.len())..],
        |i| offsets.get(i + 1).copied(),
        t.media_len(),
        index.duration_ns(),
        target_ns,
    );
    // What precedes the first frame (an ID3 tag of the file's own) is
    // left out: each segment's tag is the one a player reads.
    if let (Some(first), Some(&at)) = (segments.first_mut(), offsets.first()) {
        let at = at.min(first.offset + first.len);
        first.len -= at - first.offset;
        first.offset = at;
    }
    let mut start_ns = 0;
    let fragments = segments
        .iter()
        .map(|s| {
            let tag = fjord_proto::hls::packed_audio_tag(start_ns);
            start_ns += s.duration_ns;
            Fragment {
                duration_ns: s.duration_ns,
                parts: vec![
                    Part::Made(tag),
                    Part::File {
                        offset: s.offset,
                        len: s.len,
                    },
                ],
                key_frame_end: None,
            }
        })
        .collect();
    let (codec, sample_rate) = match kind {
        Packed::Aac => {
            // The AudioSpecificConfig's object type, from the SDP's config.
            let config = track.fmtp().split("config=").nth(1).unwrap_or("10");
            let aot = u8::from_str_radix(config.get(..2).unwrap_or("10"), 16).unwrap_or(0x10) >> 3;
            (format!("mp4a.40.{aot}"), Some(track.clock_rate()))
        }
        Packed::Mp3 => ("mp4a.40.34".to_owned(), None),
    };
    Some(Fragmented {
        init: Vec::new(),
        fragments,
        tracks: vec![TrackInfo {
            video: false,
            codec: codec.clone(),
            sample_rate,
        }],
        codecs: codec,
        resolution: None,
        frame_rate: None,
    })
}
