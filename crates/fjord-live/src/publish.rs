//! A publishing session's steps (RFC 2326 §10.3, §10.11; RFC 7826 §13.5
//! for `mode=record`): ANNOUNCE describes the stream, SETUP with
//! `mode=record` takes each track, RECORD starts it; and the paths in
//! use, one publisher each.

use std::collections::HashMap;

use crate::sdp::Announced;

/// A request out of order or in conflict: its status and why.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Refusal {
    pub status: u16,
    pub reason: &'static str,
}

const fn refuse(status: u16, reason: &'static str) -> Refusal {
    Refusal { status, reason }
}

/// One publisher's session, between its ANNOUNCE and its end.
#[derive(Clone, Debug)]
pub struct Publish {
    pub announced: Announced,
    set_up: Vec<bool>,
    recording: bool,
}

impl Publish {
    pub fn new(announced: Announced) -> Self {
        let n = announced.tracks.len();
        Publish {
            announced,
            set_up: vec![false; n],
            recording: false,
        }
    }

    /// SETUP of the track named by `uri`: its index.
    pub fn setup(&mut self, uri: &str) -> Result<usize, Refusal> {
        if self.recording {
            return Err(refuse(
                455,
                "the stream records already: SETUP before RECORD",
            ));
        }
        let track = (self.announced.track_for(uri))
            .ok_or(refuse(404, "no track of the announced stream has that URL"))?;
        self.set_up[track] = true;
        Ok(track)
    }

    /// RECORD: from now on packets are taken.
    pub fn record(&mut self) -> Result<(), Refusal> {
        if !self.set_up.iter().any(|s| *s) {
            return Err(refuse(455, "SETUP a track with mode=record first"));
        }
        self.recording = true;
        Ok(())
    }

    pub fn is_recording(&self) -> bool {
        self.recording
    }

    pub fn is_set_up(&self, track: usize) -> bool {
        self.set_up.get(track).copied().unwrap_or(false)
    }
}

/// Which publisher holds which path.
#[derive(Debug)]
pub struct Paths<O> {
    held: HashMap<String, O>,
    max: usize,
}

impl<O: PartialEq + Copy> Paths<O> {
    /// At most `max` paths live at once.
    pub fn new(max: usize) -> Self {
        Paths {
            held: HashMap::new(),
            max,
        }
    }

    /// `owner` takes `path`: refused while another holds it.
    pub fn claim(&mut self, path: &str, owner: O) -> Result<(), Refusal> {
        match self.held.get(path) {
            Some(o) if *o == owner => Ok(()),
            Some(_) => Err(refuse(
                455,
                "another publisher is live on this path: ANNOUNCE again once it ends",
            )),
            None if self.held.len() >= self.max => Err(refuse(
                453,
                "as many live streams as the server takes are live",
            )),
            None => {
                self.held.insert(path.to_owned(), owner);
                Ok(())
            }
        }
    }

    /// `owner` lets `path` go (a no-op if it does not hold it).
    pub fn release(&mut self, path: &str, owner: O) {
        if self.held.get(path) == Some(&owner) {
            self.held.remove(path);
        }
    }

    pub fn owner(&self, path: &str) -> Option<O> {
        self.held.get(path).copied()
    }

    pub fn len(&self) -> usize {
        self.held.len()
    }

    pub fn is_empty(&self) -> bool {
        self.held.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Limits, sdp};

    fn announced() -> Announced {
        let s = "v=0\r\no=- 0 0 IN IP4 1.2.3.4\r\ns=x\r\nt=0 0\r\nm=video 0 RTP/AVP 96\r\na=rtpmap:96 H264/90000\r\na=control:streamid=0\r\n";
        sdp::parse(s.as_bytes(), &Limits::default()).unwrap()
    }

    #[test]
    fn record_needs_a_track_set_up_and_setup_comes_before_record() {
        let mut p = Publish::new(announced());
        assert_eq!(p.record().unwrap_err().status, 455);
        assert_eq!(
            p.setup("rtsp://h/live/a/streamid=3").unwrap_err().status,
            404
        );
        assert_eq!(p.setup("rtsp://h/live/a/streamid=0"), Ok(0));
        assert!(p.is_set_up(0) && !p.is_set_up(1));
        assert_eq!(p.record(), Ok(()));
        assert!(p.is_recording());
        assert_eq!(
            p.setup("rtsp://h/live/a/streamid=0").unwrap_err().status,
            455
        );
    }

    #[test]
    fn one_publisher_per_path_within_the_cap() {
        let mut paths = Paths::new(2);
        assert_eq!(paths.claim("live/a", 1), Ok(()));
        assert_eq!(paths.claim("live/a", 1), Ok(()));
        assert_eq!(paths.claim("live/a", 2).unwrap_err().status, 455);
        assert_eq!(paths.claim("live/b", 2), Ok(()));
        assert_eq!(paths.claim("live/c", 3).unwrap_err().status, 453);
        paths.release("live/a", 2);
        assert_eq!(paths.owner("live/a"), Some(1));
        paths.release("live/a", 1);
        assert_eq!(paths.claim("live/a", 2), Ok(()));
        assert_eq!(paths.len(), 2);
    }
}
