//! The track's FEC repair stream (`docs/fec.md`), sent by its source
//! stream's session: when a block's last source packet has left, the next
//! tick sends that block's repair packets (and no source packets), so they
//! always follow their block on one clock. Symbols come from the sidecar by
//! reference, or are encoded as the source packets leave.

use fjord_fec::{
    RepairHeader,
    live::LiveEncoder,
    symbol::{REPAIR_HEADER_LEN, SymbolMeta},
};
use fjord_media::{index::Track, plan::PacketRecord};
use fjord_proto::{rtcp::SenderReportTemplate, rtp};
use fjord_storage::Uses;

use super::{
    AtEnd, Session,
    pacing::{MAX_BURST_PACKETS, Pacing},
};
use crate::{
    Title,
    command::{Output, RepairSpec},
    datapath::{Batch, Packet},
};

/// A source stream's repair stream: its header fields, its RTCP counts, and
/// the block whose repair packets are due.
pub(super) struct Repair {
    pub(super) ssrc: u32,
    pub(super) seq: u16,
    pt: u8,
    pub(super) output: Output,
    pub(super) pending: Option<PendingRepair>,
    /// The repair stream's own RTCP sender reports and BYE (RFC 3550: every
    /// RTP stream reports its counts, and ends with BYE).
    pub(super) report: SenderReportTemplate,
    pub(super) packets: u32,
    pub(super) octets: u32,
    /// Repair symbols encoded here as the source packets leave, when the
    /// title asks for it ([`Title::encode_parity_live`]).
    pub(super) live: Option<LiveEncoder>,
}

/// A block whose repair packets are due.
#[derive(Clone, Copy, Debug)]
pub(super) struct PendingRepair {
    block: u64,
    /// The next repair packet to send.
    pub(super) esi: u16,
    /// RTP sequence number the block's first source packet had.
    seq_base: u16,
}

impl Session {
    /// Attaches a repair stream; false (and nothing changes) when the title
    /// has no parity for the track or the repair output is not of the
    /// source's kind (UDP, or interleaved on the same connection).
    pub(crate) fn attach_repair(&mut self, spec: RepairSpec, cname: &str) -> bool {
        let same_kind = match (&self.output, &spec.output) {
            (Output::Udp { .. }, Output::Udp { .. }) => true,
            (Output::Interleaved { conn: a, .. }, Output::Interleaved { conn: b, .. }) => a == b,
            _ => false,
        };
        let Some(fec) = self.title.fec(self.track).filter(|_| same_kind) else {
            return false;
        };
        let live = self
            .title
            .parity_is_live()
            .then(|| LiveEncoder::new(usize::from(fec.params().m), fec.symbol_len() as usize));
        self.repair = Some(Box::new(Repair {
            report: SenderReportTemplate::new(spec.ssrc, cname),
            ssrc: spec.ssrc,
            seq: spec.seq0,
            pt: spec.payload_type,
            output: spec.output,
            pending: None,
            packets: 0,
            octets: 0,
            live,
        }));
        if let Some(r) = &self.readahead {
            let prefab_path = r.cursor().uses().has(Uses::PREFAB);
            r.set_uses(self.uses(prefab_path));
        }
        true
    }

    pub(super) fn repair_pending(&self) -> Option<PendingRepair> {
        self.repair.as_ref()?.pending
    }

    /// One past the last packet of the block holding the next packet, when
    /// the session sends repair packets: a burst of source packets ends there.
    pub(super) fn block_end(&self) -> Option<usize> {
        self.repair.as_ref()?;
        if self.trick.is_some() {
            return None;
        }
        let fec = self.title.fec(self.track)?;
        let b = fec.block_of(u64::from(self.next))?;
        usize::try_from(fec.block(b)?.packets().end).ok()
    }

