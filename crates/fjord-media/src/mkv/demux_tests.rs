use super::*;
use crate::mkv::testfile::*;
use proptest::prelude::*;

fn frames_of(d: &Demuxed, track: usize, data: &[u8]) -> Vec<(i64, Vec<u8>, bool)> {
    d.frames[track]
        .iter()
        .map(|f| {
            let at = f.offset as usize;
            (
                f.time_ns / 1_000_000,
                data[at..at + f.size as usize].to_vec(),
                f.key,
            )
        })
        .collect()
}

#[test]
fn simple_blocks_groups_and_cues() {
    let group = |rel, key: bool, frame: &[u8]| {
        let mut body = el(BLOCK, &block(1, rel, false, 0, &[frame]));
        if !key {
            body.extend(uint(REFERENCE_BLOCK, 40));
        }
        el(BLOCK_GROUP, &body)
    };
    let c1 = cluster(
        0,
        &[simple_block(1, 0, true, b"k0"), group(40, false, b"p1")],
    );
    let c2 = cluster(80, &[group(0, true, b"k2"), simple_block(2, 5, true, b"a")]);
    let tracks = [
        track(1, 1, "V_VP8", b""),
        track(2, 2, "A_OPUS", &opus_head(2)),
    ];
    let data = file("webm", &tracks, &[c1, c2]);
    let d = demux(&data, &mut |_| {}).unwrap();
    assert_eq!(d.doc_type, "webm");
    assert_eq!(
        frames_of(&d, 0, &data),
        [
            (0, b"k0".to_vec(), true),
            (40, b"p1".to_vec(), false),
            (80, b"k2".to_vec(), true)
        ]
    );
    assert_eq!(frames_of(&d, 1, &data), [(85, b"a".to_vec(), true)]);
    // No Cues: one per cluster, at its first video key frame.
    assert!(d.cues_rebuilt);
    let times: Vec<i64> = d.cues.iter().map(|c| c.time_ns / 1_000_000).collect();
    assert_eq!(times, [0, 80]);
    assert_eq!(
        d.cues[0].cluster as usize,
        data.windows(4)
            .position(|w| w == CLUSTER.to_be_bytes())
            .unwrap()
    );
}

#[test]
fn every_lacing() {
    let a: &[u8] = &[1; 300];
    let b: &[u8] = &[2; 7];
    let c: &[u8] = &[3; 9];
    let tracks = [track(1, 2, "A_OPUS", &opus_head(1))];
    for lacing in [1, 3] {
        let blk = el(SIMPLE_BLOCK, &block(1, 0, true, lacing, &[a, b, c]));
        let data = file("matroska", &tracks, &[cluster(10, &[blk])]);
        let d = demux(&data, &mut |_| {}).unwrap();
        let got: Vec<_> = frames_of(&d, 0, &data).into_iter().map(|f| f.1).collect();
        assert_eq!(got, [a, b, c], "lacing {lacing}");
        assert_eq!(
            d.frames[0].iter().map(|f| f.laced).collect::<Vec<_>>(),
            [false, true, true]
        );
    }
    let blk = el(SIMPLE_BLOCK, &block(1, 0, true, 2, &[b, b, b]));
    let data = file("matroska", &tracks, &[cluster(10, &[blk])]);
    let d = demux(&data, &mut |_| {}).unwrap();
    assert_eq!(d.frames[0].len(), 3);
    // Fixed lacing that does not divide: the block is skipped with a note.
    let blk = el(SIMPLE_BLOCK, &block(1, 0, true, 2, &[b, &c[1..]]));
    let data = file("matroska", &tracks, &[cluster(10, &[blk])]);
    let d = demux(&data, &mut |_| {}).unwrap();
    assert!(d.frames[0].is_empty() && d.warnings[0].contains("lacing"));
}

#[test]
fn unknown_size_clusters_end_at_the_next_cluster() {
    let c = |ts, f: &[u8]| {
        unknown(
            CLUSTER,
            &cat(&[uint(CLUSTER_TIMESTAMP, ts), simple_block(1, 0, true, f)]),
        )
    };
    let tracks = [track(1, 1, "V_VP9", b"")];
    let data = file("webm", &tracks, &[c(0, b"x"), c(33, b"yy"), c(66, b"zzz")]);
    let d = demux(&data, &mut |_| {}).unwrap();
    let got: Vec<_> = frames_of(&d, 0, &data)
        .into_iter()
        .map(|f| (f.0, f.1.len()))
        .collect();
    assert_eq!(got, [(0, 1), (33, 2), (66, 3)]);
    assert_eq!(d.truncated_bytes, 0);
}

#[test]
fn the_files_cues_are_kept() {
    let cue = el(
        CUE_POINT,
        &cat(&[
            uint(CUE_TIME, 80),
            el(
                CUE_TRACK_POSITIONS,
                &cat(&[uint(CUE_TRACK, 1), uint(CUE_CLUSTER_POSITION, 7)]),
            ),
        ]),
    );
    let tracks = [track(1, 1, "V_VP8", b"")];
    let data = file(
        "webm",
        &tracks,
        &[
            cluster(0, &[simple_block(1, 0, true, b"k")]),
            el(CUES, &cue),
        ],
    );
    let d = demux(&data, &mut |_| {}).unwrap();
    assert!(!d.cues_rebuilt);
    let segment_body = ebml_header("webm").len() + 12;
    assert_eq!(
        d.cues,
        [Cue {
            time_ns: 80_000_000,
            track: 1,
            cluster: segment_body as u64 + 7
        }]
    );
}

