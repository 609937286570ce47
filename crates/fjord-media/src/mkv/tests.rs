use super::testfile::*;
use crate::plan::FLAG_MARKER;

/// A VP8 key frame and inter frame (frame tag bit 0) of `len` bytes.
fn vp8(key: bool, len: usize) -> Vec<u8> {
    let mut f = vec![0x55; len];
    f[0] = if key { 0x10 } else { 0x11 };
    f
}

#[test]
fn vp8_and_opus_in_webm() {
    // 20 ms Opus packets (TOC 0xfc) stamped in whole ms, as muxers round.
    let opus = [0xfc, 1, 2, 3];
    let mut blocks = Vec::new();
    for i in 0..6i16 {
        blocks.push(simple_block(2, i * 20, true, &opus));
    }
    blocks.push(simple_block(1, 0, true, &vp8(true, 3000)));
    blocks.push(simple_block(1, 40, false, &vp8(false, 10)));
    // Flagged key, but its bitstream says inter: not a sync point.
    blocks.push(simple_block(1, 80, true, &vp8(false, 10)));
    let tracks = [
        track(1, 1, "V_VP8", b""),
        track(2, 2, "A_OPUS", &opus_head(2)),
    ];
    let data = file("webm", &tracks, &[cluster(1000, &blocks)]);
    let p = crate::format::plan(&data, &Default::default(), &mut |_, _| {}).unwrap();
    assert_eq!(p.report.format, "WebM (VP8, Opus)");
    let v = &p.tracks[0];
    assert_eq!(
        (v.desc.encoding.as_str(), v.desc.clock_rate),
        ("VP8", 90_000)
    );
    assert_eq!(v.packets.len(), 3 + 2);
    assert_eq!(v.packets[0].prefix(), [0x10]);
    assert_eq!(v.packets[1].prefix(), [0x00]);
    assert!(v.packets[2].flags & FLAG_MARKER != 0);
    assert_eq!(v.sync.len(), 1);
    assert_eq!(v.packets[3].rtp_ts, 3600);
    let a = &p.tracks[1];
    assert_eq!(a.desc.encoding, "opus");
    assert_eq!(a.desc.fmtp, "sprop-stereo=1");
    let ts: Vec<u32> = a.packets.iter().map(|r| r.rtp_ts).collect();
    assert_eq!(ts, [0, 960, 1920, 2880, 3840, 4800]);
    assert!(
        a.packets
            .iter()
            .all(|r| r.len == 4 && r.prefix().is_empty())
    );
    assert_eq!(p.duration_ns, 120_000_000);
    assert!(p.report.warnings.iter().any(|w| w.contains("Cues")));
}

#[test]
fn audio_follows_the_count_not_the_rounded_milliseconds() {
    // 48 kHz AAC: 1024-sample frames are 21.333 ms; Matroska says 0, 21, 43, 64.
    let asc = [0x11, 0x90];
    let blocks: Vec<_> = [0i16, 21, 43, 64, 500]
        .iter()
        .map(|&t| simple_block(1, t, true, &[1; 50]))
        .collect();
    let data = file(
        "matroska",
        &[track(1, 2, "A_AAC", &asc)],
        &[cluster(0, &blocks)],
    );
    let p = crate::format::plan(&data, &Default::default(), &mut |_, _| {}).unwrap();
    let ts: Vec<u32> = p.tracks[0].packets.iter().map(|r| r.rtp_ts).collect();
    // A gap (at 500 ms) is taken from the container.
    assert_eq!(ts, [0, 1024, 2048, 3072, 24_000]);
    assert_eq!(p.tracks[0].packets[0].prefix(), [0, 16, 1, 0x90]);
}

/// AV1 is an index track without packets (HLS and DASH serve it), which
/// RTSP refuses with the reason; a broken av1C refuses the file.
#[test]
fn av1_is_a_track_without_packets_that_rtsp_refuses() {
    let av1c = [0x81, 0x08, 0x0c, 0x00];
    let blocks = [
        simple_block(1, 0, true, b"\x12\0\x0a\x0b"),
        simple_block(1, 40, false, b"\x12\0\x32\x01"),
        simple_block(2, 0, true, &[0xfc, 1, 2, 3]),
    ];
    let tracks = [
        track(1, 1, "V_AV1", &av1c),
        track(2, 2, "A_OPUS", &opus_head(2)),
    ];
    let data = file("webm", &tracks, &[cluster(0, &blocks)]);
    let p = crate::format::plan(&data, &Default::default(), &mut |_, _| {}).unwrap();
    assert_eq!(p.report.format, "WebM (AV1, Opus)");
    let v = &p.tracks[0];
    assert_eq!(v.desc.encoding, crate::av1::ENCODING);
    assert!(v.packets.is_empty() && v.sync.is_empty());
    assert_eq!(p.tracks[1].packets.len(), 1);
    assert!(
        (p.report.warnings.iter()).any(|w| w.contains("HLS and DASH only")),
        "{:?}",
        p.report.warnings
    );
    let e = crate::format::plan(
        &file(
            "webm",
            &[track(1, 1, "V_AV1", b"\x01\0")],
            &[cluster(0, &blocks[..1])],
        ),
        &Default::default(),
        &mut |_, _| {},
    )
    .unwrap_err();
    assert!(e.to_string().contains("AV1CodecConfigurationRecord"), "{e}");
}

#[test]
fn nothing_to_serve_says_what_was_found() {
    let data = file(
        "matroska",
        &[track(1, 2, "A_VORBIS", b"x")],
        &[cluster(0, &[simple_block(1, 0, true, b"v")])],
    );
    let e = crate::format::plan(&data, &Default::default(), &mut |_, _| {}).unwrap_err();
    assert!(e.to_string().contains("found A_VORBIS"), "{e}");
    // Multichannel Opus cannot go over RFC 7587.
    let mut head = opus_head(6);
    head[18] = 1;
    let data = file(
        "webm",
        &[track(1, 2, "A_OPUS", &head)],
        &[cluster(0, &[simple_block(1, 0, true, b"v")])],
    );
    let e = crate::format::plan(&data, &Default::default(), &mut |_, _| {}).unwrap_err();
    assert!(e.to_string().contains("A_OPUS"), "{e}");
}

#[test]
fn video_is_sent_by_decode_order_never_after_its_time() {
    // B-frame order: presentation 0, 120, 40, 80.
    let blocks: Vec<_> = [(0i16, true), (120, false), (40, false), (80, false)]
        .iter()
        .map(|&(t, k)| simple_block(1, t, k, &vp8(k, 20)))
        .collect();
    let data = file("webm", &[track(1, 1, "V_VP8", b"")], &[cluster(0, &blocks)]);
    let p = crate::format::plan(&data, &Default::default(), &mut |_, _| {}).unwrap();
    let send: Vec<u64> = p.tracks[0]
        .packets
        .iter()
        .map(|r| r.send_time_ns / 1_000_000)
        .collect();
    assert_eq!(send, [0, 40, 40, 80]);
}