    /// Adds to `batch` the due repair packets of a finished block, at most
    /// [`MAX_BURST_PACKETS`]; returns how many, `None` when none are due.
    pub(super) fn collect_repair<'a>(&'a self, batch: &mut Batch<'a>) -> Option<usize> {
        let (r, pending) = (self.repair.as_deref()?, self.repair_pending()?);
        let Output::Udp { rtp, rtp_peer, .. } = &r.output else {
            return Some(0);
        };
        let first = batch.packets.len();
        let mut seq = r.seq;
        for esi in pending.esi..u16::MAX {
            if batch.packets.len() - first >= MAX_BURST_PACKETS {
                break;
            }
            let Some(packet) = self.repair_packet(&self.title, r, pending, esi, seq) else {
                break;
            };
            batch.packets.push(packet);
            seq = seq.wrapping_add(1);
        }
        Some(batch.close_burst(first, rtp, *rtp_peer))
    }

    /// Repair packet `esi` (the block's repair index j; its ESI on the wire
    /// is k + j) of a finished block as it leaves: the RTP header
    /// (sequence `seq`, the timestamp of the block's first source packet as
    /// sent), the FEC payload ID, and the repair symbol by reference into
    /// the sidecar. `None` past the block's last repair packet.
    pub(super) fn repair_packet<'t>(
        &self,
        title: &'t Title,
        r: &'t Repair,
        pending: PendingRepair,
        esi: u16,
        seq: u16,
    ) -> Option<Packet<'t>> {
        let blk = title.fec(self.track)?.block(pending.block)?;
        let (fd, offset, symbol) = match &r.live {
            Some(live) if esi < blk.repair_count => (title.fd(), 0, live.repair(esi.into())?),
            Some(_) => return None,
            None => title.repair_symbol(self.track, pending.block, esi)?,
        };
        let first = title
            .index()
            .track(self.track)?
            .packet(usize::try_from(blk.first_packet).ok()?)?;
        let mut header = [0u8; rtp::RTP_HEADER_LEN];
        let ts = self.ts0.wrapping_add(first.rtp_ts);
        rtp::write_header(&mut header, r.pt, false, seq, ts, r.ssrc);
        let id = RepairHeader::new(pending.block, blk.source_count, esi, pending.seq_base);
        Some(Packet::new(&header, &id.to_bytes(), symbol, fd, offset))
    }

    /// Moves past `sent` repair packets that left; the block is done when
    /// its last one has.
    pub(super) fn account_repair(&mut self, sent: usize, p: &mut Pacing) {
        let Some(r) = &mut self.repair else { return };
        let Some(pending) = &mut r.pending else {
            return;
        };
        let (m, len) = self
            .title
            .fec(self.track)
            .and_then(|f| f.block(pending.block))
            .map_or((0, 0), |b| {
                (b.repair_count, REPAIR_HEADER_LEN as u32 + b.symbol_len)
            });
        pending.esi = pending.esi.saturating_add(sent as u16);
        r.seq = r.seq.wrapping_add(sent as u16);
        r.packets = r.packets.wrapping_add(sent as u32);
        if sent > 0 {
            self.last_sent = Some(p.now);
        }
        r.octets = r.octets.wrapping_add(len.wrapping_mul(sent as u32));
        p.stats.repair_packets += sent as u64;
        if pending.esi >= m {
            r.pending = None;
        }
    }

    /// After `sent` source packets left: when they finish a block, its
    /// repair packets are due.
    pub(super) fn finish_block(&mut self, sent: usize) {
        let looping = matches!(self.at_end, AtEnd::Loop { .. });
        let round_end = u64::from(self.count());
        let (Some(r), Some(fec)) = (&mut self.repair, self.title.fec(self.track)) else {
            return;
        };
        let next = u64::from(self.next);
        // A loop (a broadcast channel's segment) sends the repair packets of
        // every block it touches, after the block's last packet in the
        // loop: receivers take the block's other packets from other
        // channels. Otherwise only whole blocks sent since the seek.
        let finished = (sent > 0)
            .then(|| fec.block_of(next - 1))
            .flatten()
            .and_then(|b| Some((b, fec.block(b)?)))
            .filter(|(_, blk)| match looping {
                true => blk.packets().end == next || next == round_end,
                false => blk.packets().end == next && blk.first_packet >= u64::from(self.floor),
            });
        if let Some((block, blk)) = finished {
            // A session only sends source packets once the previous block's
            // repair packets are out, so none are pending here.
            r.pending = Some(PendingRepair {
                block,
                esi: 0,
                seq_base: self.seq0.wrapping_add(blk.first_packet as u16),
            });
        }
    }

    /// Multiplies packet `i` (just sent) into its block's repair symbols
    /// when the session encodes them on the fly.
    pub(super) fn encode_live(&mut self, track: Track<'_>, i: u64, rec: &PacketRecord) {
        // Checked first: this runs for every packet sent, and only the
        // bench's live-encoding sessions go past it.
        let Some(live) = self.repair.as_mut().and_then(|r| r.live.as_mut()) else {
            return;
        };
        let Some(fec) = self.title.fec(self.track) else {
            return;
        };
        let Some(blk) = fec.block_of(i).and_then(|b| fec.block(b)) else {
            return;
        };
        let at = (i - blk.first_packet) as usize;
        let Some(first) = track.packet(blk.first_packet as usize) else {
            return;
        };
        let Some((run1, run2)) = self.title.runs(rec) else {
            return;
        };
        let meta = SymbolMeta {
            marker: rec.marker(),
            ts_delta: rec.rtp_ts.wrapping_sub(first.rtp_ts),
        };
        let started = at > 0 || live.start_block(blk.source_count.into()).is_ok();
        if started && let Err(e) = live.add(at, &[rec.prefix(), run1, run2], meta) {
            tracing::warn!("live parity: {e}");
        }
    }
}
