//! Matroska, WebM and fragmented MP4 titles (issue 37): files made by
//! ffmpeg (libvpx VP8 and VP9, libopus, x264, AAC) played over RTSP by
//! ffmpeg and GStreamer, every frame compared with the file's (framemd5 per
//! stream, packets for GStreamer); seeks land on key frames; a CMAF title,
//! a WebM and a Matroska title over HLS and DASH; an AV1 title over HLS
//! and DASH, refused over RTSP with the reason; truncated and corrupt files
//! are refused with the reason and the server serves on. (The fragmented MP4 title over RTSP is
//! `formats::fragmented_mp4_h264_aac`.)

use std::fs;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

use fjord_client::RtspClient;

use crate::common::{Server, run_bounded};
use crate::formats::{
    AAC_GST, COPY, Case, DECODE_VIDEO, H264_GST, Reference, assert_packets_match, check, framemd5,
    media,
};

const OPUS_GST: (&str, &str, Reference) = (
    "application/x-rtp,media=audio ! rtpopusdepay",
    "audio",
    Reference::Packets(&[]),
);

/// Packets compared as stored, the receiver's from its first: ffmpeg's VP9
/// depacketizer flags no packet as a key frame, and its stream copy waits
/// for one unless told not to.
pub(crate) const COPY_FROM_FIRST: &[&str] = &["-c", "copy", "-copyinkf"];

/// VP9 and Opus in WebM; libvpx in real-time mode makes superframes (a
/// hidden frame and a shown one in a block).
const VP9_WEBM: Case = Case {
    file: "vp9.webm",
    make: &[
        "-map",
        "0:v",
        "-map",
        "1:a",
        "-c:v",
        "libvpx-vp9",
        "-deadline",
        "realtime",
        "-cpu-used",
        "8",
        "-g",
        "25",
        "-b:v",
        "500k",
        "-c:a",
        "libopus",
        "-b:a",
        "64k",
        "-f",
        "webm",
    ],
    compare: COPY_FROM_FIRST,
    source_opts: &[],
    gst: &[
        (
            "application/x-rtp,media=video ! rtpvp9depay",
            "video",
            Reference::Packets(&[]),
        ),
        OPUS_GST,
    ],
};

#[test]
fn webm_vp9_opus() {
    check(&VP9_WEBM);
}

#[test]
fn webm_vp8_opus() {
    check(&Case {
        file: "vp8.webm",
        make: &[
            "-map",
            "0:v",
            "-map",
            "1:a",
            "-c:v",
            "libvpx",
            "-deadline",
            "realtime",
            "-cpu-used",
            "8",
            "-g",
            "25",
            "-b:v",
            "500k",
            "-c:a",
            "libopus",
            "-b:a",
            "64k",
            "-f",
            "webm",
        ],
        compare: COPY,
        source_opts: &[],
        gst: &[
            (
                "application/x-rtp,media=video ! rtpvp8depay",
                "video",
                Reference::Packets(&[]),
            ),
            OPUS_GST,
        ],
    });
}

/// AV1 (SVT-AV1, hidden frames in its mini-GOPs) and Opus in WebM: HLS
/// and DASH only.
pub(crate) const AV1_WEBM: Case = Case {
    file: "av1-opus.webm",
    make: &[
        "-map",
        "0:v",
        "-map",
        "1:a",
        "-c:v",
        "libsvtav1",
        "-preset",
        "12",
        "-g",
        "25",
        "-c:a",
        "libopus",
        "-b:a",
        "64k",
        "-f",
        "webm",
    ],
    compare: COPY_FROM_FIRST,
    source_opts: &[],
    gst: &[],
};

/// AV1 and Opus in a fragmented MP4: HLS and DASH only.
const AV1_FMP4: Case = Case {
    file: "av1-opus.mp4",
    make: &[
        "-map",
        "0:v",
        "-map",
        "1:a",
        "-c:v",
        "libsvtav1",
        "-preset",
        "12",
        "-g",
        "25",
        "-c:a",
        "libopus",
        "-b:a",
        "64k",
        "-movflags",
        "frag_keyframe+empty_moov",
        "-f",
        "mp4",
    ],
    compare: COPY_FROM_FIRST,
    source_opts: &[],
    gst: &[],
};

/// H.264 with B-frames (Matroska stores no decode times) and AAC.
pub(crate) const AVC_MKV: Case = Case {
    file: "avc.mkv",
    make: &[
        "-map", "0:v", "-map", "1:a", "-c:v", "libx264", "-preset", "veryfast", "-g", "25", "-bf",
        "2", "-c:a", "aac", "-b:a", "128k", "-f", "matroska",
    ],
    compare: DECODE_VIDEO,
    source_opts: &[],
    gst: &[H264_GST, AAC_GST],
};

