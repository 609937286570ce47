//! HTTP and RTSP authentication, sans-IO: Digest (RFC 7616, and the
//! older RFC 2069 form) and Basic (RFC 7617) against a user table,
//! per-user read rules over title paths, and a failed-attempt throttle.
//!
//! # Contract
//!
//! - In, once: the users of the config ([`User`]), the realm, and a
//!   server key of at least [`MIN_KEY`] random bytes the caller generates
//!   ([`Auth::new`]). Per request ([`Request`]): the method as sent, the
//!   `Authorization` value if any, what the request names ([`Target`]),
//!   the client's address, whether the connection is TLS, and the time
//!   in unix seconds ([`Auth::check`]); then the title path — as the
//!   `rtsp`/`http` modules give it, percent-decoded, no leading `/` —
//!   ([`Auth::may_read`]).
//! - Out: `WWW-Authenticate` values ([`Auth::challenges`]), an
//!   [`Outcome`], and whether that outcome may read a path.
//! - Never: I/O, clocks, randomness, or panics on any input. State lives
//!   in what the caller owns and passes in: [`NonceCounts`] (the `nc`
//!   seen per nonce) and [`Throttle`], both bounded. Passwords are not
//!   kept: only HA1 = H(name:realm:password) under MD5 and SHA-256, which
//!   is also what a config may store ([`hashed_secret`]).
//!
//! # Use
//!
//! ```text
//! match auth.check(&request, &mut counts) {
//!     Stale                               → 401, challenges((now, salt), ip, tls, true)
//!     Failed { user }                     → throttle.failed(ip, name of user, now_ms);
//!                                           503 if throttle.locked(ip, now_ms), else
//!                                           401, challenges((now, salt), ip, tls, false)
//!     Authenticated { user } if throttle.refuses(ip, name, now_ms) → 503
//!     who if auth.may_read(&who, path)    → serve
//!     Anonymous                           → 401, challenges((now, salt), ip, tls, false)
//!     Authenticated { .. }                → 403
//! }
//! ```
//! An open server ([`Auth::is_open`]: no users) checks nothing: every
//! outcome is `Anonymous` and may read everything.
//!
//! # Accepted credentials
//!
//! - Digest with `qop=auth`, `nc` and `cnonce` (ffmpeg, curl, browsers),
//!   or without `qop` (RFC 2069: GStreamer's rtspsrc, live555/VLC);
//!   `algorithm` MD5 (also when absent), SHA-256, and their `-sess`
//!   forms. Refused: `auth-int`, `userhash`, `username*`.
//! - Basic, only over TLS.
//!
//! # What a captured Digest header is worth
//!
//! - Its `uri` must name the request's target ([`Target`]): the same path
//!   over HTTP, the same title (any track) over RTSP.
//! - Its nonce must be ours (this process's key), fresh, and made for the
//!   client's address; with `qop`, its `nc` must be above the last one
//!   seen on that nonce ([`NonceCounts`]). A right password on a nonce
//!   that fails any of these is answered [`Outcome::Stale`]: a fresh
//!   challenge the client takes without asking its user, and no failure
//!   (cached nonces after a restart, a client whose address changed).
//! - Without `qop` (RFC 2069) there is no `nc`: such a header can be sent
//!   again from the same address, for the same title and method, while
//!   its nonce is fresh. Where that matters, use TLS.
//!
//! Stored hashes bind the user's name and the realm: renaming a user or
//! changing the realm needs new hashes.

mod counts;
mod hash;
mod header;
mod nonce;
mod target;
pub mod throttle;

#[cfg(test)]
mod tests;

use std::{fmt, net::IpAddr};

use globset::{GlobBuilder, GlobSet, GlobSetBuilder};
use subtle::ConstantTimeEq;

use counts::parse_nc;
pub use counts::{DEFAULT_MAX_NONCES, NonceCounts};
pub use hash::Ha1;
use hash::{Algorithm, Qop, response, session_ha1, unhex};
use header::quote;
pub use header::{Credentials, MAX_HEADER, Params, parse_authorization};
pub use nonce::MIN_KEY;
use nonce::Nonces;
pub use target::{Target, target_path};
pub use throttle::Throttle;

/// The realm when the config names none.
pub const DEFAULT_REALM: &str = "fjord";
/// Seconds a nonce is fresh for by default; older ones get `stale=true`.
pub const DEFAULT_NONCE_LIFETIME: u64 = 300;

