//! A growing MPEG-TS's snapshots made incrementally (each planned on from
//! the previous one: `ts::growing`) are the snapshots planning the whole
//! prefix makes, byte for byte, at any cuts (a packet's end or not, bytes
//! damaged after the cut); and what a snapshot serves is what the whole
//! file's plan serves there.

mod media;
mod synth;

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use fjord_media::ingest::{Snapshot, snapshot};
use fjord_media::ts::growing::{plan_on, plan_whole};
use fjord_media::ts::{Packetization, TsOptions, packetize};
use media::*;
use proptest::prelude::*;

/// H.264 and AAC, 8 s, as ffmpeg muxes them to MPEG-TS with `more`
/// arguments.
fn made(dir: &tempfile::TempDir, name: &str, more: &[&str]) -> PathBuf {
    let out = path_in(dir, name);
    let mut args = vec![
        "-f",
        "lavfi",
        "-i",
        "testsrc2=size=320x240:rate=25",
        "-f",
        "lavfi",
        "-i",
        "sine=sample_rate=48000",
        "-t",
        "8",
        "-c:v",
        "libx264",
        "-preset",
        "veryfast",
        "-c:a",
        "aac",
    ];
    args.extend(more);
    args.extend(["-f", "mpegts", out.to_str().unwrap()]);
    ffmpeg(&args);
    out
}

/// The test files, made once: B-frames and a key frame every 12 frames;
/// none, a key frame a second and `-muxrate` (CBR, null packets); the
/// two joined (the second's clock starts afresh: a PCR jump, as when
/// another publisher continues a recording).
fn files() -> &'static (tempfile::TempDir, Vec<PathBuf>) {
    static FILES: OnceLock<(tempfile::TempDir, Vec<PathBuf>)> = OnceLock::new();
    FILES.get_or_init(|| {
        let dir = scratch();
        let bframes = made(&dir, "bframes.ts", &["-bf", "2", "-g", "12"]);
        let muxrate = made(
            &dir,
            "muxrate.ts",
            &["-bf", "0", "-g", "25", "-b:v", "600k", "-muxrate", "1500k"],
        );
        let joined = path_in(&dir, "joined.ts");
        let mut data = std::fs::read(&bframes).unwrap();
        data.extend(std::fs::read(&muxrate).unwrap());
        std::fs::write(&joined, data).unwrap();
        (dir, vec![bframes, muxrate, joined])
    })
}

/// A copy of test file `which` of its own (a snapshot's index is written
/// beside its media, and tests run at once), and its length.
fn copy(which: usize, dir: &tempfile::TempDir) -> (PathBuf, u64) {
    let file = &files().1[which];
    let own = path_in(dir, file.file_name().unwrap().to_str().unwrap());
    std::fs::copy(file, &own).unwrap();
    let len = std::fs::metadata(&own).unwrap().len();
    (own, len)
}

/// [`media::growing::grow`], each snapshot cut also compared with the
/// plan of the whole file `whole` (when the bytes are the file's).
fn grow(media: &Path, cuts: &[u64], whole: Option<&Packetization>) -> usize {
    media::growing::grow(media, cuts, |s| {
        if let (Some(whole), Some(_)) = (whole, &s.resume) {
            assert_serves_the_whole(s, whole);
        }
    })
}

/// A cut snapshot's packets and sync points are the whole file's first.
fn assert_serves_the_whole(s: &Snapshot, whole: &Packetization) {
    let t = s.index.track(0).unwrap();
    let n = t.packet_count();
    assert!(n > 0 && n < whole.packets.len());
    for i in 0..n {
        assert_eq!(t.packet(i).unwrap(), whole.packets[i], "packet {i} of {n}");
    }
    let sync: Vec<_> = t.sync_points().collect();
    let before: Vec<_> = (whole.sync.iter())
        .filter(|p| (p.packet as usize) < n)
        .copied()
        .collect();
    assert_eq!(sync, before);
    // Its end is the send time of the first packet it does not hold.
    assert_eq!(s.index.duration_ns(), whole.packets[n].send_time_ns);
}

fn whole_plan(media: &Path) -> Packetization {
    packetize(&std::fs::read(media).unwrap(), &TsOptions::default()).unwrap()
}

