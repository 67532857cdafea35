//! `caseops-runtime`: the generic executor of a compiled contract bundle.
//!
//! The compiler (`caseops-compile build`) writes a crate of data — tool contracts,
//! the state enum and its transition table, budgets, schemas, listings, policies —
//! that implements [`ContractBundle`]. Everything that *behaves* lives here and knows
//! nothing about any particular agent, tool or resource.

pub mod bundle;
pub mod contract;
pub mod handler;
pub mod state;

pub use bundle::ContractBundle;
pub use contract::{
    Backoff, BackoffKind, Budgets, Effects, ErrorClass, ErrorDecl, FieldContract, FieldSource,
    OnUnknown, Risk, ToolContract,
};
pub use handler::{CallContext, ToolError};
pub use state::RunStateEnum;
