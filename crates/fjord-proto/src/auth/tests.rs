//! End to end: challenges answered the way real clients answer them.

use std::net::Ipv4Addr;

use super::hash::{hex, response, session_ha1};
use super::*;
use proptest::prelude::*;

const KEY: [u8; 32] = [42; 32];
const NOW: u64 = 1_700_000_000;
const URL: &str = "rtsp://example.org:554/movies/a.ts";
const CLIENT: IpAddr = IpAddr::V4(Ipv4Addr::new(192, 0, 2, 1));
const OTHER: IpAddr = IpAddr::V4(Ipv4Addr::new(192, 0, 2, 2));

fn user(name: &str, password: &str, paths: &[&str]) -> User {
    User {
        name: Some(name.to_owned()),
        secret: Some(Secret::Password(password.to_owned())),
        paths: paths.iter().map(|p| p.to_string()).collect(),
        ..User::default()
    }
}

fn anonymous(paths: &[&str]) -> User {
    User {
        paths: paths.iter().map(|p| p.to_string()).collect(),
        ..User::default()
    }
}

/// alice reads everything, bob `movies/*`, anyone `public/**`.
fn table() -> Auth {
    let users = [
        user("alice", "wonder land", &["**"]),
        user("bob", "builder", &["movies/*"]),
        anonymous(&["public/**"]),
    ];
    Auth::new(&users, DEFAULT_REALM, &KEY).unwrap()
}

/// The Digest challenge with this `algorithm` that `auth` sends at `now`.
fn challenge(auth: &Auth, alg: &str, now: u64) -> String {
    let wanted = format!("algorithm={alg},");
    let mut all = auth.challenges((now, 1), CLIENT, false, false).into_iter();
    all.find(|c| c.contains(&wanted)).unwrap()
}

/// A client's answer to a challenge.
struct Answer<'a> {
    user: &'a str,
    password: &'a str,
    method: &'a str,
    uri: &'a str,
    /// Sent as `algorithm="…"` when given; MD5 when not.
    algorithm: Option<&'a str>,
    /// `qop=auth` with this cnonce (ffmpeg) or no `qop` (GStreamer,
    /// live555).
    cnonce: Option<&'a str>,
}

impl Default for Answer<'_> {
    fn default() -> Self {
        Answer {
            user: "alice",
            password: "wonder land",
            method: "DESCRIBE",
            uri: URL,
            algorithm: None,
            cnonce: None,
        }
    }
}