#[test]
fn snapshots_at_many_cuts_are_made_incrementally_and_equal_the_whole() {
    let dir = scratch();
    for which in 0..files().1.len() {
        let (file, len) = copy(which, &dir);
        let whole = whole_plan(&file);
        // Whole packets every 61 (some 25 ms at 3.6 Mbit/s), and some
        // cut mid-packet.
        let cuts: Vec<u64> = (1..len / 188 / 61)
            .map(|k| k * 61 * 188 + if k % 5 == 0 { 100 } else { 0 })
            .collect();
        let n = grow(&file, &cuts, Some(&whole));
        assert!(
            n + 3 >= cuts.len(),
            "{}: {n} of {} incremental",
            file.display(),
            cuts.len()
        );
    }
}

#[test]
fn a_cut_plan_lags_the_prefix_by_a_pcr_interval_and_a_pat_period() {
    let dir = scratch();
    for which in 0..files().1.len() {
        let (file, len) = copy(which, &dir);
        let data = std::fs::read(&file).unwrap();
        let opts = TsOptions::default();
        let mut most = 0;
        for cut in (len / 40..len).step_by(len as usize / 40) {
            let prefix = &data[..cut as usize];
            let (p, resume) = plan_whole(prefix, &opts).unwrap();
            assert!(resume.is_some(), "at {cut}");
            let all = packetize(prefix, &opts).unwrap();
            assert!(p.report.ts_packets < all.report.ts_packets);
            most = most.max(all.duration_ns - p.duration_ns);
        }
        // ffmpeg: a PCR with each video frame or so (40-100 ms apart
        // here), a PAT each 100 ms.
        assert!(most <= 300_000_000, "{}: {most} ns behind", file.display());
        eprintln!("{}: at most {most} ns behind", file.display());
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(24))]

    /// Cuts anywhere (a packet's end or any byte), growing.
    #[test]
    fn snapshots_at_random_cuts_equal_the_whole(
        which in 0usize..3,
        picks in proptest::collection::vec((any::<bool>(), any::<prop::sample::Index>()), 1..10),
    ) {
        let dir = scratch();
        let (file, len) = copy(which, &dir);
        let whole = whole_plan(&file);
        let mut cuts: Vec<u64> = picks
            .iter()
            .map(|(whole_packet, i)| {
                let at = i.index(len as usize) as u64 + 1;
                if *whole_packet { at - at % 188 } else { at }
            })
            .filter(|&c| c > 0)
            .collect();
        cuts.sort_unstable();
        cuts.dedup();
        grow(&file, &cuts, Some(&whole));
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(24))]

    /// Bytes after a snapshot's end changed at random (garbage, a lost
    /// sync byte): the next snapshot is still the whole prefix's, or both
    /// fail.
    #[test]
    fn snapshots_after_random_damage_equal_the_whole(
        which in 0usize..3,
        cut in any::<prop::sample::Index>(),
        more in 1u64..200,
        damage in proptest::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 1..4),
    ) {
        let dir = scratch();
        let (file, len) = copy(which, &dir);
        let cut = 100 + cut.index(len as usize / 188 - 400) as u64;
        let (len, next) = (cut * 188, (cut + more) * 188);
        media::growing::damage(&file, len..next, &damage);
        grow(&file, &[len, next, next + 188 * 50], None);
    }
}

/// Garbage written after the cut, or a packet cut short: the next
/// snapshot is the whole prefix's (with its warning, uncut, no resume
/// after garbage), never a packet of the garbage.
#[test]
fn garbage_or_a_packet_cut_short_after_the_cut_plans_as_the_whole_prefix() {
    let dir = scratch();
    let (file, _) = copy(0, &dir);
    let mut data = std::fs::read(&file).unwrap();
    let at = 1000 * 188;
    data.splice(at..at, b"garbage!".repeat(30));
    let broken = path_in(&dir, "broken.ts");
    std::fs::write(&broken, &data).unwrap();
    let (len, next) = (at as u64 - 188 * 40, at as u64 + 188 * 100);
    assert_eq!(grow(&broken, &[len, next, next + 188 * 100], None), 0);
    let s = snapshot(&broken, next, &Default::default(), None).unwrap();
    assert!(s.resume.is_none());
    assert!(
        (s.index.report().warnings.iter()).any(|w| w.contains("lost sync")),
        "{:?}",
        s.index.report().warnings
    );
    // Half a packet, then the rest of it: both incremental.
    assert_eq!(
        grow(&file, &[len, at as u64 + 94, at as u64 + 188 * 60], None),
        2
    );
}

