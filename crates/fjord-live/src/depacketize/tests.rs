use proptest::prelude::*;

use super::*;

const MAX: usize = 1 << 20;

fn run(d: &mut Depacketizer, packets: &[(u16, u32, bool, Vec<u8>)]) -> Vec<Frame> {
    let mut out = Vec::new();
    for (seq, ts, m, p) in packets {
        d.push((*seq, *ts, *m), p, &mut out);
    }
    out
}

/// A NAL unit as an RFC 6184 packetizer sends it: whole up to `mtu`
/// bytes, else FU-A fragments of at most `mtu` bytes of it.
fn packetize(nal: &[u8], mtu: usize) -> Vec<Vec<u8>> {
    if nal.len() <= mtu {
        return vec![nal.to_vec()];
    }
    let chunks: Vec<&[u8]> = nal[1..].chunks(mtu).collect();
    let n = chunks.len();
    (chunks.into_iter().enumerate())
        .map(|(i, c)| {
            let mut p = vec![(nal[0] & 0xe0) | 28, nal[0] & 0x1f];
            if i == 0 {
                p[1] |= 0x80;
            }
            if i == n - 1 {
                p[1] |= 0x40;
            }
            p.extend_from_slice(c);
            p
        })
        .collect()
}

fn prefixed(nals: &[&[u8]]) -> Vec<u8> {
    nals.iter()
        .flat_map(|n| {
            (n.len() as u32)
                .to_be_bytes()
                .into_iter()
                .chain(n.iter().copied())
        })
        .collect()
}

#[test]
fn a_stap_a_and_fu_a_frame_comes_back_length_prefixed() {
    let (sps, pps) = (&[0x67u8, 0x64, 0, 0x1f][..], &[0x68u8, 0xee][..]);
    let idr: Vec<u8> = std::iter::once(0x65)
        .chain((0..3000).map(|i| i as u8))
        .collect();
    let mut stap = vec![24u8];
    for n in [sps, pps] {
        stap.extend_from_slice(&(n.len() as u16).to_be_bytes());
        stap.extend_from_slice(n);
    }
    let mut packets = vec![(0u16, 90_000u32, false, stap)];
    let frags = packetize(&idr, 1400);
    let last = frags.len() - 1;
    for (i, f) in frags.into_iter().enumerate() {
        packets.push((1 + i as u16, 90_000, i == last, f));
    }
    packets.push((4, 93_600, true, vec![0x41, 9, 9]));
    let mut d = Depacketizer::new(Payload::H264, MAX);
    let frames = run(&mut d, &packets);
    assert_eq!(frames.len(), 2);
    assert_eq!(frames[0].data, prefixed(&[sps, pps, &idr]));
    assert!(frames[0].key && !frames[1].key);
    assert_eq!((frames[0].ts, frames[1].ts), (90_000, 93_600));
    assert_eq!(
        d.counts,
        Counts {
            frames: 2,
            dropped: 0
        }
    );
}

#[test]
fn a_lost_fragment_drops_its_frame_only() {
    let idr: Vec<u8> = std::iter::once(0x65)
        .chain((0..3000).map(|i| i as u8))
        .collect();
    let frags = packetize(&idr, 1400);
    let mut packets = vec![
        (0u16, 0u32, false, frags[0].clone()),
        // frags[1] lost
        (2, 0, true, frags[2].clone()),
        (3, 3600, true, vec![0x41, 1]),
    ];
    let mut d = Depacketizer::new(Payload::H264, MAX);
    let frames = run(&mut d, &packets);
    assert_eq!(frames.len(), 1);
    assert_eq!(frames[0].ts, 3600);
    assert_eq!(
        d.counts,
        Counts {
            frames: 1,
            dropped: 1
        }
    );
    // A frame whose marker was lost ends when the next timestamp comes;
    // the loss could have been its end, so it is dropped too.
    packets = vec![
        (4, 7200, false, vec![0x41, 2]),
        (6, 10_800, true, vec![0x41, 3]),
    ];
    let frames = run(&mut d, &packets);
    assert_eq!(frames.len(), 0);
    assert_eq!(d.counts.dropped, 3);
    // Without a loss, a missing marker is just the next timestamp.
    let frames = run(
        &mut d,
        &[
            (7, 14_400, false, vec![0x41, 4]),
            (8, 18_000, true, vec![0x41, 5]),
        ],
    );
    assert_eq!(frames.len(), 2);
}

#[test]
fn a_frame_over_the_bound_is_dropped_and_counted() {
    let mut d = Depacketizer::new(Payload::H264, 100);
    let frames = run(
        &mut d,
        &[(0, 0, true, vec![0x65; 200]), (1, 1, true, vec![0x41; 50])],
    );
    assert_eq!(frames.len(), 1);
    assert_eq!(d.counts.dropped, 1);
}

