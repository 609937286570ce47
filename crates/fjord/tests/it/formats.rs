//! Every stored format, served and checked by real players: media made by
//! ffmpeg, played by ffmpeg (UDP and TCP) and GStreamer, compared with the
//! source; seeks land on keyframes; tracks stay in sync by their RTCP SRs.

use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use fjord_client::{Event, RtcpPacket, RtspClient};

use crate::common::{Server, generate_media, run_bounded, run_bounded_with};

/// One format under test.
pub(crate) struct Case {
    /// File name in the server's root (the extension matters to nobody but
    /// humans: fjord detects formats by content).
    pub(crate) file: &'static str,
    /// ffmpeg arguments that make it (after the test inputs: 4 s of 320x240
    /// 25 fps video as input 0 and a 48 kHz tone as input 1; output format
    /// included).
    pub(crate) make: &'static [&'static str],
    /// How ffmpeg's frames are compared, on both sides: `COPY` (packets as
    /// stored) or `DECODE_VIDEO` (see there).
    pub(crate) compare: &'static [&'static str],
    /// Options for ffmpeg reading the source so its packets compare with
    /// what RTP carries (bitstream filters), placed before `-f framemd5`.
    pub(crate) source_opts: &'static [&'static str],
    /// Per stream, the GStreamer depayloader chain after `rtspsrc`, and how
    /// to make the reference from the source (see [`Reference`]).
    pub(crate) gst: &'static [(&'static str, &'static str, Reference)],
}

/// What a GStreamer branch writes, and so what it is compared with.
#[derive(Clone, Copy)]
pub(crate) enum Reference {
    /// The stream's packets, concatenated (`ffmpeg -c copy -f data`).
    Packets(&'static [&'static str]),
    /// Decoded frames (`ffmpeg -f rawvideo`): GStreamer decodes with the
    /// same libavcodec (gst-libav), so the frames are identical.
    Decoded,
}

/// The test inputs every case's `make` arguments follow.
const INPUTS: &[&str] = &[
    "-f",
    "lavfi",
    "-i",
    "testsrc2=size=320x240:rate=25",
    "-f",
    "lavfi",
    "-i",
    "sine=frequency=440:sample_rate=48000",
    "-t",
    "4",
];

pub(crate) fn media(case: &Case) -> PathBuf {
    let args: Vec<&str> = INPUTS.iter().chain(case.make).copied().collect();
    generate_media(case.file, &args)
}

/// A server whose root holds the case's media as its file, and the media.
pub(crate) fn serve(case: &Case, config: &str) -> (Server, PathBuf) {
    let source = media(case);
    let server = Server::start_with(config, |root| {
        fs::copy(&source, root.join(case.file)).unwrap();
    });
    (server, source)
}

/// `framemd5` of the case's `source` with the case's options for it.
pub(crate) fn source_packets(case: &Case, source: &Path) -> Packets {
    let src = source.to_string_lossy().into_owned();
    let opts: Vec<&str> = case
        .compare
        .iter()
        .chain(case.source_opts)
        .copied()
        .collect();
    framemd5(&["-i", &src], &opts, "source")
}

/// Packets compared as stored.
pub(crate) const COPY: &[&str] = &["-c", "copy"];
/// H.264/H.265 video decoded, audio as stored: ffmpeg's RTP depacketizer
/// writes 4-byte start codes before every NAL unit, `h264_mp4toannexb` 3-byte
/// ones before all but the first of an access unit, so the packets of an
/// access unit of several NAL units differ in framing, not in content. The
/// NAL units themselves are compared byte for byte by fjord-media's tests.
pub(crate) const DECODE_VIDEO: &[&str] = &[
    "-c:v",
    "rawvideo",
    "-fps_mode",
    "passthrough",
    "-c:a",
    "copy",
];

/// framemd5 per stream: (size, md5) of each packet, in order.
pub(crate) type Packets = BTreeMap<u32, Vec<(String, String)>>;

