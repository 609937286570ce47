use super::*;
use proptest::prelude::*;

const S: u64 = 1_000_000_000;

#[test]
fn segments_start_at_points_at_least_the_target_apart() {
    // A point every second at byte 1000 × second (+ 376 bytes of PAT/PMT).
    let times: Vec<u64> = (0..10).map(|i| i * S).collect();
    let segs = cut(
        &times,
        |i| Some(376 + 1000 * i as u64),
        10_376,
        10 * S,
        4 * S,
    );
    assert_eq!(
        segs,
        [
            Segment {
                offset: 0,
                len: 4376,
                duration_ns: 4 * S
            },
            Segment {
                offset: 4376,
                len: 4000,
                duration_ns: 4 * S
            },
            Segment {
                offset: 8376,
                len: 2000,
                duration_ns: 2 * S
            },
        ]
    );
    let m = media_playlist(&segs, "../a%20b.ts");
    assert!(
        m.starts_with("#EXTM3U\n#EXT-X-VERSION:4\n#EXT-X-TARGETDURATION:4\n"),
        "{m}"
    );
    assert!(
        m.contains("#EXTINF:4.000,\n#EXT-X-BYTERANGE:4000@4376\n../a%20b.ts\n"),
        "{m}"
    );
    assert!(m.ends_with("#EXT-X-ENDLIST\n"));
    let v = multivariant_playlist(&segs, "media.m3u8", &Variant::default());
    // Peak: 4376 bytes in 4 s = 8752 bit/s; average 10376 bytes in 10 s.
    assert!(
        v.contains("BANDWIDTH=8752,AVERAGE-BANDWIDTH=8300\nmedia.m3u8\n"),
        "{v}"
    );
}

#[test]
fn a_fragmented_title_names_its_init_segment_and_codecs() {
    let segs = [
        Segment {
            offset: 0,
            len: 3000,
            duration_ns: 6 * S,
        },
        Segment {
            offset: 0,
            len: 1000,
            duration_ns: 2_500_000_000,
        },
    ];
    let m = segment_playlist(&segs, Some("init.mp4"), |i| format!("seg-{i}.m4s"));
    assert!(
        m.starts_with("#EXTM3U\n#EXT-X-VERSION:7\n#EXT-X-TARGETDURATION:6\n"),
        "{m}"
    );
    assert!(
        m.contains("#EXT-X-MAP:URI=\"init.mp4\"\n#EXTINF:6.000,\nseg-0.m4s\n"),
        "{m}"
    );
    assert!(
        m.contains("#EXTINF:2.500,\nseg-1.m4s\n#EXT-X-ENDLIST\n"),
        "{m}"
    );
    // Growing: EVENT, no ENDLIST, a target that holds as it grows.
    let e = event_playlist(
        &segs,
        Some("init.mp4"),
        |i| format!("seg-{i}.m4s"),
        (12, false),
    );
    assert!(
        e.contains("#EXT-X-TARGETDURATION:12\n#EXT-X-PLAYLIST-TYPE:EVENT\n"),
        "{e}"
    );
    assert!(e.ends_with("#EXTINF:2.500,\nseg-1.m4s\n"), "{e}");
    assert!(!e.contains("ENDLIST"), "{e}");
    // Ended: the same lines, ENDLIST appended (RFC 8216 §6.2.1).
    let done = event_playlist(
        &segs,
        Some("init.mp4"),
        |i| format!("seg-{i}.m4s"),
        (12, true),
    );
    assert_eq!(done, format!("{e}#EXT-X-ENDLIST\n"));
    let variant = Variant {
        codecs: Some("avc1.64001f,mp4a.40.2".into()),
        resolution: Some((1280, 720)),
        frame_rate: Some(25.0),
        i_frames: Some(("iframes.m3u8".into(), 12_000, "avc1.64001f".into())),
        backups: Vec::new(),
    };
    let v = multivariant_playlist(&segs, "media.m3u8", &variant);
    assert_eq!(v.matches("#EXT-X-STREAM-INF:").count(), 1, "{v}");
    assert!(
        v.contains(
            ",CODECS=\"avc1.64001f,mp4a.40.2\",RESOLUTION=1280x720,FRAME-RATE=25.000\nmedia.m3u8"
        ),
        "{v}"
    );
    assert!(
        v.contains("#EXT-X-I-FRAME-STREAM-INF:BANDWIDTH=12000,CODECS=\"avc1.64001f\",RESOLUTION=1280x720,URI=\"iframes.m3u8\"\n"),
        "{v}"
    );
    let frames = [IFrame {
        uri: "seg-0.m4s".into(),
        offset: 0,
        len: 900,
        duration_ns: 6 * S,
    }];
    let i = i_frame_playlist(&frames, Some("init.mp4"));
    assert!(
        i.contains("#EXT-X-I-FRAMES-ONLY\n#EXT-X-MAP:URI=\"init.mp4\"\n"),
        "{i}"
    );
    assert!(
        i.contains("#EXTINF:6.000,\n#EXT-X-BYTERANGE:900@0\nseg-0.m4s\n#EXT-X-ENDLIST"),
        "{i}"
    );
    assert_eq!(i_frame_bandwidth(&frames), 1200);
    let ts = i_frame_playlist(
        &[IFrame {
            uri: "../t.ts".into(),
            offset: 376,
            len: 9000,
            duration_ns: S,
        }],
        None,
    );
    assert!(
        ts.starts_with("#EXTM3U\n#EXT-X-VERSION:4\n") && !ts.contains("EXT-X-MAP"),
        "{ts}"
    );
    assert!(ts.contains("#EXT-X-BYTERANGE:9000@376\n../t.ts\n"), "{ts}");
}

