//! Stage 2, capability filtering: the tools a planner may see this step.
//!
//! `effective_tools = tenant catalog ∩ principal scopes ∩ stage ∩ Cedar policies ∩
//! runtime health ∩ tools whose required evidence exists`.
//!
//! No risk class is allowed or refused here: whether a run may use a write tool is
//! the policies' decision alone, asked through [`Authorization::may_call`] (the same
//! question the MCP server asks before it executes a call).
//!
//! [`Authorization::may_call`]: crate::authorization::Authorization::may_call

use std::collections::BTreeSet;

use crate::bundle::ContractBundle;
use crate::contract::ToolContract;
use crate::run::RunSpec;

/// Tools the host currently considers unhealthy (e.g. their MCP server is down).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Health {
    pub unhealthy: BTreeSet<String>,
}

/// Why a known tool is not visible, or `None` when it is.
pub fn hidden_because(
    spec: &RunSpec,
    stage: &str,
    tool: &ToolContract,
    succeeded: &[String],
    health: &Health,
) -> Option<&'static str> {
    if !spec.catalog.contains(tool.name) {
        return Some("not in the tenant catalog");
    }
    if !spec.scopes.iter().any(|s| s == tool.required_scope) {
        return Some("scope missing");
    }
    // An empty stage list means every stage.
    if !tool.stages.is_empty() && !tool.stages.contains(&stage) {
        return Some("not offered in this stage");
    }
    if health.unhealthy.contains(tool.name) {
        return Some("unhealthy");
    }
    if !tool
        .requires
        .iter()
        .all(|r| succeeded.iter().any(|s| s == r))
    {
        return Some("required evidence missing");
    }
    None
}

/// The tools visible to the planner, in contract-table order: those no structural
/// rule hides and the policies (asked for the run's own resource) permit.
/// `permitted` holds the policies' answer per tool of `B::TOOLS`, by position; a
/// tool beyond its end is not permitted.
pub fn effective_tools<B: ContractBundle>(
    spec: &RunSpec,
    stage: &str,
    succeeded: &[String],
    health: &Health,
    permitted: &[bool],
) -> Vec<&'static ToolContract> {
    B::TOOLS
        .iter()
        .zip(permitted)
        .filter(|(t, allowed)| {
            **allowed && hidden_because(spec, stage, t, succeeded, health).is_none()
        })
        .map(|(t, _)| t)
        .collect()
}