pub(crate) fn framemd5(input: &[&str], opts: &[&str], what: &str) -> Packets {
    let mut cmd = Command::new("ffmpeg");
    cmd.args(["-nostdin", "-v", "error"])
        .args(input)
        .args(["-map", "0"])
        .args(opts)
        .args(["-f", "framemd5", "-"]);
    let out = run_bounded(cmd, Duration::from_secs(60));
    assert!(
        out.status.success() && !out.timed_out,
        "{what}: ffmpeg framemd5 failed (timed out {}): {}",
        out.timed_out,
        out.stderr
    );
    let mut packets = Packets::new();
    for line in String::from_utf8_lossy(&out.stdout).lines() {
        if line.starts_with('#') || line.trim().is_empty() {
            continue;
        }
        let f: Vec<&str> = line.split(',').map(str::trim).collect();
        assert!(f.len() >= 6, "framemd5 line {line:?}");
        packets
            .entry(f[0].parse().unwrap())
            .or_default()
            .push((f[4].to_owned(), f[5].to_owned()));
    }
    packets
}

/// Every stream's packets equal the source's, except that a stream's last
/// packet may be missing (the RTP depacketizers end a frame when the next
/// one starts, and the last has no next).
pub(crate) fn assert_packets_match(got: &Packets, want: &Packets, what: &str) {
    assert_eq!(
        got.keys().collect::<Vec<_>>(),
        want.keys().collect::<Vec<_>>(),
        "{what}: streams"
    );
    for (stream, w) in want {
        let g = &got[stream];
        assert!(
            g.len() == w.len() || g.len() + 1 == w.len(),
            "{what}: stream {stream}: {} packets received, {} in the source",
            g.len(),
            w.len()
        );
        if let Some(i) = g.iter().zip(w).position(|(a, b)| a != b) {
            panic!(
                "{what}: stream {stream} packet {i} of {}: received {:?}, source {:?}",
                w.len(),
                g[i],
                w[i]
            );
        }
    }
}

fn ffmpeg_plays(server: &Server, case: &Case, source: &Path, want: &Packets) {
    for transport in ["udp", "tcp"] {
        ffmpeg_plays_over(server, case, source, want, transport);
    }
}

/// ffmpeg with `-rtsp_transport transport` receives what the source holds.
pub(crate) fn ffmpeg_plays_over(
    server: &Server,
    case: &Case,
    source: &Path,
    want: &Packets,
    transport: &str,
) {
    let url = server.url(case.file);
    let got = framemd5(
        &[
            "-rtsp_transport",
            transport,
            "-timeout",
            "10000000",
            "-i",
            &url,
        ],
        case.compare,
        &format!("{} over {transport}", case.file),
    );
    assert_packets_match(
        &got,
        want,
        &format!("ffmpeg {transport} {}", source.display()),
    );
}

/// What ffmpeg makes of stream `index` of the source for `reference`.
fn reference_bytes(source: &Path, index: usize, reference: Reference, dir: &Path) -> Vec<u8> {
    let out = dir.join(format!("ref{index}"));
    let mut cmd = Command::new("ffmpeg");
    cmd.args(["-nostdin", "-v", "error", "-y", "-i"])
        .arg(source)
        .args(["-map", &format!("0:{index}")]);
    match reference {
        Reference::Packets(opts) => cmd.args(["-c", "copy"]).args(opts).args(["-f", "data"]),
        Reference::Decoded => cmd.args(["-fps_mode", "passthrough", "-f", "rawvideo"]),
    };
    cmd.arg(&out);
    let r = run_bounded(cmd, Duration::from_secs(60));
    assert!(r.status.success(), "ffmpeg reference: {}", r.stderr);
    fs::read(&out).unwrap()
}

