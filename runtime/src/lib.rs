//! `caseops-runtime`: the generic executor of a compiled contract bundle.
//!
//! The compiler (`caseops-compile build`) writes a crate of data — tool contracts,
//! the state enum and its transition table, budgets, schemas, listings, policies —
//! that implements [`ContractBundle`]. Everything that *behaves* lives here and knows
//! nothing about any particular agent, tool or resource.
//!
//! The nine stages of a tool call, one file each:
//! [`goal_assembly`] → [`capability_filter`] → [`proposal`] (the planner) →
//! [`protocol`] (parsing) → [`validation`] (arguments) → [`authorization`] →
//! [`execution`] → [`normalization`] (results) → [`state_update`] (budgets, stop).
//! A write whose effect is unknown is settled by [`reconciliation`] first.
//! A final answer is accepted by [`conclusion`] (grounded evidence, domain rules).
//! [`engine`] drives them through the [`machine`]; [`context`] builds what a planner
//! sees; [`store`] makes runs durable; [`telemetry`] names the spans and metrics a
//! run reports.

pub mod authorization;
pub mod bundle;
pub mod capability_filter;
pub mod catalog;
pub mod conclusion;
pub mod context;
pub mod contract;
mod decision_cache;
pub mod engine;
pub mod execution;
pub mod fingerprint;
pub mod goal_assembly;
pub mod handler;
pub mod machine;
pub mod normalization;
pub mod proposal;
pub mod protocol;
pub mod reconciliation;
pub mod run;
pub mod state;
pub mod state_update;
pub mod store;
pub mod telemetry;
pub mod validation;

pub use bundle::ContractBundle;
pub use catalog::Catalog;
pub use conclusion::{ConclusionCheck, Provenance, Rejection};
pub use contract::{
    Backoff, BackoffKind, Budgets, Effects, ErrorClass, ErrorDecl, FieldContract, FieldSource,
    OnUnknown, Risk, ToolContract,
};
pub use engine::{Engine, EngineError, Interrupt, RuntimeError};
pub use execution::{EffectStatus, ExecError, Executor, ToolCall};
pub use handler::{CallContext, ToolDispatch, ToolError};
pub use proposal::{Planner, PlannerError};
pub use run::{CallStatus, Checkpoint, LedgerRow, Outcome, RunSpec, SnapshotText};
pub use state::RunStateEnum;
pub use store::{MemoryStore, RunStore};
