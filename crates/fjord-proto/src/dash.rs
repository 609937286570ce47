//! MPEG-DASH manifests (ISO/IEC 23009-1), written without I/O: a stored
//! title served as fragmented MP4 (live profile), one representation per
//! track, whose segments of every track are cut at the same places so one
//! timeline serves them all; or an MPEG-TS title (MPEG-2 TS simple
//! profile) whose segments are byte ranges of the file. A stored title's
//! manifest is static; a recording still being written has a dynamic one
//! ([`Presentation::Dynamic`]) that players fetch again as it grows.
//!
//! In: the segments' durations and each track's codec facts and segment
//! lengths, or the file's byte ranges, and the presentation (for a
//! dynamic one its times, as text: no clock is read here). Out: the MPD's
//! text, whose URLs are
//! `init-$RepresentationID$.mp4` and `seg-$RepresentationID$-$Number$.m4s`
//! (from 0; `.webm` both for WebM representations) relative to the
//! manifest, or the file's URI with
//! `mediaRange`s.

use std::fmt::Write;

/// One track as a representation.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Representation {
    pub video: bool,
    /// RFC 6381 name.
    pub codecs: String,
    /// Each segment's length in bytes, in order.
    pub segment_bytes: Vec<u64>,
    pub resolution: Option<(u16, u16)>,
    pub frame_rate: Option<f64>,
    pub sample_rate: Option<u32>,
    /// Its segments are WebM (`init-K.webm`, `seg-K-N.webm`), not
    /// fragmented MP4.
    pub webm: bool,
}

/// The timeline's unit: milliseconds.
const TIMESCALE: u64 = 1000;

/// How the manifest presents the segments it lists.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Presentation<'a> {
    /// A stored title, or a recording that ended: every segment, its
    /// whole duration. (A player that followed the recording as it grew
    /// takes this as its end: DASH-IF IOP 4.6.4, dynamic to static.)
    Static,
    /// A recording still being written (`type="dynamic"`): the segments
    /// so far, all of them kept (no time-shift limit), the manifest
    /// fetched again every `update_s`. Times are `xs:dateTime` text, UTC.
    Dynamic {
        /// When the recording's time 0 was: segment `i` is available from
        /// this plus its end.
        available_since: &'a str,
        /// Now: the manifest's publish time, and the clock players set
        /// theirs by (`UTCTiming` direct: no time server is needed).
        now: &'a str,
        update_s: u64,
    },
}

/// The manifest of a title whose segments last `durations_ns`, tracks
/// `reps` (representation IDs are their positions).
pub fn mpd(durations_ns: &[u64], reps: &[Representation], how: Presentation<'_>) -> String {
    let mut m = head("isoff-live:2011", durations_ns, how);
    let timeline = timeline(durations_ns);
    for (id, r) in reps.iter().enumerate() {
        let kind = if r.video { "video" } else { "audio" };
        let (sub, init, media) = if r.webm {
            ("webm", "webm", "webm")
        } else {
            ("mp4", "mp4", "m4s")
        };
        let _ = writeln!(
            m,
            "<AdaptationSet id=\"{id}\" contentType=\"{kind}\" mimeType=\"{kind}/{sub}\" \
             segmentAlignment=\"true\" startWithSAP=\"1\">"
        );
        let _ = write!(
            m,
            "<Representation id=\"{id}\" codecs=\"{}\" bandwidth=\"{}\"",
            xml_escape(&r.codecs),
            peak_bps(&r.segment_bytes, durations_ns)
        );
        if let Some((w, h)) = r.resolution {
            let _ = write!(m, " width=\"{w}\" height=\"{h}\"");
        }
        if let Some(f) = r.frame_rate {
            let _ = write!(m, " frameRate=\"{}\"", frame_rate(f));
        }
        if let Some(hz) = r.sample_rate {
            let _ = write!(m, " audioSamplingRate=\"{hz}\"");
        }
        m.push_str(">\n");
        let _ = write!(
            m,
            "<SegmentTemplate timescale=\"{TIMESCALE}\" initialization=\"init-$RepresentationID$.{init}\" \
             media=\"seg-$RepresentationID$-$Number$.{media}\" startNumber=\"0\">\n\
             <SegmentTimeline>\n{timeline}</SegmentTimeline>\n</SegmentTemplate>\n\
             </Representation>\n</AdaptationSet>\n"
        );
    }
    m.push_str("</Period>\n");
    m.push_str(&tail(how));
    m
}

/// The `MPD` element's start and the period's, for `profile`
/// (`urn:mpeg:dash:profile:` omitted).
fn head(profile: &str, durations_ns: &[u64], how: Presentation<'_>) -> String {
    let total = duration(durations_ns.iter().sum());
    let timing = match how {
        Presentation::Static => format!("type=\"static\" mediaPresentationDuration=\"{total}\""),
        Presentation::Dynamic {
            available_since,
            now,
            update_s,
        } => format!(
            "type=\"dynamic\" availabilityStartTime=\"{}\" publishTime=\"{}\" \
             minimumUpdatePeriod=\"PT{update_s}S\"",
            xml_escape(available_since),
            xml_escape(now)
        ),
    };
    format!(
        "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n\
         <MPD xmlns=\"urn:mpeg:dash:schema:mpd:2011\" {timing} \
         profiles=\"urn:mpeg:dash:profile:{profile}\" minBufferTime=\"PT2S\">\n\
         <Period id=\"0\" start=\"PT0S\">\n"
    )
}

