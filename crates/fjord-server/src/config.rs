//! `fjord serve` settings: one TOML file, every key optional, CLI flags on top.

use std::{
    net::{IpAddr, Ipv4Addr},
    path::{Path, PathBuf},
    time::Duration,
};

use ipnet::IpNet;
use serde::Deserialize;

/// The documented defaults are the `Default` impl below; docs/config.md lists them.
#[derive(Clone, Debug, PartialEq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Config {
    /// Directory of the titles: every media file below it, by relative path.
    pub root: PathBuf,
    pub bind: IpAddr,
    pub port: u16,
    /// HTTP downloads of the same titles (`http://HOST:PORT/NAME`); 0: off.
    pub http_port: u16,
    /// One log line per RTSP or HTTP request (target `fjord::access`).
    pub access_log: bool,
    /// Who may read what (`[[user]]` tables); none: anyone reads anything.
    #[serde(rename = "user")]
    pub users: Vec<UserConfig>,
    /// The realm of Digest challenges (stored password hashes bind it).
    pub auth_realm: String,
    /// Titles sent by periodic broadcasting (`[[broadcast]]` tables), each
    /// on channels of groups from `multicast_pool`, from the server's start.
    #[serde(rename = "broadcast")]
    pub broadcasts: Vec<BroadcastConfig>,
    /// TLS certificate chain and private key (PEM files): with them,
    /// `rtsps://` on `rtsps_port` and HTTPS on `http_port` beside plain
    /// HTTP; re-read on SIGHUP. Empty: no TLS.
    pub tls_cert: PathBuf,
    pub tls_key: PathBuf,
    /// RTSP over TLS (`rtsps://`), when `tls_cert` is set; 0 picks a free
    /// one.
    pub rtsps_port: u16,
    /// The admin listener: status page, `/metrics`, JSON API
    /// (docs/api.md); `""`: none.
    pub admin_bind: String,
    /// Names besides IP addresses and `localhost` that the admin listener
    /// answers as `Host` (a request naming another is 403: DNS rebinding).
    pub admin_hosts: Vec<String>,
    /// HLS and DASH segments last at least this long (cut at the next
    /// random access point).
    pub hls_segment_s: u64,
    /// `Access-Control-Allow-Origin` of HTTP responses, so web players on
    /// other origins (hls.js, dash.js) may read them; empty: none.
    pub http_allow_origin: String,
    /// `Cache-Control` of HTTP responses by kind (`[http_cache_control]`).
    pub http_cache_control: CacheControl,
    /// Engine threads; 0 = one per available core.
    pub threads: usize,
    /// A session with no RTSP request and no RTCP for this long is torn down;
    /// one never played, this long after its SETUP whatever it sends.
    pub session_timeout_s: u64,
    /// A request must be complete this long after its first byte.
    pub request_timeout_s: u64,
    /// A connection without sessions and without requests is closed after this.
    pub idle_timeout_s: u64,
    /// A client playing over TCP (interleaved) that takes no data for this
    /// long is dropped: its connection closed, its sessions ended.
    pub stall_timeout_s: u64,
    /// The fastest delivery a PLAY may ask for with RFC 2326 `Speed`
    /// (admission counts such a stream that many times); 1: `Speed` 1 only.
    pub max_speed: f64,
    pub max_header_bytes: usize,
    pub max_body_bytes: usize,
    /// A live stream whose publisher sent nothing for this long ends
    /// (`docs/live.md`).
    pub live_timeout_s: u64,
    /// A live stream whose publisher went (connection closed, or silent for
    /// `live_timeout_s`) is held this long for a publisher to continue it;
    /// 0: it ends at once.
    pub live_grace_s: u64,
    /// Live streams at once (publishers).
    pub live_max_streams: usize,
    /// An ANNOUNCE body's bytes.
    pub live_max_sdp_bytes: usize,
    /// Media sections of an ANNOUNCE.
    pub live_max_tracks: usize,
    /// Bytes of one RTP packet a publisher sends.
    pub live_max_packet_bytes: usize,
    /// Bytes held per live stream for viewers joining at its last key frame.
    pub live_max_buffer_bytes: usize,
    /// Globs of the live paths whose streams are recorded as titles
    /// (`docs/live.md#recording`); none: nothing is recorded.
    pub live_record: Vec<String>,
    /// A recording's file ends at the first key frame past this many
    /// seconds and the next begins there; 0: one file per stream.
    pub live_record_max_s: u64,
    pub max_connections: usize,
    /// Of `max_connections`, at most this many from one client address
    /// (RTSP and HTTP together); 0: no cap.
    pub max_connections_per_address: usize,
    pub max_sessions: usize,
    /// Titles kept loaded (files open, tables mapped) that no session
    /// holds; past it the least recently opened are unloaded. At start.
    pub max_loaded_titles: usize,
    /// Of `max_sessions`, at most this many on one RTSP connection (SETUP
    /// beyond: 453); 0: no cap.
    pub max_sessions_per_connection: usize,
    /// Of `max_sessions`, at most this many from one client address (SETUP
    /// beyond: 453), so one client cannot lock the others out; 0: no cap.
    pub max_sessions_per_address: usize,
    /// Server RTP/RTCP ports for UDP sessions come from this range.
    pub rtp_port_min: u16,
    pub rtp_port_max: u16,
    /// How far ahead of its scheduled time a packet may leave.
    pub burst_ms: u64,
    /// Packets per second one engine thread may promise to admitted streams
    /// (SETUP beyond it gets 453). 0: the figure `fjord bench capacity`
    /// saved in the state directory, or no limit when there is none.
    pub capacity_pps_per_core: u64,
    /// Engine threads under SCHED_FIFO, so other work on a core cannot
    /// delay a packet (needs root or CAP_SYS_NICE).
    pub realtime: bool,
    /// How packets leave: `auto` (the best the kernel supports) or a name
    /// from `fjord_engine::datapath::NAMES`.
    pub datapath: String,
    /// `shared`: all UDP sessions use one server port pair (per local
    /// address), each engine thread sending from one unconnected socket
    /// bound to its RTP port, RTCP read from one socket and demultiplexed
    /// by the client's address; `per-session`: a port pair and connected
    /// socket per session. The data paths that need a connected socket
    /// (`read-writev`, `sendfile-cork`) always use `per-session`.
    pub udp_sockets: String,
    /// Of `shared`: how many streams per local address get an RTP socket
    /// of their own on the shared port, connected to the client (the
    /// kernel keeps its route instead of looking it up per send); later
    /// streams send from their thread's socket. At most 1024: the kernel
    /// scans the port's sockets for each datagram arriving at it.
    pub udp_connected_streams: usize,
    pub rtcp_interval_s: u64,
    /// TS packets per RTP packet when titles are ingested on demand (1..=7).
    pub ts_per_rtp: u8,
    /// Block layout of titles ingested on demand, recorded in their index
    /// (`auto`, `K:M` or `off`, as `fjord ingest --fec`); their parity is
    /// made in the background (`off`: never).
    pub fec: String,
    /// Titles get prefabricated packets (`NAME.fjpkt`, about the media
    /// file's size again), made in the background; the batching data paths
    /// then send each burst as one run of that file. `"auto"`: only titles
    /// played often, within `prefab_share_percent` of the disk.
    pub prefab: PrefabMode,
    /// With `prefab = "auto"`: the share of each root's filesystem packet
    /// files may take, in percent.
    pub prefab_share_percent: u64,
    /// Networks a SETUP `destination=` may name besides the client's own
    /// address. Empty: RTP goes only to the client that asked for it.
    pub destination_allow: Vec<IpNet>,
    /// SETUPs may ask for multicast (`Transport: RTP/AVP;multicast`);
    /// `[[broadcast]]` channels need no opt-in.
    pub multicast: bool,
    /// Multicast groups the server hands out (one per shared stream); the
    /// well-known groups other protocols use are refused or skipped
    /// (`multicast::check_pool`). A SETUP's `destination=` is ignored.
    pub multicast_pool: IpNet,
    /// The RTP port of a group's first track (RTCP on the next; track `i`
    /// at `multicast_port + 2i`); a SETUP's `port=` is ignored.
    pub multicast_port: u16,
    /// Hops multicast packets may travel (IP TTL); a SETUP may ask for less.
    pub multicast_ttl: u8,
    /// Multicast sessions of one title that start within this window share
    /// one stream: the first PLAY starts its group this long after it.
    pub multicast_batch_ms: u64,
    /// The most the storage layer keeps a playing session's packets
    /// resident ahead of it (read and locked in memory), so an engine
    /// thread never waits for a disk: a session is refilled when its lead
    /// falls to twice its disk's worst latency of the last 10 s (at least
    /// `readahead_min_ms`, at most half this), with `read_kb` more. `0`: no
    /// storage layer (serve straight from the mapped files: only for
    /// libraries that stay in the page cache).
    pub readahead_ms: u64,
    /// The least lead a session is refilled at, however fast its disk (at
    /// most half of `readahead_ms`).
    pub readahead_min_ms: u64,
    /// What a refill reads past that lead, in KiB: about where the disk's
    /// transfer time meets its seek cost (bandwidth over IOPS).
    pub read_kb: u64,
    /// Memory the read-ahead may lock at most, in MiB; `0`: half of RAM, or
    /// of the memory cgroup's limit when it is lower. It is locked only as
    /// the sessions need it.
    pub readahead_budget_mb: u64,
    /// The first seconds of every loaded title kept resident, so PLAY from
    /// the start never waits for the disk.
    pub head_s: u64,
    /// Reads in flight per disk.
    pub storage_threads: usize,
    /// What each media root's disk reads, in MB/s, for admission: streams
    /// of titles on a disk are promised at most 80 % of it (SETUP beyond:
    /// 453). `0`: what `fjord bench disk` measured for the disk (random
    /// 1 MiB reads, 4 in flight), saved in `$XDG_STATE_HOME/fjord/disks.toml`,
    /// or no limit.
    pub disk_mbps: u64,
    /// A storage pool: several media roots, a disk each, searched in order
    /// for a title, each disk with its own read queue. Parity the server
    /// makes for a title goes to the next root on another disk
    /// (`ROOT/.fjord-parity/`), so a disk that fails to read is not the
    /// one asked for the parity that rebuilds it. Empty: `root` alone.
    pub roots: Vec<PathBuf>,
    /// A file the server rewrites every second with its counters (JSON:
    /// per engine thread and of the storage layer); empty: none.
    pub stats_file: PathBuf,
    /// The S3-compatible store that holds the library (`fjord publish`
    /// writes to it): its address; empty: AWS S3 itself.
    pub origin_endpoint: String,
    /// The origin's region; empty: `AWS_REGION`, else `us-east-1`.
    pub origin_region: String,
    /// An edge's origin, `s3://BUCKET/PREFIX`: a title not under the roots
    /// whose index is there (`fjord publish`) is served from it, cached in
    /// slices under `cache_dir`; empty: none.
    pub origin: String,
    /// Where an edge keeps the slices and indexes of origin titles.
    pub cache_dir: PathBuf,
    /// The most an edge keeps of origin titles, in GB (10^9 bytes).
    pub cache_gb: f64,
    /// What the edge's link to its origin carries, Mbit/s: streams of
    /// titles being fetched are admitted to 80 % of it; 0: not limited.
    pub origin_mbit_s: u64,
    /// A cluster of nodes kept in etcd (docs/cluster.md): its client
    /// endpoints, `http://HOST:2379`; empty: no etcd.
    pub cluster_etcd: Vec<String>,
    /// A static cluster without etcd (`[[peer]]` tables): the other nodes
    /// (this one may be listed too).
    #[serde(rename = "peer")]
    pub peers: Vec<PeerConfig>,
    /// This node's name in the cluster; empty: the host name.
    pub node_name: String,
    /// Where other nodes send this node's RTSP clients
    /// (`rtsp://HOST:PORT`); empty: the RTSP listener's address.
    pub advertise_rtsp: String,
    /// Where other nodes send this node's HTTP clients
    /// (`http://HOST:PORT`); empty: the HTTP listener's address.
    pub advertise_http: String,
    /// Where other nodes send this node's clients that came over TLS
    /// (`rtsps://HOST:PORT`, `https://HOST:PORT`); empty: the RTSPS and
    /// HTTP listeners' addresses when TLS is on, else none (a TLS request
    /// is never sent on to a plain URL: it is served where it came).
    pub advertise_rtsps: String,
    pub advertise_https: String,
    /// The lease of this node's key in etcd: a node that stops renewing it
    /// leaves the cluster within this long.
    pub cluster_ttl_s: u64,
    /// Home nodes of every title at least.
    pub cluster_copies: usize,
    /// Requests a second across the cluster one home node takes for a
    /// title; a title asked for more gets more home nodes. 0: not by
    /// rate.
    pub cluster_hot_rps: f64,
    /// A title gets one home node per this percent of a node's balanced
    /// share of the cluster's sessions (theirs over the members) that its
    /// sessions take; 0: not by sessions.
    pub cluster_copy_share_pct: u32,
    /// ε of bounded loads, in percent: a node takes a new viewer only
    /// while within `1 + ε` of its share of the cluster's sessions, else
    /// sends it to the title's next node in order; 0: no bound.
    pub cluster_balance_pct: u32,
}