#[test]
fn matroska_h264_aac() {
    check(&AVC_MKV);
}

/// H.265 (its `hvcC` in CodecPrivate) alone in Matroska.
#[test]
fn matroska_h265() {
    check(&Case {
        file: "hevc.mkv",
        make: &[
            "-map",
            "0:v",
            "-c:v",
            "libx265",
            "-x265-params",
            "log-level=error:keyint=25",
            "-f",
            "matroska",
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

/// The status and body of a DESCRIBE of `title`.
fn describe(server: &Server, title: &str) -> (u16, String) {
    let url = server.url(title);
    let mut c = RtspClient::connect(&url).expect("connect");
    let r = c.request("DESCRIBE", &url, &[], &[]).expect("DESCRIBE");
    (r.status, String::from_utf8_lossy(&r.body).into_owned())
}

/// What `fjord ingest` says of `path`, and whether it succeeded.
fn ingest(path: &Path) -> (bool, String) {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_fjord"));
    cmd.arg("ingest").arg(path);
    let out = run_bounded(cmd, Duration::from_secs(60));
    assert!(!out.timed_out, "fjord ingest hung");
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), out.stderr);
    (out.status.success(), text)
}

/// A file cut inside its header and one whose tracks are garbage: 415
/// with the reason, from the server (RTSP; HTTP says 404) and from `fjord
/// ingest`; a file cut mid-way serves what it holds over RTSP, HLS and
/// DASH. An AV1 title (no player here depacketizes AV1 over RTP): 415 with
/// the reason at DESCRIBE and at a SETUP without one, ingested with a
/// warning saying so. The server stays healthy throughout.
#[test]
fn av1_over_rtsp_and_truncated_and_corrupt_files_are_refused_with_the_reason() {
    let av1 = [media(&AV1_WEBM), media(&AV1_FMP4)];
    let whole = fs::read(media(&VP9_WEBM)).unwrap();
    // The Tracks ID's second occurrence: the first is the SeekHead's entry.
    let tracks_at = whole
        .windows(4)
        .enumerate()
        .filter(|(_, w)| *w == [0x16, 0x54, 0xae, 0x6b])
        .nth(1)
        .expect("Tracks")
        .0;
    let mut corrupt = whole.clone();
    corrupt[tracks_at + 12..tracks_at + 40].fill(0);
    let (mut server, http) = Server::start_http_with("", |root| {
        fs::copy(&av1[0], root.join(AV1_WEBM.file)).unwrap();
        fs::copy(&av1[1], root.join(AV1_FMP4.file)).unwrap();
        fs::write(root.join("cut.webm"), &whole[..tracks_at + 20]).unwrap();
        fs::write(root.join("corrupt.webm"), &corrupt).unwrap();
        fs::write(root.join("half.webm"), &whole[..whole.len() / 2]).unwrap();
    });
    let root = server.media_root();
    for title in [AV1_WEBM.file, AV1_FMP4.file] {
        let (status, text) = describe(&server, title);
        assert_eq!(status, 415, "{title}: {text}");
        assert!(text.contains("served over HLS and DASH only"), "{text}");
        let url = format!("{}/track1", server.url(title));
        let mut c = RtspClient::connect(&url).expect("connect");
        let transport = [("Transport", "RTP/AVP/TCP;unicast;interleaved=0-1")];
        let r = c.request("SETUP", &url, &transport, &[]).expect("SETUP");
        assert_eq!(r.status, 415, "{title}: SETUP without DESCRIBE");
        let (ok, said) = ingest(&root.join(title));
        assert!(ok && said.contains("HLS and DASH only"), "{title}: {said}");
    }
    for (title, reason) in [
        ("cut.webm", "the file ends inside its Tracks"),
        ("corrupt.webm", "Matroska:"),
    ] {
        let (status, text) = describe(&server, title);
        assert_eq!(status, 415, "{title}: {text}");
        assert!(text.contains(reason), "{title}: {text}");
        let (ok, said) = ingest(&root.join(title));
        assert!(!ok && said.contains(reason), "fjord ingest {title}: {said}");
        // Over HTTP a file fjord does not serve is no title, as a missing
        // one (http_titles.rs).
        for manifest in ["index.m3u8", "manifest.mpd"] {
            let url = format!("http://127.0.0.1:{http}/{title}/{manifest}");
            let (body, code) = crate::common::curl(&[&url]);
            assert_eq!(code, 404, "{title}/{manifest}: {body}");
        }
    }
    let (ok, said) = ingest(&root.join("half.webm"));
    assert!(
        ok && said.contains("truncated"),
        "fjord ingest half.webm: {said}"
    );
    let (status, text) = describe(&server, "half.webm");
    assert_eq!(status, 200, "half.webm: {text}");
    assert!(text.contains("VP9/90000"), "{text}");
    for (manifest, says) in [
        ("index.m3u8", "CODECS=\"vp09.00."),
        ("manifest.mpd", "codecs=\"vp09.00."),
    ] {
        let url = format!("http://127.0.0.1:{http}/half.webm/{manifest}");
        let (body, code) = crate::common::curl(&[&url]);
        assert_eq!(code, 200, "{manifest}: {body}");
        assert!(body.contains(says), "{manifest}: {body}");
    }
    server.assert_alive();
}

/// A CMAF title over HLS and DASH: ffmpeg reads every packet of the file
/// through the playlists (its fragments re-cut, samples by reference).
#[test]
fn hls_and_dash_of_a_fragmented_mp4_title() {
    let cmaf = Case {
        file: "cmaf-http.mp4",
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
            "-movflags",
            "cmaf",
            "-frag_duration",
            "500000",
            "-f",
            "mp4",
        ],
        compare: COPY,
        source_opts: &[],
        gst: &[],
    };
    let source = media(&cmaf);
    let (mut server, port) = Server::start_http_with("", |root| {
        fs::copy(&source, root.join(cmaf.file)).unwrap();
    });
    let want = framemd5(&["-i", source.to_str().unwrap()], COPY, "source");
    for manifest in ["index.m3u8", "manifest.mpd"] {
        let url = format!("http://127.0.0.1:{port}/{}/{manifest}", cmaf.file);
        let got = framemd5(&["-i", &url], COPY, manifest);
        assert_packets_match(&got, &want, manifest);
    }
    server.assert_alive();
}

/// Matroska and WebM titles over HLS and DASH (fragmented MP4, sample
/// entries from CodecPrivate, AV1's too; DASH of the VP9+Opus WebM in WebM), frames
/// by reference: ffmpeg reads every packet of the file through the
/// playlists, and they name the codecs.
#[test]
fn hls_and_dash_of_matroska_webm_and_av1_titles() {
    let cases = [
        (&VP9_WEBM, "vp09.00.20.08,opus"),
        (&AVC_MKV, "avc1.64000d,mp4a.40.2"),
        (&AV1_WEBM, "av01.0.00M.08,opus"),
        (&AV1_FMP4, "av01.0.00M.08,opus"),
    ];
    let sources: Vec<_> = cases.iter().map(|(c, _)| media(c)).collect();
    let (mut server, port) = Server::start_http_with("", |root| {
        for ((case, _), source) in cases.iter().zip(&sources) {
            fs::copy(source, root.join(case.file)).unwrap();
        }
    });
    for ((case, codecs), source) in cases.iter().zip(&sources) {
        let want = framemd5(&["-i", source.to_str().unwrap()], COPY_FROM_FIRST, "source");
        let index = format!("http://127.0.0.1:{port}/{}/index.m3u8", case.file);
        let (body, code) = crate::common::curl(&[&index]);
        assert_eq!(code, 200, "{body}");
        assert!(body.contains(&format!("CODECS=\"{codecs}\"")), "{body}");
        let mpd = format!("http://127.0.0.1:{port}/{}/manifest.mpd", case.file);
        let (body, _) = crate::common::curl(&[&mpd]);
        // DASH WebM when every track is VP8, VP9 or Opus.
        let webm = case.file.ends_with(".webm") && !codecs.starts_with("av01");
        assert_eq!(body.contains("mimeType=\"video/webm\""), webm, "{body}");
        for manifest in ["index.m3u8", "manifest.mpd"] {
            let url = format!("http://127.0.0.1:{port}/{}/{manifest}", case.file);
            let got = framemd5(&["-i", &url], COPY_FROM_FIRST, manifest);
            assert_packets_match(&got, &want, &format!("{} {manifest}", case.file));
        }
    }
    server.assert_alive();
}

fn adler32(b: &[u8]) -> u32 {
    let (mut a, mut s) = (1u32, 0u32);
    for &x in b {
        a = (a + u32::from(x)) % 65521;
        s = (s + a) % 65521;
    }
    (s << 16) | a
}

/// ffprobe's video packets of `file`: (adler32 of the bytes, key frame).
fn video_packets(file: &Path) -> Vec<(u32, bool)> {
    let mut cmd = Command::new("ffprobe");
    cmd.args([
        "-v",
        "error",
        "-select_streams",
        "v",
        "-show_data_hash",
        "adler32",
    ])
    .args(["-show_entries", "packet=flags,data_hash", "-of", "csv=p=0"])
    .arg(file);
    let out = run_bounded(cmd, Duration::from_secs(30));
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| {
            let (flags, hash) = l.split_once(',')?;
            let hash = u32::from_str_radix(hash.trim_start_matches("adler32:"), 16).ok()?;
            Some((hash, flags.starts_with('K')))
        })
        .collect()
}

