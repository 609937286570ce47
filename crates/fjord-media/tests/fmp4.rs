//! Fragmented MP4 input: a file remuxed by ffmpeg into fragments (base
//! offsets explicit, or the moof; CMAF; several tracks per fragment or
//! one) plans to the same packets as the unfragmented file: same payload
//! bytes, RTP timestamps, markers and sync points.

mod media;

use std::path::{Path, PathBuf};

use fjord_media::{FormatError, MediaPlan};
use media::*;

fn source(dir: &tempfile::TempDir) -> PathBuf {
    let out = path_in(dir, "flat.mp4");
    ffmpeg(&[
        "-f",
        "lavfi",
        "-i",
        "testsrc2=size=320x240:rate=25",
        "-f",
        "lavfi",
        "-i",
        "sine=sample_rate=48000",
        "-t",
        "4",
        "-c:v",
        "libx264",
        "-preset",
        "veryfast",
        "-bf",
        "2",
        "-g",
        "25",
        "-crf",
        "18",
        "-c:a",
        "aac",
        out.to_str().unwrap(),
    ]);
    out
}

fn remux(src: &Path, dir: &tempfile::TempDir, name: &str, flags: &[&str]) -> PathBuf {
    let out = path_in(dir, name);
    let mut args = vec!["-i", src.to_str().unwrap(), "-c", "copy", "-map", "0"];
    args.extend(flags);
    args.push(out.to_str().unwrap());
    ffmpeg(&args);
    out
}

/// What a player gets of one track.
struct Got {
    /// Payload and marker of every packet.
    packets: Vec<(Vec<u8>, bool)>,
    /// RTP timestamp of each access unit (packets up to a marker; every
    /// packet for audio), from the first's.
    units: Vec<u32>,
    /// Sync point times, from the first's.
    sync: Vec<u64>,
}

fn got(data: &[u8], plan: &MediaPlan) -> Vec<Got> {
    plan.tracks
        .iter()
        .map(|t| {
            check_records(data, t);
            let ts0 = t.packets[0].rtp_ts;
            let video = t.desc.clock_rate == 90_000;
            let mut units = vec![0];
            for w in t.packets.windows(2) {
                if !video || w[0].marker() {
                    units.push(w[1].rtp_ts.wrapping_sub(ts0));
                }
            }
            // ffmpeg writes no edit list in fragments: a track whose first
            // picture shows after its first decode starts that much later
            // (as ffmpeg reads it too), so times count from the first.
            let s0 = t.sync.first().map_or(0, |s| s.time_ns);
            Got {
                packets: t
                    .packets
                    .iter()
                    .map(|r| (payload(data, r), r.marker()))
                    .collect(),
                units,
                sync: t.sync.iter().map(|s| s.time_ns - s0).collect(),
            }
        })
        .collect()
}

/// ffprobe's presentation times of stream `stream` in `clock` ticks, from
/// the first packet's.
fn probe_units(file: &Path, stream: &str, clock: i128) -> Vec<u32> {
    let (p, (num, den)) = probe_packets(file, stream);
    let first = i128::from(p[0].0);
    p.iter()
        .map(|(pts, _)| {
            ((i128::from(*pts) - first) * clock * i128::from(num) / i128::from(den)) as u32
        })
        .collect()
}

#[test]
fn fragments_plan_as_the_flat_file() {
    let dir = scratch();
    let flat = source(&dir);
    let (data, plan) = plan_file(&flat);
    let want = got(&data, &plan);
    for (name, flags) in [
        (
            "moof.mp4",
            &["-movflags", "frag_keyframe+empty_moov+default_base_moof"][..],
        ),
        ("explicit.mp4", &["-movflags", "frag_keyframe+empty_moov"]),
        (
            "cmaf.mp4",
            &["-movflags", "cmaf", "-frag_duration", "500000"],
        ),
        (
            "separate.mp4",
            &["-movflags", "frag_keyframe+empty_moov+separate_moof"],
        ),
        (
            "mfra.mp4",
            &["-movflags", "frag_keyframe", "-write_tmcd", "0"],
        ),
    ] {
        let file = remux(&flat, &dir, name, flags);
        let (data, p) = plan_file(&file);
        assert_eq!(p.report.format, plan.report.format, "{name}");
        for (i, (g, w)) in got(&data, &p).iter().zip(&want).enumerate() {
            assert_eq!(
                g.packets.len(),
                w.packets.len(),
                "{name} track {i}: packets"
            );
            let k = g.packets.iter().zip(&w.packets).position(|(a, b)| a != b);
            assert!(k.is_none(), "{name} track {i}: packet {k:?} differs");
            assert_eq!(g.sync, w.sync, "{name} track {i}: sync points");
            // Times as ffmpeg reads this file (it moves AAC's priming from
            // an edit list into the first sample's duration).
            let clock = i128::from(p.tracks[i].desc.clock_rate);
            assert_eq!(
                g.units,
                probe_units(&file, &i.to_string(), clock),
                "{name} track {i}: times"
            );
        }
    }
}