impl Default for Config {
    fn default() -> Self {
        Self {
            root: PathBuf::from("./media"),
            bind: IpAddr::V4(Ipv4Addr::UNSPECIFIED),
            port: 8554,
            http_port: 8080,
            admin_bind: "127.0.0.1:9090".to_owned(),
            admin_hosts: Vec::new(),
            access_log: true,
            tls_cert: PathBuf::new(),
            tls_key: PathBuf::new(),
            rtsps_port: 322,
            users: Vec::new(),
            broadcasts: Vec::new(),
            auth_realm: fjord_proto::auth::DEFAULT_REALM.to_owned(),
            hls_segment_s: 6,
            http_allow_origin: "*".to_owned(),
            http_cache_control: CacheControl::default(),
            threads: 0,
            session_timeout_s: 60,
            request_timeout_s: 10,
            idle_timeout_s: 60,
            stall_timeout_s: 10,
            max_speed: 4.0,
            max_header_bytes: 16 * 1024,
            max_body_bytes: 64 * 1024,
            live_timeout_s: 10,
            live_grace_s: 10,
            live_max_streams: 64,
            live_max_sdp_bytes: 16 * 1024,
            live_max_tracks: 8,
            live_max_packet_bytes: 1500,
            live_max_buffer_bytes: 16 << 20,
            live_record: Vec::new(),
            live_record_max_s: 3600,
            max_connections: 1024,
            max_connections_per_address: 128,
            max_sessions: 1024,
            max_loaded_titles: 512,
            max_sessions_per_connection: 16,
            max_sessions_per_address: 128,
            rtp_port_min: 40000,
            rtp_port_max: 59999,
            burst_ms: fjord_engine::DEFAULT_BURST.as_millis() as u64,
            datapath: "auto".to_owned(),
            udp_sockets: "shared".to_owned(),
            udp_connected_streams: 64,
            capacity_pps_per_core: 0,
            realtime: false,
            rtcp_interval_s: 5,
            ts_per_rtp: 7,
            fec: "auto".to_owned(),
            prefab: PrefabMode::On,
            prefab_share_percent: 25,
            destination_allow: Vec::new(),
            multicast: false,
            multicast_pool: "239.255.0.0/16".parse().expect("a network"),
            multicast_port: 5004,
            multicast_ttl: 1,
            multicast_batch_ms: 1000,
            readahead_ms: 8000,
            readahead_min_ms: 500,
            read_kb: 1024,
            readahead_budget_mb: 0,
            head_s: 2,
            storage_threads: 4,
            disk_mbps: 0,
            roots: Vec::new(),
            stats_file: PathBuf::new(),
            origin_endpoint: String::new(),
            origin_region: String::new(),
            origin: String::new(),
            cache_dir: PathBuf::from("./cache"),
            cache_gb: 10.0,
            origin_mbit_s: 1000,
            cluster_etcd: Vec::new(),
            peers: Vec::new(),
            node_name: String::new(),
            advertise_rtsp: String::new(),
            advertise_http: String::new(),
            advertise_rtsps: String::new(),
            advertise_https: String::new(),
            cluster_ttl_s: 5,
            cluster_copies: 1,
            cluster_hot_rps: 20.0,
            cluster_copy_share_pct: 25,
            cluster_balance_pct: 60,
        }
    }
}

