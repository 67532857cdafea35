//! Stage 8, result normalization: a tool result must match the tool's output schema
//! before anything else sees it; a nonconforming result is a contract error.

use std::sync::Arc;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::contract::ToolContract;
use crate::validation::Validators;

/// A conforming tool result, as the run records and the planner sees it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Observation {
    pub tool_call_id: String,
    pub tool: String,
    // Shared (`Arc`) with each planner view that shows them: a view is built at
    // every step and holds every observation so far.
    pub arguments: Arc<Value>,
    pub result: Arc<Value>,
    /// The value of the contract's evidence field.
    pub evidence_ref: Option<String>,
    /// The attempt that returned it and the bundle that governed the call: where a
    /// conclusion citing `evidence_ref` came from.
    #[serde(default)]
    pub attempt: u32,
    #[serde(default)]
    pub bundle_digest: String,
}

pub fn normalize(
    validators: &Validators,
    tool: &ToolContract,
    tool_call_id: &str,
    arguments: &Value,
    result: Value,
) -> Result<Observation, Vec<String>> {
    validators.output(tool.name, &result)?;
    let evidence_ref = result
        .get(tool.evidence_field)
        .and_then(Value::as_str)
        .map(str::to_string);
    Ok(Observation {
        tool_call_id: tool_call_id.to_string(),
        tool: tool.name.to_string(),
        arguments: Arc::new(arguments.clone()),
        result: Arc::new(result),
        evidence_ref,
        attempt: 0,
        bundle_digest: String::new(),
    })
}
