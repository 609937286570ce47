use proptest::prelude::*;

use super::*;
use crate::{Limits, sdp};

/// What `ffmpeg -f rtsp` announces for H.264 + AAC.
const FFMPEG: &str = "v=0\r\no=- 0 0 IN IP4 127.0.0.1\r\ns=No Name\r\nc=IN IP4 127.0.0.1\r\nt=0 0\r\nm=video 0 RTP/AVP 96\r\na=rtpmap:96 H264/90000\r\na=fmtp:96 packetization-mode=1; sprop-parameter-sets=Z2QAFazZQUH7ARAAAAMAEAAAAwMg8UKZYA==,aOvjyyLA; profile-level-id=640015\r\na=control:streamid=0\r\nm=audio 0 RTP/AVP 97\r\na=rtpmap:97 MPEG4-GENERIC/44100/2\r\na=fmtp:97 profile-level-id=1;mode=AAC-hbr;sizelength=13;indexlength=3;indexdeltalength=3; config=121056E500\r\na=control:streamid=1\r\nm=application 0 RTP/AVP 98\r\na=rtpmap:98 X-FOO/1000\r\n";

fn rtp(pt: u8, seq: u16, ts: u32, marker: bool, payload: &[u8]) -> Vec<u8> {
    let mut p = vec![0x80, pt | if marker { 0x80 } else { 0 }];
    p.extend_from_slice(&seq.to_be_bytes());
    p.extend_from_slice(&ts.to_be_bytes());
    p.extend_from_slice(&[0, 0, 0, 1]);
    p.extend_from_slice(payload);
    p
}

/// `secs` seconds of 25 fps video (a key frame each second, starting
/// with a P frame, which is left out) and AAC, interleaved, from RTP
/// timestamps near the wrap.
fn stream(secs: u32) -> Vec<(usize, Vec<u8>)> {
    let mut out = Vec::new();
    let (v0, a0) = (u32::MAX - 50_000, 7u32);
    let mut audio = 0u32;
    for f in 0..=secs * 25 {
        let key = f % 25 == 1;
        let nal = if key { 0x65 } else { 0x41 };
        let ts = v0.wrapping_add(f * 3600);
        out.push((0, rtp(96, f as u16, ts, true, &[nal, f as u8, 0xaa])));
        while u64::from(audio) * 1024 * 25 < u64::from(f + 1) * 44_100 {
            let payload = [0, 16, 0, 3 << 3, 0x21, audio as u8, 0];
            out.push((
                1,
                rtp(
                    97,
                    audio as u16,
                    a0.wrapping_add(audio * 1024),
                    true,
                    &payload,
                ),
            ));
            audio += 1;
        }
        out.push((2, rtp(98, f as u16, f, true, &[1])));
    }
    out
}

fn record(packets: &[(usize, Vec<u8>)]) -> (Recorder, Vec<u8>) {
    let a = sdp::parse(FFMPEG.as_bytes(), &Limits::default()).unwrap();
    let (mut r, left) = Recorder::new(&a.tracks, RecordLimits::default()).unwrap();
    assert_eq!(left.len(), 1, "{left:?}");
    assert!(left[0].contains("X-FOO"));
    let (chosen, _) = recorder(&a.tracks, RecordLimits::default()).unwrap();
    assert_eq!(chosen.extension(), "mp4");
    let mut file = r.init();
    for (track, p) in packets {
        r.push(*track, p, &mut file);
    }
    r.finish(&mut file);
    (r, file)
}

#[test]
fn a_recording_is_an_mp4_title_fjord_ingests_cut_at_key_frames() {
    let (r, file) = record(&stream(4));
    assert_eq!(r.skipped, 1 + 2); // the P frame before the first key frame, and its audio
    assert_eq!(r.fragments(), 4);
    assert_eq!(r.counts().dropped, 0);
    let plan = fjord_media::mp4::plan(&file, &mut |_, _| {}).unwrap();
    assert_eq!(plan.tracks.len(), 2);
    assert_eq!(plan.tracks[0].sync.len(), 4);
    let secs = plan.duration_ns as f64 / 1e9;
    assert!((3.9..4.1).contains(&secs), "{secs}");
    let f = fjord_media::mp4::fragments::fragment(&file, 2_000_000_000, None).unwrap();
    assert_eq!(f.codecs, "avc1.640015,mp4a.40.2");
}

#[test]
fn a_recording_cut_short_inside_a_fragment_is_ingested_up_to_the_fragment_before() {
    let (_, file) = record(&stream(4));
    let cut = &file[..file.len() - 300];
    let plan = fjord_media::mp4::plan(cut, &mut |_, _| {}).unwrap();
    assert_eq!(plan.tracks[0].sync.len(), 3);
    let secs = plan.duration_ns as f64 / 1e9;
    assert!((2.9..3.1).contains(&secs), "{secs}");
}

