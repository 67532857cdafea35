//! The state machine driver: the only code that changes a run's state and sequence.

use crate::state::RunStateEnum;

/// A transition the generated table does not allow; it was not applied.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("illegal transition `{from} → {to}`")]
pub struct IllegalTransition {
    pub from: &'static str,
    pub to: &'static str,
}

/// The current state and the sequence number of the last applied transition.
/// Fields are private: only [`Machine::apply`] moves them, and only along the table.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Machine<S: RunStateEnum> {
    state: S,
    sequence: u64,
}

impl<S: RunStateEnum> Machine<S> {
    pub fn new() -> Self {
        Self {
            state: S::INITIAL,
            sequence: 0,
        }
    }

    /// Restores a machine from a checkpoint (recovery).
    pub fn restore(state: S, sequence: u64) -> Self {
        Self { state, sequence }
    }

    pub fn state(&self) -> S {
        self.state
    }

    pub fn sequence(&self) -> u64 {
        self.sequence
    }

    /// Applies `from → to` if the table allows it; returns the new sequence number.
    pub fn apply(&mut self, to: S) -> Result<u64, IllegalTransition> {
        if !S::is_legal(self.state, to) {
            return Err(IllegalTransition {
                from: self.state.as_str(),
                to: to.as_str(),
            });
        }
        self.state = to;
        self.sequence += 1;
        Ok(self.sequence)
    }
}

impl<S: RunStateEnum> Default for Machine<S> {
    fn default() -> Self {
        Self::new()
    }
}
