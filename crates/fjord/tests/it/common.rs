//! Shared pieces of the integration tests: test media (made by ffmpeg once
//! per target dir), a running `fjord serve` per test, bounded child
//! processes, requests by hand and by curl, checks on received bytes
//! against the source file, and a real S3 server for the edge.

mod checks;
mod http;
mod media;
mod net;
mod process;
pub mod s3;
mod server;

pub use checks::{TS, assert_contiguous, find_aligned, sender_reports, starts_at_random_access};
pub use http::{curl, curl_bytes, curl_status, get_json};
pub use media::{TsClip, clip_bytes, generate_media, ingest, media, muxed_10mbit, vbr_bytes};
pub use net::{
    free_port, in_private_network, raw_exchange, read_until_close, status_of, transport_param,
    view_udp,
};
pub use process::{Output, run_bounded, run_bounded_with, stdout_of};
pub use s3::S3Server;
pub use server::{ALICE, Server, certificate};
