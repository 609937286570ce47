//! `auth` on arbitrary `Authorization` values: checking and parsing never
//! panic, over TLS or not; any string quoted back into a Digest parameter
//! parses to itself.
#![no_main]

use std::sync::LazyLock;

use fjord_proto::auth::{
    Auth, Credentials, MAX_HEADER, NonceCounts, Request, Secret, Target, User, parse_authorization,
};
use libfuzzer_sys::fuzz_target;

static AUTH: LazyLock<Auth> = LazyLock::new(|| {
    let users = [
        User {
            name: Some("alice".into()),
            secret: Some(Secret::Password("wonder land".into())),
            paths: vec!["movies/*".into()],
            publish: vec!["live/**".into()],
        },
        User {
            paths: vec!["public/**".into()],
            ..User::default()
        },
    ];
    Auth::new(&users, "fjord", &[42; 32]).expect("a valid table")
});

fuzz_target!(|data: &[u8]| {
    let Ok(s) = std::str::from_utf8(data) else {
        return;
    };
    let mut counts = NonceCounts::new(4);
    for (tls, target) in [(false, Target::Title(s)), (true, Target::Path(s))] {
        let req = Request {
            method: "DESCRIBE",
            authorization: Some(s),
            target,
            client: std::net::Ipv4Addr::LOCALHOST.into(),
            tls,
            now_unix: 1_700_000_000,
        };
        let outcome = AUTH.check(&req, &mut counts);
        AUTH.may_read(&outcome, s);
    }
    let quoted = format!(
        "Digest v=\"{}\"",
        s.replace('\\', "\\\\").replace('"', "\\\"")
    );
    if quoted.len() <= MAX_HEADER {
        match parse_authorization(&quoted) {
            Some(Credentials::Digest(params)) => assert_eq!(params.get("v"), Some(s)),
            other => panic!("{quoted:?} → {other:?}"),
        }
    }
});
