//! The run state machine as the runtime sees it: a generated enum and its table.

use std::fmt::Debug;

/// Implemented by the generated run-state enum. The data (states, transitions) is
/// generated from `contracts/state-machine.yaml`; the checks are here.
pub trait RunStateEnum: Copy + Eq + Debug + Send + Sync + 'static {
    /// Every state, non-terminal first, in declaration order.
    const ALL: &'static [Self];
    /// Every legal `(from, to)` transition.
    const TRANSITIONS: &'static [(Self, Self)];
    const INITIAL: Self;

    fn as_str(self) -> &'static str;
    fn is_terminal(self) -> bool;

    fn parse(name: &str) -> Option<Self> {
        Self::ALL.iter().copied().find(|s| s.as_str() == name)
    }

    fn is_legal(from: Self, to: Self) -> bool {
        Self::TRANSITIONS.contains(&(from, to))
    }
}
