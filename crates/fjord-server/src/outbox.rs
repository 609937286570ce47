//! The engine commands a control-plane decision makes. They are kept
//! while the decision holds the control core and sent once it lets go,
//! in the order they were made; a unit test reads them instead of an
//! engine.

use fjord_engine::{Command, Engine};

/// Commands, each with the engine shard it goes to.
#[derive(Default)]
pub(crate) struct Outbox(Vec<(u64, Command)>);

impl Outbox {
    pub fn push(&mut self, shard: u64, command: Command) {
        self.0.push((shard, command));
    }

    pub fn send_to(self, engine: &Engine) {
        for (shard, command) in self.0 {
            engine.send(shard, command);
        }
    }

    #[cfg(test)]
    pub fn commands(&self) -> &[(u64, Command)] {
        &self.0
    }
}