/// A `[[peer]]` table: a node of a static cluster.
#[derive(Clone, Debug, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PeerConfig {
    pub name: String,
    /// `rtsp://HOST:PORT`.
    pub rtsp: String,
    /// `http://HOST:PORT`; empty: none.
    #[serde(default)]
    pub http: String,
    /// `rtsps://HOST:PORT` and `https://HOST:PORT`, where its clients that
    /// came over TLS go; empty: none.
    #[serde(default)]
    pub rtsps: String,
    #[serde(default)]
    pub https: String,
}

/// How long a cache in front of fjord (a CDN, a browser) may keep what HTTP
/// answers, by kind; an empty value sends no `Cache-Control`. Errors are
/// always `no-store`. Not `public` by default: with `[[user]]` tables a
/// shared cache must not hand one user's titles to another.
#[derive(Clone, Debug, PartialEq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct CacheControl {
    /// Whole-file downloads, byte ranges, init and media segments: the
    /// bytes of one ETag never change (a changed file is a new ETag).
    pub media: String,
    /// HLS playlists and DASH manifests of stored titles: made from the
    /// title, but a title may be replaced, so kept a short while.
    pub playlist: String,
}

impl Default for CacheControl {
    fn default() -> Self {
        Self {
            media: "max-age=31536000, immutable".to_owned(),
            playlist: "max-age=60".to_owned(),
        }
    }
}

