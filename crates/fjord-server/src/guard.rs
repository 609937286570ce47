//! Who may read which title: the config's `[[user]]` tables checked
//! ([`fjord_proto::auth`]) on every RTSP request but OPTIONS and every HTTP
//! download, before any title is looked up, so a refusal says nothing
//! about which titles exist. Failed attempts are throttled per address.
//! No users: an open server, nothing checked.

use std::{
    net::IpAddr,
    sync::{Arc, Mutex, RwLock},
    time::{Instant, SystemTime, UNIX_EPOCH},
};

use fjord_proto::auth::{Auth, Outcome, Throttle};

use crate::{Config, ConfigError};

pub(crate) struct Guard {
    /// Rebuilt on reload; the key stays, so nonces given out stay good.
    tables: RwLock<Arc<Tables>>,
    key: [u8; 32],
    throttle: Mutex<Throttle>,
    epoch: Instant,
}

/// Who reads titles, and who uses the admin listener.
struct Tables {
    read: Auth,
    admin: Admin,
}

enum Admin {
    /// No users at all: an open server.
    Open,
    /// Whether each user of `read` (same order) has `admin = true`.
    Users(Vec<bool>),
}

/// What a request may do.
pub(crate) enum Verdict {
    Allow,
    /// Answer with this status and these `WWW-Authenticate` values.
    Deny(u16, Vec<String>),
}

impl Guard {
    pub(crate) fn new(config: &Config) -> Result<Guard, ConfigError> {
        let key: [u8; 32] = rand::random();
        Ok(Guard {
            tables: RwLock::new(Arc::new(build(config, &key)?)),
            key,
            throttle: Mutex::new(Throttle::new()),
            epoch: Instant::now(),
        })
    }

    /// Takes the users and rules of a reloaded config (checked by
    /// [`Config::validate`] already).
    pub(crate) fn reload(&self, config: &Config) -> Result<(), ConfigError> {
        let tables = Arc::new(build(config, &self.key)?);
        *self.tables.write().unwrap_or_else(|e| e.into_inner()) = tables;
        Ok(())
    }

    fn tables(&self) -> Arc<Tables> {
        self.tables
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// Whether `authorization` lets a request of `method` from `ip` read
    /// the title at `path`.
    pub(crate) fn check(
        &self,
        ip: IpAddr,
        method: &str,
        authorization: Option<&str>,
        path: &str,
        tls: bool,
    ) -> Verdict {
        let tables = self.tables();
        let read = &tables.read;
        self.verdict(read, ip, (method, authorization), tls, |who| {
            read.may_read(who, path)
        })
    }

    /// The same for the admin listener: its users are those with
    /// `admin = true`; `basic`: whether Basic may be taken (Prometheus
    /// knows no Digest).
    pub(crate) fn check_admin(
        &self,
        ip: IpAddr,
        method: &str,
        authorization: Option<&str>,
        basic: bool,
    ) -> Verdict {
        let tables = self.tables();
        match &tables.admin {
            Admin::Open => Verdict::Allow,
            Admin::Users(admins) => self.verdict(&tables.read, ip, (method, authorization), basic, |who| {
                matches!(who, Outcome::Authenticated { user } if admins.get(*user) == Some(&true))
            }),
        }
    }

    /// Checks the credentials; `allowed` says what the outcome may do.
    fn verdict(
        &self,
        auth: &Auth,
        ip: IpAddr,
        (method, authorization): (&str, Option<&str>),
        tls: bool,
        allowed: impl Fn(&Outcome) -> bool,
    ) -> Verdict {
        if auth.is_open() {
            return Verdict::Allow;
        }
        let now_ms = self.epoch.elapsed().as_millis() as u64;
        let mut throttle = self.throttle.lock().unwrap_or_else(|e| e.into_inner());
        if !throttle.allow(ip, now_ms) {
            return Verdict::Deny(503, vec![]);
        }
        let now = (SystemTime::now().duration_since(UNIX_EPOCH))
            .unwrap_or_default()
            .as_secs();
        let challenge = |stale| Verdict::Deny(401, auth.challenges(now, tls, stale));
        match auth.check(method, authorization, now, tls) {
            Outcome::Stale => challenge(true),
            Outcome::Failed => {
                throttle.failed(ip, now_ms);
                tracing::info!(%ip, "wrong credentials");
                challenge(false)
            }
            who if allowed(&who) => Verdict::Allow,
            Outcome::Anonymous => challenge(false),
            Outcome::Authenticated { .. } => Verdict::Deny(403, vec![]),
        }
    }
}

fn build(config: &Config, key: &[u8]) -> Result<Tables, ConfigError> {
    let read = Auth::new(&config.users(), &config.auth_realm, key)
        .map_err(|e| ConfigError::Invalid(format!("[[user]]: {e}")))?;
    let admin = match config.users.is_empty() {
        true => Admin::Open,
        false => Admin::Users(config.users.iter().map(|u| u.admin).collect()),
    };
    Ok(Tables { read, admin })
}

/// The users of a config check out (for [`Config::validate`]).
pub(crate) fn check_users(config: &Config) -> Result<(), ConfigError> {
    build(config, &[0u8; 32]).map(drop)
}
