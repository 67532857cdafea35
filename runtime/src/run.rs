//! The records of a run: what it was asked, where it is, what it did.

use serde::{Deserialize, Serialize};
use serde_json::Value;
use serde_json::value::RawValue;

use crate::catalog::Catalog;

/// Stop reasons the runtime itself gives (deny reasons come from policies).
pub mod reasons {
    pub const STEP_BUDGET_EXHAUSTED: &str = "STEP_BUDGET_EXHAUSTED";
    pub const REPEATED_ACTION_FINGERPRINT: &str = "REPEATED_ACTION_FINGERPRINT";
    pub const WALL_CLOCK_EXHAUSTED: &str = "WALL_CLOCK_EXHAUSTED";
    pub const NO_NEW_EVIDENCE: &str = "NO_NEW_EVIDENCE";
    pub const COST_BUDGET_EXHAUSTED: &str = "COST_BUDGET_EXHAUSTED";
    pub const TOKEN_BUDGET_EXHAUSTED: &str = "TOKEN_BUDGET_EXHAUSTED";
    pub const PROTOCOL_ERROR: &str = "PROTOCOL_ERROR";
    pub const PLANNER_ERROR: &str = "PLANNER_ERROR";
    pub const INVALID_ARGUMENTS: &str = "INVALID_ARGUMENTS";
    pub const CONTRACT_VIOLATION: &str = "CONTRACT_VIOLATION";
    pub const TOOL_TIMEOUT: &str = "TOOL_TIMEOUT";
    pub const TOOL_UNAVAILABLE: &str = "TOOL_UNAVAILABLE";
    pub const EFFECT_UNKNOWN: &str = "EFFECT_UNKNOWN";
    pub const EFFECT_NOT_APPLIED: &str = "EFFECT_NOT_APPLIED";
    pub const UNSAFE_RESUME_POINT: &str = "UNSAFE_RESUME_POINT";
    pub const PLANNER_NEEDS_HUMAN: &str = "PLANNER_NEEDS_HUMAN";
    pub const TOOL_NOT_VISIBLE: &str = "TOOL_NOT_VISIBLE";
    pub const TOOL_RESOURCE_MISMATCH: &str = "TOOL_RESOURCE_MISMATCH";
    pub const RECOVERED_DISCARDED: &str = "RECOVERED_DISCARDED";
    pub const EVIDENCE_NOT_OBSERVED: &str = "EVIDENCE_NOT_OBSERVED";
    /// Not a denial: the call waits for a person (the authorization metric's label).
    pub const APPROVAL_PENDING: &str = "APPROVAL_PENDING";
    pub const APPROVAL_REJECTED: &str = "APPROVAL_REJECTED";
    pub const APPROVAL_EXPIRED: &str = "APPROVAL_EXPIRED";
    /// The decision on record is not for the call that waits (a different action).
    pub const APPROVAL_MISMATCH: &str = "APPROVAL_MISMATCH";
}

/// What a run is asked to do and for whom. Built by the host from the API request and
/// the verified principal; the planner never sees the identity parts.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunSpec {
    pub run_id: String,
    pub tenant_id: String,
    pub task_id: String,
    pub subject: String,
    /// The run-bound resource (e.g. the case id).
    pub resource_id: String,
    pub scopes: Vec<String>,
    /// The tenant's tool catalog (shared between the tenant's runs).
    pub catalog: Catalog,
    /// The task stage the run works in (one of the bundle's `STAGES`).
    pub stage: String,
    pub goal: String,
    pub correlation_id: String,
}

/// One applied transition. `sequence` starts at 1 and grows by exactly 1.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Checkpoint {
    pub run_id: String,
    pub sequence: u64,
    pub from: String,
    pub to: String,
    pub at_ms: u64,
    pub reason: Option<String>,
    /// The whole run state after the transition, on the last checkpoint of each
    /// commit but the terminal one (`None` on the others); recovery starts from the
    /// last committed one, and a finished run is read from its outcome instead.
    pub snapshot: Option<SnapshotText>,
}

/// A run's whole state as JSON text. Only recovery reads it, and only the newest,
/// while every commit writes one: so the runtime serializes it once, straight from
/// the run, and a store writes and reads back the text as it is.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(transparent)]
pub struct SnapshotText(Box<RawValue>);

impl SnapshotText {
    pub(crate) fn of<T: Serialize>(state: &T) -> Self {
        // A snapshot is plain data with string keys, which always serializes.
        Self(serde_json::value::to_raw_value(state).expect("a snapshot serializes"))
    }

    /// Text as a store read it back: it must be one JSON value.
    pub fn from_text(text: String) -> Result<Self, serde_json::Error> {
        RawValue::from_string(text).map(Self)
    }

    pub fn as_str(&self) -> &str {
        self.0.get()
    }

    /// The snapshot as a tree of values (for inspection; recovery reads the text).
    pub fn to_value(&self) -> Value {
        serde_json::from_str(self.0.get()).expect("a snapshot is one JSON value")
    }
}

impl PartialEq for SnapshotText {
    fn eq(&self, other: &Self) -> bool {
        self.as_str() == other.as_str()
    }
}

/// Where a tool call is in its life.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CallStatus {
    Proposed,
    Authorized,
    Running,
    Succeeded,
    Failed,
    Denied,
    /// Proposed and valid, waiting for a person to approve it.
    WaitingApproval,
}

impl CallStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            CallStatus::Proposed => "proposed",
            CallStatus::Authorized => "authorized",
            CallStatus::Running => "running",
            CallStatus::Succeeded => "succeeded",
            CallStatus::Failed => "failed",
            CallStatus::Denied => "denied",
            CallStatus::WaitingApproval => "waiting_approval",
        }
    }
}

/// The ledger row of one tool call (one per `tool_call_id`, updated in place).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LedgerRow {
    pub run_id: String,
    pub tool_call_id: String,
    pub tool_name: String,
    pub tool_version: String,
    pub arguments: Value,
    pub arguments_hash: String,
    pub fingerprint: String,
    /// A write's business idempotency key ([`crate::handler::idempotency_key`]),
    /// recorded with its intent before it runs: reconciliation and an operator find
    /// its effect by it. `None` for reads.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub idempotency_key: Option<String>,
    pub status: CallStatus,
    pub attempt_count: u32,
    pub result: Option<Value>,
    /// Error class and code, e.g. `Business` / `CASE_NOT_FOUND`, or the deny reason.
    pub error_class: Option<String>,
    pub error_code: Option<String>,
    pub bundle_digest: String,
    pub started_at_ms: u64,
    pub finished_at_ms: Option<u64>,
}

/// How a run ended.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Outcome {
    pub run_id: String,
    /// The terminal state: `completed`, `needs_human`, `stopped` or `failed`.
    pub status: String,
    pub stop_reason: Option<String>,
    pub final_answer: Option<Value>,
    /// For a completed run: each cited evidence reference → the tool call that
    /// returned it (`conclusion::Provenance`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub provenance: Option<Value>,
    pub step_count: u32,
    pub recovery_count: u32,
}