/// One entry of the config's user table.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct User {
    /// `None`: the anonymous rule, what anyone may read without
    /// credentials (it has no secret).
    pub name: Option<String>,
    pub secret: Option<Secret>,
    /// Globs over title paths, `*` within one path segment, `**` across
    /// them: `"**"`, `"movies/*.ts"`.
    pub paths: Vec<String>,
    /// Globs of the live paths the user may publish to (RTSP ANNOUNCE and
    /// RECORD): nobody publishes anywhere unless a rule says so.
    pub publish: Vec<String>,
}

/// A user's password, as the config gives it.
#[derive(Clone, PartialEq, Eq)]
pub enum Secret {
    Password(String),
    /// What [`hashed_secret`] prints: `digest:<hex MD5 HA1>:<hex SHA-256 HA1>`.
    Hashed(String),
}

/// Secrets stay out of logs.
impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Secret::Password(_) => "Password(..)",
            Secret::Hashed(_) => "Hashed(..)",
        })
    }
}

/// The stored form of a password for `fjord passwd`:
/// `digest:<32 hex digits: MD5 HA1>:<64 hex digits: SHA-256 HA1>`, HA1 =
/// H(name:realm:password) (RFC 7616 §3.4.2).
pub fn hashed_secret(name: &str, realm: &str, password: &str) -> String {
    Ha1::new(name, realm, password).to_string()
}

/// A user table that cannot be used.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub enum AuthError {
    #[error("{who}: invalid path glob {glob:?}: {reason}")]
    Glob {
        who: String,
        glob: String,
        reason: String,
    },
    #[error("user {0:?} has no password")]
    NoSecret(String),
    #[error("the anonymous rule (a user without a name) cannot have a password")]
    AnonymousSecret,
    #[error(
        "user {0:?}: the password hash is not `digest:<32 hex digits>:<64 hex digits>` (see `fjord passwd`)"
    )]
    BadHash(String),
    #[error("user {0:?} is listed twice")]
    Duplicate(String),
    #[error("user name {0:?} is empty or holds ':' or a control character")]
    BadName(String),
    #[error("the server key is shorter than {MIN_KEY} bytes")]
    ShortKey,
}

/// What a request's credentials amount to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// The user at this index of the table given to [`Auth::new`].
    Authenticated { user: usize },
    /// No credentials (or an open server).
    Anonymous,
    /// Malformed, of an unknown user, wrong, for another target, or Basic
    /// without TLS; `user`: the user named, when there is one.
    Failed { user: Option<usize> },
    /// The right password, on a nonce that will not do: expired, of
    /// another key, for another address, forgotten, or with an `nc` seen
    /// already. Challenge with `stale=true` and the client retries
    /// without asking its user again.
    Stale,
}

/// One request, as [`Auth::check`] needs it.
#[derive(Clone, Copy, Debug)]
pub struct Request<'a> {
    /// As sent (`DESCRIBE`, `GET`).
    pub method: &'a str,
    pub authorization: Option<&'a str>,
    pub target: Target<'a>,
    /// The peer's address: nonces are made for one.
    pub client: IpAddr,
    pub tls: bool,
    pub now_unix: u64,
}

/// The user table, compiled; the realm and the key nonces are made with.
#[derive(Clone)]
pub struct Auth {
    realm: String,
    nonces: Nonces,
    /// Parallel to the users given to [`Auth::new`].
    rules: Vec<Rule>,
    /// Checked against when the user is unknown, so that costs the same.
    nobody: Ha1,
}

#[derive(Clone)]
struct Rule {
    /// Name and HA1; `None` for the anonymous rule.
    account: Option<(String, Ha1)>,
    paths: GlobSet,
    publish: GlobSet,
}

impl Auth {
    pub fn new(users: &[User], realm: &str, key: &[u8]) -> Result<Auth, AuthError> {
        let nonces = Nonces::new(key, DEFAULT_NONCE_LIFETIME).ok_or(AuthError::ShortKey)?;
        let mut rules: Vec<Rule> = Vec::with_capacity(users.len());
        for user in users {
            let account = account(user, realm)?;
            if let Some((name, _)) = &account
                && rules
                    .iter()
                    .any(|r| r.account.as_ref().is_some_and(|(n, _)| n == name))
            {
                return Err(AuthError::Duplicate(name.clone()));
            }
            let paths = globs(user, &user.paths)?;
            let publish = globs(user, &user.publish)?;
            rules.push(Rule {
                account,
                paths,
                publish,
            });
        }
        Ok(Auth {
            realm: realm.to_owned(),
            nonces,
            rules,
            nobody: Ha1::new("", realm, ""),
        })
    }