const HBR: AuHeaders = AuHeaders {
    size_bits: 13,
    index_bits: 3,
    delta_bits: 3,
};

/// An RFC 3640 AAC-hbr payload of `aus` (sizes as `sizes` says).
fn aac_payload(sizes: &[usize], data: &[u8]) -> Vec<u8> {
    let mut p = ((sizes.len() * 16) as u16).to_be_bytes().to_vec();
    for s in sizes {
        p.extend_from_slice(&((*s as u16) << 3).to_be_bytes());
    }
    p.extend_from_slice(data);
    p
}

#[test]
fn aac_aus_come_out_one_by_one_and_a_fragmented_one_whole() {
    let aac = Payload::Aac {
        headers: HBR,
        frame: 1024,
    };
    let mut d = Depacketizer::new(aac, MAX);
    let two = aac_payload(&[3, 2], &[1, 2, 3, 4, 5]);
    let big: Vec<u8> = (0..3000).map(|i| i as u8).collect();
    let frames = run(
        &mut d,
        &[
            (0, 1000, true, two),
            (1, 3048, false, aac_payload(&[3000], &big[..1400])),
            (2, 3048, true, aac_payload(&[3000], &big[1400..])),
        ],
    );
    assert_eq!(frames.len(), 3);
    assert_eq!(
        (frames[0].ts, &frames[0].data[..]),
        (1000, &[1u8, 2, 3][..])
    );
    assert_eq!((frames[1].ts, &frames[1].data[..]), (2024, &[4u8, 5][..]));
    assert_eq!((frames[2].ts, &frames[2].data), (3048, &big));
    // Sizes beyond the data: refused, counted.
    let frames = run(&mut d, &[(3, 4072, true, aac_payload(&[9, 9], &[1]))]);
    assert!(frames.is_empty());
    assert_eq!(d.counts.dropped, 1);
}

#[test]
fn opus_packets_are_frames() {
    let mut d = Depacketizer::new(Payload::Opus, MAX);
    let frames = run(
        &mut d,
        &[
            (0, 0, true, vec![0xfc, 1]),
            (1, 960, false, vec![0xfc, 2]),
            (2, 1920, false, vec![]),
        ],
    );
    assert_eq!(frames.len(), 2);
    assert_eq!(
        d.counts,
        Counts {
            frames: 2,
            dropped: 1
        }
    );
}

/// An H.265 NAL unit as an RFC 7798 packetizer sends it: whole up to
/// `mtu` bytes, else FUs of at most `mtu` bytes of it.
fn packetize_h265(nal: &[u8], mtu: usize) -> Vec<Vec<u8>> {
    if nal.len() <= mtu {
        return vec![nal.to_vec()];
    }
    let chunks: Vec<&[u8]> = nal[2..].chunks(mtu).collect();
    let n = chunks.len();
    (chunks.into_iter().enumerate())
        .map(|(i, c)| {
            let mut p = vec![(nal[0] & 0x81) | (49 << 1), nal[1], (nal[0] >> 1) & 0x3f];
            p[2] |= if i == 0 { 0x80 } else { 0 } | if i == n - 1 { 0x40 } else { 0 };
            p.extend_from_slice(c);
            p
        })
        .collect()
}

#[test]
fn an_h265_ap_and_fu_frame_comes_back_length_prefixed() {
    let (vps, sps, pps) = (
        &[0x40u8, 1, 0xc][..],
        &[0x42u8, 1, 1][..],
        &[0x44u8, 1, 0xc1][..],
    );
    // An IDR_W_RADL (19) slice, then a TRAIL_R (1) one.
    let idr: Vec<u8> = [0x26, 1]
        .into_iter()
        .chain((0..3000).map(|i| i as u8))
        .collect();
    let mut ap = vec![48 << 1, 1];
    for n in [vps, sps, pps] {
        ap.extend_from_slice(&(n.len() as u16).to_be_bytes());
        ap.extend_from_slice(n);
    }
    let mut packets = vec![(0u16, 90_000u32, false, ap)];
    let frags = packetize_h265(&idr, 1400);
    let last = frags.len() - 1;
    for (i, f) in frags.into_iter().enumerate() {
        packets.push((1 + i as u16, 90_000, i == last, f));
    }
    packets.push((4, 93_600, true, vec![0x02, 1, 9, 9]));
    let mut d = Depacketizer::new(Payload::H265, MAX);
    let frames = run(&mut d, &packets);
    assert_eq!(frames.len(), 2);
    assert_eq!(frames[0].data, prefixed(&[vps, sps, pps, &idr]));
    assert!(frames[0].key && !frames[1].key);
    assert_eq!(frames[1].data, prefixed(&[&[0x02, 1, 9, 9]]));
    // A PACI (50) or a truncated FU damages its frame.
    let frames = run(
        &mut d,
        &[
            (5, 97_200, true, vec![50 << 1, 1, 0]),
            (6, 100_800, true, vec![49 << 1, 1]),
        ],
    );
    assert!(frames.is_empty());
    assert_eq!(
        d.counts,
        Counts {
            frames: 2,
            dropped: 2
        }
    );
}

