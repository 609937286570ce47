//! HTTP and RTSP authentication, sans-IO: Digest (RFC 7616, and the
//! older RFC 2069 form) and Basic (RFC 7617) against a user table,
//! per-user read rules over title paths, and a failed-attempt throttle.
//!
//! # Contract
//!
//! - In, once: the users of the config ([`User`]), the realm, and a
//!   server key of at least [`MIN_KEY`] random bytes the caller generates
//!   ([`Auth::new`]). Per request: the method as sent, the
//!   `Authorization` value if any, the time in unix seconds, and whether
//!   the connection is TLS ([`Auth::check`]); then the title path — as
//!   the `rtsp`/`http` modules give it, percent-decoded, no leading `/` —
//!   ([`Auth::may_read`]).
//! - Out: `WWW-Authenticate` values ([`Auth::challenges`]), an
//!   [`Outcome`], and whether that outcome may read a path.
//! - Never: I/O, clocks, randomness, panics on any input, or state per
//!   nonce or client (except in [`Throttle`], which the caller owns).
//!   Passwords are not kept: only HA1 = H(name:realm:password) under MD5
//!   and SHA-256, which is also what a config may store
//!   ([`hashed_secret`]).
//!
//! # Use
//!
//! ```text
//! if !throttle.allow(ip, now_ms)          → refuse (e.g. 503), no check
//! match auth.check(method, header, now, tls) {
//!     Stale                               → 401, challenges(now, tls, true)
//!     Failed                              → throttle.failed(ip, now_ms); 401, challenges(now, tls, false)
//!     who if auth.may_read(&who, path)    → serve
//!     Anonymous                           → 401, challenges(now, tls, false)
//!     Authenticated { .. }                → 403
//! }
//! ```
//! An open server ([`Auth::is_open`]: no users) checks nothing: every
//! outcome is `Anonymous` and may read everything.
//!
//! # Accepted credentials
//!
//! - Digest with `qop=auth`, `nc` and `cnonce` (ffmpeg, browsers), or
//!   without `qop` (RFC 2069: GStreamer's rtspsrc, live555/VLC);
//!   `algorithm` MD5 (also when absent), SHA-256, and their `-sess`
//!   forms. Refused: `auth-int`, `userhash`, `username*`.
//! - Basic, only over TLS.
//!
//! The Digest `uri` parameter enters the hash as the client sent it and is
//! not compared with the request line: RTSP clients send the absolute URL,
//! a path, or the URL of a track for the same request. So a captured
//! request can be replayed, with its method and `uri`, while its nonce is
//! fresh (nonces are stateless and `nc` is not tracked): where that
//! matters, use TLS.
//!
//! Stored hashes bind the user's name and the realm: renaming a user or
//! changing the realm needs new hashes.

mod hash;
mod header;
mod nonce;
pub mod throttle;

#[cfg(test)]
mod tests;

use std::fmt;

use globset::{GlobBuilder, GlobSet, GlobSetBuilder};
use subtle::ConstantTimeEq;

pub use hash::Ha1;
use hash::{Algorithm, Qop, response, session_ha1, unhex};
use header::quote;
pub use header::{Credentials, MAX_HEADER, Params, parse_authorization};
pub use nonce::MIN_KEY;
use nonce::{Age, Nonces};
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
    /// Malformed, of an unknown user, wrong, of a nonce not ours, or Basic
    /// without TLS.
    Failed,
    /// Right, but on an expired nonce: challenge with `stale=true` and the
    /// client retries without asking its user again.
    Stale,
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
            let paths = globs(user)?;
            rules.push(Rule { account, paths });
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
    /// (RFC 7616 §3.7): Digest SHA-256, Digest MD5, and Basic over TLS.
    /// `realm` then `nonce` (then `stale`) lead, in that order, because
    /// live555 reads them with a fixed pattern; ffmpeg, GStreamer and
    /// live555 take the last Digest challenge, so MD5, which they all
    /// know, comes last.
    pub fn challenges(&self, now_unix: u64, tls: bool, stale: bool) -> Vec<String> {
        let realm = quote(&self.realm);
        let nonce = self.nonces.make(now_unix);
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

    /// Checks a request's `Authorization` value (see the module's doc).
    pub fn check(
        &self,
        method: &str,
        authorization: Option<&str>,
        now_unix: u64,
        tls: bool,
    ) -> Outcome {
        let Some(value) = authorization.filter(|_| !self.is_open()) else {
            return Outcome::Anonymous;
        };
        match parse_authorization(value) {
            Some(Credentials::Digest(params)) => self.check_digest(method, &params, now_unix),
            Some(Credentials::Basic { user, password }) if tls => {
                self.check_basic(&user, &password)
            }
            _ => Outcome::Failed,
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

    fn check_digest(&self, method: &str, params: &Params<'_>, now_unix: u64) -> Outcome {
        let Some(req) = DigestRequest::read(params) else {
            return Outcome::Failed;
        };
        let Some(age) = self.nonces.age(req.nonce, now_unix) else {
            return Outcome::Failed;
        };
        let (user, ha1) = self.account(req.user);
        let mut ha1 = ha1.get(req.alg).to_vec();
        if let (true, Some((_, cnonce, _))) = (req.sess, req.qop) {
            ha1 = session_ha1(req.alg, &ha1, req.nonce, cnonce);
        }
        let expected = response(req.alg, &ha1, req.nonce, req.qop, method, req.uri);
        let right = bool::from(expected.ct_eq(&req.response));
        match (user, right, age) {
            (Some(user), true, Age::Fresh) => Outcome::Authenticated { user },
            (Some(_), true, Age::Stale) => Outcome::Stale,
            _ => Outcome::Failed,
        }
    }

    fn check_basic(&self, name: &str, password: &str) -> Outcome {
        let (user, ha1) = self.account(name);
        let given = Ha1::new(name, &self.realm, password);
        let alg = Algorithm::Sha256;
        match (user, bool::from(given.get(alg).ct_eq(ha1.get(alg)))) {
            (Some(user), true) => Outcome::Authenticated { user },
            _ => Outcome::Failed,
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

/// A user's globs, compiled into one set.
fn globs(user: &User) -> Result<GlobSet, AuthError> {
    let error = |glob: &str, reason: String| AuthError::Glob {
        who: user
            .name
            .as_ref()
            .map_or("the anonymous rule".to_owned(), |n| format!("user {n:?}")),
        glob: glob.to_owned(),
        reason,
    };
    let mut set = GlobSetBuilder::new();
    for glob in &user.paths {
        // Title paths have none, so such a glob would never match.
        if glob.starts_with('/') {
            return Err(error(glob, "title paths do not start with '/'".to_owned()));
        }
        let compiled = GlobBuilder::new(glob).literal_separator(true).build();
        set.add(compiled.map_err(|e| error(glob, e.kind().to_string()))?);
    }
    set.build()
        .map_err(|e| error(&user.paths.join(" "), e.to_string()))
}
