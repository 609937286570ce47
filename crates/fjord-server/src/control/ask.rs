//! What a decision cannot finish alone: it asks (a title opened, the
//! engine where a stream stands or to position it (a multicast group's
//! streams too, at its first PLAY), sockets bound, time to pass) and is finished by the answer, fed back as an
//! event ([`on_answer`]). The connection's task does the asking and the
//! awaiting (`crate::drive`); a method awaits nothing.

use std::{sync::Arc, time::Instant};

use fjord_engine::{PlayInfo, Title};

use super::{
    Client, Reply, describe, multicast, pause, play,
    setup::{self, Binding, Read},
    status,
    transport::{Bind, Bound},
};
use crate::{Server, catalog::CatalogError, outbox::Outbox, scale, session::SessionId};

/// A decision's outcome: the reply, or a question whose answer finishes it.
pub(crate) enum Step {
    Reply(Reply),
    Ask(Ask),
}

impl From<Reply> for Step {
    fn from(r: Reply) -> Self {
        Step::Reply(r)
    }
}

/// A question, with the engine commands to send before it is asked and
/// what the decision goes on with once it is answered.
pub(crate) struct Ask {
    pub commands: Outbox,
    pub question: Question,
    pending: Pending,
}

/// What a decision goes on with once its question is answered.
pub(crate) struct Resume(Pending);

impl Ask {
    /// The commands, the question (the driver's to carry out) and what
    /// takes its answer.
    pub(crate) fn into_parts(self) -> (Outbox, Question, Resume) {
        (self.commands, self.question, Resume(self.pending))
    }
}

impl From<Ask> for Resume {
    fn from(a: Ask) -> Self {
        Resume(a.pending)
    }
}

impl Step {
    /// The step with `commands` to send before its reply or question.
    pub(super) fn with_commands(mut self, commands: Outbox) -> Step {
        match &mut self {
            Step::Reply(r) => r.commands = commands,
            Step::Ask(a) => a.commands = commands,
        }
        self
    }

    /// Asks `question`, going on with `pending` once it is answered.
    pub(super) fn ask(question: Question, pending: Pending) -> Step {
        Step::Ask(Ask {
            commands: Outbox::default(),
            question,
            pending,
        })
    }
}

/// What the driver is asked to find out.
pub(crate) enum Question {
    /// Open the title of this name (its file checked, its index loaded
    /// or made, or fetched from the origin): [`Answer::Opened`].
    Open(Box<str>),
    /// Where engine stream `id` (on `shard`) stands on the title's
    /// timeline: [`Answer::Position`].
    Position { shard: u64, id: u64 },
    /// Position each stream (engine shard, id, track) for a PLAY: find its
    /// start and end packets in the index (off the runtime's threads: the
    /// page may be on disk), then `Command::Play`: [`Answer::Played`].
    Play(PlayAsk),
    /// Set a pause point at `ns` on each stream (shard, id, track):
    /// [`Answer::PausedAt`].
    PauseAt {
        title: Arc<Title>,
        streams: Vec<(u64, u64, u32)>,
        ns: u64,
    },
    /// Wake at this time: [`Answer::Woke`].
    Wait(Instant),
    /// Bind a UDP stream's sockets: [`Answer::Bound`].
    Bind(Bind),
    /// Start a reader of a UDP stream's own RTCP socket, stopped by its
    /// abort handle: [`Answer::Reading`].
    ReadRtcp(Read),
}

/// A PLAY's positioning of its streams.
pub(crate) struct PlayAsk {
    pub title: Arc<Title>,
    pub streams: Vec<(u64, u64, u32)>,
    pub seek_ns: Option<u64>,
    pub end_ns: Option<Option<u64>>,
    pub rate: scale::Rate,
    pub queue: bool,
}

/// The answer to a [`Question`].
pub(crate) enum Answer {
    /// The title's name as the catalog keeps it, and the title.
    Opened(Result<(Arc<str>, Arc<Title>), CatalogError>),
    /// `None`: the engine has no such stream (any more), or it stands
    /// nowhere yet.
    Position(Option<u64>),
    /// Where each stream starts, in order; or the status the PLAY gets
    /// (500: a lookup failed, 454: the engine has the stream no more).
    Played(Result<Vec<PlayInfo>, u16>),
    /// Set on every stream; or the status (457: not ahead of where it
    /// plays, 500: a lookup failed).
    PausedAt(Result<(), u16>),
    Woke,
    /// The sockets, or why none could be bound.
    Bound(std::io::Result<Bound>),
    /// `None`: the reader could not start.
    Reading(Option<tokio::task::AbortHandle>),
}

/// What a decision goes on with.
pub(super) enum Pending {
    /// A DESCRIBE, once its title is open.
    Describe(describe::Opening),
    /// A SETUP that makes a session, once its title is open.
    Setup(Box<setup::Opening>),
    /// A PLAY from where the streams stand.
    PlayFrom(play::Plan),
    Play(play::Plan),
    Pause(SessionId),
    /// A multicast group's first PLAY, once its streams are positioned.
    GroupStart(Box<multicast::GroupStart>),
    /// A multicast PLAY's reply, due (at the group's start) at this time.
    GroupReply(SessionId, Instant),
    /// A UDP SETUP.
    Bind(Box<Binding>),
    /// A multicast SETUP of a stream its group does not have yet.
    GroupBind(Box<multicast::GroupBinding>),
    /// A SETUP's reply, once the reader of its stream (session, engine
    /// id) has started.
    Reading((SessionId, u64), Box<Reply>),
}

/// Finishes the decision `ask` began on `conn` with the driver's
/// `answer`: the reply, or the next question, with the engine commands to
/// send first. The session may have ended meanwhile (its connection
/// closed, it timed out, the admin ended it): 454.
pub(crate) fn on_answer(
    server: &Server,
    conn: &mut dyn Client,
    ask: impl Into<Resume>,
    answer: Answer,
) -> Step {
    let Resume(pending) = ask.into();
    match (pending, answer) {
        (Pending::Describe(o), Answer::Opened(t)) => describe::on_opened(o, t).into(),
        (Pending::Setup(o), Answer::Opened(t)) => {
            let mut out = Outbox::default();
            let step = setup::on_opened(server, (conn, &mut out), *o, t);
            step.with_commands(out)
        }
        (Pending::PlayFrom(plan), Answer::Position(at)) => play::on_position(plan, at),
        (Pending::Play(plan), Answer::Played(infos)) => play::on_played(server, plan, infos),
        (Pending::Pause(id), Answer::PausedAt(r)) => pause::on_paused_at(server, id, r),
        (Pending::GroupStart(g), Answer::Played(infos)) => {
            multicast::on_positioned(server, *g, infos)
        }
        (Pending::GroupReply(id, due), Answer::Woke) => multicast::on_reply_due(server, id, due),
        (Pending::Bind(b), Answer::Bound(bound)) => setup::on_bound(server, *b, bound),
        (Pending::GroupBind(b), Answer::Bound(bound)) => {
            multicast::on_bound(server, conn, *b, bound)
        }
        (Pending::Reading(stream, reply), Answer::Reading(reader)) => {
            setup::on_reading(server, stream, reader);
            Step::Reply(*reply)
        }
        // The driver answers what was asked; anything else is a bug here.
        _ => status(500).into(),
    }
}