/// A `[[broadcast]]` table: a title sent by periodic broadcasting.
#[derive(Clone, Debug, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BroadcastConfig {
    pub title: String,
    /// `staggered`, `pyramid`, `skyscraper`, `harmonic` or
    /// `cautious-harmonic`.
    pub scheme: String,
    /// The longest a viewer waits for the title to start, in seconds.
    pub max_start_s: f64,
}

/// The `live_record` globs, matched as `[[user]]` `publish` globs are (`*`
/// within a path segment, `**` across).
fn record_globs(globs: &[String]) -> Result<globset::GlobSet, globset::Error> {
    let mut set = globset::GlobSetBuilder::new();
    for g in globs {
        set.add(
            globset::GlobBuilder::new(g)
                .literal_separator(true)
                .build()?,
        );
    }
    set.build()
}

/// A `[[user]]` table: `name` and `password` (plain, or the
/// `digest:...` hash `fjord passwd` prints), and `paths`, globs of the
/// titles the user may read (`"**"`: all). Without `name`: what anyone
/// may read without credentials.
#[derive(Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct UserConfig {
    pub name: Option<String>,
    pub password: Option<String>,
    #[serde(default)]
    pub paths: Vec<String>,
    /// Globs of the live paths the user may publish to (`docs/live.md`).
    #[serde(default)]
    pub publish: Vec<String>,
    /// The user may also use the admin listener (status page, metrics,
    /// API).
    #[serde(default)]
    pub admin: bool,
}

impl UserConfig {
    fn user(&self) -> fjord_proto::auth::User {
        use fjord_proto::auth::Secret;
        fjord_proto::auth::User {
            name: self.name.clone(),
            secret: (self.password.as_ref()).map(|p| match p.starts_with("digest:") {
                true => Secret::Hashed(p.clone()),
                false => Secret::Password(p.clone()),
            }),
            paths: self.paths.clone(),
            publish: self.publish.clone(),
        }
    }
}

/// Passwords stay out of logs.
impl std::fmt::Debug for UserConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("UserConfig")
            .field("name", &self.name)
            .field("paths", &self.paths)
            .field("admin", &self.admin)
            .finish_non_exhaustive()
    }
}

/// `prefab`: `true`, `false` or `"auto"`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(try_from = "toml::Value")]
pub enum PrefabMode {
    On,
    Off,
    Auto,
}

impl TryFrom<toml::Value> for PrefabMode {
    type Error = String;
    fn try_from(v: toml::Value) -> Result<Self, String> {
        match v {
            toml::Value::Boolean(true) => Ok(PrefabMode::On),
            toml::Value::Boolean(false) => Ok(PrefabMode::Off),
            toml::Value::String(s) if s == "auto" => Ok(PrefabMode::Auto),
            _ => Err("prefab must be true, false or \"auto\"".to_owned()),
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("cannot read config file {path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("config file {path}: {message}")]
    Parse { path: PathBuf, message: String },
    #[error("invalid setting: {0}")]
    Invalid(String),
}

/// Where and why a config file does not parse, without quoting the line:
/// it may hold a password (the error is logged, e.g. on SIGHUP).
fn parse_message(text: &str, e: &toml::de::Error) -> String {
    let Some(span) = e.span() else {
        return e.message().to_owned();
    };
    let before = &text.as_bytes()[..span.start.min(text.len())];
    let line = before.iter().filter(|&&b| b == b'\n').count() + 1;
    let column = before.iter().rev().take_while(|&&b| b != b'\n').count() + 1;
    format!("line {line}, column {column}: {}", e.message())
}

impl Config {
    pub fn load(path: &Path) -> Result<Self, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
            path: path.to_owned(),
            source,
        })?;
        toml::from_str(&text).map_err(|e| ConfigError::Parse {
            path: path.to_owned(),
            message: parse_message(&text, &e),
        })
    }

    /// The bounds of a publisher's input.
    pub fn live_limits(&self) -> fjord_live::Limits {
        fjord_live::Limits {
            max_sdp_bytes: self.live_max_sdp_bytes,
            max_tracks: self.live_max_tracks,
            max_packet_bytes: self.live_max_packet_bytes,
            max_buffer_bytes: self.live_max_buffer_bytes,
        }
    }