#[test]
fn a_cut_fragmented_file_serves_what_it_holds_and_a_broken_one_is_refused() {
    let dir = scratch();
    let flat = source(&dir);
    let frag = remux(
        &flat,
        &dir,
        "f.mp4",
        &["-movflags", "frag_keyframe+empty_moov+default_base_moof"],
    );
    let data = std::fs::read(&frag).unwrap();
    let cut = &data[..data.len() * 2 / 3];
    let p = fjord_media::format::plan(cut, &Default::default(), &mut |_, _| {}).expect("plan");
    assert!(p.report.truncated_tail_bytes > 0 || !p.report.warnings.is_empty());
    for t in &p.tracks {
        assert!(t.packets.iter().all(|r| r.file_end() <= cut.len() as u64));
    }
    // The first fragment's trun claims more samples than it holds.
    let mut broken = data.clone();
    let trun = broken.windows(4).position(|w| w == b"trun").unwrap();
    broken[trun + 8..trun + 12].copy_from_slice(&u32::MAX.to_be_bytes());
    match fjord_media::format::plan(&broken, &Default::default(), &mut |_, _| {}) {
        Err(FormatError::Invalid(m)) => assert!(m.contains("trun"), "{m}"),
        other => panic!("{other:?}"),
    }
}

/// A fragmented file still being written, indexed from its durable
/// prefix: only the fragments before the length given count (the bytes
/// after, a fragment half written, are never read); a later, longer
/// snapshot holds the earlier one's packets unchanged, then more; and
/// the whole file's ingest never takes a snapshot's index for its own.
#[test]
fn a_growing_fragmented_file_is_indexed_up_to_its_durable_length() {
    let dir = scratch();
    let flat = source(&dir);
    let frag = remux(
        &flat,
        &dir,
        "g.mp4",
        &["-movflags", "frag_keyframe+empty_moov+default_base_moof"],
    );
    let data = std::fs::read(&frag).unwrap();
    let moofs: Vec<usize> = (data.windows(4).enumerate())
        .filter(|(_, w)| *w == b"moof")
        .map(|(i, _)| i - 4)
        .collect();
    assert!(moofs.len() >= 4, "{} fragments", moofs.len());
    let snap = |len: usize| {
        let idx = fjord_media::ingest::snapshot(&frag, len as u64, &Default::default(), None)
            .unwrap()
            .index;
        let records: Vec<Vec<_>> = (idx.tracks())
            .map(|t| {
                (0..t.packet_count())
                    .map(|i| t.packet(i).unwrap())
                    .collect()
            })
            .collect();
        (idx.duration_ns(), idx.source().size, records)
    };
    // Two fragments, and half of the third's bytes.
    let (d2, size2, r2) = snap(moofs[2] + 100);
    assert_eq!(size2, moofs[2] as u64 + 100);
    for t in &r2 {
        assert!(!t.is_empty());
        assert!(t.iter().all(|r| r.file_end() <= moofs[2] as u64));
    }
    let (d3, _, r3) = snap(moofs[3]);
    assert!(d3 > d2, "{d3} > {d2}");
    for (a, b) in r2.iter().zip(&r3) {
        assert!(b.len() > a.len());
        assert_eq!(a[..], b[..a.len()]);
    }
    let (_, report) = fjord_media::open_or_ingest(
        &frag,
        &Default::default(),
        &fjord_media::no_parity,
        &mut |_, _| {},
    )
    .unwrap();
    assert!(
        report.is_some(),
        "the snapshot's index was taken for the file's"
    );
    // Bad lengths: past the end, or no fragment yet.
    assert!(
        fjord_media::ingest::snapshot(&frag, data.len() as u64 + 1, &Default::default(), None)
            .is_err()
    );
    assert!(
        fjord_media::ingest::snapshot(&frag, moofs[0] as u64, &Default::default(), None).is_err()
    );
}