/// A seek and Scale 4 on a VP9 title: the trick stream is the title's key
/// frames, whole and in order, each marked a key frame (P bit clear).
#[test]
fn scale_4_on_a_vp9_title_sends_its_key_frames() {
    let source = media(&VP9_WEBM);
    let server = Server::start_with("", |root| {
        fs::copy(&source, root.join(VP9_WEBM.file)).unwrap();
    });
    let packets = video_packets(&source);
    let mut c = RtspClient::connect(&server.url(VP9_WEBM.file)).expect("connect");
    let d = c.describe().expect("DESCRIBE");
    let (_, mut rx) = c.setup_udp(&d.track_urls[0]).expect("SETUP");
    let url = c.control_url().to_string();
    let r = c
        .request("PLAY", &url, &[("Scale", "4"), ("Range", "npt=1.5-")], b"")
        .unwrap();
    assert_eq!((r.status, r.header("Scale")), (200, Some("4")));
    let mut frames: Vec<(bool, Vec<u8>)> = Vec::new();
    let mut open = false;
    let until = std::time::Instant::now() + Duration::from_secs(4);
    while std::time::Instant::now() < until {
        let Some(fjord_client::Event::Rtp(p)) = rx.recv(Duration::from_millis(20)) else {
            continue;
        };
        if !open {
            frames.push((p.payload[0] & 0x40 == 0, Vec::new()));
        }
        frames
            .last_mut()
            .unwrap()
            .1
            .extend_from_slice(&p.payload[1..]);
        open = !p.marker;
    }
    let at: Vec<usize> = frames
        .iter()
        .map(|(key, f)| {
            assert!(key, "a frame not marked key");
            let h = adler32(f);
            packets
                .iter()
                .position(|p| p.0 == h)
                .expect("a frame not in the title")
        })
        .collect();
    assert!(
        at.iter().all(|&i| packets[i].1),
        "not only key frames: {at:?}"
    );
    // From the key frame before 1.5 s (1 s) to the end: 1, 2, 3 s.
    assert_eq!(at, [25, 50, 75], "key frames");
}