pub(crate) fn gstreamer_plays(server: &Server, case: &Case, source: &Path, protocol: &str) {
    let dir = tempfile::tempdir().unwrap();
    let mut cmd = Command::new("gst-launch-1.0");
    cmd.args(["-q", "-e", "rtspsrc"])
        .arg(format!("location={}", server.url(case.file)))
        .arg(format!("protocols={protocol}"))
        .arg("name=src");
    for (i, (chain, _, _)) in case.gst.iter().enumerate() {
        cmd.args(["src.", "!", "queue", "!"])
            .args(chain.split(' '))
            .args(["!", "filesink"])
            .arg(format!(
                "location={}",
                dir.path().join(format!("got{i}")).display()
            ));
    }
    // Ends by itself on the server's BYE (EOS); otherwise interrupted well
    // after the clip's end (EOS via -e, so filesink flushes), then killed.
    let out = run_bounded_with(cmd, Duration::from_secs(30), Some(Duration::from_secs(20)));
    for (i, (chain, caps, reference)) in case.gst.iter().enumerate() {
        let got = fs::read(dir.path().join(format!("got{i}"))).unwrap_or_default();
        let stream = source_stream(source, caps);
        let want = reference_bytes(source, stream, *reference, dir.path());
        assert!(
            got == want,
            "gst {protocol} {} [{chain}]: {} bytes received, {} expected (common prefix {}); exited {:?}, timed out {}: {}",
            case.file,
            got.len(),
            want.len(),
            got.iter().zip(&want).take_while(|(a, b)| a == b).count(),
            out.status,
            out.timed_out,
            out.stderr
        );
    }
}

/// Index of the source's first stream of type `kind` ("video"/"audio").
fn source_stream(source: &Path, kind: &str) -> usize {
    let mut cmd = Command::new("ffprobe");
    cmd.args([
        "-v",
        "error",
        "-show_entries",
        "stream=codec_type",
        "-of",
        "csv=p=0",
    ])
    .arg(source);
    let out = run_bounded(cmd, Duration::from_secs(30));
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter(|l| !l.trim().is_empty())
        .position(|l| l.trim().trim_end_matches(',') == kind)
        .unwrap_or_else(|| panic!("no {kind} stream in {}", source.display()))
}

/// The encoding name of each media section of an SDP, in order.
fn encodings(sdp: &str) -> Vec<(String, u32)> {
    sdp.lines()
        .filter_map(|l| l.strip_prefix("a=rtpmap:"))
        .map(|m| {
            let enc = m.split_whitespace().nth(1).unwrap_or_default();
            let mut parts = enc.split('/');
            let name = parts.next().unwrap_or_default().to_ascii_uppercase();
            let clock = parts.next().and_then(|c| c.parse().ok()).unwrap_or(0);
            (name, clock)
        })
        .collect()
}

/// Whether the packets of one access unit (up to the marker) start a
/// picture a decoder can begin with.
fn starts_with_keyframe(encoding: &str, unit: &[Vec<u8>]) -> bool {
    match encoding {
        "H264" => {
            for p in unit {
                let t = match p.first().map(|b| b & 0x1f) {
                    Some(28) if p.len() > 1 && p[1] & 0x80 != 0 => p[1] & 0x1f,
                    Some(24) if p.len() > 3 => p[3] & 0x1f,
                    Some(t) => t,
                    None => continue,
                };
                match t {
                    5 => return true,
                    1 => return false,
                    _ => {}
                }
            }
            false
        }
        "H265" => {
            for p in unit {
                let t = match p.first().map(|b| (b >> 1) & 0x3f) {
                    Some(49) if p.len() > 2 && p[2] & 0x80 != 0 => p[2] & 0x3f,
                    Some(t) => t,
                    None => continue,
                };
                match t {
                    16..=21 => return true,
                    0..=9 => return false,
                    _ => {}
                }
            }
            false
        }
        // One-byte payload descriptors (what fjord sends): VP8's S bit then
        // the frame tag's inverse key frame bit (RFC 7741 §4.2, RFC 6386
        // §9.1); VP9's B bit and P (inter-predicted) bit (RFC 9628 §4.2).
        "VP8" => unit
            .first()
            .is_some_and(|p| p.len() > 1 && p[0] & 0x90 == 0x10 && p[1] & 1 == 0),
        "VP9" => unit
            .first()
            .is_some_and(|p| p.len() > 1 && p[0] & 0x48 == 0x08),
        // RFC 2250 §3.4: picture type in the low 3 bits of byte 2; 1 = I.
        "MPV" => unit
            .first()
            .is_some_and(|p| p.len() > 2 && p[2] & 0x07 == 1),
        other => panic!("no keyframe rule for {other}"),
    }
}

