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

    fn propose(
        &self,
        view: &PlannerView,
    ) -> impl Future<Output = Result<Value, PlannerError>> + Send;
}