#[test]
fn b_frames_get_decode_times_in_order_and_signed_offsets() {
    let a = sdp::parse(FFMPEG.as_bytes(), &Limits::default()).unwrap();
    let (mut r, _) = Recorder::new(&a.tracks[..1], RecordLimits::default()).unwrap();
    let mut file = r.init();
    // Decode order I P B B, shown I B B P.
    for (seq, (pts, nal)) in [(0u32, 0x65u8), (3, 0x41), (1, 0x01), (2, 0x01)]
        .into_iter()
        .enumerate()
    {
        r.push(
            0,
            &rtp(96, seq as u16, pts * 3600, true, &[nal, 1]),
            &mut file,
        );
    }
    r.finish(&mut file);
    let plan = fjord_media::mp4::plan(&file, &mut |_, _| {}).unwrap();
    assert_eq!(plan.tracks[0].sync.len(), 1);
    assert!(plan.duration_ns >= 160_000_000, "{}", plan.duration_ns);
}

#[test]
fn configurations_are_read_from_the_sdp_or_the_track_left_out() {
    assert!(
        avcc("Z2QAFazZQUH7ARAAAAMAEAAAAwMg8UKZYA==,aOvjyyLA")
            .unwrap()
            .starts_with(&[1, 0x64, 0, 0x15, 0xff, 0xe1])
    );
    assert!(avcc("aOvjyyLA").is_err());
    // ffmpeg's SPS above: 320x240 (20x15 macroblocks).
    assert_eq!(
        avc_size(&avcc("Z2QAFazZQUH7ARAAAAMAEAAAAwMg8UKZYA==,aOvjyyLA").unwrap()),
        (320, 240)
    );
    assert_eq!(
        avc_size(&[1, 0x64, 0, 0x15, 0xff, 0xe1, 0, 2, 0x67, 0xff]),
        (0, 0)
    );
    assert!(avcc("!!").is_err());
    assert_eq!(param("a=1; SizeLength=13 ;b", "sizelength"), Some("13"));
    let opus = "v=0\r\no=- 0 0 IN IP4 1.2.3.4\r\ns=x\r\nt=0 0\r\nm=audio 0 RTP/AVP 111\r\na=rtpmap:111 opus/48000/2\r\n";
    let a = sdp::parse(opus.as_bytes(), &Limits::default()).unwrap();
    let (r, left) = Recorder::new(&a.tracks, RecordLimits::default()).unwrap();
    assert!(left.is_empty());
    assert!(r.init().windows(4).any(|w| w == b"dOps"));
    let mp2t = "v=0\r\no=- 0 0 IN IP4 1.2.3.4\r\ns=x\r\nt=0 0\r\nm=video 0 RTP/AVP 33\r\n";
    let a = sdp::parse(mp2t.as_bytes(), &Limits::default()).unwrap();
    assert!(Recorder::new(&a.tracks, RecordLimits::default()).is_err());
    // Its TS packets are the file instead.
    let (chosen, left) = recorder(&a.tracks, RecordLimits::default()).unwrap();
    assert_eq!((chosen.extension(), left.len()), ("ts", 0));
}

#[test]
fn a_fragment_is_cut_at_its_byte_bound() {
    let a = sdp::parse(FFMPEG.as_bytes(), &Limits::default()).unwrap();
    let limits = RecordLimits {
        max_fragment_bytes: 100,
        ..RecordLimits::default()
    };
    let (mut r, _) = Recorder::new(&a.tracks, limits).unwrap();
    let mut file = r.init();
    for f in 0..40u32 {
        let nal = if f == 0 { 0x65 } else { 0x41 };
        r.push(0, &rtp(96, f as u16, f * 3600, true, &[nal; 30]), &mut file);
    }
    r.finish(&mut file);
    assert!(r.fragments() >= 10, "{}", r.fragments());
    fjord_media::mp4::plan(&file, &mut |_, _| {}).unwrap();
}

proptest! {
    #[test]
    fn mutated_streams_never_panic_and_what_is_written_stays_readable(
        edits in prop::collection::vec((any::<prop::sample::Index>(), any::<prop::sample::Index>(), any::<u8>()), 0..20),
    ) {
        let mut packets = stream(2);
        for (p, at, byte) in edits {
            let (_, packet) = p.get_mut(&mut packets);
            let k = at.index(packet.len());
            packet[k] = byte;
        }
        let a = sdp::parse(FFMPEG.as_bytes(), &Limits::default()).unwrap();
        let (mut r, _) = Recorder::new(&a.tracks, RecordLimits::default()).unwrap();
        let mut file = r.init();
        for (track, p) in &packets {
            r.push(*track, p, &mut file);
        }
        r.finish(&mut file);
        if r.fragments() > 0 {
            // What the mutations left is still a file fjord takes (or refuses cleanly).
            let _ = fjord_media::mp4::plan(&file, &mut |_, _| {});
        }
    }
}