    /// Seconds a nonce stays fresh (default [`DEFAULT_NONCE_LIFETIME`]).
    pub fn nonce_lifetime(mut self, secs: u64) -> Auth {
        self.nonces.lifetime = secs;
        self
    }

    /// No users: everything may be read, nothing is challenged.
    pub fn is_open(&self) -> bool {
        self.rules.is_empty()
    }

    /// The name of the user an [`Outcome::Authenticated`] names.
    pub fn user_name(&self, user: usize) -> Option<&str> {
        let (name, _) = self.rules.get(user)?.account.as_ref()?;
        Some(name)
    }

    /// `WWW-Authenticate` values, one header each, preferred first
    /// (RFC 7616 §3.7): Digest SHA-256, Digest MD5, and Basic over TLS;
    /// the nonce is made for `client`, unique by `salt` (which must differ
    /// from the last challenge's: a counter will do). `realm` then `nonce` (then
    /// `stale`) lead, in that order, because live555 reads them with a
    /// fixed pattern; ffmpeg, GStreamer and live555 take the last Digest
    /// challenge, so MD5, which they all know, comes last.
    pub fn challenges(
        &self,
        (now_unix, salt): (u64, u64),
        client: IpAddr,
        tls: bool,
        stale: bool,
    ) -> Vec<String> {
        let realm = quote(&self.realm);
        let nonce = self.nonces.make(now_unix, salt, client);
        let opaque = self.nonces.opaque();
        let stale = if stale { ", stale=true" } else { "" };
        let digest = |alg| {
            format!(
                "Digest realm={realm}, nonce=\"{nonce}\"{stale}, qop=\"auth\", algorithm={alg}, opaque=\"{opaque}\""
            )
        };
        let mut values = vec![digest("SHA-256"), digest("MD5")];
        if tls {
            values.push(format!("Basic realm={realm}, charset=\"UTF-8\""));
        }
        values
    }

    /// Checks a request's `Authorization` value (see the module's doc);
    /// `counts` learns the `nc` of a good Digest answer.
    pub fn check(&self, req: &Request<'_>, counts: &mut NonceCounts) -> Outcome {
        let Some(value) = req.authorization.filter(|_| !self.is_open()) else {
            return Outcome::Anonymous;
        };
        match parse_authorization(value) {
            Some(Credentials::Digest(params)) => self.check_digest(req, &params, counts),
            Some(Credentials::Basic { user, password }) if req.tls => {
                self.check_basic(&user, &password)
            }
            Some(Credentials::Basic { user, .. }) => Outcome::Failed {
                user: self.account(&user).0,
            },
            None => Outcome::Failed { user: None },
        }
    }

    /// Whether `who` may read the title at `path`: anyone what the
    /// anonymous rule allows, a user also what their own globs allow.
    pub fn may_read(&self, who: &Outcome, path: &str) -> bool {
        let own = match who {
            Outcome::Authenticated { user } => self
                .rules
                .get(*user)
                .is_some_and(|r| r.paths.is_match(path)),
            _ => false,
        };
        self.is_open()
            || own
            || self
                .rules
                .iter()
                .any(|r| r.account.is_none() && r.paths.is_match(path))
    }

    /// Whether `who` may publish to `path`: anyone where the anonymous
    /// rule's `publish` globs allow, a user also where their own do. An
    /// open server (no users) lets nobody publish.
    pub fn may_publish(&self, who: &Outcome, path: &str) -> bool {
        let own = match who {
            Outcome::Authenticated { user } => {
                (self.rules.get(*user)).is_some_and(|r| r.publish.is_match(path))
            }
            _ => false,
        };
        own || (self.rules.iter()).any(|r| r.account.is_none() && r.publish.is_match(path))
    }

    /// Right password first, then the target, then the nonce: a right
    /// answer on a nonce that will not do is [`Outcome::Stale`].
    fn check_digest(
        &self,
        req: &Request<'_>,
        params: &Params<'_>,
        counts: &mut NonceCounts,
    ) -> Outcome {
        let Some(d) = DigestRequest::read(params) else {
            return Outcome::Failed { user: None };
        };
        let (user, ha1) = self.account(d.user);
        let mut ha1 = ha1.get(d.alg).to_vec();
        if let (true, Some((_, cnonce, _))) = (d.sess, d.qop) {
            ha1 = session_ha1(d.alg, &ha1, d.nonce, cnonce);
        }
        let expected = response(d.alg, &ha1, d.nonce, d.qop, req.method, d.uri);
        let right = bool::from(expected.ct_eq(&d.response));
        let nc = d.qop.map(|(nc, _, _)| parse_nc(nc));
        let (Some(user), true, true, None | Some(Some(_))) =
            (user, right, req.target.named_by(d.uri), nc)
        else {
            return Outcome::Failed { user };
        };
        let Some(nonce) = self.nonces.verify(d.nonce, req.now_unix, req.client) else {
            return Outcome::Stale;
        };
        match nc.flatten() {
            Some(nc) if !counts.advance(nonce, nc) => Outcome::Stale,
            _ => Outcome::Authenticated { user },
        }
    }

