//! The codec facts of a TS read from its first bytes at a key frame, for
//! files ffmpeg makes: RFC 6381 names as ffprobe's profile and level say,
//! the resolution and frame rate it was made with.

mod media;

use fjord_media::ts::params::params;
use media::*;

fn made(args: &[&str]) -> Vec<u8> {
    let dir = scratch();
    let out = path_in(&dir, "t.ts");
    let mut a = vec![
        "-f",
        "lavfi",
        "-i",
        "testsrc2=size=320x240:rate=25:duration=3",
    ];
    a.extend(["-f", "lavfi", "-i", "sine=duration=3"]);
    a.extend(args);
    a.push(out.to_str().unwrap());
    ffmpeg(&a);
    std::fs::read(out).unwrap()
}

#[test]
fn h264_high_and_aac_lc() {
    let ts = made(&[
        "-c:v",
        "libx264",
        "-profile:v",
        "high",
        "-level",
        "3.0",
        "-c:a",
        "aac",
        "-f",
        "mpegts",
    ]);
    let p = params(&ts[..ts.len().min(256 << 10)]);
    assert_eq!(p.codecs.as_deref(), Some("avc1.64001e,mp4a.40.2"));
    assert_eq!(p.resolution, Some((320, 240)));
    assert_eq!(p.frame_rate, Some(25.0));
}

#[test]
fn h265_and_mp3() {
    let ts = made(&[
        "-c:v",
        "libx265",
        "-x265-params",
        "log-level=error",
        "-vf",
        "scale=352:288",
        "-c:a",
        "libmp3lame",
        "-f",
        "mpegts",
    ]);
    let p = params(&ts[..ts.len().min(256 << 10)]);
    let codecs = p.codecs.unwrap();
    assert!(
        codecs.starts_with("hvc1.1.6.L") && codecs.ends_with(",mp4a.40.34"),
        "{codecs}"
    );
    assert_eq!(p.resolution, Some((352, 288)));
}

#[test]
fn bytes_that_say_nothing_give_nothing() {
    assert_eq!(params(&[]), Default::default());
    assert_eq!(params(&[0x47; 188 * 4]), Default::default());
    // Video alone, cut before its key frame: no codec named for it.
    let ts = made(&["-an", "-c:v", "libx264", "-f", "mpegts"]);
    assert_eq!(params(&ts[..188 * 2]).codecs, None);
}
