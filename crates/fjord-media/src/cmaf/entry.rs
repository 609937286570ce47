//! A generated `trak` for a track whose container is not MP4 (Matroska,
//! WebM): `tkhd`, `mdhd`, `hdlr`, the media header and a sample entry
//! made from the codec's configuration as the container stores it (avcC,
//! hvcC, av1C, AudioSpecificConfig, OpusHead, VP9 facts), and the track's
//! RFC 6381 codec name. No crate writes these boxes from bare
//! configurations without taking the samples too; they are a few fixed
//! layouts (ISO 14496-12 §12, 14496-14, 14496-15, Opus in ISOBMFF, the VP
//! codec ISOBMFF binding, AV1 in ISOBMFF).

use super::{boxed, empty_sample_tables, full, matrix};

/// What a track's sample entry is made from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Config {
    /// The `avcC` body (Matroska's CodecPrivate).
    Avc(Vec<u8>),
    /// The `hvcC` body.
    Hevc(Vec<u8>),
    /// The AudioSpecificConfig.
    Aac {
        asc: Vec<u8>,
        rate: u32,
        channels: u8,
    },
    /// The OpusHead (RFC 7845 §5.1).
    Opus(Vec<u8>),
    /// Its colour: primaries, transfer, matrix (H.273 code points).
    Vp8([u8; 3]),
    Vp9(Vp9Facts),
    /// The AV1CodecConfigurationRecord, the `av1C` body.
    Av1(Vec<u8>),
}

/// What a `vpcC` says of a VP9 stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Vp9Facts {
    pub profile: u8,
    /// As the VP9 levels are numbered: 10 for 1, 41 for 4.1.
    pub level: u8,
    pub bit_depth: u8,
    /// The `vpcC` value: 0, 1 4:2:0, 2 4:2:2, 3 4:4:4.
    pub chroma: u8,
    pub full_range: bool,
    /// Primaries, transfer characteristics and matrix coefficients (ITU-T
    /// H.273 code points; 2 each: unspecified).
    pub colour: [u8; 3],
}

impl Config {
    pub fn is_video(&self) -> bool {
        !matches!(self, Config::Aac { .. } | Config::Opus(_))
    }

    /// Audio samples per second (the track's timescale).
    pub fn sample_rate(&self) -> Option<u32> {
        match self {
            Config::Aac { rate, .. } => Some(*rate),
            Config::Opus(_) => Some(48_000),
            _ => None,
        }
    }

    /// The RFC 6381 name (HLS `CODECS`, DASH `codecs`); `None` when the
    /// configuration is too short to name.
    pub fn codec_name(&self) -> Option<String> {
        Some(match self {
            Config::Avc(c) => {
                let b = c.get(1..4)?;
                format!("avc1.{:02x}{:02x}{:02x}", b[0], b[1], b[2])
            }
            Config::Hevc(c) => crate::mp4::fragments::hevc_codec_name("hvc1", c.get(..13)?),
            Config::Aac { asc, .. } => {
                let aot = asc.first().map_or(2, |b| b >> 3);
                let aot = match asc.get(1) {
                    Some(b1) if aot == 31 => 32 + (((asc[0] & 7) << 3) | (b1 >> 5)),
                    _ => aot,
                };
                format!("mp4a.40.{aot}")
            }
            Config::Opus(_) => "opus".to_owned(),
            Config::Vp8(_) => "vp8".to_owned(),
            Config::Vp9(f) => format!("vp09.{:02}.{:02}.{:02}", f.profile, f.level, f.bit_depth),
            Config::Av1(c) => crate::av1::Av1Config::parse(c)?.codec_name(),
        })
    }
}

/// A track as the init segment describes it.
pub(crate) struct TrackHead<'a> {
    pub id: u32,
    pub timescale: u32,
    /// Video: width and height in pixels.
    pub size: (u16, u16),
    /// The media time shown first (an edit list says so when not 0).
    pub media_start: i64,
    pub config: &'a Config,
}