    /// Whether the live stream at `path` is recorded (`live_record`).
    pub fn records(&self, path: &str) -> bool {
        record_globs(&self.live_record).is_ok_and(|g| g.is_match(path))
    }

    pub fn validate(&self) -> Result<(), ConfigError> {
        let bad = |m: &str| Err(ConfigError::Invalid(m.to_owned()));
        if let Err(e) = record_globs(&self.live_record) {
            return Err(ConfigError::Invalid(format!("live_record: {e}")));
        }
        if !(1..=7).contains(&self.ts_per_rtp) {
            return bad("ts_per_rtp must be between 1 and 7");
        }
        if self.rtp_port_min < 1024 || self.rtp_port_max <= self.rtp_port_min {
            return bad(
                "rtp_port_min..rtp_port_max must be a range above 1023 holding at least one port pair",
            );
        }
        if self.session_timeout_s == 0
            || self.request_timeout_s == 0
            || self.idle_timeout_s == 0
            || self.stall_timeout_s == 0
        {
            return bad("timeouts must be at least 1 second");
        }
        if self.rtcp_interval_s == 0 {
            return bad("rtcp_interval_s must be at least 1");
        }
        if self.live_timeout_s == 0 || !(12..=65_535).contains(&self.live_max_packet_bytes) {
            return bad("live_timeout_s must be at least 1, live_max_packet_bytes 12 to 65535");
        }
        // Viewers of a held stream wait in memory: bounded like the other live limits.
        if self.live_grace_s > 300 {
            return bad("live_grace_s must be at most 300");
        }
        if self.live_record_max_s > 7 * 86_400 {
            return bad("live_record_max_s must be at most 604800 (a week)");
        }
        if self.max_header_bytes < 256 {
            return bad("max_header_bytes must be at least 256");
        }
        if let Err(e) = self.fec.parse::<fjord_fec::FecChoice>() {
            return Err(ConfigError::Invalid(format!("fec: {e}")));
        }
        if !matches!(self.udp_sockets.as_str(), "shared" | "per-session") {
            return bad("udp_sockets must be \"shared\" or \"per-session\"");
        }
        if self.udp_connected_streams > 1024 {
            return bad("udp_connected_streams must be at most 1024");
        }
        if self.readahead_ms != 0 && self.readahead_ms < 200 {
            return bad("readahead_ms must be 0 (off) or at least 200");
        }
        if self.readahead_min_ms < 100 {
            return bad("readahead_min_ms must be at least 100");
        }
        if !(64..=65536).contains(&self.read_kb) {
            return bad("read_kb must be between 64 and 65536");
        }
        if !self.origin.is_empty() && self.readahead_ms == 0 {
            return bad(
                "an origin needs the storage layer (it fills slices before they are read): set readahead_ms above 0",
            );
        }
        let cache_size = self.cache_gb > 0.0 && self.cache_gb.is_finite();
        if !self.origin.is_empty() && !cache_size {
            return bad("cache_gb must be above 0");
        }
        if self.prefab_share_percent > 100 {
            return bad("prefab_share_percent must be at most 100");
        }
        if self.storage_threads == 0 || self.storage_threads > 64 {
            return bad("storage_threads must be between 1 and 64");
        }
        if !self.multicast_pool.addr().is_multicast() || self.multicast_pool.prefix_len() == 0 {
            return bad(
                "multicast_pool must be a network of multicast addresses, e.g. 239.255.0.0/16",
            );
        }
        if self.multicast_port < 1024 || self.multicast_port % 2 == 1 || self.multicast_ttl == 0 {
            return bad("multicast_port must be even and at least 1024, multicast_ttl at least 1");
        }
        if self.multicast_batch_ms > 60_000 {
            return bad("multicast_batch_ms must be at most 60000");
        }
        if !(1.0..=64.0).contains(&self.max_speed) {
            return bad("max_speed must be between 1 and 64");
        }
        self.admin_bind()?;
        for b in &self.broadcasts {
            if !(b.max_start_s > 0.0 && b.max_start_s <= 3600.0) {
                return bad("a [[broadcast]]'s max_start_s must be above 0 and at most 3600");
            }
        }
        if self.max_connections == 0 || self.max_sessions == 0 {
            return bad("max_connections and max_sessions must be at least 1");
        }
        self.validate_cluster()
    }

