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

use fjord_proto::auth::{Auth, NonceCounts, Outcome, Request, Target, Throttle};

use crate::{Config, ConfigError};

pub(crate) struct Guard {
    /// Rebuilt on reload; the keys stay, so nonces given out stay good.
    tables: RwLock<Arc<Tables>>,
    keys: Keys,
    /// Apart for the admin listener, so its callers (often all on
    /// loopback) and the players lock out and count nonces apart.
    read: Mutex<Side>,
    admin: Mutex<Side>,
    epoch: Instant,
}

/// One key for reading titles and another for the admin listener, so a
/// header seen on plain RTSP or HTTP is not taken by the admin listener.
struct Keys {
    read: [u8; 32],
    admin: [u8; 32],
}

/// What is remembered about one listener's callers.
#[derive(Default)]
struct Side {
    throttle: Throttle,
    counts: NonceCounts,
}

/// Who reads titles, and who uses the admin listener.
struct Tables {
    read: Auth,
    admin: Admin,
}

enum Admin {
    /// No users at all: an open server.
    Open,
    /// The users again, under the admin key, and whether each has
    /// `admin = true`.
    Users(Box<Auth>, Vec<bool>),
}

/// What a request may do.
pub(crate) enum Verdict {
    Allow,
    /// Answer with this status and these `WWW-Authenticate` values.
    Deny(u16, Vec<String>),
}

impl Guard {
    pub(crate) fn new(config: &Config) -> Result<Guard, ConfigError> {
        let keys = Keys {
            read: rand::random(),
            admin: rand::random(),
        };
        Ok(Guard {
            tables: RwLock::new(Arc::new(build(config, &keys)?)),
            keys,
            read: Mutex::default(),
            admin: Mutex::default(),
            epoch: Instant::now(),
        })
    }

    /// Takes the users and rules of a reloaded config (checked by
    /// [`Config::validate`] already).
    pub(crate) fn reload(&self, config: &Config) -> Result<(), ConfigError> {
        let tables = Arc::new(build(config, &self.keys)?);
        *self.tables.write().unwrap_or_else(|e| e.into_inner()) = tables;
        Ok(())
    }

