//! HLS playlists (RFC 8216) of a stored title, written without I/O. An
//! MPEG-TS title's segments are byte ranges of the file itself
//! (`EXT-X-BYTERANGE`), cut at the title's random access points, so a
//! segment is served like any download and no payload is generated; an
//! MP4 title's are fragmented MP4 (`EXT-X-MAP`), made elsewhere
//! (`fjord_media::mp4::fragments`).
//!
//! In: the random access points' times (and, for the ones chosen as
//! boundaries, their byte offsets), the file's length and duration, or a
//! fragmented title's segment lengths and durations. Out: the segments and
//! the playlists' text.

/// One segment: `len` bytes of the file from `offset`, lasting `duration_ns`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Segment {
    pub offset: u64,
    pub len: u64,
    pub duration_ns: u64,
}

/// Cuts a title into segments of at least `target_ns` (the last may be
/// shorter) at its random access points, whose times are `times`
/// (ascending); `offset_of(i)` is the byte offset point `i` starts at,
/// asked only for the points chosen. The first segment starts at byte 0:
/// whatever precedes the first point (the PAT and PMT) belongs to it.
/// Points whose offset is unknown or not after the previous boundary are
/// skipped.
pub fn cut(
    times: &[u64],
    mut offset_of: impl FnMut(usize) -> Option<u64>,
    file_len: u64,
    duration_ns: u64,
    target_ns: u64,
) -> Vec<Segment> {
    let mut segments = Vec::new();
    let (mut offset, mut start_ns) = (0u64, 0u64);
    for (i, &t) in times.iter().enumerate() {
        if t < start_ns.saturating_add(target_ns) || t >= duration_ns {
            continue;
        }
        let Some(at) = offset_of(i).filter(|&o| o > offset && o < file_len) else {
            continue;
        };
        segments.push(Segment {
            offset,
            len: at - offset,
            duration_ns: t - start_ns,
        });
        (offset, start_ns) = (at, t);
    }
    if file_len > offset {
        segments.push(Segment {
            offset,
            len: file_len - offset,
            duration_ns: duration_ns.saturating_sub(start_ns),
        });
    }
    segments
}

/// The media playlist of `segments`, each a byte range of `uri`.
pub fn media_playlist(segments: &[Segment], uri: &str) -> String {
    byte_ranges(segments, uri, None)
}

/// [`media_playlist`] of a live recording: an EVENT playlist (RFC 8216
/// §6.2.1), `#EXT-X-ENDLIST` appended once the recording `ended`; its
/// target duration at least `target_s` (see [`event_playlist`]).
pub fn event_media_playlist(
    segments: &[Segment],
    uri: &str,
    (target_s, ended): (u64, bool),
) -> String {
    byte_ranges(segments, uri, Some((target_s, ended)))
}

/// A VOD playlist of byte ranges, or with `event` (a least target
/// duration, ended) an EVENT one.
fn byte_ranges(segments: &[Segment], uri: &str, event: Option<(u64, bool)>) -> String {
    use std::fmt::Write;
    let longest = segments.iter().map(|s| s.duration_ns).max().unwrap_or(0);
    let least = event.map_or(0, |(target_s, _)| target_s);
    let target = longest.div_ceil(1_000_000_000).max(1).max(least);
    let kind = if event.is_some() { "EVENT" } else { "VOD" };
    let mut m = format!(
        "#EXTM3U\n#EXT-X-VERSION:4\n#EXT-X-TARGETDURATION:{target}\n\
         #EXT-X-PLAYLIST-TYPE:{kind}\n#EXT-X-MEDIA-SEQUENCE:0\n#EXT-X-INDEPENDENT-SEGMENTS\n"
    );
    for s in segments {
        let _ = write!(
            m,
            "#EXTINF:{:.3},\n#EXT-X-BYTERANGE:{}@{}\n{uri}\n",
            s.duration_ns as f64 / 1e9,
            s.len,
            s.offset
        );
    }
    if event.is_none_or(|(_, ended)| ended) {
        m.push_str("#EXT-X-ENDLIST\n");
    }
    m
}

/// The media playlist of segments served whole (their offsets unused):
/// fragmented MP4 with its init segment at `init_uri`, or packed audio
/// (`None`); segment `i` at `segment_uri(i)`.
pub fn segment_playlist(
    segments: &[Segment],
    init_uri: Option<&str>,
    segment_uri: impl Fn(usize) -> String,
) -> String {
    whole_segments(segments, init_uri, segment_uri, None)
}