/// What one track delivered in the first second after a seek.
#[derive(Default)]
struct Arrived {
    packets: Vec<(u32, bool, Vec<u8>)>,
    /// (NTP as seconds, RTP timestamp) of the first sender report.
    report: Option<(f64, u32)>,
}

/// Seeks to 2 s with every track set up over UDP; checks the reply, that
/// video starts with a keyframe and audio at the seek time, and that the
/// tracks' sender reports put the same instant at the same wall time.
fn seek_and_sync(server: &Server, case: &Case) {
    let mut c = RtspClient::connect(&server.url(case.file)).expect("connect");
    let d = c.describe().expect("DESCRIBE");
    let encs = encodings(&d.sdp);
    assert_eq!(
        encs.len(),
        d.track_urls.len(),
        "rtpmap per track: {}",
        d.sdp
    );
    let mut rx: Vec<_> = d
        .track_urls
        .iter()
        .map(|u| c.setup_udp(u).expect("SETUP").1)
        .collect();
    let reply = c.play(Some("npt=2-")).expect("PLAY");
    let start = reply.start.expect("Range start");
    assert!(
        (1.0..=2.0).contains(&start),
        "{}: seek to 2 s started at {start}",
        case.file
    );
    assert_eq!(reply.rtp_info.len(), encs.len(), "RTP-Info per track");
    let mut arrived: Vec<Arrived> = (0..rx.len()).map(|_| Arrived::default()).collect();
    let until = Instant::now() + Duration::from_millis(1500);
    while Instant::now() < until {
        for (r, a) in rx.iter_mut().zip(&mut arrived) {
            match r.recv(Duration::from_millis(5)) {
                Some(Event::Rtp(p)) => a.packets.push((p.rtp_ts, p.marker, p.payload)),
                Some(Event::Rtcp(rtcp)) => {
                    for p in rtcp.packets {
                        if let RtcpPacket::SenderReport { ntp, rtp_ts, .. } = p
                            && a.report.is_none()
                        {
                            a.report = Some((ntp as f64 / 4_294_967_296.0, rtp_ts));
                        }
                    }
                }
                _ => {}
            }
        }
    }
    let mut wall_of_start = Vec::new();
    for (((enc, clock), a), info) in encs.iter().zip(&arrived).zip(&reply.rtp_info) {
        let rtptime = info.rtptime.expect("rtptime");
        let (first_ts, _, _) = a
            .packets
            .first()
            .unwrap_or_else(|| panic!("{}: no {enc} packet within 1.5 s of PLAY", case.file));
        let lead = first_ts.wrapping_sub(rtptime) as i32;
        if matches!(enc.as_str(), "H264" | "H265" | "MPV" | "VP8" | "VP9") {
            let unit: Vec<Vec<u8>> = a
                .packets
                .iter()
                .take_while(|(ts, _, _)| ts == first_ts)
                .map(|(_, _, p)| p.clone())
                .collect();
            assert!(
                starts_with_keyframe(enc, &unit),
                "{}: first {enc} picture after the seek is not a keyframe",
                case.file
            );
            assert_eq!(lead, 0, "{}: the keyframe is the Range start", case.file);
        } else {
            // Audio enters at its first frame at or after the start.
            assert!(
                (0..*clock as i32 / 10).contains(&lead),
                "{}: first {enc} packet {lead} ticks after the Range start",
                case.file
            );
        }
        let (ntp, sr_rtp) = a
            .report
            .unwrap_or_else(|| panic!("{}: no sender report for {enc}", case.file));
        let since = sr_rtp.wrapping_sub(rtptime) as i32 as f64 / f64::from(*clock);
        wall_of_start.push(ntp - since);
    }
    let (lo, hi) = wall_of_start
        .iter()
        .fold((f64::MAX, f64::MIN), |(l, h), &w| (l.min(w), h.max(w)));
    assert!(
        hi - lo < 0.040,
        "{}: tracks put the Range start {:.1} ms apart",
        case.file,
        (hi - lo) * 1e3
    );
}