    /// The cluster's settings (docs/cluster.md).
    fn validate_cluster(&self) -> Result<(), ConfigError> {
        let bad = |m: &str| Err(ConfigError::Invalid(m.to_owned()));
        if !self.cluster_etcd.is_empty() && !self.peers.is_empty() {
            return bad("a cluster is kept in etcd (cluster_etcd) or listed ([[peer]]), not both");
        }
        if (self.cluster_etcd.iter())
            .any(|e| !e.starts_with("http://") && !e.starts_with("https://"))
        {
            return bad("cluster_etcd endpoints must be http:// or https:// URLs");
        }
        if !(2..=300).contains(&self.cluster_ttl_s) {
            return bad("cluster_ttl_s must be between 2 and 300");
        }
        if self.cluster_copies == 0
            || !(self.cluster_hot_rps >= 0.0 && self.cluster_hot_rps.is_finite())
        {
            return bad("cluster_copies must be at least 1 and cluster_hot_rps 0 or more");
        }
        if self.cluster_balance_pct > 1000 || self.cluster_copy_share_pct > 1000 {
            return bad(
                "cluster_balance_pct and cluster_copy_share_pct must be between 0 and 1000",
            );
        }
        let tls = |url: &str, scheme: &str| url.is_empty() || url.starts_with(scheme);
        let mut names = std::collections::HashSet::new();
        for p in &self.peers {
            if p.name.is_empty() || !names.insert(&p.name) {
                return bad("each [[peer]] needs a name of its own");
            }
            if !p.rtsp.starts_with("rtsp://") || !(p.http.is_empty() || p.http.starts_with("http"))
            {
                return bad("a [[peer]]'s rtsp must be an rtsp:// URL and its http an http:// one");
            }
            if !tls(&p.rtsps, "rtsps://") || !tls(&p.https, "https://") {
                return bad(
                    "a [[peer]]'s rtsps must be an rtsps:// URL and its https an https:// one",
                );
            }
        }
        let advertised =
            self.advertise_rtsp.is_empty() || self.advertise_rtsp.starts_with("rtsp://");
        if !advertised
            || !(self.advertise_http.is_empty() || self.advertise_http.starts_with("http"))
        {
            return bad("advertise_rtsp must be an rtsp:// URL and advertise_http an http:// one");
        }
        if !tls(&self.advertise_rtsps, "rtsps://") || !tls(&self.advertise_https, "https://") {
            return bad(
                "advertise_rtsps must be an rtsps:// URL and advertise_https an https:// one",
            );
        }
        Ok(())
    }

    /// Whether this node is one of a cluster.
    pub fn clustered(&self) -> bool {
        !self.cluster_etcd.is_empty() || !self.peers.is_empty()
    }

    /// What a reload (SIGHUP) makes of `new` while the server runs with
    /// `self`: settings the control plane reads per request or connection
    /// (timeouts, limits, `max_speed`, `destination_allow`, HLS and CORS)
    /// take effect; the others are fixed at start (listeners, engine
    /// threads, data path, roots, storage, ingest): they keep `self`'s
    /// values, and their names are returned so the change can be logged.
    pub fn reloaded(&self, mut new: Config) -> (Config, Vec<&'static str>) {
        let mut kept = Vec::new();
        macro_rules! fixed {
            ($($field:ident),*) => {$(
                if new.$field != self.$field {
                    kept.push(stringify!($field));
                    new.$field = self.$field.clone();
                }
            )*};
        }
        fixed!(
            root,
            roots,
            bind,
            port,
            http_port,
            rtsps_port,
            admin_bind,
            threads,
            stall_timeout_s,
            max_connections,
            rtp_port_min,
            rtp_port_max,
            burst_ms,
            capacity_pps_per_core,
            realtime,
            datapath,
            udp_sockets,
            udp_connected_streams,
            rtcp_interval_s,
            ts_per_rtp,
            fec,
            prefab,
            prefab_share_percent,
            readahead_ms,
            readahead_min_ms,
            read_kb,
            readahead_budget_mb,
            head_s,
            storage_threads,
            disk_mbps,
            stats_file,
            origin_endpoint,
            origin_region,
            origin,
            cache_dir,
            cache_gb,
            origin_mbit_s,
            max_loaded_titles,
            broadcasts,
            cluster_etcd,
            peers,
            node_name,
            advertise_rtsp,
            advertise_http,
            advertise_rtsps,
            advertise_https,
            cluster_ttl_s
        );
        // Certificates rotate on reload; turning TLS on or off takes a
        // restart (its listener is bound at start).
        if new.tls_cert.as_os_str().is_empty() != self.tls_cert.as_os_str().is_empty() {
            kept.push("tls_cert");
            (new.tls_cert, new.tls_key) = (self.tls_cert.clone(), self.tls_key.clone());
        }
        (new, kept)
    }

    /// The `[[user]]` tables as the authentication module takes them.
    pub fn users(&self) -> Vec<fjord_proto::auth::User> {
        self.users.iter().map(UserConfig::user).collect()
    }

    /// Where the admin listener listens, or `None`: nowhere.
    pub fn admin_bind(&self) -> Result<Option<std::net::SocketAddr>, ConfigError> {
        match self.admin_bind.trim() {
            "" => Ok(None),
            a => a.parse().map(Some).map_err(|_| {
                ConfigError::Invalid(format!(
                    "admin_bind must be ADDRESS:PORT (e.g. 127.0.0.1:9090) or \"\", not {a:?}"
                ))
            }),
        }
    }

    /// The storage layer's settings, or `None` when it is off.
    pub fn storage(&self) -> Option<fjord_storage::StorageConfig> {
        let readahead = Duration::from_millis(self.readahead_ms);
        (self.readahead_ms > 0).then(|| fjord_storage::StorageConfig {
            lead: fjord_storage::LeadConfig {
                floor: Duration::from_millis(self.readahead_min_ms).min(readahead / 2),
                ceiling: readahead,
                read_bytes: self.read_kb << 10,
                ..Default::default()
            },
            first_read: (readahead / 8).max(Duration::from_millis(100)),
            budget: match self.readahead_budget_mb {
                0 => fjord_storage::default_budget(),
                mb => mb << 20,
            },
            head: Duration::from_secs(self.head_s),
            workers_per_disk: self.storage_threads,
            disk_capacity: self.disk_capacity(),
            origin_capacity: (!self.origin.is_empty() && self.origin_mbit_s > 0)
                .then_some(self.origin_mbit_s * 1_000_000 / 8),
        })
    }

    /// The media roots: `roots`, or `root` alone.
    pub fn roots(&self) -> Vec<PathBuf> {
        if self.roots.is_empty() {
            vec![self.root.clone()]
        } else {
            self.roots.clone()
        }
    }

