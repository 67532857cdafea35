//! The compiled contract bundle as one type: the generated crate implements this.

use crate::contract::{Budgets, ToolContract};
use crate::state::RunStateEnum;

/// Everything `caseops-compile build` produced for one agent, as constants.
pub trait ContractBundle: Send + Sync + 'static {
    /// The generated run-state enum.
    type State: RunStateEnum;

    /// The agent's name, e.g. `caseops_investigation`.
    const AGENT: &'static str;
    /// The resource entity type (e.g. `Case`) and its id field (e.g. `case_id`).
    const RESOURCE_TYPE: &'static str;
    const RESOURCE_ID_FIELD: &'static str;
    /// The API route that starts a run on one resource (`POST`), holding
    /// `{RESOURCE_ID_FIELD}` once, e.g. `/v1/cases/{case_id}/agent-runs`.
    const RUNS_PATH: &'static str;
    /// Task stages, the first being the initial one.
    const STAGES: &'static [&'static str];
    /// The tenant catalog: tools a run may ever see.
    const CATALOG: &'static [&'static str];
    const TOOLS: &'static [ToolContract];
    const BUDGETS: Budgets;
    /// Deny reason codes in reporting priority order.
    const DENY_REASONS: &'static [&'static str];
    /// SHA-256 over the contract and policy sources: stamped on every ledger row and
    /// audit event to say which contracts governed a call.
    const BUNDLE_DIGEST: &'static str;
    const FINAL_ANSWER_SCHEMA_VERSION: &'static str;
    /// JSON Schema 2020-12 of the final answer.
    const FINAL_ANSWER_SCHEMA: &'static str;
    /// The final answer's list of cited evidence references (`final_answer.evidence`):
    /// each must have been returned by a succeeded tool call of the run.
    const CITED_EVIDENCE_FIELD: Option<&'static str> = None;
    /// Whether an answer must cite at least one reference.
    const CITED_EVIDENCE_REQUIRED: bool = false;
    /// The MCP `tools/list` result.
    const MCP_TOOLS: &'static str;
    /// OpenAI Responses function tools (strict).
    const OPENAI_TOOLS: &'static str;
    const CEDAR_SCHEMA_JSON: &'static str;
    /// The validated Cedar policy set.
    const CEDAR_POLICIES: &'static str;

    fn tool(name: &str) -> Option<&'static ToolContract> {
        Self::TOOLS.iter().find(|t| t.name == name)
    }

    /// The scopes the tools require, each once, in tool order (several tools
    /// share one).
    fn required_scopes() -> Vec<&'static str> {
        let mut scopes: Vec<&'static str> = Vec::new();
        for tool in Self::TOOLS {
            if !scopes.contains(&tool.required_scope) {
                scopes.push(tool.required_scope);
            }
        }
        scopes
    }
}
