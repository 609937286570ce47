//! MPEG-4 audio in LATM (RFC 6416 §6, `MP4A-LATM` with `cpresent=0`): the
//! AudioSpecificConfig inside the SDP's StreamMuxConfig (ISO 14496-3
//! §1.7.3), and the access units of a frame's AudioMuxElements. What
//! ffmpeg (`-rtpflags latm`) and GStreamer's `rtpmp4apay` send:
//! audioMuxVersion 0, one program, one layer, every stream on the same
//! time framing. Written here: a few fields of a bit string, which no
//! crate reads without a decoder around it.

/// What a StreamMuxConfig says: the AudioSpecificConfig in it (its bits
/// from a byte boundary, zero-padded), and the access units per
/// AudioMuxElement.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Config {
    pub asc: Vec<u8>,
    pub sub_frames: usize,
}

/// The StreamMuxConfig of `smc` (the bytes of the SDP's `config`).
pub fn config(smc: &[u8]) -> Result<Config, &'static str> {
    let mut r = Bits { b: smc, at: 0 };
    if r.take(1)? != 0 {
        return Err("audioMuxVersion 1");
    }
    if r.take(1)? != 1 {
        return Err("streams on their own time framing");
    }
    let sub_frames = r.take(6)? as usize + 1;
    if r.take(4)? != 0 || r.take(3)? != 0 {
        return Err("more than one program or layer");
    }
    let start = r.at;
    audio_specific_config(&mut r)?;
    let asc = (start..r.at)
        .step_by(8)
        .map(|at| {
            let mut c = Bits { b: smc, at };
            c.take((r.at - at).min(8) as u8)
                .map(|v| (v << (8 - (r.at - at).min(8))) as u8)
        })
        .collect::<Result<_, _>>()?;
    Ok(Config { asc, sub_frames })
}

/// Reads past an AudioSpecificConfig (§1.6.2.1) of a general audio
/// object (AAC main, LC, SSR, LTP, scalable; with SBR or PS signalled).
fn audio_specific_config(r: &mut Bits<'_>) -> Result<(), &'static str> {
    let object = |r: &mut Bits<'_>| -> Result<u32, &'static str> {
        match r.take(5)? {
            31 => Ok(32 + r.take(6)?),
            o => Ok(o),
        }
    };
    let rate = |r: &mut Bits<'_>| -> Result<(), &'static str> {
        if r.take(4)? == 15 {
            r.take(24)?;
        }
        Ok(())
    };
    let mut aot = object(r)?;
    rate(r)?;
    let channels = r.take(4)?;
    if aot == 5 || aot == 29 {
        rate(r)?;
        aot = object(r)?;
    }
    if !matches!(aot, 1..=4 | 6 | 7) {
        return Err("an audio object other than AAC");
    }
    if channels == 0 {
        return Err("channels in a program config element");
    }
    r.take(1)?; // frameLengthFlag
    if r.take(1)? == 1 {
        r.take(14)?; // coreCoderDelay
    }
    let extension = r.take(1)?;
    if aot == 6 {
        r.take(3)?; // layerNr
    }
    if extension == 1 {
        return Err("an AAC extension (ER) config");
    }
    Ok(())
}

/// The access units of a frame: AudioMuxElements one after another, each
/// `sub_frames` of a length (bytes of 255 summed, then the last) and
/// that many bytes. None when one runs past the frame.
pub fn access_units(mut frame: &[u8], sub_frames: usize) -> Option<Vec<&[u8]>> {
    let mut units = Vec::new();
    while !frame.is_empty() {
        for _ in 0..sub_frames {
            let mut len = 0usize;
            loop {
                let (&b, rest) = frame.split_first()?;
                frame = rest;
                len += usize::from(b);
                if b != 255 {
                    break;
                }
            }
            let (unit, rest) = frame.split_at_checked(len)?;
            units.push(unit);
            frame = rest;
        }
    }
    Some(units)
}

/// A bit reader, most significant first.
struct Bits<'a> {
    b: &'a [u8],
    at: usize,
}

impl Bits<'_> {
    /// The next `n` bits (at most 24).
    fn take(&mut self, n: u8) -> Result<u32, &'static str> {
        let mut v = 0u32;
        for _ in 0..n {
            let byte = self.b.get(self.at / 8).ok_or("its config is cut short")?;
            v = (v << 1) | u32::from((byte >> (7 - self.at % 8)) & 1);
            self.at += 1;
        }
        Ok(v)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ffmpegs_config_holds_an_aac_lc_config() {
        // ffmpeg -rtpflags latm of AAC LC, 44.1 kHz, stereo.
        let c = config(&[0x40, 0x00, 0x24, 0x20, 0x3f, 0xc0]).unwrap();
        assert_eq!(
            c,
            Config {
                asc: vec![0x12, 0x10],
                sub_frames: 1
            }
        );
        // 48 kHz mono: AOT 2, index 3, 1 channel.
        let c = config(&[0x40, 0x00, 0x23, 0x10, 0x3f, 0xc0]).unwrap();
        assert_eq!(c.asc, [0x11, 0x88]);
        assert!(config(&[0xc0, 0, 0, 0]).is_err(), "version 1");
        assert!(config(&[0x40, 0x00]).is_err(), "cut short");
    }

    #[test]
    fn access_units_follow_their_lengths() {
        let mut frame = vec![3, 1, 2, 3, 255, 1];
        frame.extend([7u8; 256]);
        let units = access_units(&frame, 1).unwrap();
        assert_eq!(units.len(), 2);
        assert_eq!(units[0], [1, 2, 3]);
        assert_eq!(units[1].len(), 256);
        assert!(access_units(&[5, 1, 2], 1).is_none(), "past the frame");
        assert_eq!(access_units(&[], 1).unwrap().len(), 0);
    }

    proptest::proptest! {
        #[test]
        fn any_bytes_are_read_or_refused_without_a_panic(
            b in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..64),
            n in 1usize..4,
        ) {
            let _ = config(&b);
            if let Some(units) = access_units(&b, n) {
                proptest::prop_assert!(units.iter().map(|u| u.len()).sum::<usize>() <= b.len());
            }
        }
    }
}
