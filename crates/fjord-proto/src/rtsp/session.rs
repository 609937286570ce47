//! The per-session state machine, server side (RFC 2326 Appendix A.2).
//!
//! Only the state: timers, transports and the session table belong to the
//! server. TEARDOWN returns [`State::Init`], after which the server removes
//! the session.

use super::framing::Method;

/// Server-side session state.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum State {
    /// No transport set up yet (also: after TEARDOWN, terminal).
    Init,
    /// Set up or paused.
    Ready,
    /// Streaming.
    Playing,
}

/// The state after `method` succeeds in `state`, or the status to answer.
///
/// - SETUP: Init/Ready → Ready; Playing → Playing. RFC 2326 lets a server
///   refuse a *transport change* while playing with 455; that needs the
///   existing transport, so it is the server's check, not this table's.
/// - PLAY: Ready/Playing → Playing; Init → 455.
/// - PAUSE: Ready/Playing → Ready; Init → 455.
/// - TEARDOWN: any → Init.
/// - OPTIONS, DESCRIBE, GET_PARAMETER, SET_PARAMETER: any state, unchanged.
/// - ANNOUNCE, RECORD, REDIRECT: 405 (we only serve; answer with `Allow`).
/// - Unknown methods: 501.
pub fn next_state(state: State, method: &Method) -> Result<State, u16> {
    use State::*;
    match (method, state) {
        (Method::Setup, Init | Ready) => Ok(Ready),
        (Method::Setup, Playing) => Ok(Playing),
        (Method::Play, Ready | Playing) => Ok(Playing),
        (Method::Pause, Ready | Playing) => Ok(Ready),
        (Method::Play | Method::Pause, Init) => Err(455),
        (Method::Teardown, _) => Ok(Init),
        (Method::Options | Method::Describe | Method::GetParameter | Method::SetParameter, s) => {
            Ok(s)
        }
        (Method::Announce | Method::Record | Method::Redirect, _) => Err(405),
        (Method::Other(_), _) => Err(501),
    }
}

/// The methods we implement, for `Public:` and `Allow:`.
pub fn allowed_methods() -> &'static str {
    "OPTIONS, DESCRIBE, SETUP, PLAY, PAUSE, TEARDOWN, GET_PARAMETER, SET_PARAMETER"
}

#[cfg(test)]
mod tests {
    use super::State::*;
    use super::*;

    const STATES: [State; 3] = [Init, Ready, Playing];

    #[test]
    fn table() {
        let m = Method::from_token;
        let expect: &[(&str, [Result<State, u16>; 3])] = &[
            ("SETUP", [Ok(Ready), Ok(Ready), Ok(Playing)]),
            ("PLAY", [Err(455), Ok(Playing), Ok(Playing)]),
            ("PAUSE", [Err(455), Ok(Ready), Ok(Ready)]),
            ("TEARDOWN", [Ok(Init), Ok(Init), Ok(Init)]),
            ("OPTIONS", [Ok(Init), Ok(Ready), Ok(Playing)]),
            ("DESCRIBE", [Ok(Init), Ok(Ready), Ok(Playing)]),
            ("GET_PARAMETER", [Ok(Init), Ok(Ready), Ok(Playing)]),
            ("SET_PARAMETER", [Ok(Init), Ok(Ready), Ok(Playing)]),
            ("ANNOUNCE", [Err(405), Err(405), Err(405)]),
            ("RECORD", [Err(405), Err(405), Err(405)]),
            ("REDIRECT", [Err(405), Err(405), Err(405)]),
            ("FROB", [Err(501), Err(501), Err(501)]),
        ];
        for (method, results) in expect {
            for (state, want) in STATES.iter().zip(results) {
                assert_eq!(
                    next_state(*state, &m(method)),
                    *want,
                    "{method} in {state:?}"
                );
            }
        }
    }

    #[test]
    fn allowed_methods_all_accepted_somewhere() {
        for name in allowed_methods().split(", ") {
            let m = Method::from_token(name);
            assert!(!matches!(m, Method::Other(_)), "{name}");
            assert!(STATES.iter().any(|s| next_state(*s, &m).is_ok()), "{name}");
        }
        assert_eq!(allowed_methods().split(", ").count(), 8);
    }
}