#[test]
fn truncation_and_corruption() {
    let tracks = [track(1, 1, "V_VP8", b"")];
    let data = file(
        "webm",
        &tracks,
        &[cluster(
            0,
            &[
                simple_block(1, 0, true, &[7; 100]),
                simple_block(1, 40, false, &[8; 100]),
            ],
        )],
    );
    // Cut inside the second block: the first is served, the rest counted.
    let cut = &data[..data.len() - 50];
    let d = demux(cut, &mut |_| {}).unwrap();
    assert_eq!(d.frames[0].len(), 1);
    assert!(d.truncated_bytes > 0);
    // Cut inside Tracks: refused with the reason.
    let header_len = ebml_header("webm").len() + 12 + 8;
    let e = demux(&data[..header_len + 5], &mut |_| {}).unwrap_err();
    assert!(e.to_string().contains("Tracks"), "{e}");
    // Not Matroska at all.
    assert!(demux(b"\x1a\x45\xdf\xa3\x84\x42\x82\x81x", &mut |_| {}).is_err());
    assert!(!looks_like_matroska(b"RIFF....WEBP"));
    assert!(looks_like_matroska(&data[..40]));
    // Garbage in place of the first cluster's header: skipped to the next.
    let mut broken = file(
        "webm",
        &tracks,
        &[
            cluster(0, &[simple_block(1, 0, true, b"a")]),
            cluster(40, &[simple_block(1, 0, true, b"b")]),
        ],
    );
    let at = broken
        .windows(4)
        .position(|w| w == CLUSTER.to_be_bytes())
        .unwrap();
    broken[at] = 0;
    let d = demux(&broken, &mut |_| {}).unwrap();
    assert_eq!(frames_of(&d, 0, &broken), [(40, b"b".to_vec(), true)]);
    assert_eq!(d.resyncs, 1);
}

proptest! {
    /// Laced frames of any sizes come back as written, whichever lacing.
    #[test]
    fn lacing_round_trips(sizes in proptest::collection::vec(1usize..600, 1..8), lacing in prop_oneof![Just(1u8), Just(3u8)]) {
        let frames: Vec<Vec<u8>> = sizes.iter().enumerate().map(|(i, &s)| vec![i as u8; s]).collect();
        let refs: Vec<&[u8]> = frames.iter().map(Vec::as_slice).collect();
        let b = block(1, 0, false, lacing, &refs);
        let l = lace(&b, 4, b.len(), lacing).unwrap();
        prop_assert_eq!(l.frames, sizes);
    }

    /// Any bytes after a valid header: never a panic, every frame inside.
    #[test]
    fn any_cluster_bytes(tail in proptest::collection::vec(any::<u8>(), 0..400)) {
        let tracks = [track(1, 1, "V_VP8", b"")];
        let mut data = file("webm", &tracks, &[]);
        data.extend(unknown(CLUSTER, &tail));
        if let Ok(d) = demux(&data, &mut |_| {}) {
            for f in d.frames.iter().flatten() {
                prop_assert!(f.offset + u64::from(f.size) <= data.len() as u64);
            }
        }
    }
}

/// A video track's Colour and an audio track's CodecDelay are read; a
/// track without them says unspecified and none.
#[test]
fn colour_and_codec_delay() {
    let colour = el(
        COLOUR,
        &cat(&[
            uint(PRIMARIES, 1),
            uint(TRANSFER_CHARACTERISTICS, 1),
            uint(MATRIX_COEFFICIENTS, 300),
        ]),
    );
    let video = el(VIDEO, &cat(&[uint(PIXEL_WIDTH, 64), colour]));
    let v = el(
        TRACK_ENTRY,
        &cat(&[
            uint(TRACK_NUMBER, 1),
            uint(TRACK_TYPE, 1),
            el(CODEC_ID, b"V_VP9"),
            video,
        ]),
    );
    let a = el(
        TRACK_ENTRY,
        &cat(&[
            uint(TRACK_NUMBER, 2),
            uint(TRACK_TYPE, 2),
            el(CODEC_ID, b"A_OPUS"),
            uint(CODEC_DELAY, 6_500_000),
        ]),
    );
    let blocks = [
        simple_block(1, 0, true, b"k"),
        simple_block(2, 0, true, b"a"),
    ];
    let data = file("webm", &[v, a], &[cluster(0, &blocks)]);
    let d = demux(&data, &mut |_| {}).unwrap();
    // A code point past 255 is no H.273 one: unspecified.
    assert_eq!(d.tracks[0].colour, [1, 1, 2]);
    assert_eq!((d.tracks[0].size.0, d.tracks[0].codec_delay_ns), (64, 0));
    assert_eq!(d.tracks[1].colour, [2, 2, 2]);
    assert_eq!(d.tracks[1].codec_delay_ns, 6_500_000);
}