    /// Bytes per second of each root's disk, by its device number.
    fn disk_capacity(&self) -> std::collections::HashMap<u64, u64> {
        use std::os::unix::fs::MetadataExt;
        let measured = capacity_state_file()
            .and_then(|f| std::fs::read_to_string(f.with_file_name("disks.toml")).ok())
            .unwrap_or_default();
        self.roots()
            .iter()
            .filter_map(|r| std::fs::metadata(r).ok())
            .filter_map(|m| {
                let mbps = match self.disk_mbps {
                    0 => measured_mbps(&measured, m.dev())?,
                    mbps => mbps as f64,
                };
                Some((m.dev(), (mbps * 1e6) as u64))
            })
            .collect()
    }

    /// The parity layout for on-demand ingest (checked by `validate`).
    pub fn fec(&self) -> fjord_fec::FecChoice {
        self.fec.parse().unwrap_or_default()
    }

    pub fn threads(&self) -> usize {
        match self.threads {
            0 => std::thread::available_parallelism().map_or(1, |n| n.get()),
            n => n,
        }
    }

    /// The admission budget per engine thread, if any (see
    /// `capacity_pps_per_core`).
    pub fn capacity_pps_per_core(&self) -> Option<u64> {
        if self.capacity_pps_per_core > 0 {
            return Some(self.capacity_pps_per_core);
        }
        let text = std::fs::read_to_string(capacity_state_file()?).ok()?;
        let saved: SavedCapacity = toml::from_str(&text).ok()?;
        Some(saved.pps_per_core).filter(|&n| n > 0)
    }

    pub fn session_timeout(&self) -> Duration {
        Duration::from_secs(self.session_timeout_s)
    }

    pub fn request_timeout(&self) -> Duration {
        Duration::from_secs(self.request_timeout_s)
    }

    pub fn idle_timeout(&self) -> Duration {
        Duration::from_secs(self.idle_timeout_s)
    }
}

/// What `fjord bench capacity` leaves for the server.
#[derive(Debug, Deserialize, serde::Serialize)]
pub struct SavedCapacity {
    pub pps_per_core: u64,
}

/// What `fjord bench disk` saved for device `dev` in `disks_toml`: random
/// 1 MiB reads with 4 in flight (a VOD load's pattern), in MB/s.
fn measured_mbps(disks_toml: &str, dev: u64) -> Option<f64> {
    let doc: toml::Table = disks_toml.parse().ok()?;
    let id = format!("{}:{}", libc::major(dev), libc::minor(dev));
    doc.get("disk")?
        .as_array()?
        .iter()
        .filter(|d| d.get("device").and_then(|v| v.as_str()) == Some(id.as_str()))
        .find_map(|d| d.get("rand_1m_qd4_mb_s")?.as_float())
}