/// What follows the period: a dynamic manifest's clock, then the end.
fn tail(how: Presentation<'_>) -> String {
    match how {
        Presentation::Static => "</MPD>\n".to_owned(),
        Presentation::Dynamic { now, .. } => format!(
            "<UTCTiming schemeIdUri=\"urn:mpeg:dash:utc:direct:2014\" value=\"{}\"/>\n</MPD>\n",
            xml_escape(now)
        ),
    }
}

/// The manifest of an MPEG-TS title whose segments are `ranges` of the
/// file at `uri` (relative to the manifest), lasting `durations_ns`.
pub fn mpd_of_ranges(
    durations_ns: &[u64],
    ranges: &[std::ops::Range<u64>],
    uri: &str,
    how: Presentation<'_>,
) -> String {
    let bytes: Vec<u64> = ranges.iter().map(|r| r.end - r.start).collect();
    let mut m = head("mp2t-simple:2011", durations_ns, how);
    let _ = write!(
        m,
        "<AdaptationSet id=\"0\" mimeType=\"video/mp2t\" segmentAlignment=\"true\" startWithSAP=\"1\">\n\
         <Representation id=\"0\" bandwidth=\"{}\">\n\
         <SegmentList timescale=\"{TIMESCALE}\">\n<SegmentTimeline>\n{}</SegmentTimeline>\n",
        peak_bps(&bytes, durations_ns),
        timeline(durations_ns)
    );
    let uri = xml_escape(uri);
    for r in ranges {
        let _ = writeln!(
            m,
            "<SegmentURL media=\"{uri}\" mediaRange=\"{}-{}\"/>",
            r.start,
            r.end.saturating_sub(1)
        );
    }
    m.push_str("</SegmentList>\n</Representation>\n</AdaptationSet>\n</Period>\n");
    m.push_str(&tail(how));
    m
}

/// `<S>` elements: each segment's duration in [`TIMESCALE`] units, from
/// rounded boundaries so rounding never drifts (the end rounded up, as the
/// whole duration is); equal neighbours as repeats (`r`).
fn timeline(durations_ns: &[u64]) -> String {
    let mut at_ns = 0u64;
    let mut at = 0u64;
    let mut runs: Vec<(u64, u64)> = Vec::new();
    for (i, &d) in durations_ns.iter().enumerate() {
        at_ns += d;
        let units = u128::from(at_ns) * u128::from(TIMESCALE);
        let next = if i + 1 == durations_ns.len() {
            units.div_ceil(1_000_000_000) as u64
        } else {
            (units / 1_000_000_000) as u64
        };
        let len = next - at;
        at = next;
        match runs.last_mut() {
            Some((l, r)) if *l == len => *r += 1,
            _ => runs.push((len, 0)),
        }
    }
    let mut s = String::new();
    for (i, (d, r)) in runs.iter().enumerate() {
        let t = if i == 0 { " t=\"0\"" } else { "" };
        let r = if *r > 0 {
            format!(" r=\"{r}\"")
        } else {
            String::new()
        };
        let _ = writeln!(s, "<S{t} d=\"{d}\"{r}/>");
    }
    s
}

/// The highest bit rate of one segment.
fn peak_bps(bytes: &[u64], durations_ns: &[u64]) -> u64 {
    bytes
        .iter()
        .zip(durations_ns)
        .map(|(&b, &d)| (u128::from(b) * 8 * 1_000_000_000 / u128::from(d.max(1))) as u64)
        .max()
        .unwrap_or(0)
}

/// An `xs:duration` in seconds with milliseconds, rounded up (a player
/// stops at it: it must not cut the last sample short).
fn duration(ns: u64) -> String {
    let ms = ns.div_ceil(1_000_000);
    format!("PT{}.{:03}S", ms / 1000, ms % 1000)
}

/// A frame rate as DASH writes it: an integer, or a ratio to 1000ths.
fn frame_rate(f: f64) -> String {
    if (f - f.round()).abs() < 1e-3 {
        format!("{}", f.round() as u64)
    } else {
        format!("{}/1000", (f * 1000.0).round() as u64)
    }
}