/// Parity works on the new titles as on the others: a VP9+Opus WebM title
/// ingested with `--fec 12:8` offers repair streams for both tracks, and
/// `fjord load --fec` that drops a tenth of the packets gets every one
/// back from them, over UDP and TCP.
#[test]
fn a_protected_webm_title_repairs_every_dropped_packet() {
    let source = media(&VP9_WEBM);
    let mut server = Server::start_with("", |root| {
        crate::common::ingest(root, &["--fec", "12:8"], &[(&source, VP9_WEBM.file)]);
    });
    let mut c = RtspClient::connect(&server.url(VP9_WEBM.file)).unwrap();
    let sdp = c.describe_fec().unwrap().sdp;
    assert!(
        sdp.contains("a=control:track1-fec") && sdp.contains("a=control:track2-fec"),
        "{sdp}"
    );
    std::thread::scope(|s| {
        for transport in [&[][..], &["--tcp"][..]] {
            let server = &server;
            s.spawn(move || {
                let mut cmd = Command::new(env!("CARGO_BIN_EXE_fjord"));
                cmd.arg("load")
                    .arg(server.url(VP9_WEBM.file))
                    .args(["--fec", "--json", "--drop", "0.1", "-n", "2", "-t", "3"])
                    .args(transport);
                let out = run_bounded(cmd, Duration::from_secs(40));
                let stdout = String::from_utf8_lossy(&out.stdout);
                assert!(
                    out.status.success(),
                    "{transport:?}: {stdout}\n{}",
                    out.stderr
                );
                let r = fjord_client::load::LoadReport::from_json(&stdout).unwrap();
                let fec = r.totals.fec.as_ref().expect("FEC counts");
                let json = r.to_json();
                assert_eq!(r.sessions_playing, 2, "{json}");
                assert!(fec.dropped > 0 && fec.repair_packets > 0, "{json}");
                assert_eq!(fec.recovered, fec.dropped, "{json}");
                assert_eq!((fec.unrecoverable, r.totals.lost), (0, 0), "{json}");
            });
        }
    });
    server.assert_alive();
}