impl Answer<'_> {
    /// The `Authorization` value, in ffmpeg's shape with a cnonce and in
    /// GStreamer's and live555's without.
    fn to(&self, challenge: &str) -> String {
        let Some(Credentials::Digest(c)) = parse_authorization(challenge) else {
            panic!("{challenge}");
        };
        let (realm, nonce, opaque) = (
            c.get("realm").unwrap(),
            c.get("nonce").unwrap(),
            c.get("opaque").unwrap(),
        );
        let (alg, sess) = Algorithm::parse(self.algorithm).unwrap();
        let mut ha1 = Ha1::new(self.user, realm, self.password).get(alg).to_vec();
        if sess {
            ha1 = session_ha1(alg, &ha1, nonce, self.cnonce.unwrap());
        }
        let qop = self.cnonce.map(|cnonce| ("00000001", cnonce, "auth"));
        let r = hex(&response(alg, &ha1, nonce, qop, self.method, self.uri));
        let (user, uri) = (self.user, self.uri);
        let mut header = format!(
            r#"Digest username="{user}", realm={}, nonce="{nonce}", uri="{uri}", response="{r}""#,
            quote(realm)
        );
        if let Some(alg) = self.algorithm {
            header += &format!(r#", algorithm="{alg}""#);
        }
        if let Some(cnonce) = self.cnonce {
            header +=
                &format!(r#", opaque="{opaque}", qop="auth", cnonce="{cnonce}", nc=00000001"#);
        }
        header
    }
}

/// `header` without its `name=` parameter (our headers split on ", ").
fn without(header: &str, name: &str) -> String {
    let prefix = format!("{name}=");
    let params = header.strip_prefix("Digest ").unwrap().split(", ");
    let kept: Vec<&str> = params.filter(|p| !p.starts_with(&prefix)).collect();
    format!("Digest {}", kept.join(", "))
}

fn check(auth: &Auth, header: &str) -> Outcome {
    check_as(auth, "DESCRIBE", Some(header), NOW, false)
}

/// A request from [`CLIENT`] for `movies/a.ts` over RTSP, or over HTTP
/// for `dir/index.html` (RFC 7616's) when the method is GET; `nc` counted
/// afresh.
fn check_as(auth: &Auth, method: &str, header: Option<&str>, now: u64, tls: bool) -> Outcome {
    let target = match method {
        "GET" => Target::Path("dir/index.html"),
        _ => Target::Title("movies/a.ts"),
    };
    let req = Request {
        method,
        authorization: header,
        target,
        client: CLIENT,
        tls,
        now_unix: now,
    };
    auth.check(&req, &mut NonceCounts::default())
}

const FAILED_ALICE: Outcome = Outcome::Failed { user: Some(0) };
const FAILED: Outcome = Outcome::Failed { user: None };

fn failed(outcome: Outcome) -> bool {
    matches!(outcome, Outcome::Failed { .. })
}

const ALICE: Outcome = Outcome::Authenticated { user: 0 };

#[test]
fn open_server_allows_everything() {
    let auth = Auth::new(&[], DEFAULT_REALM, &KEY).unwrap();
    assert!(auth.is_open());
    assert!(!table().is_open());
    assert_eq!(
        check_as(&auth, "DESCRIBE", None, NOW, false),
        Outcome::Anonymous
    );
    assert_eq!(
        check_as(&auth, "DESCRIBE", Some("Basic !"), NOW, true),
        Outcome::Anonymous
    );
    assert!(auth.may_read(&Outcome::Anonymous, "any/thing.ts"));
}

#[test]
fn challenges_prefer_sha256_and_end_with_md5() {
    let auth = table();
    let plain = auth.challenges((NOW, 1), CLIENT, false, false);
    assert_eq!(plain.len(), 2);
    assert!(plain[0].contains("algorithm=SHA-256,"), "{}", plain[0]);
    assert!(plain[1].contains("algorithm=MD5,"), "{}", plain[1]);
    for c in &plain {
        // live555's pattern: `Digest realm="%[^"]", nonce="%[^"]"`.
        let nonce = c.strip_prefix("Digest realm=\"fjord\", nonce=\"").unwrap();
        assert!(
            nonce[44..].starts_with("\", qop=\"auth\", algorithm="),
            "{c}"
        );
        assert!(c.contains(", opaque=\""), "{c}");
    }
    let tls = auth.challenges((NOW, 1), CLIENT, true, false);
    assert_eq!(tls[..2], plain[..]);
    assert_eq!(tls[2], r#"Basic realm="fjord", charset="UTF-8""#);
    let stale = auth.challenges((NOW, 1), CLIENT, false, true);
    assert!(
        stale[1].contains("\", stale=true, qop=\"auth\""),
        "{}",
        stale[1]
    );
}

#[test]
fn realm_is_quoted() {
    let auth = Auth::new(&[user("a", "b", &[])], r#"my "home" \ server"#, &KEY).unwrap();
    let c = &auth.challenges((NOW, 1), CLIENT, true, false);
    assert!(
        c[0].starts_with(r#"Digest realm="my \"home\" \\ server", "#),
        "{}",
        c[0]
    );
    let header = Answer {
        user: "a",
        password: "b",
        ..Answer::default()
    }
    .to(&c[1]);
    assert_eq!(check(&auth, &header), Outcome::Authenticated { user: 0 });
}

/// RFC 7616 §3.9.1's user, password, realm, cnonce, method and uri, on a
/// nonce of ours.
#[test]
fn rfc7616_example_end_to_end() {
    let users = [user("Mufasa", "Circle of Life", &["**"])];
    let auth = Auth::new(&users, "http-auth@example.org", &KEY).unwrap();
    for alg in ["SHA-256", "MD5"] {
        let answer = Answer {
            user: "Mufasa",
            password: "Circle of Life",
            method: "GET",
            uri: "/dir/index.html",
            algorithm: Some(alg),
            cnonce: Some("f2/wE4q74E6zIJEtWaHKaf5wv/H5QzzpXusqGemxURZJ"),
        };
        let header = answer.to(&challenge(&auth, alg, NOW));
        assert_eq!(
            check_as(&auth, "GET", Some(&header), NOW, false),
            Outcome::Authenticated { user: 0 }
        );
    }
}

#[test]
fn ffmpeg_md5_with_qop() {
    let auth = table();
    let answer = Answer {
        algorithm: Some("MD5"),
        cnonce: Some("0123456789abcdef"),
        ..Answer::default()
    };
    assert_eq!(
        check(&auth, &answer.to(&challenge(&auth, "MD5", NOW))),
        ALICE
    );
}

#[test]
fn gstreamer_and_live555_md5_without_qop() {
    let auth = table();
    for uri in [
        URL,
        "rtsp://example.org/movies/a.ts/trackID=1",
        "/movies/a.ts",
    ] {
        let header = Answer {
            uri,
            ..Answer::default()
        }
        .to(&challenge(&auth, "MD5", NOW));
        assert_eq!(check(&auth, &header), ALICE, "{header}");
    }
}

#[test]
fn sha256_and_sess_forms() {
    let auth = table();
    for (alg, cnonce) in [
        ("SHA-256", None),
        ("SHA-256", Some("c")),
        ("MD5-sess", Some("c")),
        ("SHA-256-sess", Some("c")),
    ] {
        let answer = Answer {
            algorithm: Some(alg),
            cnonce,
            ..Answer::default()
        };
        let offered = alg.trim_end_matches("-sess");
        let header = answer.to(&challenge(&auth, offered, NOW));
        assert_eq!(check(&auth, &header), ALICE, "{alg}");
    }
}

#[test]
fn wrong_credentials_fail() {
    let auth = table();
    let c = challenge(&auth, "MD5", NOW);
    let wrong_password = Answer {
        password: "wonderland",
        ..Answer::default()
    }
    .to(&c);
    let unknown_user = Answer {
        user: "mallory",
        ..Answer::default()
    }
    .to(&c);
    let other_users_password = Answer {
        password: "builder",
        ..Answer::default()
    }
    .to(&c);
    assert_eq!(check(&auth, &wrong_password), FAILED_ALICE);
    assert_eq!(check(&auth, &unknown_user), FAILED, "no user to name");
    assert_eq!(check(&auth, &other_users_password), FAILED_ALICE);
    let right = Answer::default().to(&c);
    assert!(
        failed(check_as(&auth, "PLAY", Some(&right), NOW, false)),
        "other method"
    );
    let other_uri = right.replace(URL, "rtsp://example.org/movies/b.ts");
    assert!(failed(check(&auth, &other_uri)));
}

/// Another key is another process (a restart): a right answer on its
/// nonce gets a fresh one, and is no failure; a wrong one fails.
#[test]
fn foreign_or_tampered_nonces_are_stale_with_the_right_password() {
    let auth = table();
    let foreign = Auth::new(
        &[user("alice", "wonder land", &[])],
        DEFAULT_REALM,
        &[43; 32],
    )
    .unwrap();
    let c = challenge(&foreign, "MD5", NOW);
    assert_eq!(check(&auth, &Answer::default().to(&c)), Outcome::Stale);
    let wrong = Answer {
        password: "x",
        ..Answer::default()
    };
    assert_eq!(check(&auth, &wrong.to(&c)), FAILED_ALICE);

    let c = challenge(&auth, "MD5", NOW);
    let nonce_at = c.find("nonce=\"").unwrap() + 7;
    for at in [0, 5, 10, 20, 31].map(|i| nonce_at + i) {
        let mut tampered = c.clone();
        let with = if &c[at..=at] == "A" { "B" } else { "A" };
        tampered.replace_range(at..=at, with);
        let header = Answer::default().to(&tampered);
        assert_eq!(check(&auth, &header), Outcome::Stale, "{tampered}");
        assert_eq!(check(&auth, &wrong.to(&tampered)), FAILED_ALICE);
    }
}

/// A nonce made for one address is stale from another.
#[test]
fn nonces_are_bound_to_the_client_address() {
    let auth = table();
    let header = Answer::default().to(&challenge(&auth, "MD5", NOW));
    let from = |client| Request {
        method: "DESCRIBE",
        authorization: Some(&header),
        target: Target::Title("movies/a.ts"),
        client,
        tls: false,
        now_unix: NOW,
    };
    let mut counts = NonceCounts::default();
    assert_eq!(auth.check(&from(OTHER), &mut counts), Outcome::Stale);
    assert_eq!(auth.check(&from(CLIENT), &mut counts), ALICE);
}

/// The Digest `uri` must name the request's target: a right answer for
/// one title or path opens no other.
#[test]
fn the_uri_must_name_the_target() {
    let auth = table();
    let c = challenge(&auth, "MD5", NOW);
    let answer = |method, uri| {
        let a = Answer {
            method,
            uri,
            cnonce: Some("c"),
            ..Answer::default()
        };
        a.to(&c)
    };
    let run = |method, header: &str, target| {
        let req = Request {
            method,
            authorization: Some(header),
            target,
            client: CLIENT,
            tls: false,
            now_unix: NOW,
        };
        auth.check(&req, &mut NonceCounts::default())
    };
    let b = Target::Title("movies/b.ts");
    assert_eq!(run("DESCRIBE", &answer("DESCRIBE", URL), b), FAILED_ALICE);
    let track = answer("SETUP", "rtsp://h/movies/b.ts/trackID=1");
    assert_eq!(run("SETUP", &track, b), ALICE, "any track of the title");
    let playlist = answer("GET", "/movies/b.ts/index.m3u8");
    let http = |path| run("GET", &playlist, Target::Path(path));
    assert_eq!(http("movies/b.ts/index.m3u8"), ALICE);
    assert_eq!(http("movies/b.ts/seg-1.ts"), FAILED_ALICE);
    assert_eq!(http("movies/b.ts"), FAILED_ALICE);
}

/// With `qop`, each `nc` passes once per nonce, in increasing order.
#[test]
fn nc_must_grow_per_nonce() {
    let auth = table();
    let c = challenge(&auth, "MD5", NOW);
    let header = Answer {
        cnonce: Some("c"),
        ..Answer::default()
    }
    .to(&c);
    let mut counts = NonceCounts::default();
    let mut run = |header: &str| {
        let req = Request {
            method: "DESCRIBE",
            authorization: Some(header),
            target: Target::Title("movies/a.ts"),
            client: CLIENT,
            tls: false,
            now_unix: NOW,
        };
        auth.check(&req, &mut counts)
    };
    assert_eq!(run(&header), ALICE);
    assert_eq!(run(&header), Outcome::Stale, "replayed");
    // `Answer` sends nc=00000001; the hash covers it, so a client's next
    // request is made with the password.
    let second = |nc| {
        let qop = Some((nc, "c", "auth"));
        let ha1 = Ha1::new("alice", DEFAULT_REALM, "wonder land");
        let Some(Credentials::Digest(p)) = parse_authorization(&c) else {
            panic!()
        };
        let nonce = p.get("nonce").unwrap();
        let r = hex(&response(
            Algorithm::Md5,
            ha1.get(Algorithm::Md5),
            nonce,
            qop,
            "DESCRIBE",
            URL,
        ));
        let with_nc = header.replace("nc=00000001", &format!("nc={nc}"));
        let old = with_nc.split("response=\"").nth(1).unwrap()[..32].to_owned();
        with_nc.replace(&old, &r)
    };
    assert_eq!(run(&second("00000003")), ALICE);
    assert_eq!(run(&second("00000002")), Outcome::Stale, "lower");
    assert_eq!(run(&second("00000004")), ALICE);
    assert_eq!(run(&second("zz")), FAILED_ALICE, "not a count");
}

/// RFC 2069 answers have no `nc`: they pass again (see the module doc).
#[test]
fn without_qop_the_same_answer_passes_again() {
    let auth = table();
    let header = Answer::default().to(&challenge(&auth, "MD5", NOW));
    let mut counts = NonceCounts::default();
    let req = Request {
        method: "DESCRIBE",
        authorization: Some(&header),
        target: Target::Title("movies/a.ts"),
        client: CLIENT,
        tls: false,
        now_unix: NOW,
    };
    assert_eq!(auth.check(&req, &mut counts), ALICE);
    assert_eq!(auth.check(&req, &mut counts), ALICE);
    assert_eq!(counts.tracked(), 0);
}

#[test]
fn expired_nonce_is_stale_only_with_the_right_password() {
    let auth = table();
    let c = challenge(&auth, "MD5", NOW);
    let later = NOW + DEFAULT_NONCE_LIFETIME + 1;
    let right = Answer::default().to(&c);
    assert_eq!(
        check_as(
            &auth,
            "DESCRIBE",
            Some(&right),
            NOW + DEFAULT_NONCE_LIFETIME,
            false
        ),
        ALICE
    );
    assert_eq!(
        check_as(&auth, "DESCRIBE", Some(&right), later, false),
        Outcome::Stale
    );
    let wrong = Answer {
        password: "x",
        ..Answer::default()
    }
    .to(&c);
    assert!(failed(check_as(
        &auth,
        "DESCRIBE",
        Some(&wrong),
        later,
        false
    )));
}

#[test]
fn nonce_lifetime_is_configurable() {
    let auth = table().nonce_lifetime(10);
    let right = Answer::default().to(&challenge(&auth, "MD5", NOW));
    assert_eq!(
        check_as(&auth, "DESCRIBE", Some(&right), NOW + 10, false),
        ALICE
    );
    assert_eq!(
        check_as(&auth, "DESCRIBE", Some(&right), NOW + 11, false),
        Outcome::Stale
    );
}

#[test]
fn basic_only_over_tls() {
    let auth = table();
    let basic = |user_pass: &str| {
        format!(
            "Basic {}",
            base64::Engine::encode(&base64::engine::general_purpose::STANDARD, user_pass)
        )
    };
    let alice = basic("alice:wonder land");
    assert!(failed(check_as(&auth, "GET", Some(&alice), NOW, false)));
    assert_eq!(check_as(&auth, "GET", Some(&alice), NOW, true), ALICE);
    for wrong in [
        "alice:wonderland",
        "alice:",
        "mallory:wonder land",
        "bob:wonder land",
    ] {
        assert!(
            failed(check_as(&auth, "GET", Some(&basic(wrong)), NOW, true)),
            "{wrong}"
        );
    }
}

#[test]
fn hashed_secrets_verify_like_passwords() {
    let hashed = |realm| User {
        secret: Some(Secret::Hashed(hashed_secret("dora", realm, "explorer"))),
        ..user("dora", "", &["**"])
    };
    let auth = Auth::new(&[hashed(DEFAULT_REALM)], DEFAULT_REALM, &KEY).unwrap();
    let dora = Outcome::Authenticated { user: 0 };
    for (algorithm, cnonce) in [
        (None, None),
        (Some("MD5"), Some("c")),
        (Some("SHA-256"), None),
    ] {
        let answer = Answer {
            user: "dora",
            password: "explorer",
            algorithm,
            cnonce,
            ..Answer::default()
        };
        let c = challenge(&auth, algorithm.unwrap_or("MD5"), NOW);
        assert_eq!(check(&auth, &answer.to(&c)), dora, "{algorithm:?}");
    }
    let basic = "Basic ZG9yYTpleHBsb3Jlcg=="; // dora:explorer
    assert_eq!(check_as(&auth, "GET", Some(basic), NOW, true), dora);

    let other_realm = Auth::new(&[hashed("elsewhere")], DEFAULT_REALM, &KEY).unwrap();
    assert!(failed(check_as(
        &other_realm,
        "GET",
        Some(basic),
        NOW,
        true
    )));
}

#[test]
fn missing_or_unsupported_fields_fail() {
    let auth = table();
    let c = challenge(&auth, "MD5", NOW);
    let qop = Answer {
        algorithm: Some("MD5"),
        cnonce: Some("c"),
        ..Answer::default()
    }
    .to(&c);
    assert_eq!(check(&auth, &qop), ALICE);
    for name in ["username", "nonce", "uri", "response", "nc", "cnonce"] {
        assert!(failed(check(&auth, &without(&qop, name))), "{name}");
    }
    let rfc2069 = Answer::default().to(&c);
    let sess = Answer {
        algorithm: Some("MD5-sess"),
        cnonce: Some("c"),
        ..Answer::default()
    };
    for header in [
        qop.replace("qop=\"auth\"", "qop=\"auth-int\""),
        qop.replace("algorithm=\"MD5\"", "algorithm=\"SHA-512-256\""),
        format!("{qop}, userhash=true"),
        format!("{qop}, nc=00000002"),
        without(&sess.to(&c), "qop"),
        rfc2069.replace("response=\"", "response=\"zz"),
        rfc2069.replace("response=\"", "response=\"0"),
        format!("{rfc2069}{}", " ".repeat(MAX_HEADER)),
        "Digest".to_owned(),
        "Bearer x".to_owned(),
    ] {
        assert!(failed(check(&auth, &header)), "{header}");
    }
    assert_eq!(
        check_as(&auth, "DESCRIBE", None, NOW, false),
        Outcome::Anonymous
    );
}

#[test]
fn path_rules() {
    let users = [
        user("alice", "a", &["**"]),
        user("bob", "b", &["movies/*"]),
        anonymous(&["public/**"]),
        user("carol", "c", &["music/*.mp3"]),
    ];
    let auth = Auth::new(&users, DEFAULT_REALM, &KEY).unwrap();
    let [alice, bob, anon_index, carol] = [0, 1, 2, 3].map(|user| Outcome::Authenticated { user });
    let cases: &[(&Outcome, &str, bool)] = &[
        (&alice, "movies/a.ts", true),
        (&alice, "a/b/c/d.mp4", true),
        (&alice, "x.ts", true),
        (&bob, "movies/a.ts", true),
        (&bob, "movies/sub/a.ts", false),
        (&bob, "music/a.mp3", false),
        (&bob, "public/a/b.ts", true),
        (&carol, "music/a.mp3", true),
        (&carol, "music/a.ts", false),
        (&carol, "movies/a.ts", false),
        (&Outcome::Anonymous, "public/a/b.ts", true),
        (&Outcome::Anonymous, "movies/a.ts", false),
        (&FAILED, "public/a.ts", true),
        (&Outcome::Stale, "movies/a.ts", false),
        (&anon_index, "movies/a.ts", false),
        (&Outcome::Authenticated { user: 99 }, "movies/a.ts", false),
        (&Outcome::Authenticated { user: 99 }, "public/a.ts", true),
    ];
    for (who, path, expected) in cases {
        assert_eq!(auth.may_read(who, path), *expected, "{who:?} {path}");
    }
    assert_eq!(auth.user_name(1), Some("bob"));
    assert_eq!(auth.user_name(2), None);
    assert_eq!(auth.user_name(99), None);
}

#[test]
fn construction_errors_name_the_problem() {
    let err = |users: &[User]| Auth::new(users, DEFAULT_REALM, &KEY).err().unwrap();
    let glob = err(&[
        user("alice", "a", &["**"]),
        user("bob", "b", &["movies/[a"]),
    ]);
    assert!(
        matches!(&glob, AuthError::Glob { who, glob, .. } if who == "user \"bob\"" && glob == "movies/[a")
    );
    let message = glob.to_string();
    assert!(
        message.starts_with(r#"user "bob": invalid path glob "movies/[a": "#),
        "{message}"
    );
    let rooted = err(&[anonymous(&["/public/**"])]).to_string();
    assert!(
        rooted.starts_with("the anonymous rule: invalid path glob \"/public/**\""),
        "{rooted}"
    );

    let no_secret = User {
        secret: None,
        ..user("bob", "", &[])
    };
    assert_eq!(err(&[no_secret]), AuthError::NoSecret("bob".into()));
    let anon_secret = User {
        secret: Some(Secret::Password("x".into())),
        ..anonymous(&[])
    };
    assert_eq!(err(&[anon_secret]), AuthError::AnonymousSecret);
    let bad_hash = User {
        secret: Some(Secret::Hashed("digest:00".into())),
        ..user("bob", "", &[])
    };
    assert_eq!(err(&[bad_hash]), AuthError::BadHash("bob".into()));
    assert_eq!(
        err(&[user("bob", "a", &[]), user("bob", "b", &[])]),
        AuthError::Duplicate("bob".into())
    );
    for name in ["", "a:b", "a\nb"] {
        assert_eq!(
            err(&[user(name, "a", &[])]),
            AuthError::BadName(name.into())
        );
    }
    assert_eq!(
        Auth::new(&[], DEFAULT_REALM, &[1; 15]).err(),
        Some(AuthError::ShortKey)
    );
    assert_eq!(
        format!("{:?}", Secret::Password("hunter2".into())),
        "Password(..)"
    );
}

proptest! {
    #[test]
    fn check_never_panics_on_any_string(header in any::<String>(), tls: bool) {
        prop_assert!(failed(check_as(&table(), "DESCRIBE", Some(&header), NOW, tls)));
    }

    #[test]
    fn check_never_panics_on_digest_like_strings(
        header in "(Digest|Basic|digest) ((username|nonce|uri|response|qop|nc|cnonce|algorithm|userhash) ?= ?(\"([^\"\\\\]|\\\\.){0,20}\"|[a-zA-Z0-9/+=-]{0,12}) ?,? ?){0,10}",
        tls: bool,
    ) {
        prop_assert!(failed(check_as(&table(), "DESCRIBE", Some(&header), NOW, tls)));
    }

    /// Any single-byte change to a right header is at worst refused.
    #[test]
    fn mutated_headers_never_panic(at in 0usize..400, byte in any::<u8>()) {
        let auth = table();
        let mut header = Answer { cnonce: Some("c"), ..Answer::default() }.to(&challenge(&auth, "MD5", NOW)).into_bytes();
        let at = at % header.len();
        header[at] = byte;
        let header = String::from_utf8_lossy(&header);
        let _ = check_as(&auth, "DESCRIBE", Some(&header), NOW, false);
    }
}

#[test]
fn publishing_needs_a_rule_even_on_an_open_server() {
    let open = Auth::new(&[], "fjord", &KEY).unwrap();
    assert!(!open.may_publish(&Outcome::Anonymous, "live/a"));
    let mut alice = user("alice", "pw", &["**"]);
    alice.publish = vec!["live/**".to_owned()];
    let mut anyone = anonymous(&[]);
    anyone.publish = vec!["open/*".to_owned()];
    let auth = Auth::new(&[alice, user("bob", "pw", &["**"]), anyone], "fjord", &KEY).unwrap();
    let (a, b) = (
        Outcome::Authenticated { user: 0 },
        Outcome::Authenticated { user: 1 },
    );
    assert!(auth.may_publish(&a, "live/x/y"));
    assert!(!auth.may_publish(&a, "films/x"));
    assert!(!auth.may_publish(&b, "live/x"));
    assert!(auth.may_publish(&b, "open/x"));
    assert!(auth.may_publish(&Outcome::Anonymous, "open/x"));
    assert!(!auth.may_publish(&Outcome::Anonymous, "live/x"));
}