fn xml_escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('"', "&quot;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: u64 = 1_000_000_000;

    #[test]
    fn one_timeline_and_a_representation_per_track() {
        let durations = [6 * S, 6 * S, 6 * S, 2_500_000_000];
        let video = Representation {
            video: true,
            codecs: "avc1.64001f".into(),
            segment_bytes: vec![600_000, 450_000, 300_000, 10],
            resolution: Some((1280, 720)),
            frame_rate: Some(25.0),
            ..Default::default()
        };
        let audio = Representation {
            codecs: "mp4a.40.2".into(),
            segment_bytes: vec![96_000; 4],
            sample_rate: Some(48_000),
            ..Default::default()
        };
        let m = mpd(&durations, &[video, audio], Presentation::Static);
        assert!(m.contains("mediaPresentationDuration=\"PT20.500S\""), "{m}");
        assert!(
            m.contains("<S t=\"0\" d=\"6000\" r=\"2\"/>\n<S d=\"2500\"/>"),
            "{m}"
        );
        assert!(
            m.contains("<Representation id=\"0\" codecs=\"avc1.64001f\" bandwidth=\"800000\" width=\"1280\" height=\"720\" frameRate=\"25\">"),
            "{m}"
        );
        assert!(
            m.contains("<Representation id=\"1\" codecs=\"mp4a.40.2\" bandwidth=\"307200\" audioSamplingRate=\"48000\">"),
            "{m}"
        );
        assert_eq!(m.matches("<AdaptationSet").count(), 2);
        assert!(m.ends_with("</Period>\n</MPD>\n"));
    }

    #[test]
    fn webm_representations_name_webm_segments() {
        let vp8 = Representation {
            video: true,
            codecs: "vp8".into(),
            segment_bytes: vec![1000],
            webm: true,
            ..Default::default()
        };
        let m = mpd(&[S], &[vp8], Presentation::Static);
        assert!(m.contains("mimeType=\"video/webm\""), "{m}");
        assert!(
            m.contains("initialization=\"init-$RepresentationID$.webm\" media=\"seg-$RepresentationID$-$Number$.webm\""),
            "{m}"
        );
    }

    #[test]
    fn a_ts_title_is_byte_ranges_of_its_file() {
        let m = mpd_of_ranges(
            &[6 * S, 3 * S],
            &[0..6000, 6000..7000],
            "../a&b.ts",
            Presentation::Static,
        );
        assert!(
            m.contains("profiles=\"urn:mpeg:dash:profile:mp2t-simple:2011\""),
            "{m}"
        );
        assert!(m.contains("mimeType=\"video/mp2t\""), "{m}");
        assert!(m.contains("bandwidth=\"8000\""), "{m}");
        assert!(
            m.contains("<S t=\"0\" d=\"6000\"/>\n<S d=\"3000\"/>"),
            "{m}"
        );
        assert!(m.contains("<SegmentURL media=\"../a&amp;b.ts\" mediaRange=\"0-5999\"/>\n<SegmentURL media=\"../a&amp;b.ts\" mediaRange=\"6000-6999\"/>"), "{m}");
    }

    #[test]
    fn a_growing_recording_is_dynamic() {
        let audio = Representation {
            codecs: "mp4a.40.2".into(),
            segment_bytes: vec![1000, 1000],
            ..Default::default()
        };
        let grows = Presentation::Dynamic {
            available_since: "2026-11-29T18:51:45Z",
            now: "2026-11-29T18:52:00.250Z",
            update_s: 2,
        };
        let m = mpd(&[6 * S, 6 * S], std::slice::from_ref(&audio), grows);
        assert!(
            m.contains(
                "type=\"dynamic\" availabilityStartTime=\"2026-11-29T18:51:45Z\" \
                 publishTime=\"2026-11-29T18:52:00.250Z\" minimumUpdatePeriod=\"PT2S\" "
            ),
            "{m}"
        );
        assert!(!m.contains("mediaPresentationDuration"), "{m}");
        assert!(
            m.ends_with(
                "</Period>\n<UTCTiming schemeIdUri=\"urn:mpeg:dash:utc:direct:2014\" \
                 value=\"2026-11-29T18:52:00.250Z\"/>\n</MPD>\n"
            ),
            "{m}"
        );
        assert!(m.contains("<S t=\"0\" d=\"6000\" r=\"1\"/>"), "{m}");
        let m = mpd_of_ranges(&[6 * S, 3 * S], &[0..10, 10..20], "a.ts", grows);
        assert!(m.contains("type=\"dynamic\""), "{m}");
        assert!(m.contains("<UTCTiming"), "{m}");
        assert!(!m.contains("mediaPresentationDuration"), "{m}");
    }

    #[test]
    fn rounding_never_drifts() {
        // 1001/30 s segments: the boundaries stay within a millisecond.
        let d = 1_001_000_000 / 30;
        let t = timeline(&vec![d; 3000]);
        let total: u64 = t
            .lines()
            .map(|l| {
                let num = |k: &str| {
                    l.split(k)
                        .nth(1)
                        .and_then(|x| x.split('"').nth(1))
                        .map_or(0, |x| x.parse::<u64>().unwrap())
                };
                num(" d=") * (num(" r=") + 1)
            })
            .sum();
        assert_eq!(total, (3000 * d).div_ceil(1_000_000));
    }
}
