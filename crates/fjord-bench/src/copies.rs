//! Copies of payload bytes the CPU makes per packet, a property of each
//! path (not measured, except what zero-copy completions report). Headers
//! (12 bytes) are copied by every path and not counted.
//!
//! | path | payload copies | why |
//! |---|---|---|
//! | read-send | 2 | `pread` page cache -> user buffer; `send` user -> socket buffer |
//! | read-writev | 2 | the same; `writev` gathers header and payload |
//! | mmap-writev | 1 | `sendmsg` copies from the mapping into the socket buffer |
//! | sendfile-cork | 0 | the header is copied with `MSG_MORE`; `sendfile` splices page-cache pages into the datagram (`MSG_SPLICE_PAGES`), and the veth sink takes scatter-gather and checksum offload |
//! | sendmmsg | 1 | one copy per packet into its socket buffer, many packets per call |
//! | gso | 1 | one copy into the GSO buffer; one pass down the stack per ≤ 64 packets |
//! | gso-zerocopy | 0 | pages pinned, not copied; the fraction of sends whose completion says "copied" is counted as 1 |
//! | uring | 1 | as gso: `IORING_OP_SENDMSG` of GSO groups |
//! | uring-zc | 0 | as gso-zerocopy: `IORING_OP_SENDMSG_ZC`; sends whose notification says "copied" count 1 |
//!
//! The seeds' Table 4 counts the header copy too (rtp sendfile = n copies,
//! read+writev = 3n); here only payload bytes count, since they are what
//! scales with the stream.

use crate::workload::Sample;

/// Payload copies per packet of `path` for this run; `None` for a path this
/// table does not know.
pub fn per_packet(path: &str, sample: &Sample) -> Option<f64> {
    let zc = || {
        (sample.zerocopy_done > 0)
            .then(|| sample.zerocopy_copied as f64 / sample.zerocopy_done as f64)
    };
    Some(match path {
        "read-send" | "read-writev" => 2.0,
        "mmap-writev" | "sendmmsg" | "gso" => 1.0,
        "sendfile-cork" => 0.0,
        "gso-zerocopy" | "uring-zc" => zc().unwrap_or(0.0),
        "uring" => zc().unwrap_or(1.0),
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn zero_copy_counts_what_completions_said() {
        let s = Sample {
            zerocopy_done: 10,
            zerocopy_copied: 5,
            ..Sample::default()
        };
        assert_eq!(per_packet("gso-zerocopy", &s), Some(0.5));
        assert_eq!(per_packet("gso-zerocopy", &Sample::default()), Some(0.0));
        assert_eq!(per_packet("uring", &Sample::default()), Some(1.0));
        assert_eq!(per_packet("read-writev", &s), Some(2.0));
        assert_eq!(per_packet("no-such-path", &s), None);
    }
}
