use proptest::prelude::*;

use super::*;
use crate::record::recorder;
use crate::{Limits, sdp};

/// What GStreamer's `rtspclientsink` announces for `mpegtsmux`, and a
/// second track beside it.
const MP2T: &str = "v=0\r\no=- 0 0 IN IP4 127.0.0.1\r\ns=Session\r\nc=IN IP4 127.0.0.1\r\nt=0 0\r\nm=video 0 RTP/AVP 33\r\na=rtpmap:33 MP2T/90000\r\na=control:stream=0\r\nm=audio 0 RTP/AVP 97\r\na=rtpmap:97 OPUS/48000/2\r\na=control:stream=1\r\n";

fn rtp(seq: u16, ts: u32, payload: &[u8]) -> Vec<u8> {
    let mut p = vec![0x80, 33];
    p.extend_from_slice(&seq.to_be_bytes());
    p.extend_from_slice(&ts.to_be_bytes());
    p.extend_from_slice(&[0, 0, 0, 1]);
    p.extend_from_slice(payload);
    p
}

/// `n` TS packets whose bytes tell `tag` apart.
fn ts_packets(n: usize, tag: u8) -> Vec<u8> {
    (0..n)
        .flat_map(|k| {
            let mut p = vec![tag; TS];
            p[..4].copy_from_slice(&[0x47, 0x01, 0x00, 0x10 | (k as u8 & 0xf)]);
            p
        })
        .collect()
}

fn ts_recorder(limits: RecordLimits) -> Box<dyn Record> {
    let a = sdp::parse(MP2T.as_bytes(), &Limits::default()).unwrap();
    let (r, left) = recorder(&a.tracks, limits).unwrap();
    assert_eq!(left.len(), 1, "{left:?}");
    assert!(left[0].contains("OPUS"), "{left:?}");
    r
}

/// Pushes each packet on track 0; every run handed out is whole TS
/// packets. The file's bytes.
fn record(r: &mut dyn Record, packets: &[Vec<u8>]) -> Vec<u8> {
    let mut file = r.init();
    for p in packets {
        let before = file.len();
        r.push(0, p, &mut file);
        assert!(file.len() == before || whole_ts(&file[before..]));
    }
    r.finish(&mut file);
    file
}

#[test]
fn a_payload_is_taken_when_it_is_whole_ts_packets_only() {
    assert!(whole_ts(&ts_packets(1, 0)));
    assert!(whole_ts(&ts_packets(7, 0)));
    assert!(!whole_ts(&[]));
    assert!(!whole_ts(&ts_packets(2, 0)[..TS + 1]));
    assert!(!whole_ts(&ts_packets(1, 0)[..TS - 1]));
    let mut second_unsynced = ts_packets(2, 0);
    second_unsynced[TS] = 0x48;
    assert!(!whole_ts(&second_unsynced));
}

#[test]
fn an_mp2t_stream_is_recorded_as_its_ts_packets_in_runs_a_second_apart() {
    let mut r = ts_recorder(RecordLimits::default());
    assert_eq!(r.extension(), "ts");
    assert!(r.init().is_empty());
    // 3 s: 25 payloads of 7 TS packets a second, timestamps across the wrap.
    let payloads: Vec<Vec<u8>> = (0..75).map(|i| ts_packets(7, i as u8)).collect();
    let packets: Vec<Vec<u8>> = (payloads.iter().enumerate())
        .map(|(i, p)| {
            rtp(
                65_500u16.wrapping_add(i as u16),
                u32::MAX - 9_000 + i as u32 * 3600,
                p,
            )
        })
        .collect();
    let mut file = Vec::new();
    for p in &packets {
        r.push(0, p, &mut file);
        // Another track's packets are not the recording's.
        r.push(1, p, &mut file);
    }
    assert_eq!(r.cuts(), 2, "a run at 1 s and at 2 s");
    assert_eq!(file, payloads[..50].concat());
    r.finish(&mut file);
    assert_eq!(r.cuts(), 3);
    assert_eq!(file, payloads.concat());
    assert_eq!(
        r.counts(),
        Counts {
            frames: 75,
            dropped: 0
        }
    );
}

