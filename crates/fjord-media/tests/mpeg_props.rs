//! Property tests for the MPEG video/audio/program stream scanners: arbitrary
//! and mutated input never panics, and every planned packet stays inside the
//! data, within the payload size, in send-time order. The mutated inputs
//! start from small files made by ffmpeg (required, as in tests/mpeg.rs).

use std::process::Command;
use std::sync::OnceLock;

use fjord_media::format::{MAX_RTP_PAYLOAD, plan};
use fjord_media::ts::TsOptions;
use proptest::prelude::*;

fn check(data: &[u8]) {
    let Ok(p) = plan(data, &TsOptions::default(), &mut |_, _| {}) else {
        return;
    };
    for t in &p.tracks {
        let mut last = 0;
        for r in &t.packets {
            assert!(r.file_end() <= data.len() as u64, "{r:?}");
            assert!(r.payload_len() <= MAX_RTP_PAYLOAD);
            assert!(r.send_time_ns >= last);
            last = r.send_time_ns;
        }
        assert!(t.sync.windows(2).all(|w| w[0].packet < w[1].packet));
        assert!(t.sync.iter().all(|s| (s.packet as usize) < t.packets.len()));
    }
}

/// Small ffmpeg-made samples: MPEG-2 ES, MPEG-1 PS with MP2, VOB with AC-3, MP3.
fn samples() -> &'static [Vec<u8>] {
    static SAMPLES: OnceLock<Vec<Vec<u8>>> = OnceLock::new();
    SAMPLES.get_or_init(|| {
        let dir = tempfile::tempdir().unwrap();
        let video = ["-f", "lavfi", "-i", "testsrc=size=160x128:rate=25"];
        let audio = ["-f", "lavfi", "-i", "sine=r=48000"];
        let jobs: [(&str, Vec<&str>); 4] = [
            (
                "v.m2v",
                [&video[..], &["-c:v", "mpeg2video", "-bf", "2", "-g", "6"]].concat(),
            ),
            (
                "p.mpg",
                [&video[..], &audio, &["-c:a", "mp2", "-f", "mpeg"]].concat(),
            ),
            (
                "p.vob",
                [&video[..], &audio, &["-c:a", "ac3", "-f", "vob"]].concat(),
            ),
            ("a.mp3", [&audio[..], &["-c:a", "libmp3lame"]].concat()),
        ];
        jobs.iter()
            .map(|(name, args)| {
                let path = dir.path().join(name);
                let status = Command::new("ffmpeg")
                    .args(["-nostdin", "-loglevel", "error", "-y"])
                    .args(args)
                    .args(["-t", "0.5", path.to_str().unwrap()])
                    .status()
                    .expect("ffmpeg is required for these tests (make test installs it)");
                assert!(status.success());
                std::fs::read(path).unwrap()
            })
            .collect()
    })
}

fn header() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        Just(vec![0, 0, 1, 0xb3]),
        Just(vec![0, 0, 1, 0xba, 0x44]),
        Just(vec![0, 0, 1, 0xba, 0x21]),
        Just(b"ID3\x04\0\0\0\0\0\0".to_vec()),
        Just(vec![0xff, 0xfb, 0x90, 0x64]),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(300))]

    #[test]
    fn arbitrary_input_never_panics(
        head in header(),
        body in proptest::collection::vec(
            prop_oneof![3 => any::<u8>(), 1 => Just(0u8), 1 => Just(1u8), 1 => Just(0xffu8)],
            0..3000,
        ),
    ) {
        let mut data = head;
        data.extend_from_slice(&body);
        check(&data);
    }

    #[test]
    fn mutated_files_never_panic(
        which in 0usize..4,
        edits in proptest::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 0..40),
        cut in any::<prop::sample::Index>(),
    ) {
        let mut data = samples()[which].clone();
        for (at, v) in edits {
            let i = at.index(data.len());
            data[i] = v;
        }
        check(&data);
        let keep = cut.index(data.len()).max(1);
        check(&data[..keep]);
    }
}

/// Inputs the fuzzers found: an ID3v2 tag followed by an APEv2 footer too
/// short to hold its fields, or claiming size 0 (which once stalled the tag
/// loop).
#[test]
fn truncated_and_empty_ape_tags_are_bad_input_not_a_crash() {
    let short_footer: &[u8] = b"ID3\x80\0\0\0\0\0\0APETAGEX\xd4\0\0";
    let odd_footer: &[u8] = b"ID3\xb3\0\0\0\0\0\0APETAGEX\\\xff\xfe!\0\x08\xf9[";
    let mut zero_size = b"ID3\x03\0\0\0\0\0\0".to_vec();
    zero_size.extend_from_slice(&[0u8; 64]);
    zero_size.extend_from_slice(b"APETAGEX");
    zero_size.extend_from_slice(&[0u8; 24]);
    for input in [short_footer, odd_footer, &zero_size] {
        check(input);
    }
}
