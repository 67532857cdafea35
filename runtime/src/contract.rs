//! The static contract table types: what the generated crate fills in for each tool.

use serde::{Deserialize, Serialize};

/// A tool's risk class.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Risk {
    ReadOnly,
    ReversibleWrite,
    IrreversibleWrite,
}

impl Risk {
    pub fn as_str(self) -> &'static str {
        match self {
            Risk::ReadOnly => "read_only",
            Risk::ReversibleWrite => "reversible_write",
            Risk::IrreversibleWrite => "irreversible_write",
        }
    }

    pub fn is_write(self) -> bool {
        self != Risk::ReadOnly
    }
}

/// Where an input field's value comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum FieldSource {
    ModelProposed,
    RunBoundResource,
    SystemInjected,
}

impl FieldSource {
    /// Whether the model sees (and proposes) the field.
    pub fn model_visible(self) -> bool {
        self != FieldSource::SystemInjected
    }
}

/// One input field of a tool and its source.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FieldContract {
    pub name: &'static str,
    pub source: FieldSource,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BackoffKind {
    None,
    Fixed,
    Exponential,
}

/// Spacing of retries; the runtime adds jitter.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Backoff {
    pub kind: BackoffKind,
    pub initial_ms: u64,
    pub max_ms: u64,
}

/// How a declared business error code is handled.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorClass {
    /// Never retried.
    Business,
    /// Retried within `max_attempts` when the tool is safe to retry.
    Transient,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ErrorDecl {
    pub code: &'static str,
    pub class: ErrorClass,
}

/// What to do when even the confirming read cannot tell whether a write happened.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OnUnknown {
    NeedsHuman,
    Fail,
}

/// How a write's effect is confirmed after an unknown outcome.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Effects {
    pub confirm_with: &'static str,
    pub on_unknown: OnUnknown,
}

/// Everything the control plane needs to know about one tool.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ToolContract {
    pub name: &'static str,
    pub version: &'static str,
    pub title: &'static str,
    pub description: &'static str,
    pub required_scope: &'static str,
    pub risk: Risk,
    /// Task stages in which the tool is visible.
    pub stages: &'static [&'static str],
    /// Tools whose evidence must exist before this one is offered.
    pub requires: &'static [&'static str],
    pub timeout_seconds: u32,
    pub max_attempts: u32,
    pub backoff: Backoff,
    /// Input fields that identify one business intent (writes only).
    pub idempotency_key: &'static [&'static str],
    pub approval: Option<&'static str>,
    pub effects: Option<Effects>,
    pub inputs: &'static [FieldContract],
    /// The output field holding the evidence reference.
    pub evidence_field: &'static str,
    pub errors: &'static [ErrorDecl],
    /// What the audit record of a call holds.
    pub audit: &'static [&'static str],
    /// JSON Schema 2020-12 of the model-visible input.
    pub input_schema: &'static str,
    /// JSON Schema 2020-12 of the output.
    pub output_schema: &'static str,
}

impl ToolContract {
    /// The name of the run-bound resource field.
    pub fn resource_field(&self) -> Option<&'static str> {
        self.inputs
            .iter()
            .find(|f| f.source == FieldSource::RunBoundResource)
            .map(|f| f.name)
    }

    pub fn error_class(&self, code: &str) -> Option<ErrorClass> {
        self.errors.iter().find(|e| e.code == code).map(|e| e.class)
    }

    /// Whether a transient failure may be retried: only tools that cannot duplicate an
    /// effect (read-only, or writes with an idempotency key) and have attempts left.
    pub fn retry_allowed(&self) -> bool {
        self.max_attempts > 1 && (!self.risk.is_write() || !self.idempotency_key.is_empty())
    }
}

/// The bounds of every run of an agent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Budgets {
    pub max_steps: u32,
    pub repeat_limit: u32,
    pub max_wall_clock_seconds: u32,
    pub tool_timeout_ceiling_seconds: u32,
    pub max_no_new_evidence_steps: u32,
    pub max_tokens: Option<u64>,
    /// Cost budget in millionths of a US dollar (integers keep the table exact).
    pub max_cost_micro_usd: Option<u64>,
}

impl Budgets {
    /// The timeout the runtime applies to a tool: the smaller of the contract's and the
    /// agent's ceiling.
    pub fn tool_timeout_seconds(&self, tool: &ToolContract) -> u32 {
        tool.timeout_seconds.min(self.tool_timeout_ceiling_seconds)
    }
}