#[test]
fn backups_are_the_same_variant_at_other_places_after_the_first() {
    let segs = [Segment {
        offset: 0,
        len: 6000,
        duration_ns: 6 * S,
    }];
    let variant = Variant {
        codecs: Some("avc1.64001f".into()),
        backups: vec![
            "http://b:8080/t.ts/media.m3u8".into(),
            "http://c:8080/t.ts/media.m3u8".into(),
        ],
        ..Variant::default()
    };
    let v = multivariant_playlist(&segs, "media.m3u8", &variant);
    let infs: Vec<(&str, &str)> = (v.lines())
        .zip(v.lines().skip(1))
        .filter(|(l, _)| l.starts_with("#EXT-X-STREAM-INF:"))
        .collect();
    let uris: Vec<&str> = infs.iter().map(|(_, u)| *u).collect();
    assert_eq!(
        uris,
        [
            "media.m3u8",
            "http://b:8080/t.ts/media.m3u8",
            "http://c:8080/t.ts/media.m3u8"
        ]
    );
    // Same attributes: a player takes them for one variant's copies, not
    // for renditions to switch between by bandwidth.
    assert!(infs.iter().all(|(a, _)| *a == infs[0].0), "{v}");
}

#[test]
fn a_title_without_points_is_one_segment() {
    let segs = cut(&[], |_| None, 500, 3 * S, 6 * S);
    assert_eq!(
        segs,
        [Segment {
            offset: 0,
            len: 500,
            duration_ns: 3 * S
        }]
    );
    assert!(cut(&[], |_| None, 0, 0, 6 * S).is_empty());
}

proptest! {
    /// Segments tile the file exactly, in order, and their durations add
    /// up to the title's.
    #[test]
    fn segments_tile_the_file(
        mut times in proptest::collection::vec(0u64..100 * S, 0..60),
        offsets in proptest::collection::vec(0u64..1_000_000, 60),
        len in 1u64..1_000_000,
        target in 1u64..10 * S,
    ) {
        times.sort_unstable();
        let duration = 100 * S;
        let segs = cut(&times, |i| offsets.get(i).copied(), len, duration, target);
        let mut at = 0;
        for s in &segs {
            prop_assert_eq!(s.offset, at);
            prop_assert!(s.len > 0);
            at += s.len;
        }
        prop_assert_eq!(at, len);
        prop_assert_eq!(segs.iter().map(|s| s.duration_ns).sum::<u64>(), duration);
    }
}

#[test]
fn a_packed_audio_segment_says_its_time_in_an_id3_tag() {
    // 10 s: 900000 ticks of 90 kHz.
    let t = packed_audio_tag(10 * S);
    assert_eq!(&t[..6], b"ID3\x04\x00\x00");
    assert_eq!(t.len(), 10 + 10 + 45 + 8);
    assert_eq!(&t[6..10], &[0, 0, 0, 63], "tag size, syncsafe");
    assert_eq!(&t[10..14], b"PRIV");
    assert_eq!(&t[14..18], &[0, 0, 0, 53]);
    assert_eq!(
        &t[20..65],
        b"com.apple.streaming.transportStreamTimestamp\0"
    );
    assert_eq!(u64::from_be_bytes(t[65..73].try_into().unwrap()), 900_000);
    // 33 bits: wraps as MPEG-2 timestamps do.
    let late = packed_audio_tag(100_000 * S);
    assert_eq!(
        u64::from_be_bytes(late[65..73].try_into().unwrap()),
        9_000_000_000 % (1 << 33)
    );
    let m = segment_playlist(
        &[Segment {
            offset: 0,
            len: 9,
            duration_ns: 6 * S,
        }],
        None,
        |i| format!("seg-{i}.aac"),
    );
    assert!(
        m.starts_with("#EXTM3U\n#EXT-X-VERSION:3\n") && !m.contains("EXT-X-MAP"),
        "{m}"
    );
    assert!(m.contains("#EXTINF:6.000,\nseg-0.aac\n"), "{m}");
}

/// A growing recording's byte-range playlist is EVENT: while it grows no
/// end, and ended only lines appended (the target duration stays).
#[test]
fn a_recordings_byte_range_playlist_is_an_event_one_that_only_grows() {
    let seg = |offset, duration_s| Segment {
        offset,
        len: 1000,
        duration_ns: duration_s * S,
    };
    let growing = event_media_playlist(&[seg(0, 2)], "x.ts", (12, false));
    assert!(growing.contains("#EXT-X-TARGETDURATION:12\n#EXT-X-PLAYLIST-TYPE:EVENT\n"));
    assert!(!growing.contains("#EXT-X-ENDLIST"), "{growing}");
    let ended = event_media_playlist(&[seg(0, 2), seg(1000, 3)], "x.ts", (12, true));
    assert!(ended.starts_with(&growing), "{growing}\n{ended}");
    assert!(
        ended.ends_with("#EXT-X-BYTERANGE:1000@1000\nx.ts\n#EXT-X-ENDLIST\n"),
        "{ended}"
    );
}