#[test]
fn lost_and_malformed_payloads_are_counted_and_the_recording_goes_on() {
    let mut r = ts_recorder(RecordLimits::default());
    let good = |i: u8| ts_packets(7, i);
    let packets = [
        rtp(10, 0, &good(0)),
        // 11 and 12 lost.
        rtp(13, 3600, &good(1)),
        // Not whole packets; not synced.
        rtp(14, 7200, &good(2)[..TS * 3 + 5]),
        rtp(15, 10_800, &[0u8; TS]),
        // Late, then repeated: left out, not counted again.
        rtp(12, 7200, &good(3)),
        rtp(15, 10_800, &good(4)),
        rtp(16, 14_400, &good(5)),
    ];
    let file = record(&mut *r, &packets);
    assert_eq!(file, [good(0), good(1), good(5)].concat());
    assert_eq!(
        r.counts(),
        Counts {
            frames: 3,
            dropped: 2 + 2
        }
    );
}

#[test]
fn a_new_publisher_or_a_restarted_numbering_is_no_loss() {
    let mut r = ts_recorder(RecordLimits::default());
    let mut file = Vec::new();
    r.push(0, &rtp(100, 0, &ts_packets(1, 0)), &mut file);
    r.next_publisher();
    r.push(0, &rtp(7, 0, &ts_packets(1, 1)), &mut file);
    r.push(0, &rtp(40_000, 0, &ts_packets(1, 2)), &mut file);
    r.finish(&mut file);
    assert_eq!(
        file,
        [ts_packets(1, 0), ts_packets(1, 1), ts_packets(1, 2)].concat()
    );
    assert_eq!(r.counts().dropped, 0);
}

#[test]
fn runs_are_cut_by_bytes_when_timestamps_stand_still_or_step_back() {
    let limits = RecordLimits {
        max_fragment_bytes: 10 * TS,
        ..RecordLimits::default()
    };
    let mut r = ts_recorder(limits);
    let packets: Vec<Vec<u8>> = (0..10)
        .map(|i| rtp(i, 5, &ts_packets(4, i as u8)))
        .collect();
    let file = record(&mut *r, &packets);
    assert_eq!(file.len(), 40 * TS);
    // Two payloads of 4 in each run of at most 10 packets.
    assert_eq!(r.cuts(), 5);
    let mut r = ts_recorder(RecordLimits::default());
    let back = [
        rtp(0, 90_000 * 5, &ts_packets(1, 0)),
        rtp(1, 0, &ts_packets(1, 1)),
    ];
    let mut file = Vec::new();
    for p in &back {
        r.push(0, p, &mut file);
    }
    assert_eq!(file, ts_packets(1, 0), "a new timeline: a run ends");
}

proptest! {
    /// Whatever arrives, the file is the whole-TS payloads taken, in the
    /// order taken, every run whole TS packets; each packet is written,
    /// counted dropped (lost or malformed) or left out as late.
    #[test]
    fn the_file_is_the_payloads_taken_in_order(
        steps in prop::collection::vec((0u16..4, any::<bool>(), 1usize..8, any::<u32>()), 0..200),
    ) {
        let limits = RecordLimits { max_fragment_bytes: 20 * TS, ..RecordLimits::default() };
        let mut r = ts_recorder(limits);
        let (mut seq, mut want, mut lost, mut malformed) = (0u16, Vec::new(), 0u64, 0u64);
        let mut packets = Vec::new();
        for (i, &(gap, good, n, ts)) in steps.iter().enumerate() {
            if i > 0 {
                seq = seq.wrapping_add(gap.max(1));
                lost += u64::from(gap.max(1) - 1);
            }
            let mut payload = ts_packets(n, i as u8);
            if good {
                want.extend_from_slice(&payload);
            } else {
                // A packet without its sync byte, or one cut short.
                let (k, len) = (ts as usize % n, payload.len());
                match ts % 2 {
                    0 => payload[k * TS] ^= 0x80,
                    _ => payload.truncate(len - 1 - ts as usize % (TS - 1)),
                }
                malformed += 1;
            }
            packets.push(rtp(seq, ts, &payload));
        }
        let file = record(&mut *r, &packets);
        prop_assert_eq!(&file, &want);
        let written = want.len() / TS;
        prop_assert!(r.cuts() as usize <= written);
        prop_assert_eq!(r.counts().dropped, lost + malformed);
        prop_assert_eq!(r.counts().frames + malformed, packets.len() as u64);
    }
}
