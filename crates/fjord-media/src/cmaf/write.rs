//! Fragmented MP4 written from bare codec configurations and samples held
//! in memory (a live stream recorded as a title, `fjord-live`'s `record`):
//! the same boxes as the HLS/DASH segments by reference ([`super`]'s
//! `init_segment`, `media_segment` and `entry::trak`), with the sample
//! bytes following the `moof` + `mdat` head in the order given. Pure code.

use super::{
    Sample as Placed, Track,
    entry::{self, TrackHead},
};

/// A track's decoder configuration, as the sample entry carries it (the
/// one HLS and DASH segments are made from).
pub use super::entry::{Config as Codec, Vp9Facts};

/// A track of the init segment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TrackSpec {
    pub id: u32,
    pub timescale: u32,
    /// Video: width and height in pixels (0 when unknown: decoders read
    /// the parameter sets).
    pub size: (u16, u16),
    pub codec: Codec,
}

/// `ftyp` + `moov` of `tracks`, their samples in the fragments.
pub fn init(tracks: &[TrackSpec]) -> Vec<u8> {
    let ids: Vec<u32> = tracks.iter().map(|t| t.id).collect();
    let made = super::init_segment(&ids, |o, k| {
        entry::trak(
            o,
            &TrackHead {
                id: tracks[k].id,
                timescale: tracks[k].timescale,
                size: tracks[k].size,
                media_start: 0,
                config: &tracks[k].codec,
            },
        );
        Ok::<(), std::convert::Infallible>(())
    });
    match made {
        Ok(v) => v,
        Err(never) => match never {},
    }
}

/// One sample of a fragment, times in its track's timescale.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Sample {
    pub size: u32,
    pub dts: i64,
    pub cts: i64,
    pub dur: u32,
    pub sync: bool,
}

/// A track's samples in one fragment.
#[derive(Debug, Clone, Copy)]
pub struct Run<'a> {
    pub id: u32,
    pub video: bool,
    pub samples: &'a [Sample],
}

/// The `moof` + `mdat` head of fragment number `sequence` holding `runs`;
/// the samples' bytes follow it, run after run, each run's in order.
pub fn fragment_head(runs: &[Run], sequence: u32) -> Vec<u8> {
    let mut offset = 0u64;
    let tracks: Vec<Track> = runs
        .iter()
        .map(|r| Track {
            id: r.id,
            video: r.video,
            timescale: 1,
            delay_ns: 0,
            media_start: 0,
            samples: (r.samples.iter())
                .map(|s| {
                    let placed = Placed {
                        offset,
                        size: s.size,
                        dts: s.dts,
                        cts: s.cts,
                        dur: s.dur,
                        sync: s.sync,
                    };
                    offset += u64::from(s.size);
                    placed
                })
                .collect(),
        })
        .collect();
    let chosen: Vec<(usize, std::ops::Range<usize>)> = (tracks.iter().enumerate())
        .filter(|(_, t)| !t.samples.is_empty())
        .map(|(i, t)| (i, 0..t.samples.len()))
        .collect();
    let f = super::media_segment(&tracks, &chosen, sequence);
    match f.parts.into_iter().next() {
        Some(super::Part::Made(head)) => head,
        _ => Vec::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_written_file_reads_back_through_the_fragmented_mp4_ingest() {
        let avcc = vec![
            1, 0x64, 0, 0x1f, 0xff, 0xe1, 0, 4, 0x67, 0x64, 0, 0x1f, 1, 0, 2, 0x68, 0xee,
        ];
        let tracks = [
            TrackSpec {
                id: 1,
                timescale: 90_000,
                size: (0, 0),
                codec: Codec::Avc(avcc),
            },
            TrackSpec {
                id: 2,
                timescale: 44_100,
                size: (0, 0),
                codec: Codec::Aac {
                    asc: vec![0x12, 0x10],
                    rate: 44_100,
                    channels: 2,
                },
            },
        ];
        let mut file = init(&tracks);
        let video = [
            Sample {
                size: 9,
                dts: 0,
                cts: 0,
                dur: 3600,
                sync: true,
            },
            Sample {
                size: 9,
                dts: 3600,
                cts: 3600,
                dur: 3600,
                sync: false,
            },
        ];
        let audio = [Sample {
            size: 4,
            dts: 0,
            cts: 0,
            dur: 1024,
            sync: true,
        }];
        let runs = [
            Run {
                id: 1,
                video: true,
                samples: &video,
            },
            Run {
                id: 2,
                video: false,
                samples: &audio,
            },
        ];
        file.extend(fragment_head(&runs, 1));
        for _ in 0..2 {
            file.extend([0, 0, 0, 5, 0x65, 1, 2, 3, 4]);
        }
        file.extend([9, 9, 9, 9]);
        let f = crate::mp4::fragments::fragment(&file, 2_000_000_000, None).unwrap();
        assert_eq!(f.tracks.len(), 2);
        assert_eq!(f.fragments.len(), 1);
        assert!(f.codecs.starts_with("avc1.64001f"));
        let plan = crate::mp4::plan(&file, &mut |_, _| {}).unwrap();
        assert_eq!(plan.tracks.len(), 2);
    }
}