/// Synthetic streams (`synth`): what lets a plan be cut, and where.
mod condition {
    use super::synth::{MS, Pkt, Stream, VIDEO_PID};
    use super::*;

    fn whole(data: &[u8]) -> (Packetization, Option<fjord_media::ts::growing::Resume>) {
        plan_whole(data, &TsOptions::default()).unwrap()
    }

    #[test]
    fn a_stream_with_pcr_pmt_and_raps_is_cut_at_the_rtp_packet_of_its_last_pcr() {
        // PAT+PMT at 0,1 then every 100; PCR every 10 (at 2, 12, ...);
        // a RAP every 50 (at 2, 52, ...): the last PCR of 1000 packets is
        // at 992, its RTP packet starts at 989 (7 a packet from 954, the
        // key frame end before 953).
        let data = Stream::default().cbr(1_000_000);
        let (p, resume) = whole(&data);
        let resume = resume.expect("cut");
        let last = p.packets.last().unwrap();
        let end = (last.offset + u64::from(last.len)) / 188;
        assert!(end <= 992 && end + 7 > 992, "ends at TS packet {end}");
        assert_eq!(p.report.ts_packets, end);
        assert_eq!(p.duration_ns, end * 1_000_000);
        assert_eq!(resume.packets(), p.packets.len() as u64);
        assert_eq!(resume.bytes(), data.len());
    }

    #[test]
    fn a_pat_no_rap_followed_yet_holds_the_cut_before_it() {
        // The last PAT (900) has had no RAP after it up to the last PCR.
        let s = Stream {
            n: 960,
            gop: 1000,
            ..Stream::default()
        };
        let mut packets = s.packets(|o| (1_000_000 + o * MS, false));
        // RAPs at 2 (start 0) and 850 (start 800).
        let mut rap = Pkt::new(VIDEO_PID);
        rap.rai = true;
        rap.pts = Some(1);
        packets[850] = rap.build();
        let (p, resume) = whole(&packets.concat());
        assert!(resume.is_some());
        let last = p.packets.last().unwrap();
        assert!((last.offset + u64::from(last.len)) / 188 <= 900);
    }

    /// Plans of `data` cut at each of `cuts`, each planned on from the
    /// one before, joined, are each the cut plan of its whole prefix.
    fn chain(data: &[u8], cuts: &[usize]) {
        let opts = TsOptions::default();
        let (mut joined, mut resume) = plan_whole(&data[..cuts[0]], &opts).unwrap();
        for &cut in &cuts[1..] {
            let (more, next) = plan_on(&data[..cut], &opts, &resume.unwrap()).unwrap();
            joined.packets.extend(more.packets);
            joined.sync.extend(more.sync);
            (joined.duration_ns, joined.report) = (more.duration_ns, more.report);
            let (alone, alone_next) = plan_whole(&data[..cut], &opts).unwrap();
            assert_eq!(joined, alone, "at {cut}");
            assert_eq!(Some(&next), alone_next.as_ref());
            resume = Some(next);
        }
    }

    /// The end of the last RTP packet, in TS packets.
    fn end(p: &Packetization) -> u64 {
        let last = p.packets.last().unwrap();
        (last.offset + u64::from(last.len)) / 188
    }

    #[test]
    fn a_pat_a_second_before_the_last_pcr_no_longer_holds_the_cut() {
        // PATs at 0, 1100, 2200, one RAP (at 2): at 1 ms a packet, the
        // last PCR of 3300 packets is 1.09 s after the last PAT; of 3150,
        // 0.94 s.
        let s = |n| Stream {
            n,
            psi_every: 1100,
            gop: 5000,
            ..Stream::default()
        };
        let far = s(3300).cbr(1_000_000);
        let (p, resume) = whole(&far);
        assert!(resume.is_some() && end(&p) > 3200, "ends at {}", end(&p));
        let near = s(3150).cbr(1_000_000);
        let (p, resume) = whole(&near);
        assert!(resume.is_some() && end(&p) <= 2200, "ends at {}", end(&p));
        chain(&far, &(1..66).map(|k| k * 50 * 188).collect::<Vec<_>>());
    }