/// ffmpeg (UDP and TCP) and GStreamer (UDP and TCP) receive every frame
/// of the case's title bit-exact; a seek lands on a key frame with the
/// tracks in sync.
pub(crate) fn check(case: &Case) {
    let (mut server, source) = serve(case, "");
    let want = source_packets(case, &source);
    std::thread::scope(|s| {
        s.spawn(|| ffmpeg_plays(&server, case, &source, &want));
        s.spawn(|| gstreamer_plays(&server, case, &source, "udp"));
        s.spawn(|| gstreamer_plays(&server, case, &source, "tcp"));
        s.spawn(|| seek_and_sync(&server, case));
    });
    server.assert_alive();
}

#[test]
fn mpeg2_video_elementary_stream() {
    check(&Case {
        file: "es2.m2v",
        make: &[
            "-map",
            "0:v",
            "-c:v",
            "mpeg2video",
            "-g",
            "12",
            "-bf",
            "2",
            "-b:v",
            "1M",
            "-f",
            "mpeg2video",
        ],
        compare: COPY,
        source_opts: &[],
        gst: &[MPV_GST],
    });
}

const MPV_GST: (&str, &str, Reference) = (
    "application/x-rtp,media=video ! rtpmpvdepay",
    "video",
    Reference::Packets(&[]),
);
const MPA_GST: (&str, &str, Reference) = (
    "application/x-rtp,media=audio ! rtpmpadepay",
    "audio",
    Reference::Packets(&[]),
);

#[test]
fn mpeg1_video_elementary_stream() {
    check(&Case {
        file: "es1.m1v",
        make: &[
            "-map",
            "0:v",
            "-c:v",
            "mpeg1video",
            "-g",
            "12",
            "-bf",
            "2",
            "-b:v",
            "1M",
            "-f",
            "mpeg1video",
        ],
        compare: COPY,
        source_opts: &[],
        gst: &[MPV_GST],
    });
}

#[test]
fn mp3() {
    check(&Case {
        file: "tone.mp3",
        make: &[
            "-map",
            "1:a",
            "-c:a",
            "libmp3lame",
            "-b:a",
            "128k",
            "-f",
            "mp3",
        ],
        compare: COPY,
        source_opts: &[],
        gst: &[MPA_GST],
    });
}
#[test]
fn mpeg2_program_stream_with_mp2_audio() {
    check(&Case {
        file: "ps.mpg",
        make: &[
            "-map",
            "0:v",
            "-map",
            "1:a",
            "-c:v",
            "mpeg2video",
            "-g",
            "12",
            "-bf",
            "2",
            "-b:v",
            "1M",
            "-c:a",
            "mp2",
            "-b:a",
            "192k",
            "-f",
            "vob",
        ],
        compare: COPY,
        source_opts: &[],
        gst: &[MPV_GST, MPA_GST],
    });
}

pub(crate) const H264_GST: (&str, &str, Reference) = (
    "application/x-rtp,media=video ! rtph264depay ! h264parse ! avdec_h264",
    "video",
    Reference::Decoded,
);
pub(crate) const AAC_GST: (&str, &str, Reference) = (
    "application/x-rtp,media=audio ! rtpmp4gdepay",
    "audio",
    Reference::Packets(&[]),
);

