//! What the runtime reports about itself: `tracing` spans for each planner round
//! and each tool call, named after the OpenTelemetry GenAI conventions, and
//! measurements through the `metrics` facade. The host decides where they go (a
//! log, an OTLP collector, `/metrics`); with no subscriber or recorder installed
//! they cost a branch each.

use std::time::Duration;

use tracing::Span;
use tracing::field::Empty;

/// The runtime's metric names; the host describes them in its exposition.
pub mod names {
    /// Histogram: one tool call from authorization to its normalized result, by
    /// `tool` and `outcome` (`ok` or the error class).
    pub const TOOL_CALL_DURATION: &str = "caseops_tool_call_duration_seconds";
    /// Histogram: one planner round, by `outcome` (`ok` or `error`).
    pub const PLANNER_DURATION: &str = "caseops_planner_duration_seconds";
    /// Counter: authorization gate decisions by `tool`, `decision` and `reason`.
    pub const AUTHORIZATION_DECISIONS: &str = "caseops_authorization_decisions_total";
    /// Counter: tool attempts repeated after a transient error, by `tool` and
    /// `error_class`.
    pub const RETRIES: &str = "caseops_tool_call_retries_total";
}

/// The span of one planner round (`chat` in the GenAI conventions: the model,
/// or the planner standing in for it, picks the next action).
pub(crate) fn planner_span(run_id: &str, sequence: u64) -> Span {
    tracing::info_span!(
        "chat",
        gen_ai.operation.name = "chat",
        caseops.run.id = run_id,
        caseops.run.sequence = sequence,
        error.type = Empty,
    )
}

/// The span of one tool call, from its proposal to its normalized result; the
/// decision, attempts and error class are recorded on it as they are known.
pub(crate) fn tool_span(tool: &str, call_id: &str, fingerprint: &str, risk: &str) -> Span {
    tracing::info_span!(
        "execute_tool",
        otel.name = format!("execute_tool {tool}"),
        gen_ai.operation.name = "execute_tool",
        gen_ai.tool.name = tool,
        gen_ai.tool.call.id = call_id,
        caseops.action.fingerprint = fingerprint,
        caseops.tool.risk = risk,
        caseops.authorization.decision = Empty,
        caseops.authorization.reason = Empty,
        caseops.attempt = Empty,
        error.type = Empty,
    )
}

pub(crate) fn planner_round(elapsed: Duration, ok: bool) {
    let outcome = if ok { "ok" } else { "error" };
    if !ok {
        Span::current().record("error.type", "planner_error");
    }
    metrics::histogram!(names::PLANNER_DURATION, "outcome" => outcome).record(elapsed);
}

/// The gate's answer for a proposed call: `allow`, or `deny` with its reason.
pub(crate) fn authorization(tool: &'static str, denied: Option<&str>) {
    let span = Span::current();
    let (decision, reason) = match denied {
        None => ("allow", "permitted".to_string()),
        Some(reason) => ("deny", reason.to_string()),
    };
    span.record("caseops.authorization.decision", decision);
    span.record("caseops.authorization.reason", reason.as_str());
    metrics::counter!(
        names::AUTHORIZATION_DECISIONS,
        "tool" => tool,
        "decision" => decision,
        "reason" => reason,
    )
    .increment(1);
}

/// A call ran (`outcome` is `ok` or its error class) after `attempts` attempts.
pub(crate) fn tool_call(tool: &'static str, outcome: &str, attempts: u32, elapsed: Duration) {
    let span = Span::current();
    span.record("caseops.attempt", attempts);
    if outcome != "ok" {
        span.record("error.type", outcome);
    }
    metrics::histogram!(
        names::TOOL_CALL_DURATION,
        "tool" => tool,
        "outcome" => outcome.to_string(),
    )
    .record(elapsed);
}

/// A call ended before it ran (contract, control or authorization).
pub(crate) fn tool_refused(class: &str) {
    Span::current().record("error.type", class);
}

pub(crate) fn retry(tool: &'static str, class: &'static str) {
    metrics::counter!(names::RETRIES, "tool" => tool, "error_class" => class).increment(1);
}