    #[test]
    fn no_pcr_no_raps_or_pcr_off_the_pmt_pid_plan_whole_without_a_cut() {
        let full = |s: &Stream| {
            let data = s.cbr(1_000_000);
            let (p, resume) = whole(&data);
            assert_eq!(p, packetize(&data, &TsOptions::default()).unwrap());
            resume
        };
        let no_pcr = Stream {
            pcr_every: None,
            ..Stream::default()
        };
        assert!(full(&no_pcr).is_none());
        let no_rai = Stream {
            rai: false,
            ..Stream::default()
        };
        assert!(full(&no_rai).is_none());
        // The PMT names another PCR PID than the one carrying PCRs.
        let mut packets = Stream::default().packets(|o| (1_000_000 + o * MS, false));
        for k in (1..1000).step_by(100) {
            packets[k] = synth::pmt(0x200);
        }
        let data = packets.concat();
        let (_, resume) = whole(&data);
        assert!(resume.is_none());
        // One PCR only.
        let one = Stream {
            n: 12,
            ..Stream::default()
        };
        assert!(full(&one).is_none());
    }

    #[test]
    fn planned_on_it_goes_on_from_the_cut_and_says_no_to_garbage() {
        let data = Stream {
            n: 3000,
            ..Stream::default()
        }
        .cbr(1_000_000);
        let opts = TsOptions::default();
        let (_, resume) = plan_whole(&data[..1000 * 188], &opts).unwrap();
        let resume = resume.unwrap();
        let (more, next) = plan_on(&data[..2000 * 188], &opts, &resume).unwrap();
        let (alone, alone_next) = plan_whole(&data[..2000 * 188], &opts).unwrap();
        assert_eq!(Some(&next), alone_next.as_ref());
        let n = resume.packets() as usize;
        assert_eq!(more.packets, alone.packets[n..]);
        assert_eq!(more.duration_ns, alone.duration_ns);
        assert_eq!(more.report, alone.report);
        // Nothing new: nothing added, the same point.
        let (none, same) = plan_on(&data[..1000 * 188], &opts, &resume).unwrap();
        assert!(none.packets.is_empty() && none.sync.is_empty());
        assert_eq!(same.packets(), resume.packets());
        // Garbage after the cut, a shorter file, other options: no.
        let mut bad = data[..2000 * 188].to_vec();
        bad[1500 * 188] = 0;
        assert!(plan_on(&bad, &opts, &resume).is_none());
        assert!(plan_on(&data[..500 * 188], &opts, &resume).is_none());
        let other = TsOptions {
            ts_per_rtp: 3,
            ..opts
        };
        assert!(plan_on(&data[..2000 * 188], &other, &resume).is_none());
    }
}

/// What a snapshot costs, printed (the machine's figures, not asserted):
/// at each of `FJORD_GROWING_MINUTES` (default 2,60) minutes of the TS
/// file `FJORD_GROWING_TS`, the first snapshot (the whole prefix, cut),
/// the next one (1 MiB more, some 1.7 s at 5 Mbit/s, planned on from
/// it) and, for comparison, that one planned whole; best of three each.
/// docs/live.md says how the figures there were made.
#[test]
#[ignore]
fn snapshot_cost() {
    let media = PathBuf::from(std::env::var("FJORD_GROWING_TS").expect("FJORD_GROWING_TS"));
    let minutes = std::env::var("FJORD_GROWING_MINUTES").unwrap_or("2,60".to_owned());
    let total = std::fs::metadata(&media).unwrap().len();
    let head = snapshot(&media, 64 << 20, &Default::default(), None).unwrap();
    let per_minute = (64 << 20) as f64 * 60e9 / head.index.duration_ns() as f64;
    let best = media::growing::best_of_three;
    for m in minutes.split(',').map(|m| m.parse::<f64>().unwrap()) {
        let len = ((m * per_minute) as u64 / 188 * 188).min(total - (1 << 20));
        let next = len + (1 << 20);
        let (first, prev) = best(&|| snapshot(&media, len, &Default::default(), None).unwrap());
        let from = Some((&prev.index, prev.resume.as_ref().unwrap()));
        let (on, s) = best(&|| snapshot(&media, next, &Default::default(), from).unwrap());
        assert!(s.incremental);
        let (whole, _) = best(&|| snapshot(&media, next, &Default::default(), None).unwrap());
        println!(
            "{m} min ({len} bytes, index {} bytes): first {first:.1?}, next {on:.1?} \
             (planned whole: {whole:.1?})",
            s.index.bytes().len()
        );
    }
}
