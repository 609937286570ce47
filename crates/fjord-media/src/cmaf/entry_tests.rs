use super::*;

#[test]
fn codec_names() {
    let avc = Config::Avc(vec![1, 0x64, 0x00, 0x1f, 0xff]);
    assert_eq!(avc.codec_name().as_deref(), Some("avc1.64001f"));
    assert_eq!(Config::Avc(vec![1]).codec_name(), None);
    let aac = Config::Aac {
        asc: vec![0x12, 0x10],
        rate: 44_100,
        channels: 2,
    };
    assert_eq!(aac.codec_name().as_deref(), Some("mp4a.40.2"));
    let vp9 = Config::Vp9(Vp9Facts {
        profile: 0,
        level: 31,
        bit_depth: 8,
        chroma: 1,
        full_range: false,
        colour: [1, 1, 1],
    });
    assert_eq!(vp9.codec_name().as_deref(), Some("vp09.00.31.08"));
    assert_eq!(Config::Opus(vec![]).codec_name().as_deref(), Some("opus"));
}

#[test]
fn vp9_levels() {
    assert_eq!(vp9_level(640, 360, 25.0), 21);
    assert_eq!(vp9_level(1280, 720, 30.0), 31);
    assert_eq!(vp9_level(1920, 1080, 30.0), 40);
    assert_eq!(vp9_level(1920, 1080, 60.0), 41);
    assert_eq!(vp9_level(u16::MAX, u16::MAX, 1e9), 62);
}

/// Every box in `b` says a length that fits its parent.
fn boxes_fit(b: &[u8]) -> usize {
    let mut at = 0;
    let mut n = 0;
    while at < b.len() {
        let len = u32::from_be_bytes(b[at..at + 4].try_into().unwrap()) as usize;
        assert!(
            len >= 8 && at + len <= b.len(),
            "box at {at} of {}",
            b.len()
        );
        at += len;
        n += 1;
    }
    n
}

#[test]
fn a_trak_of_each_config_is_well_formed() {
    let head = b"OpusHead\x01\x02\x38\x01\x80\xbb\0\0\0\0\0".to_vec();
    for config in [
        Config::Avc(vec![1, 0x64, 0, 0x1f]),
        Config::Hevc(vec![1; 23]),
        Config::Aac {
            asc: vec![0x12, 0x10],
            rate: 48_000,
            channels: 2,
        },
        Config::Opus(head),
        Config::Opus(vec![]),
        Config::Vp8([2; 3]),
    ] {
        let mut o = Vec::new();
        trak(
            &mut o,
            &TrackHead {
                id: 1,
                timescale: 90_000,
                size: (640, 360),
                media_start: 3600,
                config: &config,
            },
        );
        assert_eq!(boxes_fit(&o), 1);
        // trak's children: tkhd, edts, mdia.
        assert_eq!(boxes_fit(&o[8..]), 3);
    }
}

#[test]
fn dops_is_the_opus_head_big_endian() {
    // 2 channels, pre-skip 312, 48 kHz, gain 0, family 0.
    let head = b"OpusHead\x01\x02\x38\x01\x80\xbb\0\0\0\0\0";
    let mut o = Vec::new();
    dops(&mut o, head);
    assert_eq!(
        o,
        [
            0, 0, 0, 19, b'd', b'O', b'p', b's', 0, 2, 0x01, 0x38, 0, 0, 0xbb, 0x80, 0, 0, 0
        ]
    );
}

#[test]
fn vpcc_carries_the_colour() {
    let mut o = Vec::new();
    vpcc(
        &mut o,
        &Vp9Facts {
            profile: 2,
            level: 31,
            bit_depth: 10,
            chroma: 1,
            full_range: true,
            colour: [9, 16, 9],
        },
    );
    // Header, version and flags, then profile, level, depth/chroma/range,
    // primaries, transfer, matrix, no initialization data.
    assert_eq!(&o[12..], [2, 31, 0xa3, 9, 16, 9, 0, 0]);
}