#[test]
fn a_next_publisher_drops_the_frame_left_unfinished_and_goes_on_at_a_key_frame() {
    let a = sdp::parse(FFMPEG.as_bytes(), &Limits::default()).unwrap();
    let (mut r, _) = Recorder::new(&a.tracks[..1], RecordLimits::default()).unwrap();
    let mut file = r.init();
    r.push(0, &rtp(96, 0, 0, true, &[0x65, 1]), &mut file);
    r.push(0, &rtp(96, 1, 3600, true, &[0x41, 2]), &mut file);
    // The first publisher goes after the start of an FU-A.
    r.push(0, &rtp(96, 2, 7200, false, &[0x7c, 0x81, 3]), &mut file);
    r.next_publisher();
    // The next one's packets follow on without a gap: a P frame (left
    // out), then a key frame the recording goes on from.
    r.push(0, &rtp(96, 3, 10_800, true, &[0x41, 4]), &mut file);
    r.push(0, &rtp(96, 4, 14_400, true, &[0x65, 5]), &mut file);
    r.push(0, &rtp(96, 5, 18_000, true, &[0x41, 6]), &mut file);
    r.finish(&mut file);
    assert_eq!(
        r.counts(),
        crate::depacketize::Counts {
            frames: 5,
            dropped: 1
        }
    );
    assert_eq!(r.skipped, 1);
    let plan = fjord_media::mp4::plan(&file, &mut |_, _| {}).unwrap();
    assert_eq!(plan.tracks[0].sync.len(), 2);
}

#[test]
fn an_h265_recording_is_an_mp4_title_with_its_hvcc_cut_at_irap_pictures() {
    // What `ffmpeg -f rtsp` announces for libx265 (320x240).
    let sdp = "v=0\r\no=- 0 0 IN IP4 127.0.0.1\r\ns=x\r\nt=0 0\r\nm=video 0 RTP/AVP 96\r\na=rtpmap:96 H265/90000\r\na=fmtp:96 sprop-vps=QAEMAf//AWAAAAMAkAAAAwAAAwA8lZQJ; sprop-sps=QgEBAWAAAAMAkAAAAwAAAwA8oAoIDxZZWVKTC8BaAgAAAwACAAADADIQ; sprop-pps=RAHAc8GJ\r\na=control:streamid=0\r\n";
    let a = sdp::parse(sdp.as_bytes(), &Limits::default()).unwrap();
    let (mut r, left) = Recorder::new(&a.tracks, RecordLimits::default()).unwrap();
    assert!(left.is_empty(), "{left:?}");
    let mut file = r.init();
    assert!(file.windows(4).any(|w| w == b"hvcC"));
    // 3 s at 25 fps: an IDR_W_RADL (19) each second, sent as an AP with
    // an SEI (39) and as a FU, TRAIL_R (1) pictures between.
    let mut seq = 0u16;
    for f in 0..75u32 {
        let ts = f * 3600;
        if f % 25 == 0 {
            let ap = [
                &[48 << 1, 1, 0, 3, 39 << 1, 1, 5][..],
                &[0, 3, 19 << 1, 1, 7],
            ]
            .concat();
            file_push(&mut r, &mut file, &mut seq, (ts, false), &ap);
            file_push(
                &mut r,
                &mut file,
                &mut seq,
                (ts, false),
                &[49 << 1, 1, 0x80 | 19, 8],
            );
            file_push(
                &mut r,
                &mut file,
                &mut seq,
                (ts, true),
                &[49 << 1, 1, 0x40 | 19, 9],
            );
        } else {
            file_push(&mut r, &mut file, &mut seq, (ts, true), &[2, 1, f as u8]);
        }
    }
    r.finish(&mut file);
    assert_eq!(
        (r.fragments(), r.counts().frames, r.counts().dropped),
        (3, 75, 0)
    );
    let plan = fjord_media::mp4::plan(&file, &mut |_, _| {}).unwrap();
    assert_eq!(plan.tracks.len(), 1);
    assert_eq!(plan.tracks[0].sync.len(), 3);
}

fn file_push(r: &mut Recorder, file: &mut Vec<u8>, seq: &mut u16, (ts, m): (u32, bool), p: &[u8]) {
    r.push(0, &rtp(96, *seq, ts, m, p), file);
    *seq += 1;
}
