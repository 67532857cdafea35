//! The context builder: the one function that decides what a planner sees.
//!
//! INVARIANT: the view holds no credentials, token claims, tenant or task identity,
//! scopes, policy text or authorization internals, and no system-injected field: only
//! the goal, the visible tools with their model-visible input schemas, the run's own
//! observations and the budget left.

use std::sync::Arc;

use serde::Serialize;
use serde_json::Value;

use crate::contract::ToolContract;
use crate::goal_assembly::Goal;
use crate::normalization::Observation;

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ToolView {
    pub name: String,
    pub title: String,
    pub description: String,
    /// JSON Schema of the model-visible input only (shared with the validators:
    /// a view is built at every step).
    pub input_schema: Arc<Value>,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ObservationView {
    pub tool: String,
    pub arguments: Arc<Value>,
    pub result: Arc<Value>,
}

/// Everything a planner is given for one decision.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PlannerView {
    pub goal: Goal,
    pub step: u32,
    pub steps_left: u32,
    pub tools: Vec<ToolView>,
    pub observations: Vec<ObservationView>,
    /// JSON Schema the final answer must satisfy.
    pub final_answer_schema: Arc<Value>,
    /// Why an earlier final answer of this run was rejected (empty until one is).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub corrections: Vec<String>,
}

pub fn build_view(
    goal: &Goal,
    step: u32,
    max_steps: u32,
    tools: &[&'static ToolContract],
    observations: &[Observation],
    final_answer_schema: &Arc<Value>,
    input_schema: &dyn Fn(&str) -> Option<Arc<Value>>,
) -> PlannerView {
    PlannerView {
        goal: goal.clone(),
        step,
        steps_left: max_steps.saturating_sub(step),
        tools: tools
            .iter()
            .map(|t| ToolView {
                name: t.name.to_string(),
                title: t.title.to_string(),
                description: t.description.to_string(),
                input_schema: input_schema(t.name).unwrap_or_default(),
            })
            .collect(),
        observations: observations
            .iter()
            .map(|o| ObservationView {
                tool: o.tool.clone(),
                arguments: o.arguments.clone(),
                result: o.result.clone(),
            })
            .collect(),
        final_answer_schema: final_answer_schema.clone(),
        corrections: Vec::new(),
    }
}