/// `$XDG_STATE_HOME/fjord/capacity.toml` (default `~/.local/state/...`).
pub fn capacity_state_file() -> Option<PathBuf> {
    let base = std::env::var_os("XDG_STATE_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".local/state")))?;
    Some(base.join("fjord/capacity.toml"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn empty_file_gives_documented_defaults() {
        let c: Config = toml::from_str("").unwrap();
        assert_eq!(c.port, 8554);
        assert_eq!(c.session_timeout_s, 60);
        assert_eq!(c.max_header_bytes, 16384);
        assert_eq!(c.max_body_bytes, 65536);
        let caps = (c.max_sessions_per_connection, c.max_sessions_per_address);
        assert_eq!((caps, c.multicast), ((16, 128), false));
        assert_eq!((c.live_timeout_s, c.live_grace_s), (10, 10));
        c.validate().unwrap();
    }

    /// A typo beside a password says where, never the line itself.
    #[test]
    fn a_parse_error_names_the_place_not_the_line() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("fjord.toml");
        let text = "port = 8554\n[[user]]\nname = \"alice\"\npasword = \"hunter2-secret\"\n";
        std::fs::write(&path, text).unwrap();
        let e = Config::load(&path).unwrap_err().to_string();
        assert!(e.contains("line 4") && e.contains("pasword"), "{e}");
        assert!(!e.contains("hunter2"), "{e}");
    }

    #[test]
    fn unknown_keys_and_bad_values_are_refused() {
        assert!(toml::from_str::<Config>("prot = 1").is_err());
        let c: Config = toml::from_str("ts_per_rtp = 9").unwrap();
        assert!(c.validate().is_err());
        let c: Config = toml::from_str("fec = \"12\"").unwrap();
        assert!(c.validate().is_err());
        assert_eq!(Config::default().live_record_max_s, 3600);
        let c: Config = toml::from_str("live_record_max_s = 604801").unwrap();
        assert!(c.validate().is_err());
        let c: Config = toml::from_str("live_record_max_s = 0").unwrap();
        assert!(c.validate().is_ok());
        let c: Config = toml::from_str("live_grace_s = 301").unwrap();
        assert!(c.validate().is_err());
        let c: Config = toml::from_str("live_grace_s = 0").unwrap();
        c.validate().unwrap();
        // Nothing is recorded by default; live_record globs say what is.
        assert!(!Config::default().records("live/cam1"));
        let c: Config = toml::from_str("live_record = [\"live/*\"]").unwrap();
        c.validate().unwrap();
        assert!(c.records("live/cam1") && !c.records("live/a/b") && !c.records("other/x"));
        let c: Config = toml::from_str("live_record = [\"live/[a\"]").unwrap();
        assert!(c.validate().is_err());
        let c: Config = toml::from_str("fec = \"off\"").unwrap();
        assert_eq!(c.fec(), fjord_fec::FecChoice::Off);
        let c: Config = toml::from_str("udp_sockets = \"pooled\"").unwrap();
        assert!(c.validate().is_err());
        let c: Config = toml::from_str("udp_sockets = \"per-session\"").unwrap();
        c.validate().unwrap();
        let c: Config = toml::from_str("destination_allow = [\"10.0.0.0/8\"]").unwrap();
        assert!(c.destination_allow[0].contains(&"10.1.2.3".parse::<IpAddr>().unwrap()));
        let edge = |more: &str| toml::from_str::<Config>(&format!("origin = \"s3://b\"\n{more}"));
        edge("").unwrap().validate().unwrap();
        for bad in ["readahead_ms = 0", "cache_gb = 0", "cache_gb = nan"] {
            assert!(edge(bad).unwrap().validate().is_err(), "{bad}");
        }
    }

    #[test]
    fn a_cluster_is_etcd_or_peers_with_sound_urls_and_limits() {
        let c = |text: &str| toml::from_str::<Config>(text).unwrap().validate();
        let peer =
            |name: &str, rtsp: &str| format!("[[peer]]\nname = \"{name}\"\nrtsp = \"{rtsp}\"\n");
        c("cluster_etcd = [\"http://127.0.0.1:2379\"]").unwrap();
        c(&peer("a", "rtsp://10.0.0.1:8554")).unwrap();
        for bad in [
            format!(
                "cluster_etcd = [\"http://e:2379\"]\n{}",
                peer("a", "rtsp://a")
            ),
            "cluster_etcd = [\"e:2379\"]".to_owned(),
            "cluster_ttl_s = 1".to_owned(),
            "cluster_copies = 0".to_owned(),
            "cluster_hot_rps = -1".to_owned(),
            "cluster_balance_pct = 1001".to_owned(),
            "cluster_copy_share_pct = 1001".to_owned(),
            "advertise_rtsp = \"http://a\"".to_owned(),
            "advertise_rtsps = \"rtsp://a\"".to_owned(),
            "advertise_https = \"http://a\"".to_owned(),
            format!("{}{}", peer("a", "rtsp://a"), peer("a", "rtsp://b")),
            peer("a", "http://a"),
        ] {
            assert!(c(&bad).is_err(), "{bad}");
        }
        let toml = format!("{}{}", peer("a", "rtsp://a"), peer("b", "rtsp://b"));
        let (kept, fixed) = Config::default().reloaded(toml::from_str(&toml).unwrap());
        assert!(kept.peers.is_empty() && fixed == ["peers"]);
    }

    #[test]
    fn a_disk_bench_figure_is_found_by_device() {
        let saved = "[[disk]]\ndevice = \"254:0\"\nroot = \"/srv\"\nrand_1m_qd4_mb_s = 455.2\n\n[[disk]]\ndevice = \"8:16\"\nrand_1m_qd4_mb_s = 120.0\n";
        assert_eq!(measured_mbps(saved, libc::makedev(8, 16)), Some(120.0));
        assert_eq!(measured_mbps(saved, libc::makedev(254, 0)), Some(455.2));
        assert_eq!(measured_mbps(saved, libc::makedev(9, 0)), None);
        assert_eq!(measured_mbps("not toml [", libc::makedev(8, 16)), None);
    }

    #[test]
    fn prefab_is_on_off_or_auto() {
        let parse = |v: &str| toml::from_str::<Config>(&format!("prefab = {v}")).map(|c| c.prefab);
        assert_eq!(parse("true").unwrap(), PrefabMode::On);
        assert_eq!(parse("false").unwrap(), PrefabMode::Off);
        assert_eq!(parse("\"auto\"").unwrap(), PrefabMode::Auto);
        assert!(parse("\"sometimes\"").is_err());
    }

    #[test]
    fn a_reload_takes_the_per_request_settings_and_keeps_the_fixed_ones() {
        let old: Config = toml::from_str("port = 554\nmax_sessions = 10").unwrap();
        let new: Config =
            toml::from_str("port = 8554\nmax_sessions = 20\nthreads = 3\nidle_timeout_s = 5")
                .unwrap();
        let (now, kept) = old.reloaded(new);
        assert_eq!((now.max_sessions, now.idle_timeout_s), (20, 5));
        assert_eq!((now.port, now.threads), (554, 0));
        assert_eq!(kept, ["port", "threads"]);
        assert_eq!(old.reloaded(old.clone()), (old, vec![]));
    }

    /// A new certificate is taken; TLS on or off, and the loaded-title
    /// bound, wait for a restart.
    #[test]
    fn a_reload_rotates_certificates_but_does_not_turn_tls_on() {
        let on: Config = toml::from_str("tls_cert = \"a.pem\"\ntls_key = \"a.key\"").unwrap();
        let rotated: Config = toml::from_str("tls_cert = \"b.pem\"\ntls_key = \"b.key\"").unwrap();
        let (now, kept) = on.reloaded(rotated);
        assert_eq!((now.tls_cert.to_str(), kept.len()), (Some("b.pem"), 0));
        let off = Config::default();
        let (now, kept) = off.reloaded(on.clone());
        assert_eq!(
            (now.tls_cert.as_os_str().is_empty(), kept),
            (true, vec!["tls_cert"])
        );
        let (now, kept) = on.reloaded(off.clone());
        assert_eq!(
            (now.tls_cert.to_str(), kept),
            (Some("a.pem"), vec!["tls_cert"])
        );
        let more: Config = toml::from_str("max_loaded_titles = 7").unwrap();
        assert_eq!(off.reloaded(more).1, ["max_loaded_titles"]);
    }
}
