//! fjord's wire layer, sans-IO: bytes and values in, bytes and values out.
//!
//! No sockets, clocks or threads live here; every function is pure and never
//! panics on any input. Parsers bound the memory they use.
//!
//! - [`rtsp`]: request framing, responses, the `Transport`/`Range`/`RTP-Info`
//!   headers, request-URI to title mapping and the per-session state machine.
//! - [`sdp`]: the DESCRIBE body.
//! - [`rtp`]: the 12-byte RTP header (hot path) and a parser for clients.
//! - [`rtcp`]: sender reports out, receiver reports in.
//! - [`http`]: HTTP/1.1 downloads: a request head in, the response's head
//!   and the byte range of the file its body is out; CORS preflights.
//! - [`hls`]: HLS playlists: a stored MPEG-TS title as byte ranges of it,
//!   an MP4 title as fragmented MP4, ADTS/MP3 as packed audio (and the ID3
//!   tag each such segment begins with); I-frame playlists.
//! - [`dash`]: DASH manifests: a fragmented MP4 title, a TS title as byte
//!   ranges.
//! - [`auth`]: Digest and Basic authentication against a user table,
//!   per-user path rules, and a failed-attempt throttle.

#![forbid(unsafe_code)]

pub mod auth;
pub mod dash;
pub mod hls;
pub mod http;
pub mod rtcp;
pub mod rtp;
pub mod rtsp;
pub mod sdp;