#[test]
fn mpeg2_program_stream_with_ac3_audio() {
    check(&Case {
        file: "ac3.vob",
        make: &[
            "-map",
            "0:v",
            "-map",
            "1:a",
            "-c:v",
            "mpeg2video",
            "-g",
            "12",
            "-bf",
            "2",
            "-b:v",
            "1M",
            "-c:a",
            "ac3",
            "-b:a",
            "192k",
            "-f",
            "vob",
        ],
        compare: COPY,
        source_opts: &[],
        gst: &[
            MPV_GST,
            (
                "application/x-rtp,media=audio ! rtpac3depay",
                "audio",
                Reference::Packets(&[]),
            ),
        ],
    });
}

/// H.264 and AAC in MP4 (also played over multicast, `multicast.rs`).
pub(crate) const AVC_MP4: Case = Case {
    file: "avc.mp4",
    make: &[
        "-map", "0:v", "-map", "1:a", "-c:v", "libx264", "-preset", "veryfast", "-g", "25", "-bf",
        "0", "-c:a", "aac", "-b:a", "128k", "-f", "mp4",
    ],
    compare: DECODE_VIDEO,
    source_opts: &[],
    gst: &[H264_GST, AAC_GST],
};

#[test]
fn mp4_h264_aac() {
    check(&AVC_MP4);
}

/// Fragmented MP4 (CMAF, fragments of both tracks every half second).
#[test]
fn fragmented_mp4_h264_aac() {
    check(&Case {
        file: "cmaf.mp4",
        make: &[
            "-map",
            "0:v",
            "-map",
            "1:a",
            "-c:v",
            "libx264",
            "-preset",
            "veryfast",
            "-g",
            "25",
            "-bf",
            "2",
            "-c:a",
            "aac",
            "-b:a",
            "128k",
            "-movflags",
            "cmaf",
            "-frag_duration",
            "500000",
            "-f",
            "mp4",
        ],
        compare: DECODE_VIDEO,
        source_opts: &[],
        gst: &[H264_GST, AAC_GST],
    });
}

#[test]
fn mp4_with_b_frames_and_an_edit_list() {
    check(&Case {
        file: "bframes.mp4",
        make: &[
            "-map", "0:v", "-map", "1:a", "-c:v", "libx264", "-preset", "veryfast", "-g", "25",
            "-bf", "2", "-c:a", "aac", "-b:a", "128k", "-f", "mp4",
        ],
        compare: DECODE_VIDEO,
        source_opts: &[],
        gst: &[H264_GST, AAC_GST],
    });
}

#[test]
fn mp4_h265() {
    check(&Case {
        file: "hevc.mp4",
        make: &[
            "-map",
            "0:v",
            "-c:v",
            "libx265",
            "-x265-params",
            "log-level=error:keyint=25",
            "-f",
            "mp4",
        ],
        compare: DECODE_VIDEO,
        source_opts: &[],
        gst: &[(
            "application/x-rtp,media=video ! rtph265depay ! h265parse ! avdec_h265",
            "video",
            Reference::Decoded,
        )],
    });
}

#[test]
fn adts_aac() {
    check(&Case {
        file: "tone.aac",
        make: &["-map", "1:a", "-c:a", "aac", "-b:a", "128k", "-f", "adts"],
        compare: COPY,
        source_opts: &["-bsf:a", "aac_adtstoasc"],
        gst: &[(
            "application/x-rtp,media=audio ! rtpmp4gdepay",
            "audio",
            Reference::Packets(&["-bsf:a", "aac_adtstoasc"]),
        )],
    });
}

#[test]
fn mp4_opus() {
    check(&Case {
        file: "opus.mp4",
        make: &["-map", "1:a", "-c:a", "libopus", "-b:a", "64k", "-f", "mp4"],
        compare: COPY,
        source_opts: &[],
        gst: &[(
            "application/x-rtp,media=audio ! rtpopusdepay",
            "audio",
            Reference::Packets(&[]),
        )],
    });
}