/// [`segment_playlist`] of a live recording: an EVENT playlist (RFC 8216
/// §6.2.1) that players fetch again for the segments added since,
/// `#EXT-X-ENDLIST` appended once the recording `ended`. An EVENT
/// playlist may only have lines appended, so its target duration, at
/// least `target_s`, and its type stay as they were while it grew.
pub fn event_playlist(
    segments: &[Segment],
    init_uri: Option<&str>,
    segment_uri: impl Fn(usize) -> String,
    (target_s, ended): (u64, bool),
) -> String {
    whole_segments(segments, init_uri, segment_uri, Some((target_s, ended)))
}

/// A VOD playlist, or with `event` (a least target duration, ended) an
/// EVENT one.
fn whole_segments(
    segments: &[Segment],
    init_uri: Option<&str>,
    segment_uri: impl Fn(usize) -> String,
    event: Option<(u64, bool)>,
) -> String {
    use std::fmt::Write;
    let longest = segments.iter().map(|s| s.duration_ns).max().unwrap_or(0);
    let least = event.map_or(0, |(target_s, _)| target_s);
    let target = longest.div_ceil(1_000_000_000).max(1).max(least);
    let version = if init_uri.is_some() { 7 } else { 3 };
    let kind = if event.is_some() { "EVENT" } else { "VOD" };
    let mut m = format!(
        "#EXTM3U\n#EXT-X-VERSION:{version}\n#EXT-X-TARGETDURATION:{target}\n\
         #EXT-X-PLAYLIST-TYPE:{kind}\n#EXT-X-MEDIA-SEQUENCE:0\n#EXT-X-INDEPENDENT-SEGMENTS\n"
    );
    if let Some(init) = init_uri {
        let _ = writeln!(m, "#EXT-X-MAP:URI=\"{init}\"");
    }
    for (i, s) in segments.iter().enumerate() {
        let _ = write!(
            m,
            "#EXTINF:{:.3},\n{}\n",
            s.duration_ns as f64 / 1e9,
            segment_uri(i)
        );
    }
    if event.is_none_or(|(_, ended)| ended) {
        m.push_str("#EXT-X-ENDLIST\n");
    }
    m
}

/// A key frame as an I-frame playlist lists it: a byte range of `uri`
/// that holds it, lasting until the next.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct IFrame {
    pub uri: String,
    pub offset: u64,
    pub len: u64,
    pub duration_ns: u64,
}

/// The peak bit rate of `frames` (each one's bytes over its duration).
pub fn i_frame_bandwidth(frames: &[IFrame]) -> u64 {
    frames
        .iter()
        .map(|f| (u128::from(f.len) * 8 * 1_000_000_000 / u128::from(f.duration_ns.max(1))) as u64)
        .max()
        .unwrap_or(0)
}

/// An I-frame playlist (`EXT-X-I-FRAMES-ONLY`): fragmented MP4 with its
/// init segment at `init_uri`, or MPEG-TS (`None`).
pub fn i_frame_playlist(frames: &[IFrame], init_uri: Option<&str>) -> String {
    use std::fmt::Write;
    let longest = frames.iter().map(|f| f.duration_ns).max().unwrap_or(0);
    let target = longest.div_ceil(1_000_000_000).max(1);
    let version = if init_uri.is_some() { 7 } else { 4 };
    let mut m = format!(
        "#EXTM3U\n#EXT-X-VERSION:{version}\n#EXT-X-TARGETDURATION:{target}\n\
         #EXT-X-PLAYLIST-TYPE:VOD\n#EXT-X-MEDIA-SEQUENCE:0\n#EXT-X-I-FRAMES-ONLY\n"
    );
    if let Some(init) = init_uri {
        let _ = writeln!(m, "#EXT-X-MAP:URI=\"{init}\"");
    }
    for f in frames {
        let _ = write!(
            m,
            "#EXTINF:{:.3},\n#EXT-X-BYTERANGE:{}@{}\n{}\n",
            f.duration_ns as f64 / 1e9,
            f.len,
            f.offset,
            f.uri
        );
    }
    m.push_str("#EXT-X-ENDLIST\n");
    m
}

