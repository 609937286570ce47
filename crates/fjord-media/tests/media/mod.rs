//! Test media made by ffmpeg, and RTP depacketizers that rebuild what a
//! player receives from a plan. ffmpeg is required: these tests fail
//! without it (`make test` installs it).
// Each test binary uses a different subset of these helpers.
#![allow(dead_code)]

pub mod growing;

use std::path::{Path, PathBuf};
use std::process::Command;

use fjord_media::format::MAX_RTP_PAYLOAD;
use fjord_media::{MediaPlan, PacketRecord, TrackPlan};

/// A scratch directory that lives as long as the test.
pub fn scratch() -> tempfile::TempDir {
    tempfile::tempdir().expect("tempdir")
}

pub fn ffmpeg(args: &[&str]) {
    let out = Command::new("ffmpeg")
        .args(["-nostdin", "-loglevel", "error", "-y"])
        .args(args)
        .output()
        .expect("ffmpeg is required for these tests (make test installs it)");
    assert!(
        out.status.success(),
        "ffmpeg {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// `ffprobe -show_packets` of one stream: (pts in stream time base, keyframe).
pub fn probe_packets(file: &Path, stream: &str) -> (Vec<(i64, bool)>, (i64, i64)) {
    let run = |args: &[&str]| {
        let out = Command::new("ffprobe")
            .args(["-v", "error", "-select_streams", stream])
            .args(args)
            .arg(file)
            .output()
            .expect("ffprobe is required for these tests");
        assert!(out.status.success());
        String::from_utf8(out.stdout).expect("utf-8")
    };
    let tb = run(&["-show_entries", "stream=time_base", "-of", "csv=p=0"]);
    let (num, den) = tb.trim().split_once('/').expect("time base");
    let packets = run(&["-show_entries", "packet=pts,flags", "-of", "csv=p=0"])
        .lines()
        .filter(|l| !l.is_empty())
        .map(|l| {
            let mut f = l.split(',');
            let pts = f.next().and_then(|p| p.parse().ok()).expect("pts");
            (pts, f.next().is_some_and(|k| k.starts_with('K')))
        })
        .collect();
    (packets, (num.parse().unwrap(), den.parse().unwrap()))
}

pub fn path_in(dir: &tempfile::TempDir, name: &str) -> PathBuf {
    dir.path().join(name)
}

pub fn plan_file(file: &Path) -> (Vec<u8>, MediaPlan) {
    let data = std::fs::read(file).expect("read media");
    let plan = fjord_media::format::plan(&data, &Default::default(), &mut |_, _| {}).expect("plan");
    (data, plan)
}

pub fn payload(data: &[u8], r: &PacketRecord) -> Vec<u8> {
    let mut p = r.prefix().to_vec();
    p.extend_from_slice(&data[r.offset as usize..][..r.len as usize]);
    if r.len2 > 0 {
        p.extend_from_slice(&data[r.offset2() as usize..][..r.len2 as usize]);
    }
    p
}

/// Common checks: payload sizes, records inside the file, send times in order.
pub fn check_records(data: &[u8], t: &TrackPlan) {
    let mut last = 0;
    for (i, r) in t.packets.iter().enumerate() {
        assert!(r.payload_len() <= MAX_RTP_PAYLOAD, "packet {i} too big");
        assert!(
            r.file_end() <= data.len() as u64,
            "packet {i} outside the file"
        );
        assert!(
            r.send_time_ns >= last,
            "packet {i} sent before its predecessor"
        );
        last = r.send_time_ns;
    }
}

/// Access units rebuilt from an H.264 (RFC 6184) or H.265 (RFC 7798) track:
/// (rtp_ts, first packet index, NAL units).
pub fn depacketize_nals(data: &[u8], t: &TrackPlan, h265: bool) -> Vec<(u32, usize, Vec<Vec<u8>>)> {
    let mut aus = Vec::new();
    let mut au: Vec<Vec<u8>> = Vec::new();
    let mut first = 0;
    let mut fu: Option<Vec<u8>> = None;
    for (i, r) in t.packets.iter().enumerate() {
        if au.is_empty() && fu.is_none() {
            first = i;
        }
        let p = payload(data, r);
        let (is_fu, hlen) = if h265 {
            ((p[0] >> 1) & 0x3f == 49, 3)
        } else {
            (p[0] & 0x1f == 28, 2)
        };
        if is_fu {
            let fh = p[hlen - 1];
            if fh & 0x80 != 0 {
                assert!(fu.is_none(), "FU start inside an FU at packet {i}");
                fu = Some(if h265 {
                    vec![(p[0] & 0x81) | ((fh & 0x3f) << 1), p[1]]
                } else {
                    vec![(p[0] & 0xe0) | (fh & 0x1f)]
                });
            }
            let n = fu.as_mut().expect("FU continuation without start");
            n.extend_from_slice(&p[hlen..]);
            if fh & 0x40 != 0 {
                au.push(fu.take().unwrap());
            }
        } else {
            assert!(fu.is_none(), "single NAL inside an FU at packet {i}");
            au.push(p);
        }
        if r.marker() {
            assert!(fu.is_none(), "marker inside an FU at packet {i}");
            aus.push((r.rtp_ts, first, std::mem::take(&mut au)));
        } else {
            assert_eq!(
                t.packets.get(i + 1).map(|n| n.rtp_ts),
                Some(r.rtp_ts),
                "AU without marker at {i}"
            );
        }
    }
    assert!(au.is_empty() && fu.is_none(), "last AU has no marker");
    aus
}

/// NAL units of an Annex B byte stream.
pub fn annexb_nals(s: &[u8]) -> Vec<Vec<u8>> {
    let mut starts = Vec::new();
    let mut i = 0;
    while i + 3 <= s.len() {
        if s[i] == 0 && s[i + 1] == 0 && s[i + 2] == 1 {
            starts.push(i + 3);
            i += 3;
        } else {
            i += 1;
        }
    }
    starts
        .iter()
        .enumerate()
        .map(|(k, &st)| {
            let mut end = starts.get(k + 1).map_or(s.len(), |&n| n - 3);
            while end > st && s[end - 1] == 0 {
                end -= 1;
            }
            s[st..end].to_vec()
        })
        .collect()
}

/// AUs rebuilt from an RFC 3640 AAC-hbr track: (rtp_ts, AU bytes).
pub fn depacketize_aac(data: &[u8], t: &TrackPlan) -> Vec<(u32, Vec<u8>)> {
    let mut aus = Vec::new();
    let mut cur: Option<(u32, usize, Vec<u8>)> = None;
    for (i, r) in t.packets.iter().enumerate() {
        let p = payload(data, r);
        assert_eq!(&p[..2], &[0, 16], "one AU header per packet ({i})");
        let size = usize::from(u16::from_be_bytes([p[2], p[3]]) >> 3);
        assert_eq!(p[3] & 7, 0, "AU index 0");
        let (ts, want, au) = cur.get_or_insert((r.rtp_ts, size, Vec::new()));
        assert_eq!(
            (*ts, *want),
            (r.rtp_ts, size),
            "fragments of one AU agree ({i})"
        );
        au.extend_from_slice(&p[4..]);
        if au.len() >= size {
            assert_eq!(au.len(), size, "AU {i} overruns its size");
            assert!(r.marker(), "marker on the last fragment ({i})");
            let (ts, _, au) = cur.take().unwrap();
            aus.push((ts, au));
        } else {
            assert!(!r.marker(), "marker before the AU's last fragment ({i})");
        }
    }
    assert!(cur.is_none(), "last AU incomplete");
    aus
}

/// Raw frames of an ADTS stream (headers stripped).
pub fn adts_frames(s: &[u8]) -> Vec<Vec<u8>> {
    let mut out = Vec::new();
    let mut pos = 0;
    while pos + 7 <= s.len() {
        assert_eq!(
            (s[pos], s[pos + 1] & 0xf6),
            (0xff, 0xf0),
            "ADTS sync at {pos}"
        );
        let hl = if s[pos + 1] & 1 == 1 { 7 } else { 9 };
        let fl = (usize::from(s[pos + 3] & 3) << 11)
            | (usize::from(s[pos + 4]) << 3)
            | usize::from(s[pos + 5] >> 5);
        out.push(s[pos + hl..pos + fl].to_vec());
        pos += fl;
    }
    out
}