    fn tables(&self) -> Arc<Tables> {
        self.tables
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// Whether `authorization` lets an RTSP request of `method` from `ip`
    /// read the title at `title` (its Digest `uri` must name that title).
    pub(crate) fn check(
        &self,
        ip: IpAddr,
        method: &str,
        authorization: Option<&str>,
        title: &str,
        tls: bool,
    ) -> Verdict {
        let req = request(ip, method, authorization, Target::Title(title), tls);
        self.check_read(&req, title)
    }

    /// Whether `authorization` lets an RTSP request publish to the live
    /// path `path` (`publish` globs). An open server is let through: it
    /// takes no publishers at all (405).
    pub(crate) fn check_publish(
        &self,
        ip: IpAddr,
        method: &str,
        authorization: Option<&str>,
        path: &str,
        tls: bool,
    ) -> Verdict {
        let tables = self.tables();
        let auth = &tables.read;
        if auth.is_open() {
            // No users, no publish rule: the server takes no live input,
            // and says so with 405 (`control::live::answer`).
            return Verdict::Allow;
        }
        let req = request(ip, method, authorization, Target::Title(path), tls);
        self.verdict(auth, &self.read, &req, |who| auth.may_publish(who, path))
    }

    /// The same for an HTTP request for `path` (decoded, no leading `/`)
    /// of the title at `title`: its Digest `uri` must name `path`.
    pub(crate) fn check_http(
        &self,
        ip: IpAddr,
        method: &str,
        authorization: Option<&str>,
        (title, path): (&str, &str),
        tls: bool,
    ) -> Verdict {
        let req = request(ip, method, authorization, Target::Path(path), tls);
        self.check_read(&req, title)
    }

    fn check_read(&self, req: &Request<'_>, title: &str) -> Verdict {
        let tables = self.tables();
        let read = &tables.read;
        self.verdict(read, &self.read, req, |who| read.may_read(who, title))
    }

    /// The same for the admin listener at `path` (its request path,
    /// decoded, as [`Target::Path`] takes it): its users are those with
    /// `admin = true`; `basic`: whether Basic may be taken (Prometheus
    /// knows no Digest).
    pub(crate) fn check_admin(
        &self,
        ip: IpAddr,
        method: &str,
        authorization: Option<&str>,
        path: &str,
        basic: bool,
    ) -> Verdict {
        let tables = self.tables();
        match &tables.admin {
            Admin::Open => Verdict::Allow,
            Admin::Users(auth, admins) => {
                let req = request(ip, method, authorization, Target::Path(path), basic);
                self.verdict(auth, &self.admin, &req, |who| {
                    matches!(who, Outcome::Authenticated { user } if admins.get(*user) == Some(&true))
                })
            }
        }
    }

    /// Checks the credentials; `allowed` says what the outcome may do. A
    /// locked-out address is refused only failing attempts and the users
    /// who failed from it ([`Throttle`]).
    fn verdict(
        &self,
        auth: &Auth,
        side: &Mutex<Side>,
        req: &Request<'_>,
        allowed: impl Fn(&Outcome) -> bool,
    ) -> Verdict {
        if auth.is_open() {
            return Verdict::Allow;
        }
        let now_ms = self.epoch.elapsed().as_millis() as u64;
        let (ip, now) = (req.client, req.now_unix);
        // A random salt: two challenges in one second get two nonces.
        let challenge = |stale| {
            let values = auth.challenges((now, rand::random()), ip, req.tls, stale);
            Verdict::Deny(401, values)
        };
        let mut side = side.lock().unwrap_or_else(|e| e.into_inner());
        let Side { throttle, counts } = &mut *side;
        match auth.check(req, counts) {
            Outcome::Stale => challenge(true),
            Outcome::Failed { user } => {
                let name = user.and_then(|u| auth.user_name(u));
                // The failure that locks is still answered 401.
                let locked = throttle.locked(ip, now_ms);
                throttle.failed(ip, name, now_ms);
                tracing::info!(%ip, user = name, "wrong credentials");
                match locked {
                    true => Verdict::Deny(503, vec![]),
                    false => challenge(false),
                }
            }
            Outcome::Authenticated { user }
                if auth
                    .user_name(user)
                    .is_some_and(|name| throttle.refuses(ip, name, now_ms)) =>
            {
                Verdict::Deny(503, vec![])
            }
            who if allowed(&who) => Verdict::Allow,
            Outcome::Anonymous => challenge(false),
            Outcome::Authenticated { .. } => Verdict::Deny(403, vec![]),
        }
    }
}

fn request<'a>(
    client: IpAddr,
    method: &'a str,
    authorization: Option<&'a str>,
    target: Target<'a>,
    tls: bool,
) -> Request<'a> {
    let now_unix = (SystemTime::now().duration_since(UNIX_EPOCH))
        .unwrap_or_default()
        .as_secs();
    Request {
        method,
        authorization,
        target,
        client,
        tls,
        now_unix,
    }
}

fn build(config: &Config, keys: &Keys) -> Result<Tables, ConfigError> {
    let users = config.users();
    let auth = |key: &[u8]| {
        Auth::new(&users, &config.auth_realm, key)
            .map_err(|e| ConfigError::Invalid(format!("[[user]]: {e}")))
    };
    let admin = match config.users.is_empty() {
        true => Admin::Open,
        false => Admin::Users(
            Box::new(auth(&keys.admin)?),
            config.users.iter().map(|u| u.admin).collect(),
        ),
    };
    Ok(Tables {
        read: auth(&keys.read)?,
        admin,
    })
}

/// The users of a config check out (for [`Config::validate`]).
pub(crate) fn check_users(config: &Config) -> Result<(), ConfigError> {
    let zero = Keys {
        read: [0; 32],
        admin: [0; 32],
    };
    build(config, &zero).map(drop)
}
