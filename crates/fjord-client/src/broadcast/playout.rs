//! Each packet's arrival against its play time ([`Playout`]): late
//! packets and the peak buffer.

/// Each packet's arrival against its play time `start + pts`: late
/// packets (underruns: arrived after it) and the most payload bytes held
/// at once, received but not yet played (a packet arriving at or after its
/// play time is never held), as [`Plan::join`](fjord_broadcast::Plan::join)
/// and `simulate` count. Arrivals are given in time order.
#[derive(Debug)]
pub struct Playout {
    start_ns: u64,
    packets: Vec<(u64, u32)>,
    held: Vec<bool>,
    played: usize,
    buffered: u64,
    peak: u64,
    late: u64,
}

impl Playout {
    /// `packets`: each packet's `(pts_ns, bytes)`.
    pub fn new(start_ns: u64, packets: Vec<(u64, u32)>) -> Playout {
        let n = packets.len();
        Playout {
            start_ns,
            packets,
            held: vec![false; n],
            played: 0,
            buffered: 0,
            peak: 0,
            late: 0,
        }
    }

    fn play_time(&self, i: usize) -> u64 {
        self.start_ns.saturating_add(self.packets[i].0)
    }

    /// Packet `i` arrived at `t_ns` (each packet once). Whether it is late.
    pub fn arrive(&mut self, i: u32, t_ns: u64) -> bool {
        let i = i as usize;
        if i >= self.packets.len() {
            return false;
        }
        while self.played < self.packets.len() && self.play_time(self.played) <= t_ns {
            if self.held[self.played] {
                self.buffered -= u64::from(self.packets[self.played].1);
            }
            self.played += 1;
        }
        let due = self.play_time(i);
        if t_ns >= due {
            // Just in time is on time, but never held.
            self.late += u64::from(t_ns > due);
            return t_ns > due;
        }
        self.held[i] = true;
        self.buffered += u64::from(self.packets[i].1);
        self.peak = self.peak.max(self.buffered);
        false
    }

    pub fn late(&self) -> u64 {
        self.late
    }

    pub fn peak_bytes(&self) -> u64 {
        self.peak
    }
}