/// The ID3 tag a packed audio segment begins with (RFC 8216 §3.4): the
/// time of its first frame as the 33-bit 90 kHz timestamp of MPEG-2
/// systems, in a `PRIV` frame of
/// `com.apple.streaming.transportStreamTimestamp`.
pub fn packed_audio_tag(time_ns: u64) -> Vec<u8> {
    const OWNER: &[u8] = b"com.apple.streaming.transportStreamTimestamp\0";
    let pts = ((u128::from(time_ns) * 90_000 / 1_000_000_000) as u64) & ((1 << 33) - 1);
    let frame_len = (OWNER.len() + 8) as u32;
    let mut t = Vec::with_capacity(20 + frame_len as usize);
    t.extend_from_slice(b"ID3\x04\x00\x00");
    t.extend_from_slice(&syncsafe(10 + frame_len));
    t.extend_from_slice(b"PRIV");
    t.extend_from_slice(&syncsafe(frame_len));
    t.extend_from_slice(&[0, 0]);
    t.extend_from_slice(OWNER);
    t.extend_from_slice(&pts.to_be_bytes());
    t
}

/// An ID3v2.4 size: 28 bits, 7 per byte.
fn syncsafe(n: u32) -> [u8; 4] {
    [
        (n >> 21) as u8 & 0x7f,
        (n >> 14) as u8 & 0x7f,
        (n >> 7) as u8 & 0x7f,
        n as u8 & 0x7f,
    ]
}

/// What a multivariant playlist says of its variant beside its bandwidth,
/// when known.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Variant {
    /// RFC 6381 names, comma-separated.
    pub codecs: Option<String>,
    pub resolution: Option<(u16, u16)>,
    pub frame_rate: Option<f64>,
    /// An I-frame playlist at this URI, its peak bit rate and codecs.
    pub i_frames: Option<(String, u64, String)>,
    /// The same media playlist at other places (the title's next nodes in
    /// a cluster), listed after it with the same attributes: redundant
    /// variants, which players fail over to when the first cannot be
    /// loaded (hls.js: each a pathway, switched to on errors).
    pub backups: Vec<String>,
}

/// The multivariant playlist: one variant, `media_uri`, whose bandwidth
/// (bits per second) is measured from `segments`: the peak segment's and
/// the average.
pub fn multivariant_playlist(segments: &[Segment], media_uri: &str, variant: &Variant) -> String {
    let bps =
        |bytes: u64, ns: u64| (bytes as u128 * 8 * 1_000_000_000 / u128::from(ns.max(1))) as u64;
    let peak = segments
        .iter()
        .map(|s| bps(s.len, s.duration_ns))
        .max()
        .unwrap_or(0);
    let (bytes, ns) = segments
        .iter()
        .fold((0, 0), |(b, n), s| (b + s.len, n + s.duration_ns));
    let mut attrs = format!("BANDWIDTH={peak},AVERAGE-BANDWIDTH={}", bps(bytes, ns));
    if let Some(c) = &variant.codecs {
        attrs.push_str(&format!(",CODECS=\"{c}\""));
    }
    if let Some((w, h)) = variant.resolution {
        attrs.push_str(&format!(",RESOLUTION={w}x{h}"));
    }
    if let Some(f) = variant.frame_rate {
        attrs.push_str(&format!(",FRAME-RATE={f:.3}"));
    }
    let mut m = "#EXTM3U\n#EXT-X-VERSION:4\n#EXT-X-INDEPENDENT-SEGMENTS\n".to_owned();
    for uri in std::iter::once(media_uri).chain(variant.backups.iter().map(String::as_str)) {
        m.push_str(&format!("#EXT-X-STREAM-INF:{attrs}\n{uri}\n"));
    }
    if let Some((uri, bps, codecs)) = &variant.i_frames {
        m.push_str(&format!("#EXT-X-I-FRAME-STREAM-INF:BANDWIDTH={bps}"));
        if !codecs.is_empty() {
            m.push_str(&format!(",CODECS=\"{codecs}\""));
        }
        if let Some((w, h)) = variant.resolution {
            m.push_str(&format!(",RESOLUTION={w}x{h}"));
        }
        m.push_str(&format!(",URI=\"{uri}\"\n"));
    }
    m
}

#[cfg(test)]
mod tests;
