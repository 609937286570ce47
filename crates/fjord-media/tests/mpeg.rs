//! MPEG video/audio ES, MP3 and program streams made by ffmpeg: the plan,
//! depacketized as a receiver would (RFC 2250 / RFC 4184 headers stripped),
//! must give back exactly what ffmpeg extracts, with the right header fields,
//! markers, timestamps and sync points. ffmpeg is required (`make test`
//! installs it); these tests fail without it.

use std::path::{Path, PathBuf};
use std::process::Command;

use fjord_media::format::{MAX_RTP_PAYLOAD, plan};
use fjord_media::plan::{MediaPlan, PacketRecord, TrackPlan};
use fjord_media::ts::TsOptions;

fn run(cmd: &str, args: &[&str]) -> Vec<u8> {
    let out = Command::new(cmd).args(args).output().unwrap_or_else(|e| {
        panic!("{cmd} is required for these tests (make test installs it): {e}")
    });
    assert!(
        out.status.success(),
        "{cmd} {args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    out.stdout
}

fn ffmpeg(args: &[&str]) {
    let mut all = vec!["-nostdin", "-loglevel", "error", "-y"];
    all.extend_from_slice(args);
    run("ffmpeg", &all);
}

/// `ffprobe -show_packets` of one stream: (pts, dts) in the stream time base.
fn probe_packets(path: &Path, stream: &str) -> Vec<(i64, i64)> {
    let out = run(
        "ffprobe",
        &[
            "-v",
            "error",
            "-select_streams",
            stream,
            "-show_entries",
            "packet=pts,dts",
            "-of",
            "csv=p=0",
            path.to_str().unwrap(),
        ],
    );
    String::from_utf8(out)
        .unwrap()
        .lines()
        .filter(|l| !l.is_empty())
        .map(|l| {
            let v: Vec<i64> = l.split(',').map(|x| x.parse().unwrap_or(-1)).collect();
            (v[0], v[1])
        })
        .collect()
}

/// Picture types in display order, from ffprobe's decoded frames.
fn probe_picture_types(path: &Path) -> String {
    let out = run(
        "ffprobe",
        &[
            "-v",
            "error",
            "-select_streams",
            "v",
            "-show_entries",
            "frame=pict_type",
            "-of",
            "csv=p=0",
            path.to_str().unwrap(),
        ],
    );
    String::from_utf8(out)
        .unwrap()
        .lines()
        .filter_map(|l| l.chars().next())
        .collect()
}

/// What ffmpeg demuxes from one stream of `src`, packets back to back.
fn extract(dir: &Path, src: &Path, map: &str) -> Vec<u8> {
    let out = dir.join(format!("extract-{}.raw", map.replace(':', "_")));
    ffmpeg(&[
        "-i",
        src.to_str().unwrap(),
        "-map",
        map,
        "-c",
        "copy",
        "-f",
        "data",
        out.to_str().unwrap(),
    ]);
    std::fs::read(out).unwrap()
}

fn make(dir: &Path, name: &str, args: &[&str]) -> (PathBuf, Vec<u8>, MediaPlan) {
    let path = dir.join(name);
    let mut all = args.to_vec();
    all.push(path.to_str().unwrap());
    ffmpeg(&all);
    let data = std::fs::read(&path).unwrap();
    let p = plan(&data, &TsOptions::default(), &mut |_, _| {}).unwrap();
    (path, data, p)
}

fn payload(data: &[u8], r: &PacketRecord) -> Vec<u8> {
    let end = r.offset as usize + r.len as usize;
    let mut v = r.prefix().to_vec();
    v.extend_from_slice(&data[r.offset as usize..end]);
    let o2 = r.offset2() as usize;
    v.extend_from_slice(&data[o2..o2 + r.len2 as usize]);
    v
}

fn common_checks(data: &[u8], t: &TrackPlan) {
    let mut last = 0;
    for r in &t.packets {
        assert!(r.payload_len() <= MAX_RTP_PAYLOAD, "{r:?}");
        assert!(r.file_end() <= data.len() as u64);
        assert!(r.len > 0);
        assert!(r.send_time_ns >= last);
        last = r.send_time_ns;
    }
}

fn starts_slice(p: &[u8]) -> bool {
    p.len() >= 4 && p[..3] == [0, 0, 1] && (1..=0xaf).contains(&p[3])
}

fn find_code(p: &[u8], code: u8) -> Option<usize> {
    p.windows(4).position(|w| w == [0, 0, 1, code])
}

/// Checks an MPV track against the video ES ffmpeg sees; returns the
/// pictures' (rtp_ts, type char) in decode order.
fn check_mpv(data: &[u8], t: &TrackPlan, reference: &[u8], mpeg2: bool) -> Vec<(u32, char)> {
    assert_eq!((t.desc.payload_type, t.desc.encoding.as_str()), (32, "MPV"));
    assert_eq!(t.desc.clock_rate, 90_000);
    common_checks(data, t);
    let mut es = Vec::new();
    let mut pictures = Vec::new();
    let mut pic: Vec<(u32, Vec<u8>)> = Vec::new();
    for (i, r) in t.packets.iter().enumerate() {
        let p = payload(data, r);
        let h = u32::from_be_bytes(p[..4].try_into().unwrap());
        let ext = h >> 26 & 1 == 1;
        assert_eq!(ext, mpeg2, "T bit");
        assert_eq!(h >> 27, 0, "MBZ");
        let body = &p[if ext { 8 } else { 4 }..];
        es.extend_from_slice(body);
        assert_eq!(h >> 13 & 1 == 1, find_code(body, 0xb3).is_some(), "S bit");
        if h >> 12 & 1 == 1 {
            assert!(
                starts_slice(body) || find_code(body, 0x01).is_some(),
                "B bit"
            );
        } else {
            assert!(
                !starts_slice(body),
                "B bit clear on a slice start, packet {i}"
            );
        }
        pic.push((h, body.to_vec()));
        if r.marker() {
            let bytes: Vec<u8> = pic.iter().flat_map(|p| p.1.clone()).collect();
            let at = find_code(&bytes, 0x00).expect("picture header") + 4;
            let tr = u32::from(bytes[at]) << 2 | u32::from(bytes[at + 1]) >> 6;
            let ptype = u32::from(bytes[at + 1]) >> 3 & 7;
            for (k, (h, body)) in pic.iter().enumerate() {
                assert_eq!(h >> 16 & 0x3ff, tr, "TR");
                assert_eq!(h >> 8 & 7, ptype, "P");
                if h >> 11 & 1 == 1 {
                    // E: the next packet of the picture starts a slice.
                    if let Some(next) = pic.get(k + 1) {
                        assert!(starts_slice(&next.1), "E bit");
                    }
                } else if k + 1 < pic.len() && (starts_slice(body) || find_code(body, 1).is_some())
                {
                    assert!(!starts_slice(&pic[k + 1].1), "E bit clear before a slice");
                }
            }
            let first = i + 1 - pic.len();
            let ts = t.packets[first].rtp_ts;
            assert!(t.packets[first..=i].iter().all(|r| r.rtp_ts == ts));
            let is_sync = t.sync.iter().any(|s| s.packet as usize == first);
            assert_eq!(is_sync, ptype == 1, "sync point on every I picture only");
            if is_sync {
                let s = t.sync.iter().find(|s| s.packet as usize == first).unwrap();
                assert_eq!(fjord_media::plan::rtp_ticks(s.time_ns, 90_000), ts);
            }
            pictures.push((ts, b"?IPB"[ptype as usize] as char));
            pic.clear();
        }
    }
    assert!(pic.is_empty(), "last packet carries the marker");
    let start = find_code(reference, 0xb3).unwrap();
    assert!(
        es == reference[start..],
        "depacketized video differs from the ES"
    );
    pictures
}

fn display_order(pictures: &[(u32, char)]) -> Vec<(u32, char)> {
    let mut v = pictures.to_vec();
    v.sort();
    v
}

#[test]
fn mpeg2_video_es() {
    let dir = tempfile::tempdir().unwrap();
    let (path, data, p) = make(
        dir.path(),
        "v.m2v",
        &[
            "-f",
            "lavfi",
            "-i",
            "testsrc=size=352x288:rate=25",
            "-t",
            "4",
            "-c:v",
            "mpeg2video",
            "-bf",
            "2",
            "-g",
            "12",
            "-b:v",
            "4M",
            "-f",
            "mpeg2video",
        ],
    );
    assert_eq!(p.report.format, "MPEG-2 video");
    let pics = check_mpv(&data, &p.tracks[0], &data, true);
    let shown = display_order(&pics);
    let types: String = shown.iter().map(|p| p.1).collect();
    assert_eq!(types, probe_picture_types(&path));
    for (k, (ts, _)) in shown.iter().enumerate() {
        assert_eq!(*ts, k as u32 * 3600, "25 fps in display order");
    }
    assert_eq!(p.duration_ns, 4_000_000_000);
    // Slices bigger than a packet were fragmented (B without E).
    assert!(
        p.tracks[0]
            .packets
            .iter()
            .any(|r| r.prefix[2] & 0x18 == 0x10)
    );
    assert!(p.tracks[0].sync.len() >= 8);
}

#[test]
fn mpeg1_video_es() {
    let dir = tempfile::tempdir().unwrap();
    let (path, data, p) = make(
        dir.path(),
        "v.m1v",
        &[
            "-f",
            "lavfi",
            "-i",
            "testsrc=size=352x288:rate=30000/1001",
            "-t",
            "3",
            "-c:v",
            "mpeg1video",
            "-bf",
            "2",
            "-g",
            "15",
            "-b:v",
            "2M",
            "-f",
            "mpeg1video",
        ],
    );
    assert_eq!(p.report.format, "MPEG-1 video");
    let pics = check_mpv(&data, &p.tracks[0], &data, false);
    let shown = display_order(&pics);
    let types: String = shown.iter().map(|p| p.1).collect();
    assert_eq!(types, probe_picture_types(&path));
    for (k, (ts, _)) in shown.iter().enumerate() {
        assert_eq!(*ts, k as u32 * 3003, "29.97 fps in display order");
    }
}

/// Depacketizes an MPA track: the frames, each from its fragments.
fn depay_mpa(data: &[u8], t: &TrackPlan) -> (Vec<u8>, Vec<u32>) {
    assert_eq!((t.desc.payload_type, t.desc.encoding.as_str()), (14, "MPA"));
    common_checks(data, t);
    assert!(t.sync.is_empty());
    let (mut out, mut stamps) = (Vec::new(), Vec::new());
    let mut frame_len = 0;
    for r in &t.packets {
        let p = payload(data, r);
        assert_eq!(p[..2], [0, 0]);
        let frag = usize::from(u16::from_be_bytes([p[2], p[3]]));
        assert_eq!(frag, frame_len, "fragment offset");
        if frag == 0 {
            stamps.push(r.rtp_ts);
        }
        frame_len += p.len() - 4;
        out.extend_from_slice(&p[4..]);
        let len = mpa_frame_len(&out[out.len() - frame_len..]);
        if frame_len == len {
            frame_len = 0;
        }
    }
    assert_eq!(frame_len, 0, "whole frames");
    (out, stamps)
}

fn mpa_frame_len(f: &[u8]) -> usize {
    let br = [
        0, 32, 48, 56, 64, 80, 96, 112, 128, 160, 192, 224, 256, 320, 384,
    ];
    let br3 = [
        0, 32, 40, 48, 56, 64, 80, 96, 112, 128, 160, 192, 224, 256, 320,
    ];
    let sr = [44_100, 48_000, 32_000][usize::from(f[2] >> 2 & 3)];
    let layer3 = f[1] >> 1 & 3 == 1;
    let kbps = if layer3 { br3 } else { br }[usize::from(f[2] >> 4)];
    144 * kbps * 1000 / sr + usize::from(f[2] >> 1 & 1)
}

#[test]
fn mp3_file() {
    let dir = tempfile::tempdir().unwrap();
    let (path, data, p) = make(
        dir.path(),
        "a.mp3",
        &[
            "-f",
            "lavfi",
            "-i",
            "sine=f=440:r=44100",
            "-t",
            "3",
            "-c:a",
            "libmp3lame",
            "-metadata",
            "title=fjord",
            "-write_id3v1",
            "1",
        ],
    );
    assert_eq!(p.report.format, "MPEG-1 audio layer III");
    assert_eq!(p.tracks[0].desc.fmtp, "layer=3");
    let (frames, stamps) = depay_mpa(&data, &p.tracks[0]);
    assert_eq!(frames, extract(dir.path(), &path, "0:a"));
    assert_eq!(stamps.len(), probe_packets(&path, "a").len());
    for (k, ts) in stamps.iter().enumerate() {
        assert_eq!(
            u64::from(*ts),
            (k as u64 * 1152 * 90_000 * 2 + 44_100) / 88_200
        );
    }
    assert_eq!(p.report.skipped_bytes, 0);
    assert_eq!(p.report.truncated_tail_bytes, 0);

    // Garbage between frames and a cut last frame.
    let first = data.windows(2).position(|w| w == [0xff, 0xfb]).unwrap();
    let mut bad = data[..first + 5000].to_vec();
    bad.extend_from_slice(&[0x55; 333]);
    bad.extend_from_slice(&data[first + 5000..data.len() - 128 - 100]);
    let q = plan(&bad, &TsOptions::default(), &mut |_, _| {}).unwrap();
    assert!(q.report.resyncs >= 1 && q.report.skipped_bytes >= 333);
    assert!(q.report.truncated_tail_bytes > 0);
    common_checks(&bad, &q.tracks[0]);
    depay_mpa(&bad, &q.tracks[0]);
}

/// Title-timeline origin of a program stream: its earliest PES PTS.
fn ps_origin(path: &Path) -> i64 {
    let v = probe_packets(path, "v");
    let a = probe_packets(path, "a");
    v.iter()
        .chain(&a)
        .map(|p| p.0)
        .filter(|&t| t >= 0)
        .min()
        .unwrap()
}

fn check_split_runs(t: &TrackPlan) {
    assert!(
        t.packets.iter().any(|r| r.len2 > 0 && r.skip > 0),
        "data straddling PES packets uses the second run"
    );
}

#[test]
fn program_stream_with_mpeg_audio() {
    let dir = tempfile::tempdir().unwrap();
    let (path, data, p) = make(
        dir.path(),
        "p.mpg",
        &[
            "-f",
            "lavfi",
            "-i",
            "testsrc=size=352x288:rate=25",
            "-f",
            "lavfi",
            "-i",
            "sine=f=440:r=48000",
            "-t",
            "4",
            "-c:v",
            "mpeg2video",
            "-bf",
            "2",
            "-b:v",
            "3M",
            "-c:a",
            "mp2",
            "-f",
            "vob",
        ],
    );
    assert_eq!(p.tracks.len(), 2);
    let t0 = ps_origin(&path);
    let video = &p.tracks[0];
    let pics = check_mpv(&data, video, &extract(dir.path(), &path, "0:v"), true);
    check_split_runs(video);
    let probed = probe_packets(&path, "v");
    assert_eq!(pics.len(), probed.len());
    // ffprobe leaves out the PTS of pictures whose PES packet has none.
    for ((ts, _), (pts, _)) in pics.iter().zip(&probed).filter(|p| p.1.0 >= 0) {
        assert_eq!(i64::from(*ts), pts - t0);
    }
    // Send times follow the decoding times.
    let mut k = 0;
    for (i, r) in video.packets.iter().enumerate() {
        if i == 0 || video.packets[i - 1].marker() {
            let dts = (probed[k].1 - t0).max(0) as u64;
            assert!(probed[k].1 >= 0);
            assert!(r.send_time_ns.abs_diff(dts * 100_000 / 9) <= 1, "send time");
            k += 1;
        }
    }

    let audio = &p.tracks[1];
    let (frames, stamps) = depay_mpa(&data, audio);
    assert_eq!(frames, extract(dir.path(), &path, "0:a"));
    check_split_runs(audio);
    let probed = probe_packets(&path, "a");
    assert_eq!(stamps.len(), probed.len());
    for (ts, (pts, _)) in stamps.iter().zip(&probed) {
        assert!((i64::from(*ts) - (pts - t0)).abs() <= 1, "{ts} vs {pts}");
    }
    assert!(p.report.format.starts_with("MPEG-PS (MPEG-2 video"));
}

#[test]
fn program_stream_with_ac3() {
    for bitrate in ["448k", "96k"] {
        let dir = tempfile::tempdir().unwrap();
        let (path, data, p) = make(
            dir.path(),
            "p.vob",
            &[
                "-f",
                "lavfi",
                "-i",
                "testsrc=size=352x288:rate=25",
                "-f",
                "lavfi",
                "-i",
                "sine=f=440:r=48000",
                "-t",
                "4",
                "-c:v",
                "mpeg2video",
                "-bf",
                "2",
                "-b:v",
                "3M",
                "-c:a",
                "ac3",
                "-ac",
                "2",
                "-b:a",
                bitrate,
                "-f",
                "vob",
            ],
        );
        assert_eq!(p.tracks.len(), 2);
        let t0 = ps_origin(&path);
        check_mpv(
            &data,
            &p.tracks[0],
            &extract(dir.path(), &path, "0:v"),
            true,
        );
        let a = &p.tracks[1];
        assert_eq!(
            (
                a.desc.payload_type,
                a.desc.encoding.as_str(),
                a.desc.clock_rate,
                a.desc.channels
            ),
            (96, "ac3", 48_000, 2)
        );
        common_checks(&data, a);
        let mut out = Vec::new();
        let mut stamps = Vec::new();
        let mut frames_in_packets = 0;
        for r in &a.packets {
            let p = payload(&data, r);
            let (ft, nf) = (p[0] & 3, usize::from(p[1]));
            assert_eq!(p[0] >> 2, 0);
            assert!(r.marker() || ft != 0);
            if ft == 0 {
                assert!(nf >= 1);
                stamps.push(r.rtp_ts);
                frames_in_packets += nf;
            } else if ft != 3 {
                stamps.push(r.rtp_ts);
                frames_in_packets += 1;
            }
            out.extend_from_slice(&p[2..]);
        }
        let reference = extract(dir.path(), &path, "0:a");
        assert!(out == reference, "depacketized AC-3 differs");
        let probed = probe_packets(&path, "a");
        assert_eq!(frames_in_packets, probed.len());
        let first = (probed[0].0 - t0) * 48_000 / 90_000;
        assert!(stamps.windows(2).all(|w| (w[1] - w[0]) % 1536 == 0));
        assert!((i64::from(stamps[0]) - first).abs() <= 1);
        if bitrate == "448k" {
            assert!(
                a.packets
                    .iter()
                    .any(|r| r.prefix[0] == 1 || r.prefix[0] == 2)
            );
        } else {
            assert!(a.packets.iter().any(|r| r.prefix[1] > 1), "frames bundled");
        }
        check_split_runs(a);
    }
}