/// Writes the `trak` of `t`, empty sample tables: its samples are in the
/// fragments.
pub(crate) fn trak(o: &mut Vec<u8>, t: &TrackHead) {
    let video = t.config.is_video();
    boxed(o, b"trak", |o| {
        boxed(o, b"tkhd", |o| {
            full(o, 0, 3); // enabled, in movie
            o.extend_from_slice(&[0; 8]); // creation, modification
            o.extend_from_slice(&t.id.to_be_bytes());
            o.extend_from_slice(&[0; 4 + 4 + 8 + 2 + 2]); // duration: fragments say
            o.extend_from_slice(&(if video { 0u16 } else { 0x0100 }).to_be_bytes());
            o.extend_from_slice(&[0; 2]);
            matrix(o);
            o.extend_from_slice(&(u32::from(t.size.0) << 16).to_be_bytes());
            o.extend_from_slice(&(u32::from(t.size.1) << 16).to_be_bytes());
        });
        if t.media_start > 0 {
            edit(o, t.media_start);
        }
        boxed(o, b"mdia", |o| {
            boxed(o, b"mdhd", |o| {
                full(o, 0, 0);
                o.extend_from_slice(&[0; 8]);
                o.extend_from_slice(&t.timescale.to_be_bytes());
                o.extend_from_slice(&0u32.to_be_bytes());
                o.extend_from_slice(&0x55c4u16.to_be_bytes()); // "und"
                o.extend_from_slice(&[0; 2]);
            });
            boxed(o, b"hdlr", |o| {
                full(o, 0, 0);
                o.extend_from_slice(&[0; 4]);
                o.extend_from_slice(if video { b"vide" } else { b"soun" });
                o.extend_from_slice(&[0; 12]);
                o.extend_from_slice(b"fjord\0");
            });
            boxed(o, b"minf", |o| {
                media_header(o, video);
                boxed(o, b"stbl", |o| {
                    boxed(o, b"stsd", |o| {
                        full(o, 0, 0);
                        o.extend_from_slice(&1u32.to_be_bytes());
                        sample_entry(o, t);
                    });
                    empty_sample_tables(o);
                });
            });
        });
    });
}

/// An edit list of one edit: the whole track from `media_start` (a
/// duration of 0 in a fragmented file: to its end).
fn edit(o: &mut Vec<u8>, media_start: i64) {
    boxed(o, b"edts", |o| {
        boxed(o, b"elst", |o| {
            full(o, 1, 0);
            o.extend_from_slice(&1u32.to_be_bytes());
            o.extend_from_slice(&0u64.to_be_bytes());
            o.extend_from_slice(&media_start.to_be_bytes());
            o.extend_from_slice(&0x0001_0000u32.to_be_bytes()); // rate 1.0
        });
    });
}

/// `vmhd` or `smhd`, and a `dinf` saying the samples are in this file.
fn media_header(o: &mut Vec<u8>, video: bool) {
    if video {
        boxed(o, b"vmhd", |o| {
            full(o, 0, 1);
            o.extend_from_slice(&[0; 8]);
        });
    } else {
        boxed(o, b"smhd", |o| {
            full(o, 0, 0);
            o.extend_from_slice(&[0; 4]);
        });
    }
    boxed(o, b"dinf", |o| {
        boxed(o, b"dref", |o| {
            full(o, 0, 0);
            o.extend_from_slice(&1u32.to_be_bytes());
            boxed(o, b"url ", |o| full(o, 0, 1));
        });
    });
}

fn sample_entry(o: &mut Vec<u8>, t: &TrackHead) {
    match t.config {
        Config::Avc(c) => visual(o, b"avc1", t.size, |o| boxed(o, b"avcC", |o| o.extend(c))),
        Config::Hevc(c) => visual(o, b"hvc1", t.size, |o| boxed(o, b"hvcC", |o| o.extend(c))),
        Config::Vp8(colour) => visual(o, b"vp08", t.size, |o| {
            vpcc(
                o,
                &Vp9Facts {
                    profile: 0,
                    level: 10,
                    bit_depth: 8,
                    chroma: 1,
                    full_range: false,
                    colour: *colour,
                },
            )
        }),
        Config::Vp9(f) => visual(o, b"vp09", t.size, |o| vpcc(o, f)),
        Config::Av1(c) => visual(o, b"av01", t.size, |o| boxed(o, b"av1C", |o| o.extend(c))),
        Config::Aac {
            asc,
            rate,
            channels,
        } => audio(o, b"mp4a", *channels, *rate, |o| esds(o, asc)),
        Config::Opus(head) => {
            let channels = head.get(9).copied().unwrap_or(2).max(1);
            audio(o, b"Opus", channels, 48_000, |o| dops(o, head))
        }
    }
}

/// A VisualSampleEntry (ISO 14496-12 §12.1.3) and its configuration box.
fn visual(o: &mut Vec<u8>, kind: &[u8; 4], (w, h): (u16, u16), config: impl FnOnce(&mut Vec<u8>)) {
    boxed(o, kind, |o| {
        o.extend_from_slice(&[0; 6]);
        o.extend_from_slice(&1u16.to_be_bytes()); // data_reference_index
        o.extend_from_slice(&[0; 16]);
        o.extend_from_slice(&w.to_be_bytes());
        o.extend_from_slice(&h.to_be_bytes());
        o.extend_from_slice(&0x0048_0000u32.to_be_bytes()); // 72 dpi
        o.extend_from_slice(&0x0048_0000u32.to_be_bytes());
        o.extend_from_slice(&[0; 4]);
        o.extend_from_slice(&1u16.to_be_bytes()); // frame_count
        o.extend_from_slice(&[0; 32]); // compressorname
        o.extend_from_slice(&0x0018u16.to_be_bytes()); // depth
        o.extend_from_slice(&(-1i16).to_be_bytes());
        config(o);
    });
}