proptest! {
    #[test]
    fn h265_nal_units_come_back_as_sent(
        frames in prop::collection::vec(prop::collection::vec(prop::collection::vec(any::<u8>(), 2..4000), 1..4), 1..6),
        mtu in 100usize..1500,
    ) {
        let mut packets = Vec::new();
        let mut seq = 0u16;
        let mut want = Vec::new();
        for (k, nals) in frames.iter().enumerate() {
            let nals: Vec<Vec<u8>> = nals.iter().map(|n| {
                let mut n = n.clone();
                n[0] = (n[0] & 0x81) | ((n[0] % 48) << 1);
                n
            }).collect();
            let ps: Vec<Vec<u8>> = nals.iter().flat_map(|n| packetize_h265(n, mtu)).collect();
            let last = ps.len() - 1;
            for (i, p) in ps.into_iter().enumerate() {
                packets.push((seq, k as u32 * 3000, i == last, p));
                seq = seq.wrapping_add(1);
            }
            want.push(prefixed(&nals.iter().map(|n| &n[..]).collect::<Vec<_>>()));
        }
        let mut d = Depacketizer::new(Payload::H265, MAX);
        let got: Vec<Vec<u8>> = run(&mut d, &packets).into_iter().map(|f| f.data).collect();
        prop_assert_eq!(got, want);
    }
}

proptest! {
    #[test]
    fn h264_nal_units_come_back_as_sent(
        frames in prop::collection::vec(prop::collection::vec(prop::collection::vec(any::<u8>(), 1..4000), 1..4), 1..6),
        mtu in 100usize..1500,
    ) {
        let mut packets = Vec::new();
        let mut seq = 0u16;
        let mut want = Vec::new();
        for (k, nals) in frames.iter().enumerate() {
            let nals: Vec<Vec<u8>> = nals.iter().map(|n| {
                let mut n = n.clone();
                n[0] = (n[0] & 0xe0) | (1 + n[0] % 23);
                n
            }).collect();
            let ps: Vec<Vec<u8>> = nals.iter().flat_map(|n| packetize(n, mtu)).collect();
            let last = ps.len() - 1;
            for (i, p) in ps.into_iter().enumerate() {
                packets.push((seq, k as u32 * 3000, i == last, p));
                seq = seq.wrapping_add(1);
            }
            want.push(prefixed(&nals.iter().map(|n| &n[..]).collect::<Vec<_>>()));
        }
        let mut d = Depacketizer::new(Payload::H264, MAX);
        let got: Vec<Vec<u8>> = run(&mut d, &packets).into_iter().map(|f| f.data).collect();
        prop_assert_eq!(got, want);
    }

    #[test]
    fn any_payloads_never_panic_and_frames_stay_bounded(
        packets in prop::collection::vec((any::<u16>(), 0u32..4, any::<bool>(), prop::collection::vec(any::<u8>(), 0..300)), 0..40),
        kind in 0u8..4,
    ) {
        let payload = match kind {
            0 => Payload::H264,
            3 => Payload::H265,
            1 => Payload::Aac { headers: HBR, frame: 1024 },
            _ => Payload::Opus,
        };
        let mut d = Depacketizer::new(payload, 500);
        let mut out = run(&mut d, &packets);
        d.flush(&mut out);
        prop_assert!(out.iter().all(|f| f.data.len() <= 500));
    }
}

#[test]
fn a_break_drops_the_frame_in_progress_only() {
    let mut d = Depacketizer::new(Payload::H264, MAX);
    let mut frames = run(
        &mut d,
        &[
            (0, 0, true, vec![0x65, 1]),
            (1, 3600, false, vec![0x7c, 0x81, 3]),
        ],
    );
    d.break_off();
    frames.extend(run(
        &mut d,
        &[
            (2, 7200, true, vec![0x41, 4]),
            (3, 10_800, true, vec![0x65, 5]),
        ],
    ));
    assert_eq!(frames.len(), 3);
    assert_eq!(
        d.counts,
        Counts {
            frames: 3,
            dropped: 1
        }
    );
}