    fn check_basic(&self, name: &str, password: &str) -> Outcome {
        let (user, ha1) = self.account(name);
        let given = Ha1::new(name, &self.realm, password);
        let alg = Algorithm::Sha256;
        match (user, bool::from(given.get(alg).ct_eq(ha1.get(alg)))) {
            (Some(user), true) => Outcome::Authenticated { user },
            (user, _) => Outcome::Failed { user },
        }
    }

    /// The index and HA1 of the user called `name`, or none and a stand-in.
    fn account(&self, name: &str) -> (Option<usize>, &Ha1) {
        let found = self.rules.iter().enumerate().find_map(|(i, rule)| {
            let (n, ha1) = rule.account.as_ref()?;
            (n == name).then_some((Some(i), ha1))
        });
        found.unwrap_or((None, &self.nobody))
    }
}

/// What a Digest `Authorization` must carry.
struct DigestRequest<'a> {
    user: &'a str,
    nonce: &'a str,
    uri: &'a str,
    response: Vec<u8>,
    alg: Algorithm,
    sess: bool,
    qop: Qop<'a>,
}

impl<'a> DigestRequest<'a> {
    /// `None` when a field is missing or asks for what fjord does not do.
    fn read(params: &'a Params<'_>) -> Option<DigestRequest<'a>> {
        let (alg, sess) = Algorithm::parse(params.get("algorithm"))?;
        let qop = match params.get("qop") {
            None => None,
            Some(q) if q.eq_ignore_ascii_case("auth") => {
                Some((params.get("nc")?, params.get("cnonce")?, q))
            }
            Some(_) => return None,
        };
        let userhash = params
            .get("userhash")
            .is_some_and(|u| u.eq_ignore_ascii_case("true"));
        if userhash || (sess && qop.is_none()) {
            return None;
        }
        Some(DigestRequest {
            user: params.get("username")?,
            nonce: params.get("nonce")?,
            uri: params.get("uri")?,
            response: unhex(params.get("response")?)?,
            alg,
            sess,
            qop,
        })
    }
}

/// A user's name and HA1, checked; `None` for the anonymous rule.
fn account(user: &User, realm: &str) -> Result<Option<(String, Ha1)>, AuthError> {
    let Some(name) = &user.name else {
        return match user.secret {
            Some(_) => Err(AuthError::AnonymousSecret),
            None => Ok(None),
        };
    };
    // Basic cannot carry a ':' in a name; control characters are mistakes.
    if name.is_empty() || name.chars().any(|c| c == ':' || c.is_control()) {
        return Err(AuthError::BadName(name.clone()));
    }
    let ha1 = match &user.secret {
        None => return Err(AuthError::NoSecret(name.clone())),
        Some(Secret::Password(password)) => Ha1::new(name, realm, password),
        Some(Secret::Hashed(stored)) => {
            Ha1::parse(stored).ok_or_else(|| AuthError::BadHash(name.clone()))?
        }
    };
    Ok(Some((name.clone(), ha1)))
}

/// A user's globs (read or publish), compiled into one set.
fn globs(user: &User, patterns: &[String]) -> Result<GlobSet, AuthError> {
    let error = |glob: &str, reason: String| AuthError::Glob {
        who: user
            .name
            .as_ref()
            .map_or("the anonymous rule".to_owned(), |n| format!("user {n:?}")),
        glob: glob.to_owned(),
        reason,
    };
    let mut set = GlobSetBuilder::new();
    for glob in patterns {
        // Title paths have none, so such a glob would never match.
        if glob.starts_with('/') {
            return Err(error(glob, "title paths do not start with '/'".to_owned()));
        }
        let compiled = GlobBuilder::new(glob).literal_separator(true).build();
        set.add(compiled.map_err(|e| error(glob, e.kind().to_string()))?);
    }
    set.build()
        .map_err(|e| error(&patterns.join(" "), e.to_string()))
}