/// An AudioSampleEntry (ISO 14496-12 §12.2.3) and its configuration box.
fn audio(
    o: &mut Vec<u8>,
    kind: &[u8; 4],
    channels: u8,
    rate: u32,
    config: impl FnOnce(&mut Vec<u8>),
) {
    boxed(o, kind, |o| {
        o.extend_from_slice(&[0; 6]);
        o.extend_from_slice(&1u16.to_be_bytes()); // data_reference_index
        o.extend_from_slice(&[0; 8]);
        o.extend_from_slice(&u16::from(channels).to_be_bytes());
        o.extend_from_slice(&16u16.to_be_bytes()); // samplesize
        o.extend_from_slice(&[0; 4]);
        // 16.16 fixed point: rates above 65535 Hz do not fit; the
        // timescale and the configuration say the rate.
        let r = if rate > 0xffff { 0 } else { rate << 16 };
        o.extend_from_slice(&r.to_be_bytes());
        config(o);
    });
}

/// `vpcC` version 1 (VP codec ISOBMFF binding §2.3).
fn vpcc(o: &mut Vec<u8>, f: &Vp9Facts) {
    boxed(o, b"vpcC", |o| {
        full(o, 1, 0);
        o.push(f.profile);
        o.push(f.level);
        o.push((f.bit_depth << 4) | ((f.chroma & 7) << 1) | u8::from(f.full_range));
        o.extend_from_slice(&f.colour); // primaries, transfer, matrix
        o.extend_from_slice(&0u16.to_be_bytes()); // no initialization data
    });
}

/// `esds` (ISO 14496-14 §5.6): an ES_Descriptor whose decoder
/// configuration is AAC (object type 0x40, audio stream) with `asc`.
fn esds(o: &mut Vec<u8>, asc: &[u8]) {
    // Real configurations are 2 to 5 bytes; 64 keeps every length one
    // byte.
    let asc = &asc[..asc.len().min(64)];
    boxed(o, b"esds", |o| {
        full(o, 0, 0);
        let dsi = 2 + asc.len();
        let dcd = 2 + 13 + dsi;
        descriptor(o, 0x03, 3 + dcd + 3);
        o.extend_from_slice(&[0, 1, 0]); // ES_ID 1, no flags
        descriptor(o, 0x04, 13 + dsi);
        o.push(0x40);
        o.push(0x15); // audio stream, upstream 0, reserved 1
        o.extend_from_slice(&[0; 3 + 4 + 4]); // buffer size, bit rates
        descriptor(o, 0x05, asc.len());
        o.extend_from_slice(asc);
        descriptor(o, 0x06, 1);
        o.push(2); // SL: predefined for MP4
    });
}

fn descriptor(o: &mut Vec<u8>, tag: u8, len: usize) {
    o.push(tag);
    o.push(len.min(0x7f) as u8);
}

/// `dOps` (Opus in ISOBMFF §4.3.2) from an OpusHead of channel mapping
/// family 0: the same fields, big-endian, without the magic.
fn dops(o: &mut Vec<u8>, head: &[u8]) {
    let le16 = |at: usize| head.get(at..at + 2).map_or([0; 2], |b| [b[1], b[0]]);
    let le32 = |at: usize| {
        head.get(at..at + 4)
            .map_or([0; 4], |b| [b[3], b[2], b[1], b[0]])
    };
    boxed(o, b"dOps", |o| {
        o.push(0); // version
        o.push(head.get(9).copied().unwrap_or(2).max(1));
        o.extend_from_slice(&le16(10)); // pre-skip
        o.extend_from_slice(&le32(12)); // input sample rate
        o.extend_from_slice(&le16(16)); // output gain
        o.push(0); // channel mapping family
    });
}

/// The VP9 level (Annex A) a stream of `width` × `height` at `fps`
/// needs: the lowest whose picture size and sample rate hold it.
pub(crate) fn vp9_level(width: u16, height: u16, fps: f64) -> u8 {
    const LEVELS: [(u8, u64, f64); 14] = [
        (10, 36_864, 829_440.0),
        (11, 73_728, 2_764_800.0),
        (20, 122_880, 4_608_000.0),
        (21, 245_760, 9_216_000.0),
        (30, 552_960, 20_736_000.0),
        (31, 983_040, 36_864_000.0),
        (40, 2_228_224, 83_558_400.0),
        (41, 2_228_224, 160_432_128.0),
        (50, 8_912_896, 311_951_360.0),
        (51, 8_912_896, 588_251_136.0),
        (52, 8_912_896, 1_176_502_272.0),
        (60, 35_651_584, 1_176_502_272.0),
        (61, 35_651_584, 2_353_004_544.0),
        (62, 35_651_584, 4_706_009_088.0),
    ];
    let pixels = u64::from(width) * u64::from(height);
    let rate = pixels as f64 * fps.max(0.0);
    LEVELS
        .iter()
        .find(|(_, size, r)| pixels <= *size && rate <= *r)
        .map_or(62, |l| l.0)
}

#[cfg(test)]
#[path = "entry_tests.rs"]
mod tests;
