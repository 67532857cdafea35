//! Stage 3, action proposal: the planner. It may only propose; everything it says is
//! parsed, validated and authorized before anything happens.

use std::future::Future;

use serde_json::Value;

use crate::context::PlannerView;

/// A planner failed to produce a decision at all (network, timeout, refusal).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("planner failed: {0}")]
pub struct PlannerError(pub String);

/// Produces exactly one decision per call, as JSON in the protocol of `protocol.rs`:
/// `{"decision": "tool_call", "tool": …, "arguments": {…}}`,
/// `{"decision": "final", "answer": {…}}` or `{"decision": "needs_human", "reason": …}`.
pub trait Planner: Send + Sync {
    /// A short name recorded with the run (e.g. `conformance`, `openai-responses`).
    fn kind(&self) -> &'static str;

    /// The model recorded with each run, if the planner is one (`None` for a
    /// deterministic driver).
    fn model(&self) -> Option<String> {
        None
    }

    /// Whether a call leaves the process (a model API). The runtime commits the
    /// run's state before every external call. A planner that is a pure function of
    /// the view it is given answers the same after a crash, so nothing has to be
    /// durable before it runs: its round is committed with the next tool call or
    /// the terminal state instead.
    fn is_external(&self) -> bool {
        true
    }

    fn propose(
        &self,
        view: &PlannerView,
    ) -> impl Future<Output = Result<Value, PlannerError>> + Send;
}
