//! Synthetic MPEG-TS for tests and benchmarks: PAT, PMT, PCR, RAI, PES starts.
// Each test binary uses a different subset of these helpers.
#![allow(dead_code)]

pub const PMT_PID: u16 = 0x1000;
pub const VIDEO_PID: u16 = 0x100;
pub const AUDIO_PID: u16 = 0x101;
/// 27 MHz ticks per packet for 1 ms per packet (1.504 Mbit/s).
pub const MS: u64 = 27_000;
pub const PCR_WRAP: u64 = (1 << 33) * 300;

/// One TS packet under construction.
#[derive(Clone, Copy, Default)]
pub struct Pkt {
    pub pid: u16,
    pub pusi: bool,
    pub pcr: Option<u64>,
    pub rai: bool,
    pub disc: bool,
    /// PES start with this PTS (90 kHz); implies `pusi`.
    pub pts: Option<u64>,
    pub cc: u8,
}

impl Pkt {
    pub fn new(pid: u16) -> Pkt {
        Pkt {
            pid,
            ..Pkt::default()
        }
    }

    pub fn build(&self) -> [u8; 188] {
        let mut p = [0xaau8; 188];
        let pusi = self.pusi || self.pts.is_some();
        p[0] = 0x47;
        p[1] = (if pusi { 0x40 } else { 0 }) | ((self.pid >> 8) as u8 & 0x1f);
        p[2] = self.pid as u8;
        let has_af = self.pcr.is_some() || self.rai || self.disc;
        p[3] = (if has_af { 0x30 } else { 0x10 }) | (self.cc & 0x0f);
        let mut at = 4;
        if has_af {
            let af_len = if self.pcr.is_some() { 7 } else { 1 };
            p[4] = af_len;
            p[5] = (if self.disc { 0x80 } else { 0 })
                | (if self.rai { 0x40 } else { 0 })
                | (if self.pcr.is_some() { 0x10 } else { 0 });
            if let Some(pcr) = self.pcr {
                let base = (pcr / 300) & ((1 << 33) - 1);
                let ext = pcr % 300;
                p[6] = (base >> 25) as u8;
                p[7] = (base >> 17) as u8;
                p[8] = (base >> 9) as u8;
                p[9] = (base >> 1) as u8;
                p[10] = ((base & 1) << 7) as u8 | 0x7e | ((ext >> 8) as u8 & 1);
                p[11] = ext as u8;
            }
            at = 5 + af_len as usize;
        }
        if let Some(pts) = self.pts {
            let pts = pts & ((1 << 33) - 1);
            let hdr = [
                0,
                0,
                1,
                0xe0,
                0,
                0,
                0x80,
                0x80,
                5,
                0x21 | (((pts >> 30) as u8 & 7) << 1),
                (pts >> 22) as u8,
                ((pts >> 14) as u8) | 1,
                (pts >> 7) as u8,
                ((pts << 1) as u8) | 1,
            ];
            p[at..at + hdr.len()].copy_from_slice(&hdr);
        }
        p
    }
}

/// A PSI packet: pointer field 0, then `section` (table id onwards, CRC filled with zeros).
fn psi(pid: u16, table_id: u8, body: &[u8]) -> [u8; 188] {
    let mut p = [0xffu8; 188];
    p[0] = 0x47;
    p[1] = 0x40 | ((pid >> 8) as u8 & 0x1f);
    p[2] = pid as u8;
    p[3] = 0x10;
    p[4] = 0; // pointer field
    let section_len = 5 + body.len() + 4;
    let head = [
        table_id,
        0xb0 | ((section_len >> 8) as u8 & 0x0f),
        section_len as u8,
        0,
        1,
        0xc1,
        0,
        0,
    ];
    p[5..13].copy_from_slice(&head);
    p[13..13 + body.len()].copy_from_slice(body);
    p[13 + body.len()..17 + body.len()].copy_from_slice(&[0, 0, 0, 0]);
    p
}

pub fn pat() -> [u8; 188] {
    psi(0, 0x00, &[0, 1, 0xe0 | (PMT_PID >> 8) as u8, PMT_PID as u8])
}

/// PMT with PCR on `pcr_pid`, H.264 video and AAC audio.
pub fn pmt(pcr_pid: u16) -> [u8; 188] {
    psi(
        PMT_PID,
        0x02,
        &[
            0xe0 | (pcr_pid >> 8) as u8,
            pcr_pid as u8,
            0xf0,
            0,
            0x0f,
            0xe0 | (AUDIO_PID >> 8) as u8,
            AUDIO_PID as u8,
            0xf0,
            0,
            0x1b,
            0xe0 | (VIDEO_PID >> 8) as u8,
            VIDEO_PID as u8,
            0xf0,
            0,
        ],
    )
}

/// Build a stream of `n` packets. `clock(ordinal)` gives the 27 MHz time of
/// each packet; PAT+PMT every `psi_every` packets (at ordinals 0,1 then
/// multiples), a PCR every `pcr_every` packets on the video PID (if given), a
/// PES start with PTS (if `pts`) and RAI (if `rai`) every `gop` packets.
pub struct Stream {
    pub n: u64,
    pub psi_every: u64,
    pub pcr_every: Option<u64>,
    pub gop: u64,
    pub pts: bool,
    pub rai: bool,
}

impl Default for Stream {
    fn default() -> Self {
        Stream {
            n: 1000,
            psi_every: 100,
            pcr_every: Some(10),
            gop: 50,
            pts: true,
            rai: true,
        }
    }
}

impl Stream {
    /// Packets, with `pcr_at(ordinal) -> (pcr, discontinuity)`.
    pub fn packets(&self, pcr_at: impl Fn(u64) -> (u64, bool)) -> Vec<[u8; 188]> {
        let mut out = Vec::with_capacity(self.n as usize);
        let mut cc = 0u8;
        for o in 0..self.n {
            let pkt = if o % self.psi_every == 0 {
                pat()
            } else if o % self.psi_every == 1 {
                pmt(VIDEO_PID)
            } else {
                let mut p = Pkt::new(VIDEO_PID);
                p.cc = cc;
                cc = cc.wrapping_add(1);
                if let Some(k) = self.pcr_every
                    && o % k == 2
                {
                    let (pcr, disc) = pcr_at(o);
                    p.pcr = Some(pcr % PCR_WRAP);
                    p.disc = disc;
                }
                if o % self.gop == 2 {
                    p.rai = self.rai;
                    p.pusi = true;
                    if self.pts {
                        // 90 kHz, 1 ms per packet.
                        p.pts = Some(o * 90 + 900_000);
                    }
                }
                p.build()
            };
            out.push(pkt);
        }
        out
    }

    /// Constant 1 ms per packet, PCR starting at `base`.
    pub fn cbr(&self, base: u64) -> Vec<u8> {
        self.packets(|o| (base + o * MS, false)).concat()
    }
}
